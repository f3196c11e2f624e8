"""Per-turn credit on one batch: which turns each estimator credits, and GiGPO's anchor states on the map.

Dimension legend: B rollouts, T tokens, H turns, G group size, n map side.

The batch is ``toyrl.viz.credit_batch``'s noisy expert on a fixed GridWorld map, so we know which
turns were useful: a turn *progresses* when it lowers the BFS distance to the goal and is *wasted*
when the agent did not move (void turn or wall bump). Every figure's title names ``cb.setting``.

    cb = make_credit_batch(group_size=8, slip=0.0, seed=0)
    adv = all_advantages(cb, gamma=0.95, omega=1.0)          # {name: (B, H) numpy}
    fig = plot_estimators(adv, cb.mask, success=cb.success, setting=cb.setting + ", gamma 0.95, omega 1")
    fig = plot_anchor_map(cb, group=0)                       # anchor-state sizes and A^S per action on the map
    fig = credit_panel("gigpo", gamma=0.9)                   # the widget figure: GRPO and gigpo on one colour scale

Compared heatmaps share one colour scale (``toyrl.viz.plots.shared_vmax``) and a colour bar. The widget's
numbers come from ``panel_advantage`` / ``panel_anchor_map``, cached on the slider values that change them
(GRPO's credit does not move with gamma or omega, the anchor map does not move with the estimator), so a
slider move recomputes only what it changes.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Optional, Sequence

import matplotlib.patches as mpatches
import numpy as np

from ..envs.core import VOID
from ..envs.gridworld import GOAL, HOLE
from ..credit import ESTIMATORS
from .credit_batch import CreditBatch, all_advantages, make_credit_batch
from .plots import heatmap, new_figure, shared_vmax
from .style import font_size, styled

__all__ = ["credit_spread", "turn_classes", "wasted_vs_progress", "step_advantage", "anchor_map",
           "plot_estimators", "plot_anchor_map", "credit_panel", "panel_advantage", "panel_anchor_map", "slider_args"]


def credit_spread(adv: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """(B,) max minus min advantage over the valid turns of each trajectory (0: every turn equal).

    Example: adv [[1., 1., 0.], [2., -1., 5.]], mask [[1, 1, 0], [1, 1, 1]] -> [0., 6.].
    """
    hi = np.where(mask, adv, -np.inf).max(1)
    lo = np.where(mask, adv, np.inf).min(1)
    return np.where(mask.any(1), hi - lo, 0.0)


def turn_classes(cb: CreditBatch) -> dict:
    """(B, H) bool masks of valid turns: ``progress`` (BFS distance went down), ``wasted`` (the
    agent did not move: a void turn or a wall bump), ``void`` (void turns only)."""
    m = cb.mask
    d0, d1 = cb.dist[:, :-1], cb.dist[:, 1:]
    stayed = (cb.cells[:, 1:] == cb.cells[:, :-1]) & m
    return {"progress": m & (d1 < d0), "wasted": stayed, "void": m & (cb.actions == VOID)}


def wasted_vs_progress(cb: CreditBatch, adv: np.ndarray) -> dict:
    """Mean advantage of progressing vs wasted turns *inside successful trajectories*, the number of
    each, and ``paired_gaps``: for every successful trajectory with both kinds, its mean progressing
    credit minus its mean wasted credit (GRPO: exactly 0 each; GiGPO: mostly positive)."""
    cls = turn_classes(cb)
    ok = cb.success[:, None]
    p, w = cls["progress"] & ok, cls["wasted"] & ok
    both = p.any(1) & w.any(1)                                              # trajectories holding both kinds
    gaps = np.array([adv[i][p[i]].mean() - adv[i][w[i]].mean() for i in np.flatnonzero(both)])
    return {"progress_mean": float(adv[p].mean()) if p.any() else float("nan"),
            "wasted_mean": float(adv[w].mean()) if w.any() else float("nan"),
            "n_progress": int(p.sum()), "n_wasted": int(w.sum()), "paired_gaps": gaps}


def step_advantage(cb: CreditBatch, gamma: float = 0.95) -> np.ndarray:
    """(B, H) GiGPO's anchor-state term A^S alone: gigpo(omega=1) - gigpo(omega=0)."""
    a1 = all_advantages(cb, ["gigpo"], gamma=gamma, omega=1.0)["gigpo"]
    a0 = all_advantages(cb, ["gigpo"], gamma=gamma, omega=0.0)["gigpo"]
    return a1 - a0


