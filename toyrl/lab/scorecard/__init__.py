"""The stability scorecard: which design choices collapse and which hold, over seeds.

    toyrl scorecard [--quick] [--seeds N] [--out-dir D] [--env gridworld] [--workers W] [--backend process|ray]
    card = run_scorecard(seeds=10, out_dir="toyrl-results/scorecard")     # the same from Python

The CLI writes to ``./toyrl-results/scorecard/`` unless ``--out-dir`` names a folder; the shipped card in
``data/scorecard/`` is replaced only by ``--update-shipped`` (``toyrl.lab.results``), each file whole, after
every run is done. Each run is kept in ``<out dir>/.runcache/`` as it finishes (``toyrl.lab.runcache``), so a
killed card resumes: a rerun reuses the runs of the same config, seed and code, unless ``fresh`` (``--fresh``).

ARLArena (arXiv 2602.21534) splits a policy-gradient design into four dials: advantage design
(``estimator``), importance sampling / clipping (``clip``), loss aggregation (``agg``) and dynamic
filtering (``filter``). The full grid (3 x 6 x 3 x 4 = 216 cells x 10 seeds) does not fit on two
cores, so the design is **one factor at a time** around a base cell (GRPO, PPO clip, token-mean,
no filter): the base plus every other level of one dial with the other three at base, 13 cells.
Every cell runs the same seeds, so a level's marginal effect is a paired difference with the base.

**The regime** (``REGIME``, one for every cell): off-policy and long-turn. Rollouts come from the
policy 2 steps old (``staleness=2``), each batch is used for 2 PPO epochs, episodes last up to 10
turns and each turn holds up to 3 reasoning tokens (4 distinct ones) before END and its action;
lr 1e-2 with no gradient clipping, high enough that a run can learn and then collapse. Sampling
goes through the turn grammar (``constrain=True``), from a randomly initialised policy: the
planner's demonstrations hold no reasoning, so a behaviour-cloning warm start (tried first, with
``constrain=False``) left no reasoning to diagnose. Consequence: no turn is void, the format-valid
rate is 1 and the ``void_turn`` filter keeps everything (its cell reproduces the base cell, seed
for seed: a check). Env: random 4x4 lakes (a new map per task, so first-turn prompts differ and
RAGEN-2's I(X;Z) is defined).

Per run (``run_metrics``): collapse and freeze by the ledger's rule (``toyrl.collapse.classify`` with
``RULE`` on the mean and within-group std of the reward and the gradient norm; a record names its rule in
``meta["collapse_rule"]``, and one that names none, like the shipped card, was computed with the earlier
argmax-peak rule ``toyrl.lab.claims.spec.collapse_times`` and is re-summarized with it), time to collapse,
final and AUC success, grad-norm spikes (steps above ``SPIKE`` x the run's median norm), format-valid
rate, and RAGEN-2's reasoning diagnostics (``toyrl.lab.scorecard.mi``) on a held-out probe batch every
``diag_every`` steps. Per cell (``freeze_rate`` too where the rule has a freeze detector): means over
seeds with 95% percentile-bootstrap intervals (``summary``: resampling seeds keeps a rate's interval
inside [0, 1], which a t-interval over 3 seeds does not) and a regime label.
Figures and the notebook helpers are in ``toyrl.lab.scorecard.plot``.
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from ...collapse import RULE, RULE_NAME, classify
from ..claims.spec import auc, collapse_times, final
from ..results import REPO, atomic_write
from .mi import regime

__all__ = ["DIALS", "BASE", "REGIME", "SETTINGS", "STEPS", "SPIKE", "design", "cell_config", "cell_name", "run_one",
           "run_metrics", "collapse_of", "LEGACY_RULE", "select_cells", "summarize_cell", "effects", "run_scorecard",
           "build_record", "rebuild", "summary", "paired_effect", "REPO"]


DIALS = {
    "estimator": ("grpo", "gigpo", "turn_gae"),
    "clip": ("ppo", "clip_higher", "cispo", "sapo", "gspo", "turn_ppo"),
    "agg": ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum"),
    "filter": ("none", "zero_variance", "starpo_s", "void_turn"),
}
"""the four dials and their levels (the first level of each is the base cell)"""
BASE = {dial: levels[0] for dial, levels in DIALS.items()}
"""the base cell of the one-factor-at-a-time design"""

REGIME = dict(n_think=4, think_max=3, constrain=True, staleness=2, ppo_epochs=2, lr=1e-2, grad_clip=0.0,
              prompts_per_step=8, group_size=8)
"""the off-policy long-turn regime every cell shares (see the module docstring)"""
SETTINGS = {
    "gridworld": dict(env="gridworld", env_kwargs={"size": 4, "max_turns": 10}),
    "bandit_chain": dict(env="bandit_chain", env_kwargs={"stages": 4, "max_turns": 10}),
}
"""env settings (bandit_chain's first prompt is the same for every task, so its I(X;Z) is undefined: n/a)"""
STEPS = {"full": 50, "quick": 40}
"""RL steps per run"""
SPIKE = 10.0
"""a grad-norm spike: a step whose pre-clip norm exceeds SPIKE x the run's median (non-zero) norm"""
SERIES_KEYS = ("reward_mean", "reward_std", "success_rate", "grad_norm", "format_valid_rate", "clip_frac",
               "ratio_max", "zero_var_frac", "kept_frac", "template_mi")
"""run-log columns kept per run"""
DIAG_KEYS = ("mi", "cond_entropy", "entropy", "mi_seq", "cond_entropy_seq", "retrieval_acc", "chance",
             "mi_upper_bound", "valid_thinking_rate")
"""RAGEN-2 diagnostics kept per probe"""


def design(kind: str = "ofat", dials: Optional[dict] = None) -> list:
    """The cells: "ofat" (base, then each other level of one dial with the rest at base) or "full".

    Example: dials {"a": (1, 2), "b": (3, 4)} -> ofat [{a 1, b 3}, {a 2, b 3}, {a 1, b 4}]; full: 4 cells.
    """
    dials = dials or DIALS
    if kind == "full":
        import itertools
        return [dict(zip(dials, combo)) for combo in itertools.product(*dials.values())]
    if kind != "ofat":
        raise ValueError(f"design must be ofat or full, got {kind!r}")
    base = {d: levels[0] for d, levels in dials.items()}
    return [dict(base)] + [{**base, d: lv} for d, levels in dials.items() for lv in levels[1:]]


def cell_name(cell: dict) -> str:
    """estimator/clip/agg/filter, e.g. "grpo/ppo/token-mean/none"."""
    return "/".join(str(cell[d]) for d in DIALS)


def cell_config(cell: dict, env: str = "gridworld", steps: int = 50) -> dict:
    """The TrainConfig fields (a dict) of one cell in the shared regime."""
    if env not in SETTINGS:
        raise ValueError(f"unknown scorecard env {env!r}; valid: {', '.join(SETTINGS)}")
    return {**SETTINGS[env], **REGIME, "estimator": cell["estimator"], "clip": cell["clip"], "agg": cell["agg"],
            "filters": [] if cell["filter"] == "none" else [cell["filter"]], "steps": steps}


def _probe_set(tr, n_tasks: int, per_task: int, seed: int):
    """A held-out probe: own core, tasks and generator, so probing never changes the training run."""
    import torch
    from ...envs import make_core
    core = make_core(tr.cfg.env, n_tasks * per_task, seed=seed + 2_000_003, **tr.env_kwargs)
    tasks = np.repeat(core.sample_tasks(np.random.default_rng([seed, 11]), n_tasks), per_task, 0)
    return core, tasks, torch.Generator(device=tr.device).manual_seed(seed + 11)


def _probe(tr, probe) -> dict:
    """RAGEN-2 diagnostics of the current policy on the probe batch."""
    from ...rollout.engine import Sampling, rollout
    from .mi import reasoning_diagnostics
    core, tasks, gen = probe
    cfg = tr.cfg
    tr.policy.eval()
    s = Sampling(temperature=cfg.temperature, constrain=cfg.constrain, context=cfg.context,
                 context_k=cfg.context_k, generator=gen)
    ro = rollout(tr.policy, core, tasks, np.arange(len(tasks)), codec=tr.codec, sampling=s)
    d = reasoning_diagnostics(tr.policy, ro.episodes, tr.codec, temperature=cfg.temperature,
                              grammar=tr.codec.grammar(cfg.constrain))
    return {k: d[k] for k in DIAG_KEYS}


def run_one(job: tuple) -> dict:
    """One (cell, seed) run: ``job`` = (config dict, seed, diag_every) -> {"series", "diag", "time_s", "cpu_s"}.

    Top level, one torch thread (a worker entry point of ``toyrl.lab.parallel.run_tasks``). The probe
    runs before step 0 (after the warm start), every ``diag_every`` steps and after the last.
    """
    import torch
    torch.set_num_threads(1)
    from ...train import Trainer, TrainConfig
    cfg_dict, seed, diag_every = job
    t0, c0 = time.perf_counter(), time.process_time()
    tr = Trainer(TrainConfig(**{**cfg_dict, "seed": seed, "progress": False}))
    if tr.cfg.bc_steps:
        tr.behaviour_clone(tr.cfg.bc_steps)
    probe = _probe_set(tr, 8, 8, seed)
    diag = {"step": []}
    for s in range(tr.cfg.steps + 1):
        if diag_every and (s % diag_every == 0 or s == tr.cfg.steps):
            diag["step"].append(s)
            for k, v in _probe(tr, probe).items():
                diag.setdefault(k, []).append(v)
        if s < tr.cfg.steps:
            tr.step()
    series = {k: [None if not math.isfinite(v) else round(float(v), 4) for v in tr.log.column(k, strict=False)]
              for k in SERIES_KEYS}
    return {"series": series, "diag": {k: [round(float(x), 4) if math.isfinite(x) else None for x in v]
                                       for k, v in diag.items()},
            "time_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0}


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
    return {**collapse_of(s, rule),
            "final_success": final(_arr(s["success_rate"])), "auc_success": auc(_arr(s["success_rate"])),
            "spike_rate": float((pos > SPIKE * med).mean()) if pos.size else 0.0,
            "log10_max_grad": float(np.log10(pos.max())) if pos.size else float("nan"),
            "format_valid": final(_arr(s["format_valid_rate"])),
            "mi": last("mi"), "mi_seq": last("mi_seq"), "cond_entropy": last("cond_entropy"),
            "retrieval_acc": last("retrieval_acc"), "mi_upper_bound": last("mi_upper_bound")}


METRICS = ("collapsed", "t_collapse", "final_success", "auc_success", "spike_rate", "log10_max_grad", "format_valid",
           "mi", "mi_seq", "cond_entropy", "retrieval_acc")
"""per-run metrics summarized per cell (``collapsed`` becomes the cell's ``collapse_rate``)"""


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
                           h_ref=math.log(n_think), mi_ref=float(ub))
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
                    "regime_cutoffs": "H(Z|X) per token high if >= 0.5 log(n_think); I(X;Z) per sequence high "
                                      "if >= 0.1 log N (N prompts); RAGEN-2 defines no cut-offs",
                    "intervals": f"95% percentile bootstrap over seeds ({N_BOOT} resamples, seed 0)"},
        "command": meta["command"], "seeds": seed_list, "workers": meta["workers"], "backend": meta["backend"],
        "run_time_s": meta["run_time_s"],
        "cpu_time_s": (round(sum(r["cpu_s"] for rs in runs.values() for r in rs), 1)
                       if all("cpu_s" in r for rs in runs.values() for r in rs) else None),
        "cells": [summarize_cell(c, seed_list, per_run[cell_name(c)], REGIME["n_think"]) for c in grid],
        "effects": effects(grid, per_run)}


