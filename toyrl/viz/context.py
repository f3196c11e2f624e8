"""Context mismatch (notebook 5): the context the policy saw vs the one the trainer recomputes.

Dimension legend: B rollouts, T tokens, H turns, S seeds, N steps.

With ``context="last_k"`` (truncation) or ``"summary"`` the policy writes turn k reading phi(x_k),
a shortened history. A trainer that recomputes log-probs on the full flattened history x_k
(``recompute="flat"``) uses the ratio

    rho_flat = pi_theta(a | x_k) / pi_old(a | phi(x_k))     instead of     pi_theta(a | phi(x_k)) / pi_old(a | phi(x_k))

(RTPO, arXiv 2608.18682). Before any update pi_theta = pi_old, so the true ratio is exactly 1 and
|log rho_flat| is pure bias; it is 0 on the turns where nothing was cut yet (k <= context_k).

    res = ratio_bias_per_turn("last_k", 1)          # mean |log ratio| per turn index, matched vs flat

Precompute the learning curves: ``python -m toyrl.viz.context`` (writes data/runs/context/mismatch.json).
"""
from __future__ import annotations

import numpy as np
import torch

from ..rollout.flatten import recompute_logp
from ..train import TrainConfig, Trainer
from .plots import legend
from .prototype import arms_figure, sweep_precompute
from .style import arm_color, figsize, subplots

__all__ = ["SETTING", "grid_config", "ratio_bias_per_turn", "bias_slope", "plot_ratio_bias", "bias_figure", "bias_panel",
           "context_arms", "plot_context_panel", "plot_context_seeds", "context_seeds_panel", "ARM_COLORS",
           "precompute", "KEYS"]

SETTING = "GridWorld 4x4 (16 turns max)"
"""the setting of this notebook's batches and sweep (``grid_config``), named in its figure titles"""
ARM_COLORS = {"full context": "#1f77b4", "last_k=1, matched": "#2ca02c", "last_k=1, flat (mismatch)": "#d62728",
              "last_k=1, RTPO on trees": "#9467bd"}
"""this notebook's arms -> a fixed colour each (``style.arm_color``'s hash gives three of them one colour)"""
KEYS = ("reward_mean", "success_rate", "ratio_max", "ratio_min", "clip_frac", "approx_kl", "tokens_generated")


def grid_config(context: str = "last_k", context_k: int = 1, *, recompute: str = "matched", steps: int = 40,
                seed: int = 0, prompts_per_step: int = 4, **kw) -> TrainConfig:
    """GridWorld 4x4 with up to 16 turns (episodes of ~9 turns at first): long enough for truncation to bite."""
    return TrainConfig(env="gridworld", env_kwargs={"map_name": "4x4", "max_turns": 16}, context=context,
                       context_k=context_k, recompute=recompute, prompts_per_step=prompts_per_step, group_size=8,
                       steps=steps, seed=seed, progress=False, **kw)


def ratio_bias_per_turn(context: str = "last_k", context_k: int = 1, *, train_steps: int = 0, seed: int = 0,
                        prompts_per_step: int = 4) -> dict:
    """Mean |log rho| per turn index on one fresh batch, before any update on it -> dict of (H,) arrays.

    ``matched``: log-probs recomputed under the stored rollout contexts (exactly the behaviour
    log-probs, up to float error); ``flat``: under the full history. ``turns``: rows reaching each
    turn index. ``train_steps`` matched GRPO updates first (a policy that reads its context more).
    """
    tr = Trainer(grid_config(context, context_k, steps=0, seed=seed, prompts_per_step=prompts_per_step))
    for _ in range(train_steps):
        tr.step()
    ro = tr.sample()
    b = ro.batch
    pm = b.policy_mask.float()
    out = {"turns": b.turn_mask.sum(0).numpy()}
    for mode in ("matched", "flat"):
        with torch.no_grad():
            lp, _ = recompute_logp(tr.policy, ro, mode)
        d = (lp - b.old_logp).abs() * pm                                        # (B, T)
        per = b.token_to_turn(d, "sum") / b.token_to_turn(pm, "sum").clamp(min=1)   # (B, H) mean per turn
        out[mode] = ((per * b.turn_mask).sum(0) / b.turn_mask.sum(0).clamp(min=1)).numpy()
    return out


def bias_slope(res: dict, min_rows: int = 8) -> float:
    """Least-squares slope of the flat |log rho| against the turn index, over indices with >= min_rows rows.

    Example: flat [0, 0.1, 0.2] with enough rows -> 0.1 per turn.
    """
    k = np.flatnonzero(res["turns"] >= min_rows)
    if len(k) < 2:
        return 0.0
    return float(np.polyfit(k, res["flat"][k], 1)[0])


