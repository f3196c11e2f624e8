"""The rollout engine is not the trainer (notebook 12): figures of the engine-trainer gap and of training under it.

Dimension legend: B rollouts, T tokens, K probability bins, S seeds, N steps.

The engine samples token y_t with log-prob rollout_logp_t, the trainer recomputes old_logp_t; the gap
log rho_t = old_logp_t - rollout_logp_t (``toyrl.rollout.mismatch``) concentrates on tokens the trainer
finds unlikely. ``plot_ratio_vs_prob`` shows each token's log rho against the trainer's probability
exp(old_logp_t) with the binned mean |log rho|; ``plot_engine_runs`` compares training arms (exact engine,
mismatched engine, mismatched engine + a correction) over seeds.

    fig = plot_ratio_vs_prob(b.old_logp, ro.rollout_logp, b.policy_mask, title="Bandit chain, int4 engine")
    fig = plot_engine_runs({"exact": [log_s0, log_s1], "int4": [...]}, "success_rate", title="Bandit chain")

Notebook 12's experiments on ``SETTING``: ``engine_batch`` (one batch of a trained policy sampled by an engine),
``engine_panel`` (its widget: engine, strength, correction -> the figure and the run-log columns), ``engine_arms``
and ``train_arms`` (exact engine vs a mismatched one vs the mismatched one with a correction, over seeds).
"""
from __future__ import annotations

import warnings
from dataclasses import replace
from functools import lru_cache
from typing import Optional, Sequence

import numpy as np
import torch

from ..objectives.rollout_correction import CORRECTIONS, correction_stats, rollout_correction
from ..rollout.mismatch import LOGP_FLOOR, PROB_BINS, engine_mismatch, mismatch_row
from ..train import TrainConfig, Trainer, train
from .plots import as_numpy, label, legend, log_columns, smooth
from .style import arm_color, figsize, font_size, subplots
from .prototype import sweep_precompute

__all__ = ["SETTING", "ENV_KWARGS", "P_FLOOR", "bin_centers", "plot_ratio_vs_prob", "run_bands", "plot_engine_runs",
           "engine_config", "trained_state", "engine_batch", "engine_panel", "ENGINE_PRESETS", "PANEL_CORRECTIONS",
           "preset_panel", "engine_arms", "train_arms", "ENGINE_COLORS", "engine_color", "plot_engine_arms",
           "sweep_logs", "LESSON_SEEDS", "LESSON_STEPS", "RUN_KEYS",
           "lesson_arms", "precompute"]

SETTING = "BanditChain 3 stages x 4 arms"
"""the setting of this notebook's batches and runs (``engine_config``), named in its figure titles"""
ENV_KWARGS = {"stages": 3, "arms": 4, "on_wrong": "stay", "max_turns": 8, "layout_seed": 0}
"""BanditChain with one fixed layout: GRPO solves it in about 15 steps at lr 1e-2, so a run is seconds"""

P_FLOOR = 1e-6
"""trainer probabilities below this are drawn at it (a log-x axis has no 0)"""
BANDS = {"minmax": "min-max", "iqr": "25-75%"}
ENGINE_LABELS = {"engine_kl": "KL(engine || trainer), k3 (nats)",
                 "engine_ratio_max": "largest rho = p_trainer / p_engine",
                 "engine_ratio_min": "smallest rho = p_trainer / p_engine", "engine_ratio_p99": "rho, 99th percentile",
                 "engine_frac_far": "share of tokens with |log rho| > 1"}
"""axis labels of the engine_* run-log columns (other keys: ``plots.label``)"""
ENGINE_COLORS = {"exact engine": "#2ca02c", "exact": "#2ca02c", "lag 2 engine": "#d62728", "lag 2 engine + seq_mis": "#1f77b4",
                 "lag 2 engine + tis": "#ff7f0e", "noise 1 engine": "#9467bd", "noise 1 engine + tis": "#8c564b",
                 "int4": "#d62728", "int4_tis": "#ff7f0e", "int4_icepop": "#9467bd", "int4_geo_rs": "#1f77b4"}
