"""Figures and tables of the stability scorecard (``toyrl.lab.scorecard``): pure functions of its records.

    record, runs = rejudge(REPO / "data" / "scorecard")    # a stored card, summarized by today's rule
    heatmap_data(record)                                    # (cell names, metric names, (C, M) means)
    marginal_effects(record, "final_success")               # [(dial, level, mean, lo, hi)]
    plot_cell(record, runs, "grpo/sapo/token-mean/none")    # the cell's runs, one line per seed
    show_cell(record, runs, "grpo/sapo/token-mean/none")    # the same, displayed (a widget callback)

``write_figure`` draws the scorecard figure: a cells x metrics heatmap (each metric's mean over seeds; a row
per cell, named by the one dial it changes from the base) beside the marginal effect of that cell's level on
final success, paired with the base cell, with its 95% interval, on the same rows. One colour scale reads every
directed column: a metric is coloured by how good it is (``goodness``: the value where higher is better, one
minus it where higher is worse), red worse and green better; the reasoning-entropy column, which has no better
direction, is purple. The cells print the metric's own value.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ...viz.style import styled

__all__ = ["HEATMAP_METRICS", "DIRECTIONS", "DIRECTION_CMAPS", "metric_direction", "goodness", "load_scorecard",
           "heatmap_data", "marginal_effects", "cell_series", "plot_cell", "show_cell", "write_figure", "cell_names",
           "row_label", "effect_sign"]

HEATMAP_METRICS = ("collapse_rate", "final_success", "auc_success", "reasoning_entropy", "retrieval_acc")
"""the heatmap's columns: metrics in [0, 1], so one colour scale reads them all (``reasoning_entropy`` is
H(Z|X) per token over its largest value, ``mi.entropy_ref``: log(n_think + 1), the reasoning tokens and END).
The format-valid rate (1 by construction under constrained sampling) and the grad-norm spike rate (about 0
in every cell of this regime) are left out: a constant column says nothing; the lesson prints both."""
LABELS = {"collapse_rate": "collapse\nrate", "final_success": "final\nsuccess", "auc_success": "AUC\nsuccess",
          "retrieval_acc": "retrieval\naccuracy"}
DIRECTIONS = {"collapse_rate": -1, "final_success": 1, "auc_success": 1, "spike_rate": -1, "format_valid": 1,
              "reasoning_entropy": 0, "retrieval_acc": 1}
"""metric -> +1 high is good, -1 high is bad, 0 no better direction (RAGEN-2: low H(Z|X) is a low-entropy
collapse, high H(Z|X) with low I(X;Z) a template collapse)"""
DIRECTION_CMAPS = {1: ("RdYlGn", "better"), -1: ("RdYlGn", "better"), 0: ("Purples", "no better direction")}
"""direction -> (matplotlib colour map of ``goodness``, what a high colour means): green good, red bad"""


def metric_direction(metric: str) -> int:
    """+1 / -1 / 0: whether a higher ``metric`` is better, worse, or neither (``DIRECTIONS``; unknown: 0).

    Example: metric_direction("collapse_rate") -> -1; metric_direction("final_success") -> 1.
    """
    return DIRECTIONS.get(metric, 0)


def goodness(value, metric: str):
    """The colour value of a metric in [0, 1]: ``value`` where higher is better or there is no direction,
    ``1 - value`` where higher is worse, so one red-to-green scale reads every directed column.

    Example: goodness(0.2, "collapse_rate") -> 0.8; goodness(0.2, "final_success") -> 0.2.
    """
    return 1.0 - np.asarray(value, float) if metric_direction(metric) == -1 else np.asarray(value, float)


def load_scorecard(path) -> tuple[dict, dict]:
    """(scorecard record as stored, runs) from a directory holding scorecard.json and runs.json. A lesson reads
    ``toyrl.lab.scorecard.rejudge`` instead: the same runs summarized by today's code and collapse rule."""
    path = Path(path)
    record = json.loads((path / "scorecard.json").read_text())
    runs_path = path / "runs.json"
    runs = json.loads(runs_path.read_text())["cells"] if runs_path.exists() else {}
    return record, runs