def anchor_map(cb: CreditBatch, group: int = 0, gamma: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """For one group: how many turns start in each cell's anchor state (n, n), and the mean step
    advantage A^S of the turns that took each action there (n, n, 5: left, down, right, up, void;
    NaN where no turn did). A^S averages to 0 over an anchor, so the split by action is the signal."""
    a_s = step_advantage(cb, gamma)
    rows = cb.batch.group.numpy() == group
    m = cb.mask & rows[:, None]
    cell, act = cb.cells[:, :-1][m], np.where(cb.actions[m] == VOID, 4, cb.actions[m])
    n = cb.size
    count = np.bincount(cell, minlength=n * n).astype(float)
    idx = cell * 5 + act
    num = np.bincount(idx, minlength=n * n * 5).astype(float)
    total = np.bincount(idx, weights=a_s[m], minlength=n * n * 5)
    mean = np.where(num > 0, total / np.maximum(num, 1), np.nan)
    return count.reshape(n, n), mean.reshape(n, n, 5)


@styled
def plot_estimators(adv: dict, mask: np.ndarray, names: Optional[Sequence[str]] = None, *, ncols: int = 3,
                    success: Optional[np.ndarray] = None, setting: str = "", shared: bool = True):
    """A grid of turn x trajectory heatmaps, one per estimator, titled with ``setting`` (default: the batch's
    shape). ``shared`` (default): one symmetric colour scale for every panel (``shared_vmax``) and one colour
    bar, so colours compare across estimators; False: each panel its own scale and its own bar. The panels
    share their axes, labelled on the outer panels only: trajectories (``+`` = reached the goal, with
    ``success``) below, turns on the left."""
    names = list(names or adv)
    ncols = min(ncols, len(names))
    nrows = int(np.ceil(len(names) / ncols))
    fig, axes = new_figure(nrows, ncols, width=min(3.3, max(2.3, 10 / ncols)), height=2.6, sharex=True, sharey=True,
                           layout="constrained")
    xlabel = "trajectory (+ = goal)" if success is not None else "trajectory"
    vmax = shared_vmax([adv[n] for n in names], mask) if shared else None
    for i, (ax, name) in enumerate(zip(axes.flat, names)):
        im = heatmap(ax, adv[name], mask, title=name, colorbar=not shared, xlabel=xlabel, ylabel="turn", vmax=vmax)
        if success is not None:
            ax.set_xticks(np.arange(len(success)))
            ax.set_xticklabels(["+" if s else "." for s in success], fontsize=font_size("tick"))
        ax.xaxis.set_visible(i + ncols >= len(names))                        # the lowest panel of its column
        ax.yaxis.set_visible(i % ncols == 0)                                 # the first panel of its row
        ax.tick_params(axis="x", labelbottom=True)                           # (above an empty slot, too)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    if shared:
        cbar = fig.colorbar(im, ax=axes, fraction=0.02, pad=0.01, shrink=min(1.0, 0.4 + 0.2 * nrows))
        cbar.set_label("advantage, every panel" if nrows > 1 else "advantage", fontsize=font_size("label"))
        cbar.ax.tick_params(labelsize=font_size("tick"))
    B, H = np.shape(mask)
    fig.suptitle(f"{setting or f'{B} trajectories, up to {H} turns'}: turn advantages per estimator "
                 "(red = credit, blue = blame, blank = past the end)", fontsize=font_size("suptitle"), wrap=True)
    return fig


_OFFSET = {0: (-0.3, 0.0), 1: (0.0, 0.34), 2: (0.3, 0.0), 3: (0.0, -0.34), 4: (0.0, 0.17)}   # (dx, dy) per action


@styled
def plot_anchor_map(cb: CreditBatch, group: int = 0, gamma: float = 0.95, ax=None):
    """The map with each cell coloured by how many turns of ``group`` start there (its anchor-state
    group size); around the centre, the mean step advantage A^S of each action taken there
    (left / down / right / up at the matching edge, void in the centre). Holes black, G the goal. On its
    own figure (``ax`` None) the title names ``cb.setting``; on a given ``ax`` the caller titles the figure."""
    count, mean = anchor_map(cb, group, gamma)
    if ax is None:
        fig, axes = new_figure(1, 1, width=4.6, height=4.6, layout="constrained")
        ax = axes[0, 0]
        fig.suptitle(f"{cb.setting}: GiGPO anchor states", fontsize=font_size("title"), wrap=True)
    return _draw_anchor_map(ax, count, mean, cb.tiles, group, gamma)


def _draw_anchor_map(ax, count: np.ndarray, mean: np.ndarray, tiles: np.ndarray, group: int, gamma: float):
    """``plot_anchor_map``'s drawing, from ``anchor_map``'s (count, mean) and the map's tiles."""
    n = count.shape[0]
    im = ax.imshow(count, cmap="Greens", vmin=0, vmax=max(count.max() * 1.6, 1))
    tiles = tiles.reshape(n, n)
    for r in range(n):
        for c in range(n):
            if tiles[r, c] == HOLE:
                ax.add_patch(mpatches.Rectangle((c - .5, r - .5), 1, 1, color="black"))
            elif tiles[r, c] == GOAL:
                ax.text(c, r, "G", ha="center", va="center", fontsize=1.4 * font_size(), color="#e76f51",
                        weight="bold")
            for a in range(5):
                v = mean[r, c, a]
                if np.isfinite(v):
                    dx, dy = _OFFSET[a]
                    ax.text(c + dx, r + dy, ("v" if a == 4 else "") + f"{v:+.1f}", ha="center", va="center",
                            fontsize=font_size("note"), color="#b2182b" if v > 0 else "#2166ac")
    ax.set_xticks(range(n))
    ax.set_yticks(range(n))
    ax.tick_params(labelsize=font_size("tick"))
    ax.set_xlabel("column", fontsize=font_size("label"))
    ax.set_ylabel("row", fontsize=font_size("label"))
    ax.set_title(f"group {group}: colour = turns per anchor state;\ntext = mean A^S per action (gamma={gamma})",
                 fontsize=font_size("note"))
    cbar = ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.02)
    cbar.set_label("turns starting in the cell", fontsize=font_size("note"))
    cbar.ax.tick_params(labelsize=font_size("tick"))
    return ax.figure


