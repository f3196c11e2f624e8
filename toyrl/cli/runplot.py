"""Plot and compare run logs: ``toyrl plot RUN...`` and ``toyrl compare RUN...``.

Runs whose configs (the run-log header, ``toyrl.train.runlog``) are equal except for the seed form one group
(``group_runs``). A group is drawn as the mean over its seeds with a min-max (or +-1 std) band, and is labelled
by the config fields that differ between the groups (``estimator=gigpo``); the fields all runs share name the
setting in the title. A log without a header is a group of its own, labelled by its file name.

``summary_table`` gives, per group and metric (each averaged over the group's runs):
    final = mean of the last 10 rows,  auc = mean over all steps,  peak = max over steps
Example: one run with reward_mean [0, 0.5, 1] -> final 0.5 (all 3 rows are "the last 10"), auc 0.5, peak 1.

    fig = plot_runs([RunLog.load("a.jsonl"), RunLog.load("b.jsonl")], ["reward_mean"], "ab.png")
"""
from __future__ import annotations

import functools
import json
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from .args import UsageError

__all__ = ["Group", "read_runs", "group_runs", "curves", "plot_runs", "summary_table", "format_table",
           "add_run_commands", "DEFAULT_METRICS"]

DEFAULT_METRICS = ("reward_mean", "reward_std")
"""what is learnt, and the within-group spread GRPO learns from (it dies first in the Echo Trap)"""
METRIC_LABELS = {"reward_mean": "mean reward", "reward_std": "within-group reward std",
                 "success_rate": "success rate", "grad_norm": "gradient norm", "clip_frac": "clipped fraction",
                 "entropy": "policy entropy", "zero_var_frac": "zero-variance group fraction",
                 "void_turn_rate": "void-turn rate", "eval_success_rate": "eval success rate"}
"""metric -> the words on its axis (other metrics: the key with spaces)"""
RUN_FIELDS = ("seed", "progress", "device")
"""config fields that do not change the setting: runs differing only here are seeds of one group"""
TITLE_FIELDS = ("env", "env_kwargs", "policy", "estimator", "clip", "agg", "steps")
"""config fields named in the title when every run shares them"""
BANDS = {"minmax": "min-max", "std": "±1 std"}


@dataclass
class Group:
    """Runs of one setting: ``config`` is their shared config without RUN_FIELDS ({} for a headerless log)."""
    label: str
    config: dict
    logs: list = field(default_factory=list)

    @property
    def seeds(self) -> list:
        return [log.config.get("seed") for log in self.logs]


def read_runs(paths: Sequence) -> list:
    """RunLogs of ``paths``; a missing or unreadable file is a one-line UsageError. What ``RunLog.load`` warns
    of (a torn final line: the run was cut off, the line is skipped) is printed as one line per file to stderr,
    ``toyrl: warning: run.jsonl:7: skipped a torn final line ...``, whatever the warning filters."""
    from ..train.runlog import RunLog                                  # torch: imported when a command reads logs
    logs = []
    for p in paths:
        if not Path(p).is_file():
            raise UsageError(f"{p}: no such run log")
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                logs.append(RunLog.load(p))
        except (ValueError, UnicodeDecodeError) as e:
            raise UsageError(str(e)) from None
        for w in caught:
            print(f"toyrl: warning: {w.message}", file=sys.stderr)
    return logs


def _text(v) -> str:
    """A config value as a label: {"map_name": "4x4", "slip": 0.1} -> {map_name=4x4, slip=0.1}."""
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}={_text(x)}" for k, x in v.items()) + "}"
    return v if isinstance(v, str) else json.dumps(v, separators=(",", ":"))


def _name(log) -> str:
    return Path(log.path).name if log.path else "run"