def cell_names(record: dict) -> list:
    """The cells' names, in design order."""
    return [c["name"] for c in record["cells"]]


def row_label(cell: dict, base: dict) -> str:
    """A cell's short name: "base" for the base cell, else the one dial it changes and its level.

    Example: row_label(sapo_cell, base_cell) -> "clip: sapo"; row_label(base_cell, base_cell) -> "base".
    """
    from .design import DIALS
    diff = [d for d in DIALS if cell[d] != base[d]]
    return "base" if not diff else ", ".join(f"{d}: {cell[d]}" for d in diff)


def _mean(cell: dict, key: str, n_think: int = 4) -> float:
    if key == "reasoning_entropy":
        from .mi import entropy_ref
        return _mean(cell, "cond_entropy") / entropy_ref(n_think)
    v = cell.get(key, {}).get("mean")
    return float("nan") if v is None else float(v)


def heatmap_data(record: dict, metrics=HEATMAP_METRICS) -> tuple[list, list, np.ndarray]:
    """(cell names, metric names, (C, M) array of means over seeds; NaN where undefined)."""
    cells, n_think = record["cells"], record["setting"]["regime"]["n_think"]
    values = np.array([[_mean(c, k, n_think) for k in metrics] for c in cells],
                      dtype=float).reshape(len(cells), len(metrics))
    return [c["name"] for c in cells], list(metrics), values


def marginal_effects(record: dict, metric: str = "final_success") -> list:
    """[(dial, level, mean, lo, hi)] of each level's paired effect on ``metric`` against the base cell."""
    out = []
    for e in record.get("effects", []):
        if e["metric"] == metric:
            eff = e["effect"]
            lo, hi = eff["ci95"]
            nan = float("nan")
            out.append((e["dial"], e["level"], nan if eff["mean"] is None else eff["mean"],
                        nan if lo is None else lo, nan if hi is None else hi))
    return out


def effect_sign(record: dict, dial: str, level: str, metric: str = "final_success") -> int:
    """+1 / -1 when the level's whole 95% interval lies above / below 0, else 0."""
    for d, lv, _, lo, hi in marginal_effects(record, metric):
        if d == dial and lv == level:
            return 1 if lo > 0 else -1 if hi < 0 else 0
    raise KeyError(f"no effect of {dial}={level} on {metric}")


def cell_series(runs: dict, name: str, key: str = "success_rate") -> np.ndarray:
    """(seeds, steps) array of one run-log series of a cell (NaN for missing values)."""
    rows = [[np.nan if v is None else v for v in r["series"][key]] for r in runs[name]]
    return np.array(rows, dtype=float)


def _setting_line(record: dict) -> str:
    st, rg = record["setting"], record["setting"]["regime"]
    size = st.get("env_kwargs", {}).get("size")
    return (f"{st['env']}{f' {size}x{size}' if size else ''}, {st['steps']} steps, staleness {rg['staleness']}, "
            f"{rg['ppo_epochs']} epochs, lr {rg['lr']:g}")


