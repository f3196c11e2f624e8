"""Figures and tables of the stability scorecard (``toyrl.lab.scorecard``): pure functions of its records.

    card = load_scorecard("data/scorecard")                 # (record, runs)
    heatmap_data(card[0])                                   # (cell names, metric names, (C, M) means)
    marginal_effects(card[0], "final_success")              # [(dial, level, mean, lo, hi)]
    plot_cell(card[0], card[1], "grpo/sapo/token-mean/none")  # the cell's runs, one line per seed

``write_figure`` draws the scorecard figure: a cells x metrics heatmap (each metric's mean over
seeds) beside the marginal effect of every level on final success, paired with the base cell, with its
95% interval. The heatmap colours each metric by which way is good (``DIRECTIONS``): green is good and
red is bad on both the high-is-good columns (``RdYlGn``) and the high-is-bad ones (``RdYlGn_r``), and a
metric with no better direction is purple; one colour bar per direction says which way it reads.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ...viz.style import styled

__all__ = ["HEATMAP_METRICS", "DIRECTIONS", "DIRECTION_CMAPS", "metric_direction", "load_scorecard", "heatmap_data", "marginal_effects", "cell_series", "plot_cell",
           "write_figure", "cell_names", "effect_sign"]

HEATMAP_METRICS = ("collapse_rate", "final_success", "auc_success", "spike_rate", "format_valid", "reasoning_entropy",
                   "retrieval_acc")
"""the heatmap's columns: metrics in [0, 1], so one colour scale reads them all (``reasoning_entropy`` is
H(Z|X) per token over its largest value, log(n_think + 1): the reasoning tokens and END)"""
LABELS = {"reasoning_entropy": "H(Z|X) / log(n_think+1)"}
DIRECTIONS = {"collapse_rate": -1, "final_success": 1, "auc_success": 1, "spike_rate": -1, "format_valid": 1,
              "reasoning_entropy": 0, "retrieval_acc": 1}
"""metric -> +1 high is good, -1 high is bad, 0 no better direction (RAGEN-2: low H(Z|X) is a low-entropy
collapse, high H(Z|X) with low I(X;Z) a template collapse)"""
DIRECTION_CMAPS = {1: ("RdYlGn", "higher is better"), -1: ("RdYlGn_r", "higher is worse"),
                   0: ("Purples", "no better direction")}
"""direction -> (matplotlib colour map, colour-bar label): green good, red bad whichever way a metric reads"""


def metric_direction(metric: str) -> int:
    """+1 / -1 / 0: whether a higher ``metric`` is better, worse, or neither (``DIRECTIONS``; unknown: 0).

    Example: metric_direction("collapse_rate") -> -1; metric_direction("final_success") -> 1.
    """
    return DIRECTIONS.get(metric, 0)


def load_scorecard(path) -> tuple[dict, dict]:
    """(scorecard record, runs) from a directory holding scorecard.json and runs.json."""
    path = Path(path)
    record = json.loads((path / "scorecard.json").read_text())
    runs_path = path / "runs.json"
    runs = json.loads(runs_path.read_text())["cells"] if runs_path.exists() else {}
    return record, runs


def cell_names(record: dict) -> list:
    """The cells' names, in design order."""
    return [c["name"] for c in record["cells"]]


def _mean(cell: dict, key: str, n_think: int = 4) -> float:
    if key == "reasoning_entropy":
        return _mean(cell, "cond_entropy") / np.log(n_think + 1)
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