def slider_args(name: str, gamma: float, omega: float, values: str) -> tuple:
    """(gamma, omega, values) with None for each one estimator ``name`` does not read: gamma when it takes
    no discount and fits no values, omega when it takes none, values when it fits none. A cache keyed on
    the result recomputes an estimator only when a slider it reads moves.

    Example: slider_args("grpo", 0.9, 1.0, "mc") -> (None, None, None); ("gigpo", 0.9, 1.0, "mc") ->
    (0.9, 1.0, None).
    """
    import inspect
    est = ESTIMATORS[name]
    params = inspect.signature(est.fn).parameters
    fits = bool({"values", "double_critic", "token_values"} & set(est.needs))
    return (gamma if fits or {"gamma", "gamma_turn"} & set(params) else None,
            omega if "omega" in params else None, values if fits else None)


@lru_cache(maxsize=512)
def _panel_advantage(name: str, gamma, omega, values, group_size: int, slip: float, seed: int) -> np.ndarray:
    cb = make_credit_batch(group_size=group_size, slip=slip, seed=seed)
    kw = {k: v for k, v in (("gamma", gamma), ("omega", omega), ("values", values)) if v is not None}
    a = all_advantages(cb, [name], **kw)[name]
    a.setflags(write=False)                                                  # cached: shared by every caller
    return a


def panel_advantage(name: str, gamma: float = 0.95, omega: float = 1.0, group_size: int = 8, slip: float = 0.0,
                    seed: int = 0, values: str = "mc") -> np.ndarray:
    """(B, H) read-only turn advantages of estimator ``name`` on ``make_credit_batch(group_size, slip, seed)``:
    ``all_advantages(cb, [name], gamma=, omega=, values=)[name]``, cached on the slider values it reads
    (``slider_args``), so GRPO is computed once per batch whatever gamma and omega do."""
    g, o, v = slider_args(name, float(gamma), float(omega), values)
    return _panel_advantage(name, g, o, v, int(group_size), float(slip), int(seed))


@lru_cache(maxsize=256)
def panel_anchor_map(group_size: int = 8, slip: float = 0.0, seed: int = 0, gamma: float = 0.95,
                     group: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``anchor_map(make_credit_batch(group_size, slip, seed), group, gamma)``, cached (read-only arrays): it
    does not move with the estimator or omega."""
    out = anchor_map(make_credit_batch(group_size=group_size, slip=slip, seed=seed), group, gamma)
    for a in out:
        a.setflags(write=False)
    return out


@styled
def credit_panel(estimator: str = "gigpo", gamma: float = 0.95, omega: float = 1.0, group_size: int = 8,
                 slip: float = 0.0, seed: int = 0, values: str = "mc"):
    """The widget figure: GRPO and the chosen estimator on one colour scale (``shared_vmax``, one colour bar),
    and GiGPO's anchor map of group 0, under a title naming the batch's setting and ``values``. The numbers
    come from the cached ``panel_advantage`` and ``panel_anchor_map``."""
    cb = make_credit_batch(group_size=group_size, slip=slip, seed=seed)
    adv = {name: panel_advantage(name, gamma, omega, group_size, slip, seed, values) for name in ("grpo", estimator)}
    vmax = shared_vmax(list(adv.values()), cb.mask)
    fig, axes = new_figure(1, 3, width=3.3, height=4.4, layout="constrained",
                           gridspec_kw={"width_ratios": [1, 1, 1.7]})     # the anchor map's cells hold 5 numbers
    heatmap(axes[0, 0], adv["grpo"], cb.mask, title="grpo\n(trajectory level)", vmax=vmax, colorbar=False)
    im = heatmap(axes[0, 1], adv[estimator], cb.mask, title=f"{estimator}\n(gamma={gamma}, omega={omega})",
                 vmax=vmax, colorbar=False)
    cbar = fig.colorbar(im, ax=axes[0, :2], fraction=0.046, pad=0.02)
    cbar.set_label("turn advantage (both panels)", fontsize=font_size("label"))
    cbar.ax.tick_params(labelsize=font_size("tick"))
    count, mean = panel_anchor_map(group_size, slip, seed, gamma, 0)
    _draw_anchor_map(axes[0, 2], count, mean, cb.tiles, 0, gamma)
    fig.suptitle(f"{cb.setting}, values={values}: turn advantages (red = credit, blue = blame) "
                 "and GiGPO's anchor states", fontsize=font_size("suptitle"), wrap=True)
    return fig
