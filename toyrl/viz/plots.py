"""Shared matplotlib helpers for the notebooks: token colours, masked heatmaps, run-log curves.

Every helper takes data and returns (or draws on) a matplotlib Figure / Axes; none reads global
state, so a widget callback is ``fig = f(**slider_values)`` and a test can call the same line.

    fig = plot_log(log, ["reward_mean", "reward_std"])       # one panel per key, step on the x axis
    heatmap(ax, adv_BH, mask_BH, title="GRPO")               # turns x trajectories, symmetric colours
    heatmap(ax, adv_BH, mask_BH, vmax=shared_vmax([a, b], mask_BH))   # compared panels: one colour scale
    ax.set_ylabel(label("success_rate"))                      # "success rate": a run-log key as an axis label
    legend(ax, twin)                                          # one entry per label; a line and its band share one
"""
from __future__ import annotations

from functools import partial, wraps
from typing import Callable, Optional, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import MaxNLocator

from .style import arm_color, figsize, font_size, subplots

__all__ = ["KINDS", "KIND_COLORS", "METRIC_LABELS", "label", "legend", "new_figure", "heatmap", "shared_vmax", "plot_log", "smooth",
           "as_numpy", "log_columns", "mark_steps", "compare_runs", "bind", "shown"]

#: token kinds of a flat multi-turn sequence, in the order of their integer codes ("end": END, the toy's </think>)
KINDS = ("pad", "prompt", "think", "action", "void", "obs", "end")
#: one colour per kind: policy tokens warm (think / end / action / void), environment tokens cool
KIND_COLORS = {"pad": "#ffffff", "prompt": "#9e9e9e", "think": "#f4a261", "action": "#e76f51",
               "void": "#6d214f", "obs": "#2a9d8f", "end": "#ffd166"}


#: run-log keys whose readable name is not the key with spaces (units where there are units)
METRIC_LABELS = {"tokens_generated": "tokens generated per step", "turns_per_episode": "turns per episode",
                 "obs_token_rate": "observation-token rate", "zero_var_frac": "zero-variance group fraction",
                 "clip_frac": "clip fraction", "approx_kl": "approx. KL (nats)", "entropy": "entropy (nats)",
                 "ratio_max": "max importance ratio", "ratio_min": "min importance ratio",
                 "reward_mean": "mean reward", "reward_std": "within-group reward std", "grad_norm": "gradient norm",
                 "void_turn_rate": "void-turn rate", "critic_loss": "critic loss (MSE)",
                 "text_template_H": "template entropy H (nats)", "text_template_MI": "MI(template; task) (nats)",
                 "repetition_rate": "repeated-reply rate"}


def label(key: str) -> str:
    """A run-log key as an axis label or title: ``METRIC_LABELS`` or the key with spaces.

    Example: label("success_rate") -> "success rate"; label("tokens_generated") -> "tokens generated per step".
    """
    return METRIC_LABELS.get(key, key.replace("_", " "))


def legend(ax, *twins, **kw):
    """``ax.legend`` over the labelled artists of ``ax`` and its ``twins``, one entry per label: artists that
    share a label (a mean line and its ``fill_between`` band) share the entry, drawn as the band's patch with
    the line over it, so every band is in the legend. Returns the Legend (None when nothing is labelled)."""
    from matplotlib.legend_handler import HandlerTuple
    from matplotlib.lines import Line2D
    by: dict = {}
    for a in (ax, *twins):
        for h, lab in zip(*a.get_legend_handles_labels()):
            by.setdefault(lab, []).append(h)
    if not by:
        return None
    handles = [v[0] if len(v) == 1 else tuple(sorted(v, key=lambda h: isinstance(h, Line2D))) for v in by.values()]
    return ax.legend(handles, list(by), handler_map={tuple: HandlerTuple(ndivide=1)}, **kw)


