"""The claims ledger: each quantitative claim of the seed article, tested at toy scale over seeds.

    toyrl reproduce [CLAIM ...] [--seeds 5] [--quick]        # == run_claims(names, seeds=5, quick=False)

For every claim: run its arms x seeds (a spawn pool of worker processes, one torch thread each),
reduce each run to scalar metrics, bootstrap per-arm means and paired effects (``stats.py``), apply
the one verdict rule, and write ``data/claims/<claim>.json`` plus ``<claim>.png``. The README claims
table (between ``<!-- claims:start -->`` and ``<!-- claims:end -->``) is regenerated from every
claim file present. Verdicts are computed, never edited.

Modules: ``spec`` (Claim, Test, run_job, per-run metrics), ``stability`` (claims 1-7), ``credit``
(claims 8-14), ``stats`` (bootstrap, verdict), ``report`` (JSON, figures, README).
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

from .credit import CREDIT_CLAIMS
from . import report
from .report import claims_table, write_figure, write_json
from .spec import Claim, Test, run_job
from .stability import STABILITY_CLAIMS
from .stats import VERDICT_RULE, _r, paired_effect, passes, summary, verdict

__all__ = ["CLAIMS", "Claim", "Test", "run_claims", "evaluate", "refresh_text", "write_readme", "REPO"]

CLAIMS = {c.name: c for c in STABILITY_CLAIMS + CREDIT_CLAIMS}
"""name -> Claim, in ledger order"""
REPO = Path(__file__).resolve().parents[2]
"""the checkout (data/claims and README.md live here)"""


def _job_key(claim: Claim, arm: str, seed: int, quick: bool) -> tuple:
    """Identical runs of different claims share one job."""
    if claim.measure is not None:
        return ("measure", claim.name, arm, seed, quick)
    from dataclasses import asdict
    from ..train import TrainConfig
    full = asdict(TrainConfig(**claim.config(arm, quick)))          # defaults filled in: equal runs, equal keys
    return ("train", json.dumps(full, sort_keys=True), seed, claim.probe)


def _execute(job: tuple) -> tuple:
    """Worker entry point (top level, so the spawn pool can import it)."""
    import torch
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    if job[0] == "measure":
        _, name, arm, seed, quick = job
        c0 = time.process_time()
        out = CLAIMS[name].measure(arm, seed, quick)
        out["series"]["time_s"] = time.perf_counter() - t0
        out["series"]["cpu_s"] = time.process_time() - c0
        return job, out
    _, cfg, seed, probe = job
    return job, {"series": run_job((json.loads(cfg), seed, probe))}


def evaluate(claim: Claim, runs: dict, seeds: Sequence[int]) -> dict:
    """Per-arm summaries of every metric, the tests' effects and the verdict, from ``runs``
    (arm -> seed -> {"metrics": ..., "series": ...})."""
    arms = {}
    for arm in claim.arms:
        per_seed = [runs[arm][s]["metrics"] for s in seeds]
        keys = sorted({k for m in per_seed for k in m})
        arms[arm] = {k: summary([m.get(k, float("nan")) for m in per_seed]) for k in keys}
    tests = []
    for t in claim.tests:
        a = [runs[t.arm][s]["metrics"].get(t.metric, float("nan")) for s in seeds]
        b = None if t.baseline is None else [runs[t.baseline][s]["metrics"].get(t.metric, float("nan")) for s in seeds]
        eff = paired_effect(a, b)
        tests.append({"name": t.name, "metric": t.metric, "arm": t.arm, "baseline": t.baseline,
                      "claimed": f"{'>' if t.sign > 0 else '<'} {t.threshold:g}", "effect": eff,
                      "passed": passes(eff, sign=t.sign, threshold=t.threshold)})
    return {"arms": arms, "tests": tests}, verdict([t["passed"] for t in tests])


def _record(claim: Claim, runs: dict, seeds: list, quick: bool, elapsed: float) -> dict:
    result, v = evaluate(claim, runs, seeds)
    cmd = f"toyrl reproduce {claim.name} --seeds {len(seeds)}" + (" --quick" if quick else "")
    setting = {"arms": {a: claim.config(a, quick) for a in claim.arms}}
    if claim.measure is not None:
        setting = {"measure": claim.measure.__name__, "config": claim.base,
                   "warmup_steps": claim.quick_steps if quick else claim.steps}
    return {"name": claim.name, "claim": claim.claim, "source": claim.source, "metric": claim.metric,
            "setting": {"env": claim.base.get("env"), "quick": quick, **setting, "probe": claim.probe},
            "seeds": seeds, "result": result, "verdict": v, "verdict_rule": VERDICT_RULE, "command": cmd,
            "notes": notes_for(claim, v), "run_time_s": round(elapsed, 1),
            "cpu_time_s": _r(sum(r["series"].get("cpu_s", float("nan")) for arm in runs.values()
                                 for r in arm.values()), 1)}


def write_readme(out_dir=None, readme=None) -> bool:
    """Regenerate the README claims table from every claim file in ``out_dir`` (ledger order)."""
    out = Path(out_dir) if out_dir is not None else REPO / "data" / "claims"
    records = [json.loads((out / f"{n}.json").read_text()) for n in CLAIMS if (out / f"{n}.json").exists()]
    footer = (f"Verdict rule: {VERDICT_RULE} Regenerate with `toyrl reproduce` (each file names its own "
              f"command).")
    return report.update_readme(Path(readme) if readme else REPO / "README.md", claims_table(records), footer)


def notes_for(claim: Claim, verdict_: str) -> str:
    """The claim's notes, plus what a reproduction would need unless it was reproduced."""
    if verdict_ != "reproduced" and claim.needed:
        return f"{claim.notes} What a reproduction would need: {claim.needed}"
    return claim.notes


