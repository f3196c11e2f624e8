"""Notebook 13: credit that pays off on long horizons (the snake), and a turn signal that can be farmed (the chain).

The functions the lesson's cells and its widget call, each pure over its inputs:

    cfg = horizon_config(5, "gigpo", steps=20)        # the snake 5x5 from its warm start, GiGPO
    logs = train_arms(("grpo", "gigpo"), n=5, seeds=(0, 1), steps=20)
    turn_contrast(batch, adv)                         # fatal turn's advantage - the rest of its failed episode
    series = ledger_series("gigpo_horizon")           # the ledger's stored runs (no training)
    gap_table(series)                                 # per task: final success and steps to halve, per arm
    horizon_panel("s7", series)                       # the widget: GRPO vs GiGPO at one horizon
    arm_table("turn_critic", series)                  # any claim: per arm, the seed-mean of its metrics
"""
from __future__ import annotations

from dataclasses import replace
from typing import Optional, Sequence

import numpy as np
import torch

from ..lab.claims import CLAIMS
from ..lab.claims.horizon import SNAKE_BASE, TASKS, TURNS, snake, steps_to_halve
from ..lab.claims.report import load_series
from ..lab.claims.spec import final
from ..lab.results import REPO
from ..train import TrainConfig, train
from .engine import BANDS, run_bands
from .plots import heatmap, new_figure
from .style import arm_color, figsize, font_size, styled, subplots

__all__ = ["SETTING", "TASK_LABELS", "LIVE_PATH", "horizon_config", "train_arms", "store_arms", "load_arms",
           "turn_contrast", "plot_blame", "ledger_series", "gap_table", "plot_arm_runs", "plot_horizon", "horizon_panel",
           "arm_table"]

SETTING = "snake from its warm start (5% teacher noise), P=8 x G=8, lr 1e-3"
TASK_LABELS = {t: (f"fork 9x9 ({TURNS[t]} turns)" if t == "fork" else f"snake {t[1]}x{t[1]} ({TURNS[t]} turns)")
               for t in TASKS}
"""task key of the ledger's gigpo_horizon arms -> what a figure calls it"""


def horizon_config(n: int = 5, estimator: str = "grpo", *, steps: int = 20, seed: int = 0, **kw) -> TrainConfig:
    """The ledger's long-horizon setting (``SNAKE_BASE``) on the size-n snake from its shipped warm start."""
    return TrainConfig(**{**SNAKE_BASE, **snake(n), "estimator": estimator, "steps": steps, "seed": seed,
                          "progress": False, **kw})


def train_arms(estimators: Sequence[str] = ("grpo", "gigpo"), *, n: int = 5, seeds: Sequence[int] = (0, 1),
               steps: int = 20, progress: bool = False) -> dict:
    """Train each estimator on the size-n snake for every seed -> {estimator: [RunLog per seed]}; ``progress``:
    one ``tqdm.auto`` bar over all the runs."""
    from tqdm.auto import tqdm
    base = horizon_config(n, steps=steps)
    bar = tqdm(total=len(estimators) * len(seeds), desc="runs", disable=not progress)
    out = {}
    for est in estimators:
        out[est] = []
        for s in seeds:
            out[est].append(train(replace(base, estimator=est, seed=s)))
            bar.update()
    bar.close()
    return out


LIVE_PATH = REPO / "data" / "runs" / "horizon_live.json"
"""lesson 13's stored training arms (``store_arms``): GRPO, GiGPO and turn GAE on the 5x5 snake, 4 seeds x 40 steps"""
KEEP = ("success_rate", "reward_mean", "grad_norm")