"""notebook 12's arms -> a fixed colour each (``style.arm_color``'s hash may give two of them one colour)"""


def bin_centers(edges: Sequence[float] = PROB_BINS) -> np.ndarray:
    """Where each probability bin is drawn on a log-x axis: the geometric mean of its edges, a lower edge of 0
    read as a tenth of the upper one. Example: (0, 1e-3, 0.1, 1.0) -> [3.16e-4, 1e-2, 0.316]."""
    e = np.asarray(edges, dtype=float)
    lo = np.where(e[:-1] > 0, e[:-1], e[1:] / 10)
    return np.sqrt(lo * e[1:])


def plot_ratio_vs_prob(old_logp: torch.Tensor, rollout_logp: torch.Tensor, mask: torch.Tensor, *,
                       title: str = "engine vs trainer", bins: Sequence[float] = PROB_BINS, ax=None,
                       max_points: int = 20000, weights: Optional[torch.Tensor] = None,
                       keep: Optional[torch.Tensor] = None, correction: str = "the correction"):
    """Two panels against the trainer's probability exp(old_logp) (log-x): left, one dot per mask token at its
    signed log rho = old_logp - rollout_logp; right, the magnitude, mean |log rho| per probability bin
    (``engine_mismatch``'s ``gap_by_prob``, log-y) over the bins that hold tokens. The title is ``title`` (name the
    setting and the engine) with the batch's k3 KL. More than ``max_points`` tokens: every n-th dot is drawn (the
    bins use all). ``ax``: an (Axes, Axes) pair to draw into.

    With a rollout correction's ``weights`` and ``keep`` (B, T) (``rollout_correction``; ``correction="none"``
    draws nothing extra): tokens it drops (keep False or weight 0) are drawn as crosses, and the log weight of the
    others where it differs from their log rho (a truncated or pooled weight). Returns the Figure.
    """
    from matplotlib.ticker import LogLocator
    turn_id = torch.zeros_like(old_logp, dtype=torch.long)
    m = engine_mismatch(old_logp, rollout_logp, mask, turn_id, 1, bins)            # validates the arguments
    axes = ax if ax is not None else subplots(1, 2, size=figsize(10, 4.8), layout="constrained")[1]
    left, right = axes
    step = max(1, -(-m["n_tokens"] // max_points))
    p, d = _points(old_logp, rollout_logp, mask, step)                             # (N,) drawn tokens
    left.scatter(p, d, s=10, alpha=0.35, lw=0, color="#457b9d", label="one policy token: log rho")
    if correction != "none" and (weights is not None or keep is not None):
        _draw_correction(left, old_logp, rollout_logp, mask, weights, keep, correction, step)
    left.axhline(0.0, color="k", lw=0.8, ls=":")
    x, gap, cnt = bin_centers(m["bin_edges"]), np.asarray(m["gap_by_prob"]), np.asarray(m["count_by_prob"])
    has = (cnt > 0) & (gap > 0)
    right.plot(x[has], gap[has], "o-", color="#e63946", label="mean |log rho| per probability bin")
    right.set_yscale("log")
    right.yaxis.set_major_locator(LogLocator(numticks=5))
    lo = min(p.min(initial=1.0), x[has].min(initial=1.0)) / 3
    for a, ylabel in ((left, "log rho (signed)"), (right, "mean |log rho| (log scale)")):
        for e in m["bin_edges"][1:-1]:
            a.axvline(e, color="0.8", lw=0.6, zorder=0)
        a.set_xscale("log")
        a.set_xlim(lo, 1.5)
        a.set_xlabel("trainer's probability")
        a.set_ylabel(ylabel)
        legend(a, loc="upper center", bbox_to_anchor=(0.5, -0.2), borderaxespad=0.0)
    left.set_title("each token")
    right.set_title("per probability bin")
    left.figure.suptitle(f"{title}\nKL(engine || trainer) {m['kl_k3']:.2e} nat per token (k3), "
                         f"{m['n_tokens']} policy tokens")
    return left.figure


def _points(old_logp, rollout_logp, mask, step: int) -> tuple:
    """Every ``step``-th mask token as (trainer probability >= P_FLOOR, log rho), log-probs floored as in
    ``engine_mismatch`` (a -inf log-prob is drawn at its floor, not lost)."""
    mk = as_numpy(mask).astype(bool)
    lo = np.maximum(as_numpy(old_logp)[mk], LOGP_FLOOR)[::step]
    ro = np.maximum(as_numpy(rollout_logp)[mk], LOGP_FLOOR)[::step]
    return np.maximum(np.exp(lo), P_FLOOR), lo - ro


def _draw_correction(ax, old_logp, rollout_logp, mask, weights, keep, correction: str, step: int) -> None:
    """The dropped tokens (crosses) and the changed log weights (dots) of a correction on ``plot_ratio_vs_prob``."""
    w = torch.ones_like(old_logp) if weights is None else weights
    kp = mask if keep is None else keep
    for name, x in (("weights", w), ("keep", kp)):
        if x.shape != mask.shape:
            raise ValueError(f"{name} must have the shape of mask (B, T)={tuple(mask.shape)}, got {tuple(x.shape)}")
    mk = as_numpy(mask).astype(bool)
    p, d = _points(old_logp, rollout_logp, mask, step)
    wv, kv = as_numpy(w)[mk][::step], as_numpy(kp).astype(bool)[mk][::step]
    drop = ~kv | (wv == 0)
    with np.errstate(divide="ignore"):
        lw = np.log(np.where(drop, 1.0, wv))
    changed = ~drop & (np.abs(lw - d) > 1e-6)
    if changed.any():
        ax.scatter(p[changed], lw[changed], s=8, color="#f4a261", lw=0, label=f"log weight after {correction}")
    if drop.any():
        ax.scatter(p[drop], d[drop], s=14, marker="x", lw=0.8, color="#e63946",
                   label=f"dropped by {correction} ({int(drop.sum())} tokens)")


def run_bands(logs: Sequence, metric: str, band: str = "minmax", smooth_w: int = 1) -> dict:
    """One arm's seeds -> {"mean", "lo", "hi"} (each (N,)) of ``metric`` per step, after smoothing each seed.

    ``logs``: one run log per seed (a RunLog, a list of row dicts or a dict of arrays); runs of different
    lengths are padded with NaN. ``band``: "minmax" (lowest and highest seed) or "iqr" (25th-75th percentile).
    Example: seeds [1, 2] and [3, 6], minmax -> mean [2, 4], lo [1, 2], hi [3, 6].
    """
    if band not in BANDS:
        raise ValueError(f"band must be one of {sorted(BANDS)}, got {band!r}")
    if len(logs) == 0:
        raise ValueError("logs must hold at least one run log")
    cols = [smooth(log_columns(log, [metric])[metric], smooth_w) for log in logs]
    N = max(len(c) for c in cols)
    x = np.full((len(cols), N), np.nan)                                          # (S, N)
    for s, c in enumerate(cols):
        x[s, :len(c)] = c
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)                          # an all-NaN step stays NaN
        lo, hi = (np.nanmin(x, 0), np.nanmax(x, 0)) if band == "minmax" else tuple(np.nanpercentile(x, [25, 75], 0))
        return {"mean": np.nanmean(x, 0), "lo": lo, "hi": hi}


def engine_color(arm: str) -> str:
    """An arm's fixed colour: ``ENGINE_COLORS`` for notebook 12's arms, else ``style.arm_color``."""
    return ENGINE_COLORS.get(arm) or arm_color(arm)


def plot_engine_runs(logs_by_arm: dict, metric: str = "success_rate", *, title: str, band: str = "minmax",
                     smooth_w: int = 1, ax=None):
    """Training arms over seeds: per arm ({name: [log per seed]}) the mean of ``metric`` per RL step in the arm's
    fixed colour (``engine_color``) and a band (``run_bands``: min-max or 25-75% over seeds) that shares the arm's
    legend entry; the legend, right of the axes, says in its title what the band is. ``title`` names the setting.
    Returns the Figure. More than three arms: ``plot_engine_arms`` draws them as small multiples."""
    from matplotlib.ticker import MaxNLocator
    if not logs_by_arm:
        raise ValueError("logs_by_arm must name at least one arm")
    if ax is None:
        ax = subplots(size=figsize(8, 4), layout="constrained")[1]
    seeds = set()
    for name, logs in logs_by_arm.items():
        r = run_bands(logs, metric, band, smooth_w)
        steps = np.arange(len(r["mean"]))
        ax.plot(steps, r["mean"], label=name, color=engine_color(name))
        ax.fill_between(steps, r["lo"], r["hi"], alpha=0.2, color=engine_color(name), label=name)
        seeds.add(len(logs))
    name = ENGINE_LABELS.get(metric, label(metric))
    what = name + (f" ({smooth_w}-step mean)" if smooth_w > 1 else "")
    ax.set_title(f"{title}: {what}", fontsize=font_size("title"), wrap=True)
    ax.set_xlabel("RL step")
    ax.set_ylabel(name)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    legend(ax, title=f"mean and\nband {BANDS[band]} over {'/'.join(map(str, sorted(seeds)))} seeds",
           loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    return ax.figure


def plot_engine_arms(logs_by_arm: dict, metric: str = "success_rate", *, title: str, reference: str,
                     band: str = "minmax", smooth_w: int = 1, ncols: int = 3):
    """Small multiples: one panel per arm but ``reference``, each the arm's mean and band (``run_bands``) with the
    ``reference`` arm's mean drawn dashed over it, every panel on one y axis, one legend below. Returns the Figure."""
    from matplotlib.ticker import MaxNLocator
    if reference not in logs_by_arm or len(logs_by_arm) < 2:
        raise ValueError(f"reference must be one of the arms {list(logs_by_arm)}, and there must be another arm")
    arms = [a for a in logs_by_arm if a != reference]
    nrows = -(-len(arms) // ncols)
    fig, axes = subplots(nrows, ncols, size=figsize(10, 2.6 * nrows + 0.9), layout="constrained", squeeze=False,
                         sharey=True)
    ref = run_bands(logs_by_arm[reference], metric, band, smooth_w)
    name = ENGINE_LABELS.get(metric, label(metric))
    for ax, arm in zip(axes.flat, arms):
        r = run_bands(logs_by_arm[arm], metric, band, smooth_w)
        steps = np.arange(len(r["mean"]))
        ax.fill_between(steps, r["lo"], r["hi"], alpha=0.25, color=engine_color(arm),
                        label=f"arm: mean, band {BANDS[band]} over {len(logs_by_arm[arm])} seeds")
        ax.plot(steps, r["mean"], color=engine_color(arm), label=f"arm: mean, band {BANDS[band]} over "
                f"{len(logs_by_arm[arm])} seeds")
        ax.plot(np.arange(len(ref["mean"])), ref["mean"], "--", color="0.3", label=f"{reference}: mean")
        ax.set_title(arm)
        ax.set_xlabel("RL step")
        ax.set_ylabel(name if len(name) < 24 else label(metric))
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    for ax in axes.flat[len(arms):]:
        ax.set_visible(False)
    h, lab = axes.flat[0].get_legend_handles_labels()
    by = dict(zip(lab, h))
    fig.legend(list(by.values()), list(by), loc="outside lower center", ncol=2)
    fig.suptitle(f"{title}\n{name}" + (f" ({smooth_w}-step mean)" if smooth_w > 1 else ""))
    return fig


def sweep_logs(sweep: dict) -> dict:
    """A stored sweep ({arm: {key: (S, N)}}, ``prototype.load_sweep``) as ``plot_engine_runs``' input:
    {arm: [{key: (N,)} per seed]}. Example: {"a": {"x": [[1, 2]]}} -> {"a": [{"x": [1, 2]}]}."""
    return {arm: [{k: cols[k][s] for k in cols} for s in range(len(next(iter(cols.values()))))]
            for arm, cols in sweep.items()}


# ---- notebook 12: one batch, the panel, the training arms ----------------------------------------
def engine_config(engine: str = "exact", strength=None, correction: str = "none", *, steps: int = 20, seed: int = 0,
                  prompts_per_step: int = 4, **kw) -> TrainConfig:
    """GRPO on ``SETTING`` (P x G=8, lr 1e-2), sampled by rollout engine ``engine``, trained with ``correction``."""
    return TrainConfig(env="bandit_chain", env_kwargs=dict(ENV_KWARGS), engine=engine, engine_strength=strength,
                       correction=correction, prompts_per_step=prompts_per_step, group_size=8, lr=1e-2, steps=steps,
                       seed=seed, progress=False, **kw)


@lru_cache(maxsize=4)
def trained_state(seed: int = 0, steps: int = 15) -> dict:
    """The policy weights after ``steps`` GRPO steps with the exact engine (cached): a policy that has learned,
    so its token probabilities spread from near 1 (the right arm) down to the rare wrong pulls it still makes."""
    tr = Trainer(engine_config(steps=steps, seed=seed))
    for _ in range(steps):
        tr.step()
    return {k: v.detach().clone() for k, v in tr.policy.state_dict().items()}


def engine_batch(engine: str = "noise", strength=None, *, seed: int = 0, train_steps: int = 15,
                 prompts_per_step: int = 16):
    """One batch (P x 8 episodes) of the ``trained_state`` policy sampled by ``engine`` -> its Rollout, whose
    batch holds the engine's ``rollout_logp`` and the trainer's ``old_logp`` on the same tokens.
    (The ``lag`` engine needs a history of updates, so on one fresh batch it equals the exact one.)"""
    tr = Trainer(engine_config(engine, strength, steps=0, seed=seed, prompts_per_step=prompts_per_step))
    if train_steps:
        tr.policy.load_state_dict(trained_state(seed, train_steps))
    return tr.collect()


def engine_panel(engine: str = "noise", strength=None, correction: str = "none", seed: int = 0, *,
                 train_steps: int = 15, prompts_per_step: int = 16):
    """Notebook 12's widget: ``plot_ratio_vs_prob`` of one ``engine_batch``, with what ``correction`` drops and
    reweights; prints the batch's run-log columns (``mismatch_row``) and the correction's ``correction_stats``."""
    b = engine_batch(engine, strength, seed=seed, train_steps=train_steps, prompts_per_step=prompts_per_step).batch
    pm = b.policy_mask
    w, keep = rollout_correction(correction, b.old_logp, b.rollout_logp, pm, b.turn_id, H=b.H)
    row = {**mismatch_row(b.old_logp, b.rollout_logp, pm, b.turn_id, H=b.H),
           **{f"correction_{k}": v for k, v in correction_stats(w, keep, pm).items()}}
    shown = "" if strength is None else f" {strength:g}"
    fig = plot_ratio_vs_prob(b.old_logp, b.rollout_logp, pm, weights=w, keep=keep, correction=correction,
                             title=f"{SETTING}, {engine}{shown} engine, seed {seed}")
    fmt = lambda v: np.round(v, 4).tolist() if isinstance(v, list) else round(v, 4)          # noqa: E731
    for lists in (False, True):                                  # the scalars on one line, the lists on the next
        print("  ".join(f"{k}={fmt(v)}" for k, v in row.items() if isinstance(v, list) == lists))
    return fig


ENGINE_PRESETS = {"exact": ("exact", None), "bf16": ("bf16", None), "fp16": ("fp16", None), "int8": ("int8", None),
                  "int4": ("int4", None), "noise sigma 0.5": ("noise", 0.5), "noise sigma 1": ("noise", 1.0),
                  "noise sigma 2": ("noise", 2.0), "top-k k=2": ("topk", 2), "top-k k=1 (greedy)": ("topk", 1),
                  "top-p p=0.9": ("topp", 0.9), "top-p p=0.7": ("topp", 0.7)}
"""the panel's engines: label -> (engine mode, strength); the lag engine is left out (one batch has no history)"""
PANEL_CORRECTIONS = tuple(c for c in CORRECTIONS if "adv" not in CORRECTIONS[c].context)
"""the corrections the panel offers: those that need no advantages (all but opsm)"""


def preset_panel(engine: str = "noise sigma 1", correction: str = "none", seed: int = 0, **kw):
    """``engine_panel`` by an ``ENGINE_PRESETS`` label (one dropdown for the mode and its strength); ``kw``:
    ``engine_panel``'s keyword settings. In a widget: ``interactive(bind(preset_panel), engine=[...], ...)``."""
    if engine not in ENGINE_PRESETS:
        raise ValueError(f"engine must be one of {list(ENGINE_PRESETS)}, got {engine!r}")
    mode, strength = ENGINE_PRESETS[engine]
    return engine_panel(mode, strength, correction, seed, **kw)


def engine_arms(engine: str = "noise", strength=None, correction: str = "tis", steps: int = 20) -> dict:
    """The three training arms: the exact engine, ``engine`` alone, ``engine`` + ``correction``."""
    shown = "" if strength is None else f" {strength:g}"
    return {"exact engine": engine_config(steps=steps),
            f"{engine}{shown} engine": engine_config(engine, strength, steps=steps),
            f"{engine}{shown} engine + {correction}": engine_config(engine, strength, correction, steps=steps)}


def train_arms(arms: dict, seeds: Sequence[int] = (0, 1)) -> dict:
    """Train every arm ({name: TrainConfig}) on each seed -> {name: [RunLog per seed]} (``plot_engine_runs``' input)."""
    return {name: [train(replace(cfg, seed=s)) for s in seeds] for name, cfg in arms.items()}


# ---- notebook 12's stored runs: the lagging engine (the correction pays) and the noise engine (it does not) ----
LESSON_SEEDS = tuple(range(100, 110))
"""the stored runs' seeds: pilot seeds (an illustration over 10 seeds, not a ledger verdict)"""
LESSON_STEPS = 20
"""RL steps per stored run (the setting of ``benchmarks/engine_modes.py``, fixed before these seeds ran)"""
RUN_KEYS = ("success_rate", "eval_success_rate", "engine_kl", "engine_ratio_max", "correction_weight_max",
            "correction_kept_token_frac", "correction_zero_weight_frac", "grad_norm")
"""the run-log columns kept per stored run"""


def lesson_arms(steps: int = LESSON_STEPS) -> dict:
    """Notebook 12's six arms on ``SETTING``: the exact engine; an engine 2 updates behind (``lag``) alone, with
    sequence-level masked IS (``seq_mis``) and with token TIS; logit noise sigma 1 alone and with token TIS.
    Each run evaluates the trainer's own weights on 64 fresh, exactly sampled episodes after its last step."""
    ev = dict(eval_every=steps, eval_episodes=64)
    return {"exact engine": engine_config(steps=steps, **ev),
            "lag 2 engine": engine_config("lag", 2, steps=steps, **ev),
            "lag 2 engine + seq_mis": engine_config("lag", 2, "seq_mis", steps=steps, **ev),
            "lag 2 engine + tis": engine_config("lag", 2, "tis", steps=steps, **ev),
            "noise 1 engine": engine_config("noise", 1.0, steps=steps, **ev),
            "noise 1 engine + tis": engine_config("noise", 1.0, "tis", steps=steps, **ev)}


precompute = sweep_precompute("engine/lesson.json", lesson_arms, RUN_KEYS, LESSON_STEPS, "toyrl.viz.engine")


if __name__ == "__main__":                  # python -m toyrl.viz.engine: write data/runs/engine/lesson.json
    print(precompute(seeds=LESSON_SEEDS))