def group_runs(logs: Sequence) -> list:
    """Group runs equal in config but for RUN_FIELDS (first-seen order), labelled by the fields that differ.

    Example: grpo seeds 0, 1 and gigpo seed 0 -> [Group("estimator=grpo", 2 logs), Group("estimator=gigpo", 1 log)];
    a single group is labelled by its estimator."""
    groups: dict = {}
    for i, log in enumerate(logs):
        setting = {k: v for k, v in log.config.items() if k not in RUN_FIELDS}
        key = json.dumps(setting, sort_keys=True, default=str) if log.config else f"headerless {i}"
        groups.setdefault(key, Group(_name(log), setting)).logs.append(log)
    out = list(groups.values())
    configs = [g.config for g in out if g.config]
    fields = [k for k in dict.fromkeys(k for c in configs for k in c)
              if len({_text(c.get(k)) for c in configs}) > 1]
    for g in out:
        if g.config:
            g.label = (", ".join(f"{k}={_text(g.config.get(k))}" for k in fields) if fields
                       else _text(g.config.get("estimator", _name(g.logs[0]))))
    return out


def _curve(log, metric: str) -> tuple:
    """(steps, values) of one metric of one log; a log without rows or without the metric is a UsageError."""
    if not log.rows:
        raise UsageError(f"{_name(log)}: no rows")
    try:
        y = log.column(metric)
    except KeyError:
        raise UsageError(f"{log.path}: no metric {metric!r}; metrics: {', '.join(log.keys())}") from None
    x = log.column("step", strict=False)
    return (x if np.isfinite(x).all() else np.arange(len(y), dtype=float)), y


def curves(group: Group, metric: str, smooth: int = 1) -> tuple:
    """(steps, ys): the steps every run of ``group`` logged and the (runs, steps) values there, each run
    smoothed by a trailing mean over ``smooth`` steps first."""
    from ..viz.plots import smooth as trailing_mean
    pairs = [_curve(log, metric) for log in group.logs]
    x = functools.reduce(np.intersect1d, [p[0] for p in pairs])
    ys = np.stack([trailing_mean(y, smooth)[np.isin(xs, x)] for xs, y in pairs])       # (runs, steps)
    return x, ys


def _title(groups: Sequence, smooth: int) -> str:
    configs = [g.config for g in groups if g.config]
    shared = [f"{k}={_text(configs[0][k])}" for k in TITLE_FIELDS
              if configs and all(c.get(k) not in (None, {}) and c[k] == configs[0][k] for c in configs)]
    text = ", ".join(shared) if shared else ", ".join(g.label for g in groups)
    return text + (f"  (smoothed over {smooth} steps)" if smooth > 1 else "")


def _draw(ax, group: Group, metric: str, color: str, smooth: int, band: str) -> None:
    x, ys = curves(group, metric, smooth)
    n = len(ys)
    if n == 1:
        ax.plot(x, ys[0], color=color, lw=1.6, label=group.label)
        return
    with warnings.catch_warnings():                 # a step where every run is NaN stays NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(ys, axis=0)
        lo, hi = ((np.nanmin(ys, axis=0), np.nanmax(ys, axis=0)) if band == "minmax"
                  else (mean - np.nanstd(ys, axis=0), mean + np.nanstd(ys, axis=0)))
    seeds = group.seeds
    runs = "seeds" if None not in seeds and len(set(seeds)) == n else "runs"
    ax.plot(x, mean, color=color, lw=1.6, label=f"{group.label} (mean of {n} {runs})")
    ax.fill_between(x, lo, hi, color=color, alpha=0.2, lw=0, label=f"{group.label} (band: {BANDS[band]})")


