"""Resumable long jobs (toyrl.lab.runcache): ``toyrl sweep``, ``reproduce`` and ``scorecard`` keep every finished run,
so a job killed with SIGKILL and rerun with the same arguments gives exactly the result of an uninterrupted one.

Each kill test runs the job in a subprocess, SIGKILLs it once a run is in its cache, resumes it here and compares
with an uninterrupted run, float for float. The code stamp is pinned (``STAMP``) in both processes, so an edit to
the checkout during the test cannot invalidate the runs; the real stamp is tested on its own. The claims job runs
a tiny claim registered here (GRPO vs RLOO, 3 steps on bandit_chain): the real ledger code around a fast run.
"""
from __future__ import annotations

import gzip
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import without_time

import toyrl.lab.claims as ledger
import toyrl.lab.runcache as rc
from toyrl.cli import main
from toyrl.lab.claims.report import load_series
from toyrl.lab.claims.spec import Claim, Test as ClaimTest, success_metrics
from toyrl.lab.runcache import CACHE_DIR, MISSING, RunCache, spec_hash, stamp_id, tree_hash
from toyrl.train.runlog import RunLog

ROOT = Path(__file__).resolve().parents[1]
STAMP = {"toyrl": "test", "source": "pinned-by-test_resume"}
"""the code stamp of every run here"""
TINY = Claim(name="tiny_resume", claim="RLOO matches GRPO on a 3-step run (a test fixture)", source="test: none",
             metric="final success", base=dict(env="bandit_chain", prompts_per_step=2, group_size=4),
             arms={"grpo": {}, "rloo": {"estimator": "rloo"}}, steps=3, quick_steps=3, metrics=success_metrics,
             tests=[ClaimTest("rloo - grpo, final success", "final_success", "rloo", "grpo")])
"""a claim small enough for a kill test (6 runs of about half a second)"""
DRIVER = """
import json, sys
sys.path.insert(0, {tests!r})
import test_resume
test_resume.pin()
from toyrl.cli import main
sys.exit(main(json.loads(sys.argv[1])))
"""


def pin() -> None:
    """In the job's subprocess: the pinned code stamp and the tiny claim."""
    rc.code_stamp = lambda: dict(STAMP)
    ledger.CLAIMS[TINY.name] = TINY


@pytest.fixture
def pinned(monkeypatch):
    monkeypatch.setattr(rc, "code_stamp", lambda: dict(STAMP))
    monkeypatch.setitem(ledger.CLAIMS, TINY.name, TINY)


def entries(folder: Path) -> list:
    """The finished runs in a cache folder (temp files are not entries)."""
    return sorted(folder.glob("*.json.gz")) if folder.is_dir() else []