def plot_ratio_bias(res: dict, ax=None, title: str = "", legend_below: bool = True):
    """Bars: mean |log rho| per turn index, matched vs flat; the row count on a second axis (its line in the
    same legend, below the axes, outside the data). Turn indices are integer ticks."""
    from matplotlib.ticker import MaxNLocator
    ax = ax if ax is not None else subplots(size=figsize(8, 4.4), layout="constrained")[1]
    H = len(res["flat"])
    x = np.arange(H)
    zero = " (0 on every turn)" if np.abs(res["matched"]).max(initial=0.0) < 1e-5 else ""
    ax.bar(x - 0.2, res["matched"], 0.4, color="#2ca02c", label="matched recompute" + zero)
    ax.bar(x + 0.2, res["flat"], 0.4, color="#d62728", label="flat recompute (full history)")
    ax.set_xlabel("turn index k")
    ax.set_ylabel("mean |log ratio|\nbefore any update")
    ax.set_title(title or f"{SETTING}: ratio bias per turn index")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    tw = ax.twinx()
    tw.plot(x, res["turns"], "k:", lw=1.5, label="rows with turn k (right axis)")
    tw.set_ylabel("rows reaching turn k")
    if legend_below:
        legend(ax, tw, loc="upper center", bbox_to_anchor=(0.5, -0.22), borderaxespad=0.0, ncol=2)
    return ax


def bias_figure(results: dict, seed: int = 0):
    """One ``plot_ratio_bias`` panel per context ({context: ratio_bias_per_turn(context, k)}), side by side on
    one shared y axis (bias) and one shared row-count axis, one legend below, under a title naming the setting."""
    fig, axes = subplots(1, len(results), size=figsize(10, 4.6), layout="constrained", squeeze=False, sharey=True)
    twins = []
    for ax, (ctx, res) in zip(axes[0], results.items()):
        plot_ratio_bias(res, ax=ax, title=f"context={ctx}, k=1", legend_below=False)
        twins.append(fig.axes[-1])
    top = max(t.get_ylim()[1] for t in twins)
    for t in twins:
        t.set_ylim(0, top)
    h, lab = [], []
    for a in (axes[0, 0], twins[0]):
        hh, ll = a.get_legend_handles_labels()
        h, lab = h + hh, lab + ll
    fig.legend(h, lab, loc="outside lower center", ncol=3)
    fig.suptitle(f"{SETTING}, untrained policy, seed {seed}: bias of the flat recompute per turn")
    return fig


def bias_panel(context: str = "summary", context_k: int = 1, seed: int = 0):
    """Notebook 5's widget: ``plot_ratio_bias`` of a fresh batch, the title naming ``bias_slope``."""
    r = ratio_bias_per_turn(context, context_k, seed=seed)
    ax = plot_ratio_bias(r, title=f"context={context}, k={context_k}: slope {bias_slope(r):+.4f} per turn")
    ax.figure.suptitle(f"{SETTING}, untrained policy, seed {seed}")
    return ax.figure


def plot_context_seeds(sweep: dict, key: str = "success_rate", arms=None, smooth_w: int = 5, seeds=None):
    """Small multiples: one panel per stored seed, every chosen arm's ``key`` over RL steps in its fixed colour
    (``ARM_COLORS``), all panels on one y axis, one legend below: how far the seeds differ beside how far
    the arms do (a mean over 3 seeds hides that)."""
    from matplotlib.ticker import MaxNLocator
    from .plots import label, smooth
    arms = list(arms or sweep)
    S = len(sweep[arms[0]][key])
    seeds = list(seeds) if seeds is not None else list(range(S))
    fig, axes = subplots(1, S, size=figsize(10, 4.2), layout="constrained", squeeze=False, sharey=True)
    for s, ax in enumerate(axes[0]):
        for a in arms:
            y = smooth(np.asarray(sweep[a][key][s], float), smooth_w)
            ax.plot(np.arange(len(y)), y, color=ARM_COLORS.get(a) or arm_color(a), label=a)
        ax.set_title(f"seed {seeds[s]}")
        ax.set_xlabel("RL step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(label(key))
    fig.legend(*axes[0, 0].get_legend_handles_labels(), loc="outside lower center", ncol=2)
    what = label(key) + (f" ({smooth_w}-step mean)" if smooth_w > 1 else "")
    fig.suptitle(f"{SETTING}, P=4 x G=8: {what}, one panel per seed")
    return fig


def context_arms(steps: int = 40) -> dict:
    """Full context; last_k (k=1) with matched and with flat recompute; last_k with RTPO on tree rollouts."""
    return {
        "full context": grid_config("full", steps=steps),
        "last_k=1, matched": grid_config("last_k", 1, steps=steps),
        "last_k=1, flat (mismatch)": grid_config("last_k", 1, recompute="flat", steps=steps),
        "last_k=1, RTPO on trees": grid_config("last_k", 1, steps=steps, estimator="rtpo", rollout="tree"),
    }


def context_seeds_panel(sweep: dict, metric: str = "success_rate", smooth: int = 5):
    """Notebook 5's learning-curve widget: ``plot_context_seeds`` of the stored sweep. Bind the sweep:
    ``interactive(bind(context_seeds_panel, sweep), metric=[...], smooth=(1, 10))``."""
    return plot_context_seeds(sweep, metric, smooth_w=smooth)


def plot_context_panel(sweep: dict, key: str = "success_rate", arms=None, smooth_w: int = 5):
    """The learning curves of the sweep: ``arms_figure`` titled with this notebook's setting."""
    return arms_figure(sweep, key, arms, smooth_w, setting=SETTING + ", P=4 x G=8")

precompute = sweep_precompute("context/mismatch.json", context_arms, KEYS, 40, "toyrl.viz.context")


if __name__ == "__main__":
    print(precompute())