def plot_runs(logs: Sequence, metrics: Sequence[str] = DEFAULT_METRICS, out=None, *, smooth: int = 1,
              band: str = "minmax"):
    """One panel per metric against the step, one line (and band, for several seeds) per group of runs;
    saved to ``out`` if given. Returns the matplotlib Figure (drawn with the Agg canvas, no pyplot state)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    if smooth < 1 or band not in BANDS:
        raise UsageError(f"--smooth must be >= 1 (got {smooth}) and --band one of {', '.join(BANDS)} (got {band})")
    groups = group_runs(logs)
    fig = Figure(figsize=(4.4 * len(metrics), 3.4), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    for ax, metric in zip(axes, metrics):
        for i, g in enumerate(groups):
            _draw(ax, g, metric, f"C{i % 10}", smooth, band)
        ax.set_xlabel("step")
        ax.set_ylabel(f"{METRIC_LABELS.get(metric, metric.replace('_', ' '))} ({metric})")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(_title(groups, smooth), fontsize=10)
    if out is not None:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, dpi=100)
    return fig


def summary_table(groups: Sequence, metrics: Sequence[str] = DEFAULT_METRICS, last: int = 10) -> list:
    """One row per group: label, runs, and ``metric.final`` / ``.auc`` / ``.peak`` for each metric, each the mean
    over the group's runs of that run's mean of its last ``last`` rows / mean over all rows / max."""
    rows = []
    for g in groups:
        row = {"label": g.label, "runs": len(g.logs)}
        for m in metrics:
            ys = [_curve(log, m)[1] for log in g.logs]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                row[f"{m}.final"] = float(np.mean([np.nanmean(y[-last:]) for y in ys]))
                row[f"{m}.auc"] = float(np.mean([np.nanmean(y) for y in ys]))
                row[f"{m}.peak"] = float(np.mean([np.nanmax(y) for y in ys]))
        rows.append(row)
    return rows


def format_table(rows: Sequence, metrics: Sequence[str]) -> str:
    """The summary rows as text: a metric-name line over final / auc / peak columns."""
    w = max([3] + [len(r["label"]) for r in rows])
    block = max([23] + [len(m) for m in metrics])
    head = f"{'':{w}}  {'':4}" + "".join(f"  {m:^{block}}" for m in metrics)
    sub = f"{'run':{w}}  {'runs':>4}" + "".join(f"  {'final':>7} {'auc':>7} {'peak':>7}".ljust(block + 2)
                                                   for _ in metrics)
    lines = [head, sub]
    for r in rows:
        cells = "".join(f"  {r[m + '.final']:7.3f} {r[m + '.auc']:7.3f} {r[m + '.peak']:7.3f}".ljust(block + 2)
                        for m in metrics)
        lines.append(f"{r['label']:{w}}  {r['runs']:>4}{cells}")
    return "\n".join(line.rstrip() for line in lines)


# ---- the two subcommands --------------------------------------------------------------------------------------
def _metrics(text: Optional[str]) -> list:
    names = [m.strip() for m in (text or "").split(",") if m.strip()]
    return names or list(DEFAULT_METRICS)


def cmd_plot(args) -> int:
    logs = read_runs(args.runs)
    metrics = _metrics(args.metrics)
    plot_runs(logs, metrics, args.out, smooth=args.smooth, band=args.band)
    groups = group_runs(logs)
    print(f"plot: {len(logs)} run(s) in {len(groups)} group(s) ({'; '.join(g.label for g in groups)}), "
          f"{', '.join(metrics)} -> {args.out}")
    return 0


def cmd_compare(args) -> int:
    metrics = _metrics(args.metrics)
    if args.last < 1:
        raise UsageError(f"--last must be >= 1 (got {args.last})")
    rows = summary_table(group_runs(read_runs(args.runs)), metrics, last=args.last)
    print(format_table(rows, metrics))
    print(f"final: mean of the last {args.last} rows; auc: mean over steps; peak: max; each averaged over runs")
    return 0


def add_run_commands(sub) -> None:
    """The ``plot`` and ``compare`` subcommands (``toyrl plot RUN... --metrics a,b --out FIG.png``)."""
    metrics_help = f"comma-separated run-log keys (default {','.join(DEFAULT_METRICS)})"
    p = sub.add_parser("plot", help="curves of run logs, seeds of one setting as a mean and band",
                       description="One panel per metric; runs equal in config but for the seed are one group.")
    p.add_argument("runs", nargs="+", help="run logs (JSON lines, from toyrl train --out or toyrl sweep)")
    p.add_argument("--metrics", default=None, help=metrics_help)
    p.add_argument("--out", default="plot.png", help="figure path (default plot.png)")
    p.add_argument("--smooth", type=int, default=1, help="trailing mean over N steps (default 1: none)")
    p.add_argument("--band", choices=list(BANDS), default="minmax", help="spread across seeds (default minmax)")
    p.set_defaults(func=cmd_plot)
    c = sub.add_parser("compare", help="final / AUC / peak of run logs, one row per setting",
                       description="A table of each group's final (mean of the last rows), AUC (mean) and peak.")
    c.add_argument("runs", nargs="+", help="run logs (JSON lines)")
    c.add_argument("--metrics", default=None, help=metrics_help)
    c.add_argument("--last", type=int, default=10, help="rows averaged for 'final' (default 10)")
    c.set_defaults(func=cmd_compare)
