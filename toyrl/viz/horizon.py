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
from .engine import plot_engine_runs
from .plots import heatmap, new_figure

__all__ = ["SETTING", "TASK_LABELS", "horizon_config", "train_arms", "turn_contrast", "plot_blame", "ledger_series",
           "gap_table", "plot_horizon", "horizon_panel", "arm_table"]

SETTING = "snake from its warm start (5% teacher noise), P=8 x G=8, lr 1e-3"
TASK_LABELS = {t: (f"fork 9x9 ({TURNS[t]} turns)" if t == "fork" else f"snake {t[1]}x{t[1]} ({TURNS[t]} turns)")
               for t in TASKS}
"""task key of the ledger's gigpo_horizon arms -> what a figure calls it"""


def horizon_config(n: int = 5, estimator: str = "grpo", *, steps: int = 20, seed: int = 0, **kw) -> TrainConfig:
    """The ledger's long-horizon setting (``SNAKE_BASE``) on the size-n snake from its shipped warm start."""
    return TrainConfig(**{**SNAKE_BASE, **snake(n), "estimator": estimator, "steps": steps, "seed": seed,
                          "progress": False, **kw})


def train_arms(estimators: Sequence[str] = ("grpo", "gigpo"), *, n: int = 5, seeds: Sequence[int] = (0, 1),
               steps: int = 20) -> dict:
    """Train each estimator on the size-n snake for every seed -> {estimator: [RunLog per seed]}."""
    base = horizon_config(n, steps=steps)
    return {est: [train(replace(base, estimator=est, seed=s)) for s in seeds] for est in estimators}


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


def plot_blame(batch, advs: dict, *, episodes: int = 16, title: str = ""):
    """The turn advantages ({estimator: (B, H)}) of the first ``episodes`` failed episodes of one batch, side by side
    on one colour scale (red credit, blue blame) with one colour bar; the fatal turn is each column's last cell.
    Returns the Figure."""
    failed = torch.nonzero(batch.outcome() <= 0).flatten()[:episodes]
    if len(failed) == 0:
        raise ValueError("the batch holds no failed episode")
    mask = batch.turn_mask[failed]
    vmax = max(float(a[failed][mask].abs().max()) for a in advs.values()) or 1.0
    fig, axes = new_figure(1, len(advs), width=4.2, height=3.2, layout="constrained")
    for ax, (name, a) in zip(axes[0], advs.items()):
        im = heatmap(ax, a[failed], mask, vmax=vmax, colorbar=False, xlabel="failed episode", ylabel="turn",
                     title=f"{name}: turn advantages")
    fig.colorbar(im, ax=list(axes[0]), fraction=0.03, pad=0.02, label="advantage (shared scale)")
    fig.suptitle(title, fontsize=10)
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


def plot_horizon(task: str, series: dict, *, smooth_w: int = 3, ax=None):
    """GRPO against GiGPO at one horizon of the ledger's gigpo_horizon claim: mean success and min-max band over
    the stored seeds. Returns the Figure."""
    if task not in TASKS:
        raise ValueError(f"task must be one of {list(TASKS)}, got {task!r}")
    runs = {f"{est} ({len(series[f'{est}_{task}'])} seeds)": list(series[f"{est}_{task}"].values())
            for est in ("grpo", "gigpo")}
    return plot_engine_runs(runs, "success_rate", smooth_w=smooth_w, ax=ax,
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