def _write(out_dir, record: dict, runs: Optional[dict], figure: bool) -> None:
    """runs.json, scorecard.png, then scorecard.json, each written whole (``atomic_write``)."""
    out = Path(out_dir)
    if runs is not None:
        atomic_write(out / "runs.json", (json.dumps({"meta": record["meta"], "cells": runs},
                                                    separators=(",", ":")) + "\n").encode())
    if figure:
        import io
        from .plot import write_figure
        buf = io.BytesIO()
        write_figure(record, buf)
        atomic_write(out / "scorecard.png", buf.getvalue())
    atomic_write(out / "scorecard.json", (json.dumps(record, indent=1) + "\n").encode())


def rebuild(out_dir, figure: bool = True) -> dict:
    """Re-summarize ``out_dir/runs.json`` into scorecard.json and scorecard.png (no runs)."""
    stored = json.loads((Path(out_dir) / "runs.json").read_text())
    record = {**build_record(stored["cells"], stored["meta"]), "meta": stored["meta"]}
    _write(out_dir, record, None, figure)
    return record


def select_cells(cells=None) -> list:
    """The design's cells: all (None), the first ``cells`` (an int), or those named (a list of names)."""
    grid = design()
    if cells is None:
        return grid
    if isinstance(cells, int):
        return grid[:cells]
    by_name = {cell_name(c): c for c in design("full")}
    unknown = [n for n in cells if n not in by_name]
    if unknown:
        raise ValueError(f"unknown cell {unknown[0]!r}; a cell is estimator/clip/agg/filter, e.g. {cell_name(BASE)}")
    return [by_name[n] for n in cells]