def store_arms(path=LIVE_PATH, estimators: Sequence[str] = ("grpo", "gigpo", "turn_gae"), *, n: int = 5,
               seeds: Sequence[int] = (0, 1, 2, 3), steps: int = 40, progress: bool = True):
    """Train ``train_arms`` and store the ``KEEP`` columns with the setting as JSON at ``path`` (regenerate lesson
    13's runs: ``python -c "from toyrl.viz.horizon import store_arms; store_arms()"``). Returns the path."""
    import json
    logs = train_arms(estimators, n=n, seeds=seeds, steps=steps, progress=progress)
    data = {"setting": {"n": n, "seeds": list(seeds), "steps": steps},
            "arms": {est: [{k: r.column(k).tolist() for k in KEEP} for r in runs] for est, runs in logs.items()}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def load_arms(path=LIVE_PATH) -> tuple[dict, dict]:
    """The stored arms of ``store_arms`` -> ({estimator: [{column: array} per seed]}, setting)."""
    import json
    data = json.loads(path.read_text())
    arms = {est: [{k: np.asarray(v, dtype=float) for k, v in run.items()} for run in runs]
            for est, runs in data["arms"].items()}
    return arms, data["setting"]


def turn_contrast(batch, adv: torch.Tensor, max_turns: Optional[int] = None) -> dict:
    """How a turn-level advantage (B, H) singles out the fatal turn of the failed episodes that ended early (a fall,
    not the turn limit): per such episode, its last turn's advantage minus the mean over its earlier turns.

    One trajectory-level advantage gives every turn of an episode the same number, so its contrast is exactly 0;
    per-turn credit that blames the fatal move more than the right moves before it gives a negative one.
    Returns {"episodes": how many, "contrast": the mean (NaN with none), "per_episode": the values}.
    Example: one failed episode of 3 turns with adv [-1, -1, -1] -> contrast 0.0; [0.1, 0.0, -2.0] -> -2.05.
    """
    n = batch.turn_mask.sum(1)                                                    # (B,) turns per episode
    limit = int(n.max()) + 1 if max_turns is None else int(max_turns)
    fell = (batch.outcome() <= 0) & (n >= 2) & (n < limit)                        # (B,) failed, ended early
    vals = []
    for i in torch.nonzero(fell).flatten().tolist():
        k = int(n[i])
        vals.append(float(adv[i, k - 1] - adv[i, :k - 1].mean()))
    return {"episodes": len(vals), "contrast": float(np.mean(vals)) if vals else float("nan"), "per_episode": vals}


@styled
def plot_blame(batch, advs: dict, *, episodes: Optional[int] = None, title: str = ""):
    """The turn advantages ({estimator: (B, H)}) of the failed episodes of one batch (the first ``episodes``; None:
    all, the title counts them), side by side on one colour scale with one colour bar; each column's fatal turn (its
    last cell) is outlined. Where every advantage shown is <= 0 (failed episodes under an outcome baseline), the
    scale runs from the most negative value (darkest blue) to 0 (white), so the differences between turns of one
    column are visible; otherwise it is symmetric around 0 (red credit, blue blame). Returns the Figure."""
    from matplotlib.lines import Line2D
    every = torch.nonzero(batch.outcome() <= 0).flatten()
    failed = every[:episodes]
    if len(failed) == 0:
        raise ValueError("the batch holds no failed episode")
    mask = batch.turn_mask[failed]                                               # (F, H)
    shown_vals = torch.cat([a[failed][mask].float() for a in advs.values()])
    lo, hi = float(shown_vals.min()), float(shown_vals.max())
    blame_only = hi <= 0
    vmax = max(abs(lo), abs(hi)) or 1.0
    last = mask.sum(1) - 1                                                       # (F,) each column's fatal turn
    fig, axes = subplots(1, len(advs), size=figsize(10, 4.4), sharey=True, squeeze=False, layout="constrained")
    shown = f"all {len(every)}" if len(failed) == len(every) else f"{len(failed)} of {len(every)}"
    for ax, (name, a) in zip(axes[0], advs.items()):
        im = heatmap(ax, a[failed], mask, vmax=vmax, colorbar=False, xlabel=f"failed episode ({shown})",
                     ylabel="turn", title=name)
        if blame_only:
            im.set_cmap("Blues_r")
            im.set_clim(lo if lo < 0 else -1.0, 0.0)
        ax.scatter(np.arange(len(failed)), last.numpy(), marker="s", s=22, facecolors="none", edgecolors="black",
                   linewidths=0.9, zorder=3)
    cbar = fig.colorbar(im, ax=list(axes[0]), fraction=0.03, pad=0.02)
    cbar.set_label("advantage (shared scale" + (", all <= 0)" if blame_only else ")"), fontsize=font_size("label"))
    cbar.ax.tick_params(labelsize=font_size("tick"))
    fig.legend([Line2D([], [], ls="", marker="s", markerfacecolor="none", markeredgecolor="black")],
               ["fatal turn (the episode's last)"], loc="outside lower center", frameon=False,
               fontsize=font_size("legend"))
    fig.suptitle(title, fontsize=font_size("suptitle"), wrap=True)
    return fig


def ledger_series(name: str = "gigpo_horizon", heldout: bool = False) -> dict:
    """The stored runs of a ledger claim (arm -> seed -> series), seeds 0-9 or the held-out block 10-19."""
    where = REPO / "data" / "claims" / ("heldout" if heldout else "")
    return load_series(where / f"{name}.series.json.gz")


def gap_table(series: dict) -> dict:
    """Per task of gigpo_horizon: mean final success and steps to halve the failure rate per arm, and the paired
    GiGPO - GRPO differences (mean over seeds) -> {task: {"grpo": (final, steps), "gigpo": ..., "gap": ...}}."""
    out = {}
    for t in TASKS:
        a, b = series.get(f"grpo_{t}"), series.get(f"gigpo_{t}")
        if not a or not b:
            continue
        seeds = sorted(set(a) & set(b))
        fa = np.array([final(a[s]["success_rate"]) for s in seeds])
        fb = np.array([final(b[s]["success_rate"]) for s in seeds])
        sa = np.array([steps_to_halve(a[s]["success_rate"]) for s in seeds])
        sb = np.array([steps_to_halve(b[s]["success_rate"]) for s in seeds])
        out[t] = {"grpo": (fa.mean(), sa.mean()), "gigpo": (fb.mean(), sb.mean()),
                  "gap": ((fb - fa).mean(), (sb - sa).mean()), "seeds": len(seeds), "turns": TURNS[t]}
    return out


@styled
def plot_arm_runs(logs_by_arm: dict, metric: str = "success_rate", *, title: str, smooth_w: int = 1,
                  band: str = "minmax", ylabel: str = "success rate"):
    """Training arms over seeds ({arm: [log per seed]}): per arm the mean of ``metric`` per step in the arm's fixed
    colour (``style.arm_color`` of the name before any space) and its band over seeds (``run_bands``), the legend
    outside the data. An arm whose every seed equals an earlier arm's is drawn dashed over it, its label saying
    "identical to" that arm. Returns the Figure."""
    from matplotlib.ticker import MaxNLocator
    if not logs_by_arm:
        raise ValueError("logs_by_arm must name at least one arm")
    fig, ax = subplots(size=figsize(10, 4.6), layout="constrained")
    drawn, seeds = {}, set()
    for name, logs in logs_by_arm.items():
        r = run_bands(logs, metric, band, smooth_w)
        cols = [np.asarray(run_bands([g], metric, band, 1)["mean"]) for g in logs]
        twin = next((o for o, oc in drawn.items() if len(oc) == len(cols) and
                     all(np.array_equal(a, b, equal_nan=True) for a, b in zip(oc, cols))), None)
        drawn[name] = cols
        seeds.add(len(logs))
        step = np.arange(len(r["mean"]))
        color = arm_color(name.split(" ")[0])
        if twin is None:
            ax.plot(step, r["mean"], color=color, label=name)
            ax.fill_between(step, r["lo"], r["hi"], alpha=0.2, color=color, label=f"{name}: {BANDS[band]}")
        else:
            ax.plot(step, r["mean"], color=color, ls=(0, (4, 4)), lw=3, label=f"{name} (identical to {twin})")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("RL step", fontsize=font_size("label"))
    ax.set_ylabel(ylabel, fontsize=font_size("label"))
    ax.tick_params(labelsize=font_size("tick"))
    smoothed = f", {smooth_w}-step mean" if smooth_w > 1 else ""
    ax.set_title(f"{title}\n(mean over {'/'.join(map(str, sorted(seeds)))} seeds{smoothed})", fontsize=font_size("title"))
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=font_size("legend"))
    return fig


