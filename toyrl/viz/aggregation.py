"""Aggregation, normalization and granularity (notebook 8).

Dimension legend: B rollouts, T tokens, G group size, S seeds, N steps.

Four choices that single-turn defaults make for you:

- loss aggregation: under seq-mean-token-mean a token of rollout i weighs 1 / (B |o_i|), so a
  short rollout's tokens are pushed harder than a long one's (ARLArena, arXiv 2602.21534); under
  token-mean every token weighs 1 / sum_i |o_i| (``token_weights``);
- std normalization: GRPO divides by the group's reward std, which gives a task solved 1 time in
  8 as much total advantage as a task solved 4 times in 8; mean-only baselines (Dr. GRPO, RLOO)
  scale it by the spread (LOOP, arXiv 2502.01600; ``advantage_mass``);
- ratio granularity: LOOP's asymmetric clip with the ratio per token, per turn or per trajectory;
- behaviour cloning before RL (``bc_steps``).

Precompute: ``python -m toyrl.viz.aggregation`` (writes data/runs/aggregation/{length,loop}.json).
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from ..credit.outcome import dr_grpo, grpo, rloo
from ..objectives import agg_weights
from ..train import TrainConfig
from .prototype import RUNS_DIR, arms_figure, compare, final_mean, sweep_to
from .style import arm_color, figsize, font_size, subplots

__all__ = ["token_weights", "advantage_mass", "plot_token_weights", "plot_advantage_mass", "weights_panel",
           "grid_config", "length_arms", "loop_arms", "granularity_table", "plot_agg_panel", "agg_panel",
           "panel_sweeps", "precompute", "ledger_arms", "ledger_runs", "LEDGER_RUNS", "COLORS", "KEYS", "SETTING",
           "RANDOM_SETTING", "RANDOM_ARMS"]

SETTING = "GridWorld fixed 4x4 map, P=4 x G=8, think <= 4"
"""the setting of this notebook's sweeps on the fixed map (``grid_config``: P = 4 tasks x G = 8 rollouts, at most 4
reasoning tokens per turn), named in its figure titles"""
RANDOM_SETTING = "GridWorld random 4x4 maps, P=4 x G=8, think <= 4"
"""the setting of ``loop_arms``' behaviour-cloning arms: a new random 4x4 map per task"""
RANDOM_ARMS = ("random maps, no BC", "random maps, BC 20")
"""the arms of ``loop_arms`` played on random maps (the others play the fixed map)"""
KEYS = ("reward_mean", "success_rate", "turns_per_episode", "zero_var_frac", "clip_frac", "grad_norm")
COLORS = {"GRPO, token-mean": "#1f77b4", "GRPO, seq-mean-token-mean": "#17becf", "Dr. GRPO": "#8c564b",
          "RLOO": "#2ca02c", "LOOP token": "#d62728", "LOOP turn": "#9467bd", "LOOP trajectory": "#ff7f0e",
          "random maps, no BC": "#7f7f7f", "random maps, BC 20": "#e377c2", "token-mean": "#1f77b4",
          "seq-mean-token-mean": "#17becf"}
"""arm (or aggregation mode) -> its colour in every figure of the lesson"""