def run_scorecard(*, seeds=10, quick: bool = False, env: str = "gridworld", out_dir=None, workers: int = 1,
                  backend: str = "process", address: Optional[str] = None, cells=None,
                  steps: Optional[int] = None, diag_every: int = 10, progress: bool = True,
                  figure: bool = True, fresh: bool = False) -> dict:
    """Run the scorecard and write ``out_dir/scorecard.json``, ``out_dir/runs.json`` (every run's series)
    and ``out_dir/scorecard.png``; returns the record. ``seeds``: a count (seeds 0..N-1) or a list;
    ``cells``: see ``select_cells`` (the base cell first, for the marginal effects); ``steps``
    overrides the RL steps per run. With an ``out_dir``, runs in its ``.runcache/`` are reused unless ``fresh``
    (``meta["runs_reused"]`` counts them)."""
    from ..runcache import CACHE_DIR, RunCache
    grid = select_cells(cells)
    n_steps = steps or STEPS["quick" if quick else "full"]
    seed_list = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
    pairs = [(c, s) for c in grid for s in seed_list]
    jobs = [(cell_config(c, env, n_steps), s, diag_every) for c, s in pairs]
    cache = RunCache(None if out_dir is None else Path(out_dir) / CACHE_DIR, fresh=fresh)
    specs = [{"job": "scorecard", "config": c, "seed": s, "diag_every": d} for c, s, d in jobs]
    n_reused = len(cache.reusable(specs))
    if n_reused:
        print(f"scorecard: {cache.describe(n_reused, len(jobs))}", flush=True)
    t0 = time.time()
    results = [None] * len(jobs)
    for i, res, _ in cache.run(run_one, jobs, specs, workers=workers, backend=backend, address=address,
                               progress=progress, desc="scorecard"):
        results[i] = res
    runs: dict = {}
    for (c, s), res in zip(pairs, results):
        runs.setdefault(cell_name(c), []).append({"seed": s, **res})
    meta = {"env": env, "steps": n_steps, "quick": quick, "diag_every": diag_every, "collapse_rule": RULE_NAME,
            "workers": workers, "backend": backend, "run_time_s": round(time.time() - t0, 1), "runs_reused": n_reused,
            "command": _command(len(seed_list), quick, env, cells, steps, workers)}
    record = {**build_record(runs, meta), "meta": meta}
    if out_dir is not None:
        _write(out_dir, record, runs, figure)
        cache.prune()
    return record
