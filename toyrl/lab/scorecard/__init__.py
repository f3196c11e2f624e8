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
``meta["collapse_rule"]``; one that names none is re-summarized with the earlier argmax-peak rule
``toyrl.lab.claims.spec.collapse_times``, unless ``rejudge`` re-summarizes its stored runs by today's rule, as
lesson 11 does with the shipped card), time to collapse, 5-step peak and final reward,
final and AUC success, grad-norm spikes (steps above ``SPIKE`` x the run's median norm), format-valid
rate, and RAGEN-2's reasoning diagnostics (``toyrl.lab.scorecard.mi``) on a held-out probe batch every
``diag_every`` steps. Per cell (``freeze_rate`` too where the rule has a freeze detector): means over
seeds with 95% percentile-bootstrap intervals (``summary``: resampling seeds keeps a rate's interval
inside [0, 1], which a t-interval over 3 seeds does not) and a regime label.
Figures and the notebook helpers are in ``toyrl.lab.scorecard.plot``; the design (dials, regime, cells) in
``design.py``, the pure summaries of stored runs in ``summary.py``.
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Optional

import numpy as np

from ...collapse import RULE_NAME
from ..results import REPO, atomic_write
from .design import (BASE, DIAG_KEYS, DIALS, REGIME, SERIES_KEYS, SETTINGS, SPIKE, STEPS, cell_config, cell_name,
                     design, select_cells)
from .summary import (LEGACY_RULE, N_BOOT, _command, build_record, collapse_of, effects, paired_effect, run_metrics,
                      summarize_cell, summary)

__all__ = ["DIALS", "BASE", "REGIME", "SETTINGS", "STEPS", "SPIKE", "design", "cell_config", "cell_name", "run_one",
           "run_metrics", "collapse_of", "LEGACY_RULE", "select_cells", "summarize_cell", "effects", "run_scorecard",
           "build_record", "rebuild", "rejudge", "summary", "paired_effect", "REPO", "N_BOOT"]


def _probe_set(tr, n_tasks: int, per_task: int, seed: int):
    """A held-out probe: own core, tasks and generator, so probing never changes the training run."""
    import torch
    from ...envs import make_core
    core = make_core(tr.cfg.env, n_tasks * per_task, seed=seed + 2_000_003, **tr.env_kwargs)
    tasks = np.repeat(core.sample_tasks(np.random.default_rng([seed, 11]), n_tasks), per_task, 0)
    return core, tasks, torch.Generator(device=tr.device).manual_seed(seed + 11)


def _probe(tr, probe) -> dict:
    """RAGEN-2 diagnostics of the current policy on the probe batch."""
    from ...rollout.play import Sampling, rollout
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


def rejudge(out_dir, rule: Optional[str] = RULE_NAME) -> tuple[dict, dict]:
    """(record, runs) of ``out_dir/runs.json`` summarized now, by today's code and collapse ``rule`` (None: the
    rule the stored meta names, ``LEGACY_RULE`` where it names none), whatever its stored scorecard.json says.
    What a lesson shows from a stored card: a summary judged by the current rule, never a stale one.

    Example: rejudge(REPO / "data" / "scorecard")[0]["setting"]["collapse_rule"] -> "collapse-v2".
    """
    stored = json.loads((Path(out_dir) / "runs.json").read_text())
    meta = stored["meta"] if rule is None else {**stored["meta"], "collapse_rule": rule}
    return {**build_record(stored["cells"], meta), "meta": meta}, stored["cells"]


def rebuild(out_dir, figure: bool = True, rule: Optional[str] = None) -> dict:
    """Re-summarize ``out_dir/runs.json`` into scorecard.json and scorecard.png (no runs), by ``rule``
    (``rejudge``; None: the rule runs.json's meta names). The shipped card:
    ``rebuild(REPO / "data" / "scorecard", rule="collapse-v2")``."""
    record, _ = rejudge(out_dir, rule)
    _write(out_dir, record, None, figure)
    return record



def run_scorecard(*, seeds=10, quick: bool = False, env: str = "gridworld", out_dir=None, workers: int = 1,
                  backend: str = "process", address: Optional[str] = None, cells=None,
                  steps: Optional[int] = None, diag_every: int = 10, progress: bool = True,
                  figure: bool = True, fresh: bool = False, keep_going: bool = False) -> dict:
    """Run the scorecard and write ``out_dir/scorecard.json``, ``out_dir/runs.json`` (every run's series)
    and ``out_dir/scorecard.png``; returns the record. ``seeds``: a count (seeds 0..N-1) or a list;
    ``cells``: see ``select_cells`` (the base cell first, for the marginal effects); ``steps``
    overrides the RL steps per run. With an ``out_dir``, runs in its ``.runcache/`` are reused unless ``fresh``
    (``meta["runs_reused"]`` counts them); ``keep_going``: a failed run does not stop the others
    (``toyrl.lab.parallel.run_tasks``)."""
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
    labels = [f"cell {cell_name(c)}, seed {s}" for c, s in pairs]
    for i, res, _ in cache.run(run_one, jobs, specs, labels, workers=workers, backend=backend, address=address,
                               progress=progress, desc="scorecard", keep_going=keep_going):
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