def token_weights(lengths, mode: str = "seq-mean-token-mean") -> np.ndarray:
    """Weight of one token of each rollout in the aggregated loss (len(lengths),), from ``agg_weights``.

    Example: lengths [2, 4]: seq-mean-token-mean -> [0.25, 0.125]; token-mean -> [1/6, 1/6].
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    T = int(max(1, lengths.max()))
    mask = torch.arange(T)[None, :] < torch.as_tensor(lengths)[:, None]         # (B, T)
    w = agg_weights(mask, mode, dtype=torch.float64)
    return w[:, 0].numpy() * (lengths > 0)


def advantage_mass(G: int = 8, norms=("grpo", "dr_grpo", "rloo")) -> dict:
    """Total |A| a group of G binary rewards receives, for k = 0..G successes -> {norm: (G+1,)}.

    GRPO (std): about the same mass for any 0 < k < G, so nearly-always / nearly-never solved tasks
    weigh as much as 50/50 ones; Dr. GRPO / RLOO (mean only): proportional to k (G - k).
    Example: G = 2, k = 1 -> grpo 1.414 (ddof 1), dr_grpo 1.0, rloo 2.0.
    """
    fns = {"grpo": lambda R, g: grpo(R, g), "dr_grpo": lambda R, g: dr_grpo(R, g), "rloo": lambda R, g: rloo(R, g)}
    out = {}
    for name in norms:
        mass = []
        for k in range(G + 1):
            R = torch.zeros(G, dtype=torch.float64)
            R[:k] = 1.0
            mass.append(float(fns[name](R, torch.zeros(G, dtype=torch.long)).abs().sum()))
        out[name] = np.array(mass)
    return out


def plot_token_weights(lengths, ax=None):
    """Per-token weight vs rollout length under token-mean and seq-mean-token-mean, on log-log axes (the weights
    are magnitudes spanning the length ratio); the legend outside the data, on the right."""
    from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter
    ax = ax if ax is not None else subplots(size=figsize(8, 4.4), layout="constrained")[1]
    lengths = np.asarray(lengths)
    order = np.argsort(lengths)
    for mode in ("token-mean", "seq-mean-token-mean"):
        ax.plot(lengths[order], token_weights(lengths, mode)[order], "o-", label=mode, color=COLORS[mode])
    ax.set(xscale="log", yscale="log")
    ax.set_xticks(sorted(set(lengths.tolist())), [str(n) for n in sorted(set(lengths.tolist()))])   # the lengths
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FormatStrFormatter("%.3g"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("rollout length |o_i| (policy tokens, log)")
    ax.set_ylabel("weight of one token (log)")
    ax.set_title(f"token weights of a batch of {len(lengths)} rollouts,\nlengths {', '.join(map(str, lengths))}",
                 fontsize=font_size("title"))
    ax.legend(fontsize=font_size("legend"), loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    return ax


def plot_advantage_mass(G: int = 8, ax=None):
    """Total |A| per group vs number of successes k for GRPO, Dr. GRPO and RLOO (integer ticks for k); the legend
    outside the data, on the right."""
    from matplotlib.ticker import MaxNLocator
    ax = ax if ax is not None else subplots(size=figsize(8, 4.4), layout="constrained")[1]
    for name, m in advantage_mass(G).items():
        ax.plot(np.arange(G + 1), m, "o-", label=name, color=arm_color(name))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(f"successes k out of G = {G}")
    ax.set_ylabel("sum_i |A_i| in the group")
    ax.set_title(f"advantage mass of one group\nof G = {G} binary outcomes", fontsize=font_size("title"))
    ax.legend(fontsize=font_size("legend"), loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    return ax


def weights_panel(short: int = 3, long: int = 24, G: int = 8):
    """Notebook 8's weights widget: ``plot_token_weights`` of lengths (short, midpoint, long) above
    ``plot_advantage_mass(G)``."""
    fig, axes = subplots(2, 1, size=figsize(8, 6.4), layout="constrained")
    plot_token_weights([short, (short + long) // 2, long], ax=axes[0])
    plot_advantage_mass(G, ax=axes[1])
    return fig


def grid_config(steps: int = 30, seed: int = 0, **kw) -> TrainConfig:
    """GridWorld 4x4 (16 turns at most), P = 4 tasks x G = 8, up to 4 reasoning tokens per turn (as the
    ledger's lakes arms: without reasoning a turn is one action token and its ratio is the token's)."""
    env_kwargs = kw.pop("env_kwargs", {"map_name": "4x4", "max_turns": 16})
    kw.setdefault("think_max", 4)
    return TrainConfig(env="gridworld", env_kwargs=env_kwargs, prompts_per_step=4, group_size=8, steps=steps,
                       seed=seed, progress=False, **kw)


def length_arms(steps: int = 30) -> dict:
    """GRPO with token-mean vs seq-mean-token-mean aggregation; Dr. GRPO and RLOO (mean-only baselines)."""
    return {
        "GRPO, token-mean": grid_config(steps, agg="token-mean"),
        "GRPO, seq-mean-token-mean": grid_config(steps, agg="seq-mean-token-mean"),
        "Dr. GRPO": grid_config(steps, estimator="dr_grpo", agg="seq-mean-token-sum-norm"),
        "RLOO": grid_config(steps, estimator="rloo"),
    }


def loop_arms(steps: int = 30, bc_steps: int = 20) -> dict:
    """LOOP (RLOO + asymmetric clip, 2 epochs) with the ratio per token / turn / trajectory, and
    GRPO with and without ``bc_steps`` of behaviour cloning on random 4x4 maps (the shipped demos)."""
    loop = grid_config(steps, estimator="rloo", clip="loop", ppo_epochs=2)
    rand = grid_config(steps, env_kwargs={"size": 4})
    return {
        "LOOP token": replace(loop, ratio="token"),
        "LOOP turn": replace(loop, ratio="turn"),
        "LOOP trajectory": replace(loop, ratio="trajectory"),
        "random maps, no BC": rand,
        f"random maps, BC {bc_steps}": replace(rand, bc_steps=bc_steps),
    }


def granularity_table(sweep: dict, arms=("LOOP token", "LOOP turn", "LOOP trajectory"), key: str = "success_rate",
                      last: int = 10) -> dict:
    """{arm: (mean over seeds of the last-``last``-steps mean of ``key``, seed std, mean clip fraction)}."""
    out = {}
    for a in arms:
        m, s = final_mean(sweep[a][key], last)
        out[a] = (m, s, float(np.nanmean(sweep[a]["clip_frac"])))
    return out


def plot_agg_panel(sweep: dict, key: str = "turns_per_episode", arms=None, smooth_w: int = 5):
    """Widget panel: ``key`` over steps for the chosen arms (mean +- s.e. over seeds), titled with their setting:
    the fixed map (``SETTING``) or, for ``RANDOM_ARMS``, random maps (``RANDOM_SETTING``). Arms of both settings
    on one axis are refused (ValueError): draw them apart (``panel_sweeps``)."""
    drawn = list(arms if arms is not None else sweep)
    rand = [a in RANDOM_ARMS for a in drawn]
    if any(rand) and not all(rand):
        raise ValueError(f"arms: {drawn} mix the fixed map and random maps ({', '.join(RANDOM_ARMS)}); draw them "
                         "apart (panel_sweeps)")
    setting = RANDOM_SETTING if all(rand) and drawn else SETTING
    fig = arms_figure(sweep, key, arms, smooth_w, setting=setting, colors=COLORS)
    ax = fig.axes[0]
    ax.set_title(ax.get_title().replace(f"{setting}: ", f"{setting}:\n"))    # two lines: it fits a slide
    return fig


def panel_sweeps(length: dict, loop: dict) -> dict:
    """The widget's sweeps, one setting each: the aggregation / normalization arms and the ratio-level arms on the
    fixed map, the behaviour-cloning arms on random maps (``RANDOM_ARMS``, stored with the ratio levels)."""
    return {"aggregation / normalization (fixed map)": length,
            "ratio level (fixed map)": {a: c for a, c in loop.items() if a not in RANDOM_ARMS},
            "BC warm start (random maps)": {a: c for a, c in loop.items() if a in RANDOM_ARMS}}


def agg_panel(sweeps: dict, sweep: str = "", metric: str = "turns_per_episode", smooth: int = 5):
    """Notebook 8's curve widget: ``plot_agg_panel`` of the sweep named ``sweep`` in ``sweeps`` (the first
    when empty; ``panel_sweeps``). Bind the sweeps: ``interactive(bind(agg_panel, sweeps), sweep=list(sweeps), ...)``."""
    return plot_agg_panel(sweeps[sweep or next(iter(sweeps))], key=metric, smooth_w=smooth)


LEDGER_RUNS = {"length_bias": (("lake_tm", "lake_smtm"), (0, 1, 2, 3), 60, ("tokens_generated", "batch_size")),
               "is_granularity": (("token", "turn", "trajectory"), (0, 1, 2), 25, ("clip_frac", "success_rate"))}
"""claim -> (arms, seeds, steps, keys) of the runs notebook 8 shows in a ledger claim's setting (its quick config
with ``steps`` steps; fewer seeds than the ledger's 10)"""