def plot_cell(record: dict, runs: dict, name: str, key: str = "success_rate"):
    """Three panels for one cell: ``key`` per seed (collapses marked at the steps the record holds, by the rule
    it names), within-group reward std, and RAGEN-2's I(X;Z) / H(Z|X) on the probe batch, under a title naming
    the cell and its setting. Returns the figure."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from ...viz.plots import label
    cell = next(c for c in record["cells"] if c["name"] == name)
    marks = cell["t_collapse"]["per_seed"]               # the record's own collapse steps, by the rule it names
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6), layout="constrained")
    for r, tc in zip(runs[name], marks):
        s = r["series"]
        y = np.array([np.nan if v is None else v for v in s[key]], float)
        line, = axes[0].plot(y, lw=1, alpha=0.8)
        if tc is not None:
            axes[0].axvline(tc, color=line.get_color(), ls="--", lw=0.8)
        axes[1].plot(np.array(s["reward_std"], float), lw=1, alpha=0.8)
        d = r.get("diag", {})
        if d.get("step"):
            axes[2].plot(d["step"], [np.nan if v is None else v for v in d["mi_seq"]], "o-", color="C0", alpha=0.5)
            axes[2].plot(d["step"], [np.nan if v is None else v for v in d["cond_entropy"]], "s--", color="C3",
                         alpha=0.5)
    cr = cell["collapse_rate"]
    axes[0].set(title=f"{label(key)} per seed (dashed: collapse)\ncollapse rate {cr['mean']:.2f} "
                f"[{cr['ci95'][0]:.2f}, {cr['ci95'][1]:.2f}]", xlabel="RL step", ylabel=label(key))
    axes[1].set(title="within-group reward std", xlabel="RL step", ylabel="reward std within a group")
    axes[2].set(title=f"RAGEN-2 probe\nregime: {cell['regime']}", xlabel="RL step", ylabel="nats")
    axes[2].legend([Line2D([], [], marker="o", color="C0"), Line2D([], [], marker="s", ls="--", color="C3")],
                   ["I(X;Z) per sequence", "H(Z|X) per token"], fontsize=8)
    st, rg = record["setting"], record["setting"]["regime"]
    size = st.get("env_kwargs", {}).get("size")
    fig.suptitle(f"{name}: {st['env']}{f' {size}x{size}' if size else ''}, {st['steps']} steps, "
                 f"{len(runs[name])} seeds (one line each), staleness {rg['staleness']}, {rg['ppo_epochs']} epochs, "
                 f"lr {rg['lr']:g}", fontsize=10)
    return fig


def _direction_heatmap(ax, values: np.ndarray, metrics: list) -> dict:
    """Draw (C, M) ``values`` in [0, 1], each column in its direction's colour map (one image per direction,
    in the order the directions first appear); returns {direction: image}. Cell text white on dark colours."""
    from ...viz.style import font_size
    images = {}
    dirs = np.array([metric_direction(m) for m in metrics])
    for d in dict.fromkeys(dirs.tolist()):
        keep = np.broadcast_to(dirs == d, values.shape)
        images[d] = ax.imshow(np.ma.masked_array(values, ~keep | ~np.isfinite(values)), cmap=DIRECTION_CMAPS[d][0],
                              vmin=0, vmax=1, aspect="auto", interpolation="nearest")
    for i in range(values.shape[0]):
        for j in range(values.shape[1]):
            if np.isfinite(values[i, j]):
                r, g, b, _ = images[dirs[j]].cmap(values[i, j])
                ax.text(j, i, f"{values[i, j]:.2f}", ha="center", va="center", fontsize=font_size("note"),
                        color="white" if 0.299 * r + 0.587 * g + 0.114 * b < 0.5 else "black")
    return images


def _metric_label(metric: str) -> str:
    """A heatmap column's label: the metric and which way is better. Example: "collapse rate (lower better)"."""
    word = {1: " (higher better)", -1: " (lower better)", 0: " (no direction)"}[metric_direction(metric)]
    return LABELS.get(metric, metric.replace("_", " ")) + word


@styled
def write_figure(record: dict, path=None, metric: str = "final_success"):
    """The scorecard figure (heatmap of cells x metrics coloured by each metric's direction, with a colour bar
    per direction; marginal effects per dial); saved to ``path`` if given. Returns the figure."""
    import matplotlib
    if path is not None:
        matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    from ...viz.style import figsize, font_size, subplots
    names, metrics, values = heatmap_data(record)
    fig, (ax, bx) = subplots(1, 2, size=figsize(15, max(5.4, 0.42 * len(names) + 3.6)),
                             gridspec_kw={"width_ratios": [1.25, 1]}, layout="constrained")
    images = _direction_heatmap(ax, values, metrics)
    ax.set_xticks(range(len(metrics)), [_metric_label(m) for m in metrics], rotation=90)
    ax.set_yticks(range(len(names)), [f"{n}  [{c['regime']}]" for n, c in zip(names, record["cells"])],
                  fontsize=font_size("note"))
    ax.set(xlabel="metric (mean over seeds)", ylabel="cell: estimator/clip/agg/filter\n[RAGEN-2 regime]")
    for d, im in images.items():
        cbar = fig.colorbar(im, ax=ax, fraction=0.035, pad=0.015)
        cbar.set_label(f"{DIRECTION_CMAPS[d][1]} (0-1)", fontsize=font_size("note"))
        cbar.ax.tick_params(labelsize=font_size("note"))
    _effects_panel(bx, marginal_effects(record, metric), metric)
    st = record["setting"]
    n_seeds = len(record["seeds"])
    fig.suptitle(f"{record.get('title', 'Stability scorecard')}: staleness {st['regime']['staleness']}, "
                 f"{st['regime']['ppo_epochs']} epochs, lr {st['regime']['lr']:g}, {st['steps']} steps, "
                 f"{n_seeds} seeds/cell" + (" (quick)" if st.get("quick") else ""))
    if path is not None:
        fig.savefig(path, dpi=max(110, fig.dpi))
        plt.close(fig)
    return fig


def _effects_panel(ax, effects: list, metric: str) -> None:
    """Horizontal bars: each level's paired effect vs the base cell with its 95% interval, grouped by dial."""
    if not effects:
        ax.text(0.5, 0.5, "no marginal effects (one cell)", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return
    dials = list(dict.fromkeys(e[0] for e in effects))
    y = np.arange(len(effects))[::-1]
    for k, (d, lv, m, lo, hi) in zip(y, effects):
        color = f"C{dials.index(d)}"
        ax.barh(k, m, color=color, alpha=0.7)
        ax.plot([lo, hi], [k, k], color="black", lw=1.2)
    ax.axvline(0, color="grey", lw=0.8)
    from ...viz.style import font_size
    ax.set_yticks(y, [f"{d}: {lv}" for d, lv, *_ in effects], fontsize=font_size("label"))
    ax.set(xlabel=f"{metric.replace('_', ' ')}: level - base\n(paired by seed, 95% CI)", ylabel="dial: level",
           title="marginal effect per dial (one at a time)")
    from matplotlib.patches import Patch
    ax.legend(handles=[Patch(color=f"C{i}", alpha=0.7, label=d) for i, d in enumerate(dials)],
              fontsize=font_size("note"), loc="best", title="dial", title_fontsize=font_size("note"))