@styled
def plot_cell(record: dict, runs: dict, name: str, key: str = "success_rate"):
    """Three panels for one cell: ``key`` per seed, thin, with the mean over seeds in black (each seed's
    collapse, by the rule the record names, a dashed vertical line in its colour), within-group reward std (the
    same), and RAGEN-2's I(X;Z) (circles) / H(Z|X) (squares, solid: dashes mark collapses only) on the probe
    batch, each seed's faint and their mean bold, with the regime rule's two cut-offs dotted, under a title
    naming the cell and its setting. Returns the figure."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator
    from ...viz.plots import label
    from ...viz.style import figsize, subplots
    from .mi import entropy_ref
    if name not in runs:
        raise ValueError(f"name must be a cell of the scorecard ({', '.join(runs)}), got {name!r}")
    cell = next(c for c in record["cells"] if c["name"] == name)
    marks = cell["t_collapse"]["per_seed"]               # the record's own collapse steps, by the rule it names
    fig, axes = subplots(1, 3, size=figsize(10, 4.6), layout="constrained")
    nan = lambda xs: np.array([np.nan if v is None else v for v in xs], float)       # noqa: E731
    for i, (r, tc) in enumerate(zip(runs[name], marks)):
        s, color = r["series"], f"C{i % 10}"
        axes[0].plot(nan(s[key]), lw=0.9, alpha=0.45, color=color)
        if tc is not None:
            axes[0].axvline(tc, color=color, ls="--", lw=1.4)
        axes[1].plot(nan(s["reward_std"]), lw=0.9, alpha=0.45, color=color)
    for ax, k in ((axes[0], key), (axes[1], "reward_std")):
        ax.plot(np.nanmean(cell_series(runs, name, k), 0), color="black", lw=2.6, label="mean over seeds")
    probes = [r.get("diag", {}) for r in runs[name] if r.get("diag", {}).get("step")]
    for k, (what, marker, color) in enumerate((("mi_seq", "o", "C0"), ("cond_entropy", "s", "C3"))):
        for d in probes:
            axes[2].plot(d["step"], nan(d[what]), marker=marker, ls="-", lw=0.8, color=color, alpha=0.25, ms=4)
        if probes:
            n = min(len(d["step"]) for d in probes)
            axes[2].plot(probes[0]["step"][:n], np.nanmean([nan(d[what])[:n] for d in probes], 0), marker=marker,
                         ls="-", lw=2.6, color=color, ms=7)
    n_think, n_prompts = record["setting"]["regime"]["n_think"], 8
    h_cut, i_cut = 0.5 * entropy_ref(n_think), 0.1 * np.log(n_prompts)
    axes[2].axhline(h_cut, color="C3", lw=1, ls=":")
    axes[2].axhline(i_cut, color="C0", lw=1, ls=":")
    axes[0].set(title=label(key), xlabel="RL step", ylabel=label(key))
    axes[1].set(title="within-group reward std", xlabel="RL step", ylabel="reward std")
    axes[2].set(title="RAGEN-2 probe", xlabel="RL step", ylabel="nats")
    for ax in axes:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[2].legend([Line2D([], [], marker="o", color="C0", lw=2.6), Line2D([], [], marker="s", color="C3", lw=2.6),
                    Line2D([], [], ls=":", color="C0"), Line2D([], [], ls=":", color="C3")],
                   ["I(X;Z) per sequence", "H(Z|X) per token", f"I cut-off {i_cut:.2f}", f"H cut-off {h_cut:.2f}"],
                   title="bold: mean over seeds", loc="upper left", bbox_to_anchor=(1.02, 1))
    cr = cell["collapse_rate"]
    fig.suptitle(f"{name}: {len(runs[name])} seeds (one colour each, black: their mean; dashed: a seed's collapse)"
                 f"\n{_setting_line(record)}"
                 f"\ncollapse rate {cr['mean']:.2f} [{cr['ci95'][0]:.2f}, {cr['ci95'][1]:.2f}], regime: "
                 f"{cell['regime']}")
    return fig


def show_cell(record: dict, runs: dict, name: str, key: str = "success_rate"):
    """``plot_cell`` displayed and closed: a widget callback (``interactive`` does not display a returned
    figure, and a figure made after the first one is not drawn by itself outside interactive mode)."""
    import matplotlib.pyplot as plt
    from IPython.display import display
    fig = plot_cell(record, runs, name, key)
    display(fig)
    plt.close(fig)


def _heatmap(ax, values: np.ndarray, metrics: list) -> dict:
    """Draw (C, M) ``values`` in [0, 1]: directed columns by ``goodness`` on one red-to-green scale, undirected
    ones in purple; returns {direction: image}. The cell text is the raw value, white on dark colours."""
    from ...viz.style import font_size
    dirs = np.array([metric_direction(m) for m in metrics])
    shade = np.stack([goodness(values[:, j], m) for j, m in enumerate(metrics)], 1)     # (C, M)
    images = {}
    for d, cmap in ((1, "RdYlGn"), (0, "Purples")):
        keep = np.broadcast_to((dirs != 0) if d == 1 else (dirs == 0), values.shape)
        if keep.any():
            images[d] = ax.imshow(np.ma.masked_array(shade, ~keep | ~np.isfinite(shade)), cmap=cmap, vmin=0,
                                  vmax=1, aspect="auto", interpolation="nearest")
    for i in range(values.shape[0]):
        for j in range(values.shape[1]):
            if np.isfinite(values[i, j]):
                r, g, b, _ = images[1 if dirs[j] else 0].cmap(shade[i, j])
                ax.text(j, i, f"{values[i, j]:.2f}", ha="center", va="center", fontsize=font_size("note"),
                        color="white" if 0.299 * r + 0.587 * g + 0.114 * b < 0.5 else "black")
    return images


@styled
def write_figure(record: dict, path=None, metric: str = "final_success"):
    """The scorecard figure: the heatmap of cells x metrics (``_heatmap``, one colour bar: red worse, green
    better) and, on the same rows, each cell's paired effect on ``metric`` against the base cell with its 95%
    interval; saved to ``path`` if given. Returns the figure."""
    import matplotlib
    if path is not None:
        matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    from ...viz.style import figsize, subplots
    names, metrics, values = heatmap_data(record)
    cells = record["cells"]
    rows = [row_label(c, cells[0]) for c in cells]
    fig, (ax, bx) = subplots(1, 2, size=figsize(10, 6.2), sharey=True, gridspec_kw={"width_ratios": [1.3, 1]},
                             layout="constrained")
    images = _heatmap(ax, values, metrics)
    n_think = record["setting"]["regime"]["n_think"]
    labels = {**LABELS, "reasoning_entropy": f"H(Z|X)\n/ log {n_think + 1}"}
    ax.set_xticks(range(len(metrics)), [labels.get(m, m.replace("_", " ")) for m in metrics])
    ax.set_yticks(range(len(rows)), rows)
    ax.set(xlabel="mean over seeds", ylabel="cell (the dial it changes)")
    cbar = fig.colorbar(images[1], ax=bx, fraction=0.06, pad=0.03, ticks=[])
    cbar.set_label("colour: red worse, green better")
    _effects_panel(bx, cells, marginal_effects(record, metric), metric)
    fig.suptitle(f"{record.get('title', 'Stability scorecard')}\n{_setting_line(record)}, "
                 f"{len(record['seeds'])} seeds/cell" + (" (quick)" if record["setting"].get("quick") else ""))
    if path is not None:
        fig.savefig(path, dpi=max(110, fig.dpi))
        plt.close(fig)
    return fig


def _effects_panel(ax, cells: list, effects: list, metric: str) -> None:
    """Horizontal bars on the heatmap's rows (which name the dial): each cell's paired effect vs the base cell
    with its 95% interval; the base row has none."""
    by = {(d, lv): (m, lo, hi) for d, lv, m, lo, hi in effects}
    dials = list(dict.fromkeys(d for d, *_ in effects))
    for k, c in enumerate(cells):
        key = next(((d, c[d]) for d in dials if c[d] != cells[0][d]), None)
        if key in by:
            m, lo, hi = by[key]
            ax.barh(k, m, color="C0", alpha=0.7, height=0.7)
            ax.plot([lo, hi], [k, k], color="black", lw=1.6)
    ax.axvline(0, color="grey", lw=0.8)
    ax.set(xlabel=f"{metric.replace('_', ' ')}: cell - base\n(paired by seed, 95% CI)", title="effect vs base")
    ax.yaxis.set_visible(False)
