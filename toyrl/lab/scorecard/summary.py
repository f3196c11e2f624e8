"""Summaries of scorecard runs: per-run metrics, per-cell means with bootstrap intervals, paired effects, the record.

Pure functions of stored series, so a stored ``runs.json`` can be re-summarized with any collapse rule:

    m = run_metrics(run)                                  # one run: collapse, freeze, success, spikes, RAGEN-2
    rec = build_record(runs, meta)                        # every cell's summary and every level's paired effect
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from ...collapse import RULE, RULE_NAME, classify, smooth
from ..claims.spec import auc, collapse_times, final
from .design import BASE, DIALS, REGIME, SETTINGS, SPIKE, cell_name, design
from .mi import entropy_ref, regime

__all__ = ["N_BOOT", "summary", "paired_effect", "LEGACY_RULE", "collapse_of", "run_metrics", "METRICS",
           "summarize_cell", "effects", "build_record"]

N_BOOT = 10_000
"""bootstrap resamples of every interval"""


def summary(x, *, seed: int = 0) -> dict:
    """{"mean", "ci95", "sd", "n", "per_seed"} of per-seed values: the mean of the finite ones and its
    95% percentile-bootstrap interval (seeds resampled with replacement, N_BOOT times, seeded).
    NaN is kept in per_seed as None. Example: [0, 0, 1] -> mean 0.333, ci95 [0.0, 1.0]."""
    x = np.asarray(x, dtype=float)
    f = x[np.isfinite(x)]
    r = lambda v: None if v is None or not np.isfinite(v) else round(float(v), 4)   # noqa: E731
    if f.size == 0:
        return {"mean": None, "ci95": [None, None], "sd": None, "n": 0, "per_seed": [None] * len(x)}
    means = f[np.random.default_rng(seed).integers(0, f.size, size=(N_BOOT, f.size))].mean(1)   # (N_BOOT,)
    return {"mean": r(f.mean()), "ci95": [r(np.quantile(means, 0.025)), r(np.quantile(means, 0.975))],
            "sd": r(f.std(ddof=1)) if f.size > 1 else 0.0, "n": int(f.size), "per_seed": [r(v) for v in x]}


def paired_effect(a, b, *, seed: int = 0) -> dict:
    """``summary`` of a - b over the seeds (paired: entry s of both comes from seed s)."""
    return summary(np.asarray(a, dtype=float) - np.asarray(b, dtype=float), seed=seed)


def _arr(x) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in x], dtype=float)


LEGACY_RULE = "collapse-v1"
"""the rule of a record whose meta names none: ``spec.collapse_times`` (argmax peak, no persistence or gradient)"""


def _nan(x) -> float:
    return float("nan") if x is None else float(x)


def collapse_of(series: dict, rule: str = RULE_NAME) -> dict:
    """{"collapsed", "t_collapse", "t_std_drop"} of one run's series by the named rule (NaN where none), plus
    {"frozen", "t_freeze"} under ``RULE_NAME`` (``toyrl.collapse.classify`` with ``RULE``); ``LEGACY_RULE``
    recomputes records stored before it. Example: a run whose mean falls from .8 to 0 at step 10 of 20 with
    gradients -> collapsed 1.0 at step 12 (5-step means) under either rule."""
    m, sd = _arr(series["reward_mean"]), _arr(series["reward_std"])
    if rule == LEGACY_RULE:
        ts, tc = collapse_times(m, sd)
        return {"collapsed": float(np.isfinite(tc)), "t_collapse": tc, "t_std_drop": ts}
    if rule != RULE_NAME:
        raise ValueError(f"rule must be {RULE_NAME!r} or {LEGACY_RULE!r}, got {rule!r}")
    c = classify(m, sd, _arr(series["grad_norm"]), **RULE)
    return {"collapsed": float(c["collapsed"]), "t_collapse": _nan(c["t_collapse"]),
            "t_std_drop": _nan(c["t_std_drop"]), "frozen": float(c["frozen"]), "t_freeze": _nan(c["t_freeze"])}


def run_metrics(run: dict, rule: str = RULE_NAME) -> dict:
    """Scalar metrics of one run (see the module docstring), collapse by ``rule`` (``collapse_of``); NaN where a
    quantity does not exist."""
    s, d = run["series"], run.get("diag", {})
    g = _arr(s["grad_norm"])
    pos = g[np.isfinite(g) & (g > 0)]
    med = float(np.median(pos)) if pos.size else float("nan")
    last = lambda k: _arr(d.get(k, [None]))[-1] if d.get(k) else float("nan")   # noqa: E731
    m = _arr(s["reward_mean"])
    return {**collapse_of(s, rule),
            "peak_reward": float(np.nanmax(smooth(m, RULE["w"]))) if np.isfinite(m).any() else float("nan"),
            "final_reward": final(m),
            "final_success": final(_arr(s["success_rate"])), "auc_success": auc(_arr(s["success_rate"])),
            "spike_rate": float((pos > SPIKE * med).mean()) if pos.size else 0.0,
            "log10_max_grad": float(np.log10(pos.max())) if pos.size else float("nan"),
            "format_valid": final(_arr(s["format_valid_rate"])),
            "mi": last("mi"), "mi_seq": last("mi_seq"), "cond_entropy": last("cond_entropy"),
            "retrieval_acc": last("retrieval_acc"), "mi_upper_bound": last("mi_upper_bound")}


METRICS = ("collapsed", "t_collapse", "peak_reward", "final_reward", "final_success", "auc_success", "spike_rate",
           "log10_max_grad", "format_valid", "mi", "mi_seq", "cond_entropy", "retrieval_acc")
"""per-run metrics summarized per cell (``collapsed`` becomes the cell's ``collapse_rate``; ``peak_reward`` is
the largest ``RULE["w"]``-step mean reward, what the collapse rule's ``min_peak`` is compared with)"""


def summarize_cell(cell: dict, seeds: Sequence[int], metrics: list, n_think: int) -> dict:
    """A cell's record: its dials, seeds, each metric's mean and 95% interval over seeds, and its regime
    (plus ``freeze_rate`` where the runs were classified by a rule with a freeze detector)."""
    out = {**cell, "name": cell_name(cell), "seeds": list(seeds)}
    for k in METRICS + (("frozen",) if metrics and "frozen" in metrics[0] else ()):
        key = {"collapsed": "collapse_rate", "frozen": "freeze_rate"}.get(k, k)
        out[key] = summary([m[k] for m in metrics])
    ubs = [m["mi_upper_bound"] for m in metrics if np.isfinite(m["mi_upper_bound"])]
    ub = float(np.mean(ubs)) if ubs else float("nan")
    out["regime"] = regime(out["cond_entropy"]["mean"] if out["cond_entropy"]["mean"] is not None else float("nan"),
                           out["mi_seq"]["mean"] if out["mi_seq"]["mean"] is not None else float("nan"),
                           h_ref=entropy_ref(n_think), mi_ref=float(ub))
    return out


def effects(cells: list, per_run: dict, keys=("final_success", "collapsed", "auc_success", "cond_entropy")) -> list:
    """Marginal effect of each level that differs from the base cell (``cells[0]``) in one dial:
    metric(level) - metric(base), paired by seed, with its 95% interval."""
    base, out = cells[0], []
    for cell in cells[1:]:
        diff = [d for d in DIALS if cell[d] != base[d]]
        if len(diff) != 1:
            continue
        for k in keys:
            a = [m[k] for m in per_run[cell_name(cell)]]
            b = [m[k] for m in per_run[cell_name(base)]]
            out.append({"dial": diff[0], "level": cell[diff[0]], "metric": k, "effect": paired_effect(a, b)})
    return out


def _command(seeds: int, quick: bool, env: str, cells: Optional[int], steps: Optional[int], workers: int) -> str:
    return ("toyrl scorecard" + (" --quick" if quick else "") + f" --seeds {seeds} --env {env}"
            + (f" --cells {cells}" if isinstance(cells, int) else "") + (f" --steps {steps}" if steps else "") + f" --workers {workers}")


def build_record(runs: dict, meta: dict) -> dict:
    """The scorecard record from every run (cell name -> [{"seed", "series", "diag", "time_s"}]) and
    ``meta`` (env, steps, quick, diag_every, command, workers, backend, run_time_s): per-cell
    summaries and marginal effects. Pure, so a stored runs.json can be re-summarized (``rebuild``): with the
    collapse rule ``meta["collapse_rule"]`` names (``LEGACY_RULE`` where it names none)."""
    by_name = {cell_name(c): c for c in design("full")}
    grid = [by_name[name] for name in runs]
    rule = meta.get("collapse_rule", LEGACY_RULE)
    per_run = {name: [run_metrics(r, rule) for r in rs] for name, rs in runs.items()}
    seed_list = [r["seed"] for r in next(iter(runs.values()))]
    env = meta["env"]
    return {
        "title": f"Stability scorecard: {env}, off-policy long-turn regime",
        "setting": {**SETTINGS[env], "regime": REGIME, "steps": meta["steps"], "quick": meta["quick"],
                    "design": "ofat", "base": BASE, "dials": DIALS, "spike_factor": SPIKE,
                    "diag_every": meta["diag_every"], "collapse_rule": rule,
                    "probe": "8 held-out tasks x 8 samples; first-turn (prompt, reasoning) pairs",
                    "regime_cutoffs": "H(Z|X) per token high if >= 0.5 log(n_think + 1); I(X;Z) per sequence high "
                                      "if >= 0.1 log N (N prompts); RAGEN-2 defines no cut-offs",
                    "intervals": f"95% percentile bootstrap over seeds ({N_BOOT} resamples, seed 0)"},
        "command": meta["command"], "seeds": seed_list, "workers": meta["workers"], "backend": meta["backend"],
        "run_time_s": meta["run_time_s"],
        "cpu_time_s": (round(sum(r["cpu_s"] for rs in runs.values() for r in rs), 1)
                       if all("cpu_s" in r for rs in runs.values() for r in rs) else None),
        "cells": [summarize_cell(c, seed_list, per_run[cell_name(c)], REGIME["n_think"]) for c in grid],
        "effects": effects(grid, per_run)}