def ledger_arms(claim: str) -> dict:
    """The ``LEDGER_RUNS`` arms of ``claim`` as TrainConfigs: the claim's quick config, ``steps`` long."""
    from ..lab.claims import CLAIMS
    arms, _, steps, _ = LEDGER_RUNS[claim]
    return {a: TrainConfig(**{**CLAIMS[claim].config(a, quick=True), "steps": steps, "progress": False})
            for a in arms}


def ledger_runs(claim: str, *, seeds=None, steps=None, progress: bool = False) -> dict:
    """Train ``claim``'s ``LEDGER_RUNS`` arms on its seeds (or ``seeds``; ``steps`` overrides the length) ->
    {arm: {key: (S, N) list}} (``compare``; ``progress``: a tqdm bar)."""
    _, s0, _, keys = LEDGER_RUNS[claim]
    return compare(ledger_arms(claim), seeds if seeds is not None else s0, keys=keys, steps=steps, progress=progress)


def precompute(out_dir=None, seeds=(0, 1, 2), steps: int = 30, which=("length", "loop", "ledger")) -> list:
    """Write data/runs/aggregation/length.json, loop.json (``seeds`` x ``steps``) and ledger_<claim>.json (the
    ``LEDGER_RUNS`` of each claim) (``which`` picks)."""
    out_dir = Path(out_dir or RUNS_DIR / "aggregation")
    paths = []
    for name, arms in (("length", length_arms), ("loop", loop_arms)):
        if name in which:
            paths.append(sweep_to(out_dir / f"{name}.json", arms(steps), seeds, steps, KEYS,
                                  f"python -m toyrl.viz.aggregation {name}"))
    if "ledger" in which:
        for claim, (_, s0, n, keys) in LEDGER_RUNS.items():
            paths.append(sweep_to(out_dir / f"ledger_{claim}.json", ledger_arms(claim), s0, n, keys,
                                  "python -m toyrl.viz.aggregation ledger"))
    return paths


if __name__ == "__main__":
    import sys
    print(precompute(which=tuple(sys.argv[1:]) or ("length", "loop", "ledger")))