def as_numpy(x) -> np.ndarray:
    """A tensor / list / array as a float numpy array (detached, on the CPU)."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=float)


def new_figure(nrows: int = 1, ncols: int = 1, *, width: float = 4.0, height: float = 3.0, **kw):
    """``plt.subplots`` sized per panel (times the style's scale, ``toyrl.viz.style.figsize``, at the style's
    dpi); axes always returned as a 2-D array."""
    fig, axes = subplots(nrows, ncols, size=figsize(width * ncols, height * nrows), squeeze=False, **kw)
    return fig, axes


def shared_vmax(values: Sequence, mask=None) -> float:
    """One symmetric colour scale for compared heatmaps: the largest |value| over the valid cells of every
    (B, H) array in ``values`` (1.0 when no cell is valid or all are 0), to pass as each panel's ``vmax``.

    Example: shared_vmax([[[1.0, -3.0]], [[2.0, 0.5]]]) -> 3.0.
    """
    best = 0.0
    for v in values:
        v = as_numpy(v)
        m = np.ones_like(v, dtype=bool) if mask is None else as_numpy(mask).astype(bool)
        if m.any():
            best = max(best, float(np.abs(v[m]).max()))
    return best if best > 0 else 1.0


def heatmap(ax, values, mask=None, *, title: str = "", vmax: Optional[float] = None, cmap: str = "RdBu_r",
            xlabel: str = "trajectory", ylabel: str = "turn", colorbar: bool = True, annotate: bool = False,
            colorbar_label: str = "advantage"):
    """Draw a (B, H) array as a turn (rows) x trajectory (columns) heatmap; masked cells are blank.

    Colours are symmetric around 0 (``vmax`` defaults to the largest |value|; panels that are compared pass
    one ``shared_vmax``), so red = credit, blue = blame; ``colorbar`` adds a bar labelled ``colorbar_label``.
    Text is sized by the active style (``toyrl.viz.style``). Returns the image.
    """
    v = as_numpy(values)
    m = np.ones_like(v, dtype=bool) if mask is None else as_numpy(mask).astype(bool)
    data = np.ma.masked_array(v, ~m).T                                     # (H, B)
    if vmax is None:
        vmax = shared_vmax([v], m)
    vmax = vmax if vmax > 0 else 1.0
    im = ax.imshow(data, cmap=cmap, vmin=-vmax, vmax=vmax, aspect="auto", interpolation="nearest")
    ax.set_title(title, fontsize=font_size("title"))
    ax.set_xlabel(xlabel, fontsize=font_size("label"))
    ax.set_ylabel(ylabel, fontsize=font_size("label"))
    ax.tick_params(labelsize=font_size("tick"))
    if annotate:
        for (h, b), val in np.ndenumerate(data.filled(np.nan)):
            if np.isfinite(val):
                ax.text(b, h, f"{val:.1f}", ha="center", va="center", fontsize=font_size("note"))
    if colorbar:
        cbar = ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.02)
        cbar.set_label(colorbar_label, fontsize=font_size("label"))
        cbar.ax.tick_params(labelsize=font_size("tick"))
    return im


def smooth(x, window: int = 1) -> np.ndarray:
    """Trailing moving average (the first points average what exists so far); NaNs are skipped.

    Example: smooth([0, 2, 4], 2) -> [0., 1., 3.].
    """
    x = as_numpy(x)
    if window <= 1 or len(x) == 0:
        return x.copy()
    ok = np.isfinite(x)
    c = np.concatenate([[0.0], np.cumsum(np.where(ok, x, 0.0))])
    n = np.concatenate([[0], np.cumsum(ok)])
    i = np.arange(1, len(x) + 1)
    lo = np.maximum(i - window, 0)
    cnt = n[i] - n[lo]
    return np.where(cnt > 0, (c[i] - c[lo]) / np.maximum(cnt, 1), np.nan)


def log_columns(log, keys: Sequence[str]) -> dict:
    """{key: (steps,) float array} from a RunLog, a list of row dicts or a dict of arrays."""
    if isinstance(log, dict):
        return {k: as_numpy(log[k]) for k in keys}
    rows = log.rows if hasattr(log, "rows") else log
    return {k: np.array([np.nan if r.get(k) is None else r.get(k, np.nan) for r in rows], dtype=float)
            for k in keys}


def mark_steps(ax, steps: dict) -> None:
    """Vertical dashed lines at named steps ({label: step or None}); None is skipped."""
    colors = ["#c0392b", "#2c3e50", "#8e44ad", "#16a085"]
    for j, (label, s) in enumerate(steps.items()):
        if s is not None:
            ax.axvline(s, ls="--", lw=1.2, color=colors[j % len(colors)], label=f"{label} (step {s})")


def plot_log(log, keys: Sequence[str], *, window: int = 1, ncols: int = 4, marks: Optional[dict] = None,
             title: str = ""):
    """One panel per run-log key against the step, optionally smoothed and with marked steps."""
    cols = log_columns(log, list(keys) + ["step"])
    step = cols.pop("step")
    if not np.isfinite(step).all():
        step = np.arange(len(step), dtype=float)
    ncols = min(ncols, len(keys))
    nrows = int(np.ceil(len(keys) / ncols))
    fig, axes = new_figure(nrows, ncols, width=min(3.4, 10.0 / ncols), height=2.6)
    for ax, k in zip(axes.flat, keys):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        y = cols[k]
        ax.plot(step, y, color="#bbbbbb", lw=0.8)
        if window > 1:
            ax.plot(step, smooth(y, window), color="#1d3557", lw=1.6)
        ax.set_title(label(k), fontsize=font_size("title"))
        ax.set_xlabel("step", fontsize=font_size("label"))
        ax.set_ylabel(label(k), fontsize=font_size("label"))
        ax.tick_params(labelsize=font_size("tick"))
        if marks:
            mark_steps(ax, marks)
    for ax in list(axes.flat)[len(keys):]:
        ax.axis("off")
    if title:
        fig.suptitle(title, fontsize=font_size("suptitle"))
    fig.tight_layout()
    return fig


def compare_runs(logs: dict, keys: Sequence[str], *, title: str, labels: Optional[dict] = None, width: float = 4.6,
                 height: float = 3.2):
    """One panel per run-log key, one line per named run ({name: RunLog or rows}) in the run's fixed colour
    (``style.arm_color``), against the step (integer ticks); each panel titled and y-labelled by ``label(key)``;
    one legend for all panels, outside the data on the right; ``title`` names the setting. The figure is at most
    10 in wide before the style's scale (panels narrow as keys are added), so its text stays readable on a slide.

        compare_runs({"bc": rows_a, "scratch": rows_b}, ["success_rate", "void_turn_rate"], title="GridWorld 4x4")
    """
    n = len(keys)
    fig, axes = new_figure(1, n, width=min(width, 8.5 / n), height=height, layout="constrained")
    for ax, k in zip(axes.flat, keys):
        for name, log in logs.items():
            ax.plot(log_columns(log, [k])[k], label=(labels or {}).get(name, name), color=arm_color(name))
        ax.set_title(label(k), fontsize=font_size("title"))
        ax.set_xlabel("RL step", fontsize=font_size("label"))
        ax.set_ylabel(label(k), fontsize=font_size("label"))
        ax.tick_params(labelsize=font_size("tick"))
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    last = axes.flat[n - 1]
    last.legend(fontsize=font_size("legend"), loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    fig.suptitle(title, fontsize=font_size("suptitle"))
    return fig


def bind(fn: Callable, *data, **fixed) -> partial:
    """``functools.partial(fn, *data, **fixed)`` carrying ``fn``'s name: a widget callback that gets its data
    as arguments instead of reading notebook globals (ipywidgets' ``interactive`` needs the name).

        widgets.interactive(bind(curve_panel, sweep), metric=["success_rate", "grad_norm"], smooth=(1, 10))

    The callback's signature (what ``interactive`` turns into widgets) leaves out the ``fixed`` arguments and
    ``fn``'s keyword-only parameters: those are settings (a figure's ``setting`` title), never widgets.
    """
    import inspect
    p = partial(fn, *data, **fixed)
    p.__name__ = fn.__name__
    sig = inspect.signature(p)
    p.__signature__ = sig.replace(parameters=[q for q in sig.parameters.values()
                                              if q.name not in fixed and q.kind is not q.KEYWORD_ONLY])
    return p



def shown(fn: Callable) -> Callable:
    """A widget callback that draws: calls ``fn`` (a function returning a Figure, e.g. ``bind(curve_panel,
    sweep)``), shows the figure with ``plt.show()`` and returns None. ipywidgets' ``interactive`` redraws its
    output area on every change, but a Figure that is only returned is not drawn reliably in JupyterLab (once
    matplotlib has left interactive mode nothing displays it), and returning it as well would draw it twice.

        widgets.interactive(shown(bind(curve_panel, sweep)), metric=["success_rate", "grad_norm"])

    Keeps ``fn``'s name and signature (what ``interactive`` turns into widgets).
    """
    import inspect

    @wraps(fn)
    def callback(*args, **kwargs):
        fn(*args, **kwargs)
        plt.show()

    callback.__signature__ = inspect.signature(fn)
    return callback