def kill_mid_way(argv: list, cache: Path, total: int, tmp_path: Path) -> int:
    """Run ``toyrl ARGV`` in a subprocess, SIGKILL it as soon as a run is in ``cache``; the runs it left."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    with open(tmp_path / "killed.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-c", DRIVER.format(tests=str(ROOT / "tests")), json.dumps(argv)],
                                env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.time() + 240
        while not entries(cache) and proc.poll() is None and time.time() < deadline:
            time.sleep(0.02)
        proc.kill()                                                     # SIGKILL: no handler runs
        proc.wait()
    left = len(entries(cache))
    assert 1 <= left < total, (left, (tmp_path / "killed.log").read_text()[-2000:])
    return left


def same(a, b) -> bool:
    """``a`` and ``b`` are the same JSON values exactly: equal floats (NaN equal to NaN; 1 is not 1.0), strings,
    bools and None, lists of the same values, dicts with the same keys in the same order."""
    if isinstance(a, float) or isinstance(b, float):
        return type(a) is type(b) is float and (a == b or (math.isnan(a) and math.isnan(b)))
    if isinstance(a, list):
        return type(b) is list and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return type(b) is dict and list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


# ---- the three jobs, killed and resumed -------------------------------------------------------------------------
def test_sweep_killed_and_resumed_equals_an_uninterrupted_sweep(tmp_path, pinned, capsys):
    args = ["sweep", "--env", "bandit_chain", "--seed", "0", "1", "2", "3", "4", "5", "--steps", "2", "--workers", "1"]
    assert main([*args, "--out-dir", str(tmp_path / "ref")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 7 and out[1].startswith("[1/6] bandit_chain__grpo__ppo__seed") and " 2 steps " in out[1]
    left = kill_mid_way([*args, "--out-dir", str(tmp_path / "run")], tmp_path / "run" / CACHE_DIR, 6, tmp_path)
    assert main([*args, "--out-dir", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert f"{left} of 6 runs reused from" in out and out.count("(reused)") == left
    names = sorted(p.name for p in (tmp_path / "ref").glob("*.jsonl"))
    assert names == sorted(p.name for p in (tmp_path / "run").glob("*.jsonl")) and len(names) == 6
    for name in names:
        a, b = RunLog.load(tmp_path / "ref" / name), RunLog.load(tmp_path / "run" / name)
        assert len(a.rows) == 2 and same(without_time(a.rows), without_time(b.rows)), name


def test_reproduce_killed_and_resumed_gives_the_same_record(tmp_path, pinned, capsys):
    args = ["reproduce", TINY.name, "--quick", "--seeds", "3", "--workers", "1", "--no-progress"]
    assert main([*args, "--out-dir", str(tmp_path / "ref")]) == 0
    run = tmp_path / "run"
    left = kill_mid_way([*args, "--out-dir", str(run)], run / CACHE_DIR, 6, tmp_path)
    assert not (run / f"{TINY.name}.json").exists() and (run / f"{TINY.name}.pending.json").exists()
    capsys.readouterr()
    assert main([*args, "--out-dir", str(run)]) == 0
    assert f"{left} of 6 runs reused" in capsys.readouterr().out
    ref, rec = (json.loads((d / f"{TINY.name}.json").read_text()) for d in (tmp_path / "ref", run))
    assert rec["runs_reused"] == left and ref["runs_reused"] == 0
    assert same(rec["result"], ref["result"]) and rec["verdict"] == ref["verdict"]
    a, b = (json.loads(json.dumps(load_series(d / f"{TINY.name}.series.json.gz"))) for d in (tmp_path / "ref", run))
    assert same(without_time(a), without_time(b)) and sorted(a["rloo"]) == ["0", "1", "2"]
    assert not (run / f"{TINY.name}.pending.json").exists()


@pytest.mark.filterwarnings("ignore:zero reward variance")                  # a 1-step run: no signal yet
def test_scorecard_killed_and_resumed_gives_the_same_card(tmp_path, pinned, capsys):
    args = ["scorecard", "--cells", "1", "--seeds", "4", "--steps", "1", "--workers", "1"]
    assert main([*args, "--out-dir", str(tmp_path / "ref")]) == 0
    run = tmp_path / "run"
    left = kill_mid_way([*args, "--out-dir", str(run)], run / CACHE_DIR, 4, tmp_path)
    assert not (run / "scorecard.json").exists()
    capsys.readouterr()
    assert main([*args, "--out-dir", str(run)]) == 0
    out = capsys.readouterr().out
    assert f"{left} of 4 runs reused" in out and f"({left} runs reused)" in out
    ref, card = (json.loads((d / "scorecard.json").read_text()) for d in (tmp_path / "ref", run))
    assert card["meta"]["runs_reused"] == left and same(card["cells"], ref["cells"])
    assert same(card["effects"], ref["effects"]) and card["seeds"] == [0, 1, 2, 3]
    a, b = (json.loads((d / "runs.json").read_text())["cells"] for d in (tmp_path / "ref", run))
    assert same(without_time(a), without_time(b))


# ---- what a rerun reuses --------------------------------------------------------------------------------------
def test_a_finished_sweep_is_reused_a_changed_config_is_not_and_fresh_recomputes(tmp_path, pinned, capsys):
    args = ["sweep", "--env", "bandit_chain", "--seed", "0", "1", "--steps", "1", "--workers", "1", "--out-dir",
            str(tmp_path)]
    assert main(args) == 0
    log = tmp_path / "bandit_chain__grpo__ppo__seed0.jsonl"
    first = log.read_bytes()
    log.unlink()                                                        # a reused run restores its log
    capsys.readouterr()
    assert main(args) == 0
    assert "2 of 2 runs reused" in capsys.readouterr().out and log.read_bytes() == first
    assert main([*args, "--lr", "0.01"]) == 0                           # another config: computed
    out = capsys.readouterr().out
    assert "reused" not in out and out.count(" 1 steps ") == 2
    assert main([*args, "--fresh"]) == 0
    assert "reused" not in capsys.readouterr().out and log.read_bytes() != first   # a new header time at least
    assert len(entries(tmp_path / CACHE_DIR)) == 4


def test_a_changed_code_stamp_invalidates_and_prune_drops_the_old_runs(tmp_path):
    spec = {"job": "t", "config": {"lr": 0.1}, "seed": 0}
    old = RunCache(tmp_path, stamp={"source": "a"})
    old.put(spec, {"x": [0.1, float("nan"), None]})
    new = RunCache(tmp_path, stamp={"source": "b"})
    assert new.get(spec) is MISSING and new.reusable([spec]) == []
    assert same(RunCache(tmp_path, stamp={"source": "a"}).get(spec), {"x": [0.1, float("nan"), None]})
    assert RunCache(tmp_path, stamp={"source": "a"}).get({**spec, "seed": 1}) is MISSING      # another run
    assert RunCache(tmp_path, stamp={"source": "a"}, fresh=True).get(spec) is MISSING
    new.put(spec, {"x": [1.0]})
    assert new.prune() == 1 and [p.name.split("-")[0] for p in entries(tmp_path)] == [stamp_id({"source": "b"})]


def test_the_code_stamp_follows_every_file_of_the_source(tmp_path):
    src = tmp_path / "pkg"
    (src / "sub").mkdir(parents=True)
    (src / "a.py").write_text("x = 1\n")
    (src / "sub" / "b.toml").write_text("[t]\n")
    h = tree_hash([src])
    (src / "__pycache__").mkdir()
    (src / "__pycache__" / "a.pyc").write_bytes(b"\0")                  # caches do not count
    assert tree_hash([src]) == h
    (src / "a.py").write_text("x = 2\n")
    assert tree_hash([src]) != h
    stamp = rc.code_stamp()
    assert set(stamp) == {"toyrl", "python", "torch", "numpy", "source"} and len(stamp["source"]) == 16


def test_a_half_written_temp_file_and_a_torn_entry_are_ignored(tmp_path):
    cache = RunCache(tmp_path, stamp=STAMP)
    specs = [{"job": "t", "seed": s} for s in range(3)]
    cache.put(specs[0], {"y": 1.5})
    torn = cache.path(specs[1])
    torn.write_bytes(gzip.compress(b'{"format": "toyrl-runcache-1", "result": {"y"')[:30])    # cut short
    (tmp_path / f".{cache.path(specs[2]).name}.k3j2.tmp").write_bytes(b"\x1f\x8b half")      # a kill mid-write
    with pytest.warns(UserWarning, match="ignoring unreadable"):
        assert RunCache(tmp_path, stamp=STAMP).reusable(specs) == [0]
    calls = []
    with pytest.warns(UserWarning, match="ignoring unreadable"):                 # and computed again
        got = list(RunCache(tmp_path, stamp=STAMP).run(lambda j: calls.append(j) or {"y": float(j)}, [0, 1, 2],
                                                       specs, progress=False))
    assert [(i, r, reused) for i, r, reused in got] == [(0, {"y": 1.5}, True), (1, {"y": 1.0}, False),
                                                        (2, {"y": 2.0}, False)]
    assert calls == [1, 2] and RunCache(tmp_path, stamp=STAMP).reusable(specs) == [0, 1, 2]


def test_a_run_is_handed_on_as_stored_every_float_exact(tmp_path):
    cache = RunCache(tmp_path, stamp=STAMP)
    result = {"a": [0.1 + 0.2, 1e-300, -0.0, float("inf"), float("nan")], "n": 7, "ok": True,
              "np": [np.float64(1 / 3), np.float32(0.1), np.int64(3), np.bool_(True)], "arr": np.arange(2.0),
              "t": (1, 2), "by_turn": {0: 0.5}}
    stored = cache.put({"s": 1}, result)
    assert same(stored, RunCache(tmp_path, stamp=STAMP).get({"s": 1}))           # what a rerun reuses
    assert stored["a"][0] == 0.30000000000000004 and str(stored["a"][2]) == "-0.0" and math.isnan(stored["a"][4])
    assert stored["np"] == [1 / 3, float(np.float32(0.1)), 3, True] and type(stored["np"][2]) is int
    assert stored["arr"] == [0.0, 1.0] and stored["t"] == [1, 2] and stored["by_turn"] == {"0": 0.5}
    got = list(cache.run(lambda job: result, [0, 1], [{"s": 1}, {"s": 2}], progress=False))
    assert [(i, reused) for i, _, reused in got] == [(0, True), (1, False)] and same(got[0][1], got[1][1])
    with pytest.raises(TypeError, match="JSON-able"):
        cache.put({"s": 3}, {"f": object()})
    assert len(entries(tmp_path)) == 2
    assert spec_hash({"a": 1, "b": [2]}) == spec_hash({"b": [2], "a": 1}) != spec_hash({"a": 1, "b": [3]})


def test_the_bar_counts_the_reused_runs():
    from toyrl.lab.parallel import _bar
    bar = _bar(3, True, "reproduce", reused=2)
    assert (bar.n, bar.total, bar.desc) == (2, 5, "reproduce (2 reused)")
    bar.close()


def test_a_pool_run_leaves_no_semaphore_to_the_tracker(tmp_path):
    """The cause of the "leaked semaphore" warning: the pool was terminated, killing workers before their exit
    handlers ran (tqdm's lock, made in every worker by the run's progress bar, stayed registered). Closed and
    joined, the workers exit on their own: no warning (the terminated pool warned on 4 of 4 tries of this job)."""
    code = ("from toyrl.lab.parallel import run_tasks\n"
            "def job(x):\n    import time\n    from tqdm.auto import tqdm\n    tqdm(range(1), disable=True).close()\n"
            "    time.sleep(0.3)\n    return x\n"
            "if __name__ == '__main__':\n    print(run_tasks(job, [1, 2, 3, 4, 5, 6], workers=2, progress=False))\n")
    (tmp_path / "pool.py").write_text(code)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([sys.executable, str(tmp_path / "pool.py")], capture_output=True, text=True, env=env,
                         timeout=120)
    assert res.returncode == 0 and res.stdout.strip() == "[1, 2, 3, 4, 5, 6]"
    assert "leaked semaphore" not in res.stderr, res.stderr