def plot_horizon(task: str, series: dict, *, smooth_w: int = 3):
    """GRPO against GiGPO at one horizon of the ledger's gigpo_horizon claim: mean success and min-max band over
    the stored seeds. Returns the Figure."""
    if task not in TASKS:
        raise ValueError(f"task must be one of {list(TASKS)}, got {task!r}")
    runs = {est: list(series[f"{est}_{task}"].values()) for est in ("grpo", "gigpo")}
    return plot_arm_runs(runs, "success_rate", smooth_w=smooth_w,
                         title=f"{TASK_LABELS[task]} from its warm start, P=8 x G=8, lr 1e-3 (ledger)")


def horizon_panel(task: str = "s9", series: Optional[dict] = None):
    """The widget: the horizon picks a task of the ledger's stored runs; draws ``plot_horizon`` and prints the gap."""
    import matplotlib.pyplot as plt
    series = ledger_series() if series is None else series
    plot_horizon(task, series)
    plt.show()
    g = gap_table(series)[task]
    print(f"{TASK_LABELS[task]}: final success GRPO {g['grpo'][0]:.3f}, GiGPO {g['gigpo'][0]:.3f} "
          f"(GiGPO - GRPO {g['gap'][0]:+.3f}); steps to halve the failure rate GRPO {g['grpo'][1]:.1f}, "
          f"GiGPO {g['gigpo'][1]:.1f} ({g['gap'][1]:+.1f}), mean of {g['seeds']} seeds")
    return g


def arm_table(name: str, series: dict, keys: Sequence[str] = ("final_success", "auc_success")) -> dict:
    """A ledger claim's stored runs -> {arm: tuple of the seed-mean of each metric in ``keys``}, each metric
    computed per seed by the claim's own ``metrics`` (so the numbers are the ledger's), e.g.
    ``arm_table("turn_critic", series, ("final_success", "steps_to_halve"))["grpo"] -> (0.791, 26.0)``."""
    if name not in CLAIMS:
        raise ValueError(f"name must be a ledger claim, got {name!r}")
    c = CLAIMS[name]
    return {arm: tuple(float(np.mean([c.metrics(s)[k] for s in runs.values()])) for k in keys)
            for arm, runs in series.items()}
