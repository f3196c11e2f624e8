"""The claims ledger: each quantitative claim of the seed article, tested at toy scale over seeds.

    toyrl reproduce [CLAIM ...] [--seeds 10] [--first-seed 0] [--quick] [--workers W] [--out-dir D]
    # == run_claims(names, seeds=10, first_seed=0, quick=False, workers=W, out_dir=D)

For every claim: write its setting, mechanism and faithfulness note to ``<claim>.pending.json``
*before* any run (verdict "pending"); run its arms x seeds S..S+N-1 (a process pool, one torch
thread each; trainer seeds from ``spec.train_seed``, so no run is shared between claims); reduce
each run to scalar metrics; paired t intervals, Holm correction and the one verdict rule
(``stats.py``); then, once all of the claim's runs are done, write ``<claim>.series.json.gz``
(every run's series), ``<claim>.png`` (drawn from the series, as ``redraw`` does) and last
``<claim>.json`` (the registration with the result and verdict), each file whole
(``toyrl.lab.results.atomic_write``), and remove the pending file. An interrupted run leaves the
claim's previous files as they were. Results go to ``out_dir`` (default ``./toyrl-results/claims``);
the shipped ledger (``data/claims/``) and its table (``docs/claims.md``, between ``<!-- claims:start -->``
and ``<!-- claims:end -->``, regenerated from every claim file present by ``write_table``) are
replaced only by ``toyrl reproduce --update-shipped``. Verdicts are computed, never edited: ``judge.rejudge``
recomputes a stored record's verdict under the ledger's rule (``stats.VERDICT_RULE``) from its stored numbers.

Resuming: every finished run is also kept, whole and unrounded, in ``out_dir/.runcache/``
(``toyrl.lab.runcache``, keyed by the run's claim, arm, seed, config and the code stamp), so a rerun of a
killed ``toyrl reproduce`` reuses the runs it finished and computes the rest; ``fresh=True`` (``--fresh``)
recomputes them all. A reused run gives the same floats as a computed one, so the same record.

Modules: ``spec`` (Claim, Test, run_job, per-run metrics), ``stability``, ``credit``, ``echo``, ``offpolicy``,
``engine``, ``horizon`` and ``llm`` (the claims; ``llm``'s run SmolLM2),
``measures`` (measurement claims), ``stats`` (t intervals, Holm, verdict, the flip rule), ``judge`` (which tests
are evidence, a stored record rejudged), ``report`` (JSON, series, figures, the table). Runs go through ``toyrl.lab.runcache.RunCache.run`` (``toyrl.lab.parallel.iter_tasks``:
a spawn pool or Ray).
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from . import report
from .credit import CREDIT_CLAIMS
from .echo import ECHO_CLAIMS
from .engine import ENGINE_CLAIMS
from .horizon import HORIZON_CLAIMS
from .llm import LLM_CLAIMS
from .offpolicy import OFFPOLICY_CLAIMS
from ..results import REPO, out_dir as results_dir, shipped_dir
from ..runcache import CACHE_DIR, RunCache
from .report import claims_table, load_series, write_figure, write_json, write_series
from .spec import Claim, Test, run_job, train_seed
from .stability import STABILITY_CLAIMS
from .judge import judge_tests, notes_for
from .stats import FLIP_RULE, VERDICT_RULE, _r, classify, holm, paired_effect, summary, verdict

__all__ = ["CLAIMS", "Claim", "Test", "run_claims", "evaluate", "register", "redraw", "write_table", "REPO",
           "SHIPPED_DIR", "PAGE"]

CLAIMS = {c.name: c for c in STABILITY_CLAIMS + ECHO_CLAIMS + OFFPOLICY_CLAIMS + ENGINE_CLAIMS + CREDIT_CLAIMS
                                + HORIZON_CLAIMS + LLM_CLAIMS}
"""name -> Claim, in ledger order"""
SHIPPED_DIR = shipped_dir("claims")
"""the shipped ledger, data/claims of the checkout (``REPO``)"""


def _execute(job: tuple) -> dict:
    """Worker entry point (top level, so the spawn pool can import it): job = (claim, arm, seed, quick) ->
    {"metrics": per-run metrics, "series": the run's series, with its time_s and cpu_s}."""
    name, arm, seed, quick = job
    c = CLAIMS[name]
    t0, c0 = time.perf_counter(), time.process_time()
    if c.measure is not None:
        out = c.measure(arm, train_seed(name, seed), quick)
        series, metrics = out["series"], out["metrics"]
    else:
        series = run_job((c.config(arm, quick), train_seed(name, seed), c.probe))
        metrics = c.metrics(series)
    series["time_s"], series["cpu_s"] = time.perf_counter() - t0, time.process_time() - c0
    return {"metrics": metrics, "series": series}


def run_spec(job: tuple) -> dict:
    """What a run's result depends on (its run-cache spec): the claim, arm, seed, its trainer seed, quick, and the
    arm's full config and probe (a measurement: the claim's base config and the measure's name)."""
    name, arm, seed, quick = job
    c = CLAIMS[name]
    what = ({"measure": c.measure.__name__, "config": c.base} if c.measure is not None
            else {"probe": c.probe, "config": c.config(arm, quick)})
    return {"job": "reproduce", "claim": name, "arm": arm, "seed": seed, "train_seed": train_seed(name, seed),
            "quick": quick, **what}


def _values(runs: dict, arm: str, metric: str, seeds) -> np.ndarray:
    return np.array([runs[arm][s]["metrics"].get(metric, float("nan")) for s in seeds], dtype=float)


def evaluate(claim: Claim, runs: dict, seeds: Sequence[int], *, quick: bool = False) -> tuple:
    """({"arms": per-arm summaries, "tests": effects with Holm decisions, marks and evidence}, verdict) from
    ``runs`` (arm -> seed -> {"metrics": ..., "series": ...}); ``quick``: the runs were --quick (the censor of
    ``claim.censored`` metrics). The verdict reads the evidence tests only (``judge.judge_tests``)."""
    arms = {}
    for arm in claim.arms:
        per_seed = [runs[arm][s]["metrics"] for s in seeds]
        keys = sorted({k for m in per_seed for k in m})
        arms[arm] = {k: summary([m.get(k, float("nan")) for m in per_seed]) for k in keys}
    tests = []
    for t in claim.tests:
        a = _values(runs, t.arm, t.metric, seeds)
        b = None if t.baseline is None else _values(runs, t.baseline, t.metric, seeds)
        if t.minus is not None:                                   # (arm - baseline) - (arm' - baseline')
            a = a - (b if b is not None else 0.0)
            b = _values(runs, t.minus[0], t.metric, seeds) - _values(runs, t.minus[1], t.metric, seeds)
        tests.append({"name": t.name, "metric": t.metric, "arm": t.arm, "baseline": t.baseline,
                      **({"minus": list(t.minus)} if t.minus else {}),
                      "claimed": f"{'>' if t.sign > 0 else '<'} {t.threshold:g}",
                      "effect": paired_effect(a, b, threshold=t.threshold)})
    rejected = holm([t["effect"]["p"] if t["effect"]["p"] is not None else float("nan") for t in tests])
    for t, spec_, rej in zip(tests, claim.tests, rejected):
        t["holm_rejected"] = bool(rej)
        t["outcome"] = classify(t["effect"], rej, sign=spec_.sign, threshold=spec_.threshold)
        t["passed"] = t["outcome"] == "passed"
    tests = judge_tests(claim, {"arms": arms, "tests": tests}, quick=quick)
    return {"arms": arms, "tests": tests}, verdict([t["outcome"] for t in tests], check=claim.check,
                                                    evidence=[t["evidence"] for t in tests])


def _setting(claim: Claim, quick: bool) -> dict:
    if claim.measure is not None:
        return {"env": claim.base.get("env"), "quick": quick, "measure": claim.measure.__name__,
                "config": claim.base, "arms": list(claim.arms)}
    return {"env": claim.base.get("env"), "quick": quick, "probe": claim.probe,
            "arms": {a: claim.config(a, quick) for a in claim.arms}}


def code_version() -> dict:
    """The code a record was computed with: the toyrl and torch versions (``runlog.header``) and, in a git
    checkout, the commit (``+dirty`` when a tracked file of the package, ``toyrl/``, differs from it; the
    ledger's own outputs in ``data/`` and the pages it rewrites do not count); ``git`` is None outside one."""
    import subprocess
    from ...train.runlog import header
    meta = header({})
    try:
        git = lambda *a: subprocess.run(["git", "-C", str(REPO), *a], capture_output=True, text=True,
                                        timeout=10, check=True).stdout.strip()
        dirty = git("status", "--porcelain", "-uno", "--", "toyrl")
        commit = git("rev-parse", "--short", "HEAD") + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {"toyrl": meta["toyrl"], "torch": meta["torch"], "git": commit}


def register(claim: Claim, seeds: list, quick: bool) -> dict:
    """The record written before any run: what is tested, how, on which seeds; verdict 'pending'."""
    cmd = (f"toyrl reproduce {claim.name} --seeds {len(seeds)} --first-seed {seeds[0]}"
           + (" --quick" if quick else ""))
    return {"name": claim.name, "claim": claim.claim, "source": claim.source, "metric": claim.metric,
            "mechanism": claim.mechanism, "faithfulness": claim.faithfulness,
            "settings_tried": claim.settings_tried, "kind": "check" if claim.check else "claim",
            "setting": _setting(claim, quick),
            "tests_planned": [{"name": t.name, "metric": t.metric, "arm": t.arm, "baseline": t.baseline,
                               **({"minus": list(t.minus)} if t.minus else {}),
                               **({"role": t.role} if t.role else {}),
                               "claimed": f"{'>' if t.sign > 0 else '<'} {t.threshold:g}"} for t in claim.tests],
            "seeds": list(seeds), "train_seeds": [train_seed(claim.name, s) for s in seeds],
            "verdict": "pending", "verdict_rule": VERDICT_RULE, "command": cmd, "notes": claim.notes,
            "registered_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "code": code_version()}


def _finish(claim: Claim, rec: dict, runs: dict, out: Path, elapsed: float, reused: int = 0) -> dict:
    result, v = evaluate(claim, runs, rec["seeds"], quick=rec["setting"]["quick"])
    cpu = sum(r["series"].get("cpu_s", float("nan")) for arm in runs.values() for r in arm.values())
    rec = {**rec, "result": result, "verdict": v, "run_time_s": round(elapsed, 1), "cpu_time_s": _r(cpu, 1),
           "runs_reused": reused, "notes": notes_for(claim, v)}
    write_series(out / f"{claim.name}.series.json.gz", claim.name, runs)
    write_figure(out / f"{claim.name}.png", claim, {a: {s: r["series"] for s, r in d.items()} for a, d in runs.items()},
                 rec)
    write_json(out / f"{claim.name}.json", rec)                # the record last: it names a finished run
    (out / f"{claim.name}.pending.json").unlink(missing_ok=True)
    return rec


def redraw(name: str, out_dir, src_dir=None) -> Path:
    """Redraw ``out_dir/<name>.png`` from the JSON record and stored series in ``src_dir`` (default ``out_dir``),
    without re-running anything; returns the figure's path."""
    out, src = Path(out_dir), Path(src_dir if src_dir is not None else out_dir)
    rec = json.loads((src / f"{name}.json").read_text())
    write_figure(out / f"{name}.png", CLAIMS[name], load_series(src / f"{name}.series.json.gz"), rec)
    return out / f"{name}.png"


def _records(out: Path) -> dict:
    """name -> claim record of every claim file in ``out`` (ledger order); a claim registered but not yet run
    (only ``<claim>.pending.json``) gives its registration."""
    found = {}
    for n in CLAIMS:
        for path in (out / f"{n}.json", out / f"{n}.pending.json"):
            if path.exists():
                found[n] = json.loads(path.read_text())
                break
    return found


PAGE = REPO / "docs" / "claims.md"
"""the ledger's page: its table lives between ``report.START`` and ``report.END``"""


def write_table(out_dir=None, page=None) -> bool:
    """Regenerate the ledger's table on its page from every claim file in ``out_dir`` (ledger order), with the
    verdicts of a held-out seed block from ``out_dir/heldout/`` where one was run in the same setting, the flip
    rule's reading of the two blocks and its summary below the table. Defaults: the shipped ledger
    (``SHIPPED_DIR``) and ``docs/claims.md`` (``PAGE``)."""
    out = Path(out_dir) if out_dir is not None else SHIPPED_DIR
    page = Path(page) if page else PAGE
    records, heldout = _records(out), _records(out / "heldout")
    link = "../" if page.resolve().parent == (REPO / "docs").resolve() else ""
    f = report.findings(list(records.values()), heldout)
    lines = [f"Verdict rule: {VERDICT_RULE}", "", f"Flip rule: {FLIP_RULE}"]
    if heldout:
        lines += ["", "By the flip rule: the verdict holds on both blocks for "
                  + ", ".join(f"`{n}` ({v})" for n, v in f["holds"].items())
                  + "; it flips for " + ", ".join(f"`{n}` ({a} / {b})" for n, (a, b) in f["flips"].items())
                  + (("; one block only: " + ", ".join(f"`{n}`" for n in f["one block"])) if f["one block"] else "")
                  + "."]
    cpu = [sum(r.get("cpu_time_s") or 0.0 for r in recs.values() if "result" in r) / 3600 for recs in (records, heldout)]
    lines += ["", f"CPU time of the stored runs (the records' `cpu_time_s`, one torch thread per run): {cpu[0]:.1f} h for "
              f"the first block" + (f", {cpu[1]:.1f} h for the held-out block." if heldout else ".")]
    lines += ["", "Regenerate with `toyrl reproduce --update-shipped` (each file names its own command)"
              + (". Held-out block: `toyrl reproduce --first-seed 10 --update-shipped --out-dir data/claims/heldout "
                 "--no-table`, seeds the settings were not chosen on" if heldout else "")
              + ". Rejudge the stored records under the rules above, without re-running: "
                "`python -m toyrl.lab.claims.rejudge`."]
    return report.update_page(page, claims_table(list(records.values()), heldout, link=link), "\n".join(lines))


def _usage(names, seeds: int) -> Optional[str]:
    bad = [n for n in names if n not in CLAIMS]
    if bad:
        return f"unknown claim {bad[0]!r}; valid claims: {', '.join(CLAIMS)}"
    if seeds < 1:
        return "--seeds must be >= 1"
    return None


def run_claims(names: Optional[Sequence[str]] = None, *, seeds: int = 10, first_seed: int = 0, quick: bool = False,
               workers: int = 2, out_dir=None, page=None, progress: bool = True, backend: str = "process",
               address: Optional[str] = None, fresh: bool = False, keep_going: bool = False) -> int:
    """Run the named claims (all if empty) on seeds first_seed .. first_seed + seeds - 1; returns the exit code.

    Unknown names (or seeds < 1) print one line to stderr and return 2, before anything is written. Results go
    to ``out_dir`` (default ``./toyrl-results/claims``); a claim's files there are replaced only once all its
    runs are done, and each run is kept in ``out_dir/.runcache/`` as it finishes: runs found there (same spec,
    same code stamp) are reused unless ``fresh``. ``page``: a page whose claims table is then regenerated
    from ``out_dir`` (default none); ``backend`` / ``address`` / ``keep_going``: those of
    ``toyrl.lab.parallel.run_tasks`` (a failed run leaves its claim unfinished; ``RunFailed`` names it).
    """
    names = list(names or CLAIMS)
    err = _usage(names, seeds)
    if err:
        print(f"toyrl: error: {err}", file=sys.stderr)
        return 2
    out = Path(out_dir) if out_dir is not None else results_dir("claims")
    seed_list = list(range(first_seed, first_seed + seeds))
    claims = [CLAIMS[n] for n in dict.fromkeys(names)]
    recs = {c.name: register(c, seed_list, quick) for c in claims}
    for c in claims:                    # the setting is on disk before any result; the last record stays until then
        write_json(out / f"{c.name}.pending.json", recs[c.name])
    jobs = [(c.name, arm, s, quick) for c in claims for arm in c.arms for s in seed_list]
    specs = [run_spec(job) for job in jobs]
    cache = RunCache(out / CACHE_DIR, fresh=fresh)
    n_reused = len(cache.reusable(specs))
    t0 = time.time()
    print(f"reproduce: {len(claims)} claim(s), {len(jobs)} runs, seeds {seed_list[0]}..{seed_list[-1]}, "
          f"{'quick' if quick else 'full'}, {workers} worker(s) -> {out}/", flush=True)
    if n_reused:
        print(f"reproduce: {cache.describe(n_reused, len(jobs))}", flush=True)
    todo = {c.name: len(c.arms) * len(seed_list) for c in claims}
    reused = dict.fromkeys(todo, 0)
    runs = {c.name: {a: {} for a in c.arms} for c in claims}
    labels = [f"claim {name}, arm {arm}, seed {s}" for name, arm, s, _ in jobs]         # a failed run's name
    for i, res, was_reused in cache.run(_execute, jobs, specs, labels, workers=workers, backend=backend,
                                        progress=progress, address=address, desc="reproduce", keep_going=keep_going):
        name, arm, s, _ = jobs[i]
        runs[name][arm][s] = res
        todo[name] -= 1
        reused[name] += was_reused
        if not todo[name]:
            rec = _finish(CLAIMS[name], recs[name], runs[name], out, time.time() - t0, reused[name])
            print(f"  {name:18s} {rec['verdict']:22s} ({time.time() - t0:.0f} s"
                  + (f", {reused[name]} runs reused" if reused[name] else "") + ")", flush=True)
    cache.prune()
    print(f"reproduce: done in {time.time() - t0:.0f} s" + (f" ({n_reused} runs reused)" if n_reused else ""),
          flush=True)
    if page is not None:
        write_table(out, page)
    return 0