def refresh_text(out_dir=None) -> list:
    """Rewrite the descriptive fields (claim, source, metric, notes) of existing claim files from the
    registry, leaving setting, seeds, results and verdict untouched. Returns the names rewritten."""
    out = Path(out_dir) if out_dir is not None else REPO / "data" / "claims"
    done = []
    for name, c in CLAIMS.items():
        path = out / f"{name}.json"
        if path.exists():
            rec = json.loads(path.read_text())
            rec.update(claim=c.claim, source=c.source, metric=c.metric, notes=notes_for(c, rec["verdict"]))
            write_json(path, rec)
            done.append(name)
    return done


def run_claims(names: Optional[Sequence[str]] = None, *, seeds: int = 5, quick: bool = False, workers: int = 2,
               out_dir=None, update_readme: bool = True, readme=None) -> int:
    """Run the named claims (all if empty) and write their files; returns the exit code.

    Unknown names print one line listing the valid ones to stderr and return 2. ``readme`` defaults
    to the checkout's README.md.
    """
    names = list(names or CLAIMS)
    bad = [n for n in names if n not in CLAIMS]
    if bad:
        print(f"toyrl: error: unknown claim {bad[0]!r}; valid claims: {', '.join(CLAIMS)}", file=sys.stderr)
        return 2
    if seeds < 1:
        print("toyrl: error: --seeds must be >= 1", file=sys.stderr)
        return 2
    out = Path(out_dir) if out_dir is not None else REPO / "data" / "claims"
    seed_list = list(range(seeds))
    claims = [CLAIMS[n] for n in dict.fromkeys(names)]
    jobs = {}                                            # key -> [(claim, arm, seed), ...]
    for c in claims:
        for arm in c.arms:
            for s in seed_list:
                jobs.setdefault(_job_key(c, arm, s, quick), []).append((c.name, arm, s))
    t0 = time.time()
    print(f"reproduce: {len(claims)} claim(s), {len(jobs)} runs, {seeds} seeds, {'quick' if quick else 'full'}, "
          f"{workers} worker(s) -> {out}/", flush=True)
    if workers <= 1:
        it = map(_execute, list(jobs))
        pool = None
    else:
        import multiprocessing as mp
        pool = mp.get_context("spawn").Pool(workers)
        it = pool.imap_unordered(_execute, list(jobs))
    todo = {c.name: {(a, s) for a in c.arms for s in seed_list} for c in claims}
    runs = {c.name: {a: {} for a in c.arms} for c in claims}
    try:
        for key, res in it:
            for name, arm, s in jobs[key]:
                c = CLAIMS[name]
                metrics = c.metrics(res["series"] if c.measure is None else res["metrics"])
                runs[name][arm][s] = {"metrics": metrics, "series": res["series"]}
                todo[name].discard((arm, s))
                if not todo[name]:
                    rec = _record(c, runs[name], seed_list, quick, time.time() - t0)
                    write_json(out / f"{name}.json", rec)
                    write_figure(out / f"{name}.png", c, runs[name], rec)
                    print(f"  {name:18s} {rec['verdict']:22s} ({time.time() - t0:.0f} s)", flush=True)
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()
    total = time.time() - t0
    print(f"reproduce: done in {total:.0f} s", flush=True)
    if update_readme:
        write_readme(out, readme)
    return 0
