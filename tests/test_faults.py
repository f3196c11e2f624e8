"""Long jobs stop when asked, survive a dead worker and lose nothing (toyrl.lab.interrupts, workers, results).

Each job test runs ``toyrl reproduce`` on the probe claim (tests/fault_jobs.py: 2 arms x 3 seeds of a short seeded
run, 2 spawn workers) in a session of its own, acts once a run is kept (a signal to the group or to the parent
alone, SIGKILL to one worker, a second job on the same folder), and checks: the exit status; the time from the act
to the exit; that no process the job started is left (their pids read from /proc while it ran: gone, or dead and
waiting to be reaped by init); no traceback and no "leaked semaphore" warning unless a run failed; the one line it
prints; and that every run it kept equals the same run of an uninterrupted job, float for float (timings aside).
"""
from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import fault_jobs
from conftest import without_time
import toyrl.lab.claims as ledger
import toyrl.lab.runcache as rc
from toyrl.cli import main
from toyrl.lab.interrupts import RunFailed
from toyrl.lab.parallel import run_tasks
from toyrl.lab.runcache import CACHE_DIR

ROOT = Path(__file__).resolve().parents[1]
PROBE = fault_jobs.PROBE.name
ARGS = ["reproduce", PROBE, "--quick", "--seeds", "3", "--no-progress"]
"""the probe job (6 runs); the tests add --workers and --out-dir"""
RUNS = 6
STOP_S = 5.0
"""a stopped job's deadline: from the signal (or the death) to its exit"""


# ---- the uninterrupted job, and what a job kept ---------------------------------------------------------------
def kept(out: Path) -> dict:
    """entry file name -> its run (timings aside) as JSON text: equal texts are the same floats."""
    return {p.name: json.dumps(without_time(json.loads(gzip.decompress(p.read_bytes()))["result"]))
            for p in sorted((out / CACHE_DIR).glob("*.json.gz"))}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The probe job run whole, in this process: {"runs": kept(...), "record": its claim record}."""
    out = tmp_path_factory.mktemp("reference")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(rc, "code_stamp", lambda: dict(fault_jobs.STAMP))
        mp.setitem(ledger.CLAIMS, PROBE, fault_jobs.PROBE)
        assert main([*ARGS, "--workers", "1", "--out-dir", str(out)]) == 0
    runs = kept(out)
    assert len(runs) == RUNS
    return {"runs": runs, "record": json.loads((out / f"{PROBE}.json").read_text()), "dir": out}


def check_kept(out: Path, reference: dict) -> dict:
    """The runs ``out`` kept, each equal to the uninterrupted job's; no temp file left in the cache."""
    runs = kept(out)
    assert runs and all(runs[name] == reference["runs"][name] for name in runs)
    assert not list((out / CACHE_DIR).glob(".*.tmp"))
    return runs


def same_record(a: dict, b: dict) -> bool:
    """Two claim records agree on everything computed from the runs."""
    return json.dumps(a["result"]) == json.dumps(b["result"]) and a["verdict"] == b["verdict"]


# ---- a job in a session of its own, watched through /proc -----------------------------------------------------
def proc_table() -> dict:
    """pid -> (state, parent pid, start time) of every process."""
    table = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                text = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            fields = text[text.rindex(")") + 2:].split()
            table[int(d)] = (fields[0], int(fields[1]), fields[19])
    return table


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")
    except OSError:
        return ""


class Job:
    """``python tests/fault_jobs.py ARGV`` in a new session, its output in files, its descendants recorded."""

    def __init__(self, argv: list, tmp_path: Path, name: str = "job", env=None):
        self.out, self.err = tmp_path / f"{name}.out", tmp_path / f"{name}.err"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               **(env or {})}
        with open(self.out, "w") as out, open(self.err, "w") as err:
            self.proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "fault_jobs.py"), *argv], env=env,
                                         stdout=out, stderr=err, start_new_session=True)
        self.seen: dict = {}

    def watch(self) -> None:
        """Record the job's descendants now (pid -> start time)."""
        table = proc_table()
        todo = [self.proc.pid]
        while todo:
            parent = todo.pop()
            for pid, (_, ppid, start) in table.items():
                if ppid == parent and pid not in self.seen:
                    self.seen[pid] = start
                    todo.append(pid)

    def wait_for(self, ready, timeout: float = 50.0) -> None:
        """Watch until ``ready()``; fail if the job ends or ``timeout`` passes first."""
        deadline = time.monotonic() + timeout
        while not ready():
            assert self.proc.poll() is None, f"the job ended first ({self.proc.returncode}): {self.stderr()[-3000:]}"
            assert time.monotonic() < deadline, f"nothing after {timeout} s: {self.stderr()[-3000:]}"
            self.watch()
            time.sleep(0.02)
        self.watch()

    def workers(self) -> list:
        """The job's live spawn workers (its resource tracker aside)."""
        table = proc_table()
        return [pid for pid in self.seen if pid in table and table[pid][0] != "Z"
                and "spawn_main" in cmdline(pid) and "resource_tracker" not in cmdline(pid)]

    def finish(self, timeout: float) -> tuple:
        """(exit status, seconds to exit), watching meanwhile; a job still running after ``timeout`` is killed."""
        t0 = time.monotonic()
        while self.proc.poll() is None and time.monotonic() - t0 < timeout:
            self.watch()
            time.sleep(0.01)
        elapsed = time.monotonic() - t0
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        return self.proc.returncode, elapsed

    def survivors(self, grace: float = 5.0) -> list:
        """Descendants still running (not a zombie, same start time) ``grace`` seconds after the exit at most."""
        deadline = time.monotonic() + grace
        while True:
            table = proc_table()
            alive = [pid for pid, start in self.seen.items()
                     if pid in table and table[pid][2] == start and table[pid][0] != "Z"]
            if not alive or time.monotonic() > deadline:
                return [(pid, cmdline(pid)[:120]) for pid in alive]
            time.sleep(0.05)

    def stderr(self) -> str:
        return self.err.read_text()

    def stdout(self) -> str:
        return self.out.read_text()


def entries(out: Path) -> int:
    return len(list((out / CACHE_DIR).glob("*.json.gz"))) if (out / CACHE_DIR).is_dir() else 0


def check_clean_stop(job: Job, out: Path, reference: dict, status: int, word: str, elapsed: float) -> None:
    """A signal's end: its exit status in time, nothing left running, one clean line naming the runs kept."""
    err = job.stderr()
    assert job.proc.returncode == status and elapsed < STOP_S, (job.proc.returncode, elapsed, err[-3000:])
    assert job.survivors() == []
    assert "Traceback" not in err and "leaked" not in err, err
    runs = check_kept(out, reference)
    assert 1 <= len(runs) < RUNS
    assert err.strip().splitlines()[-1] == (f"toyrl: {word}; {len(runs)} of {RUNS} runs finished and are kept in "
                                            f"{out / CACHE_DIR}; rerun with the same arguments to resume from them")
    assert (out / f"{PROBE}.pending.json").exists() and not (out / f"{PROBE}.json").exists()


def start(tmp_path: Path, *extra, name: str = "job", out: Path = None, env=None) -> tuple:
    """The probe job on 2 workers into ``out`` (default tmp_path/out): (Job, out)."""
    out = out or tmp_path / "out"
    return Job([*ARGS, "--workers", "2", "--out-dir", str(out), *extra], tmp_path, name, env), out


# ---- signals ----------------------------------------------------------------------------------------------------
def test_ctrl_c_to_the_process_group_stops_the_job_and_keeps_its_runs(tmp_path, reference):
    job, out = start(tmp_path)
    job.wait_for(lambda: entries(out) >= 1)
    os.killpg(job.proc.pid, signal.SIGINT)                       # what a terminal's Ctrl-C does
    status, elapsed = job.finish(30)
    check_clean_stop(job, out, reference, 130, "interrupted", elapsed)


def test_ctrl_c_to_the_parent_alone_stops_its_workers_and_a_rerun_resumes(tmp_path, reference, monkeypatch, capsys):
    job, out = start(tmp_path)
    job.wait_for(lambda: entries(out) >= 1 and len(job.workers()) == 2)
    os.kill(job.proc.pid, signal.SIGINT)                         # a notebook kernel's interrupt, timeout -s INT
    status, elapsed = job.finish(30)
    check_clean_stop(job, out, reference, 130, "interrupted", elapsed)
    n = entries(out)
    monkeypatch.setattr(rc, "code_stamp", lambda: dict(fault_jobs.STAMP))
    monkeypatch.setitem(ledger.CLAIMS, PROBE, fault_jobs.PROBE)
    assert main([*ARGS, "--workers", "1", "--out-dir", str(out)]) == 0            # the same arguments, one worker
    assert f"{n} of {RUNS} runs reused" in capsys.readouterr().out
    assert same_record(json.loads((out / f"{PROBE}.json").read_text()), reference["record"])
    assert kept(out) == reference["runs"]


def test_sigterm_stops_the_job_with_status_143(tmp_path, reference):
    job, out = start(tmp_path)
    job.wait_for(lambda: entries(out) >= 1)
    os.killpg(job.proc.pid, signal.SIGTERM)                      # every process of the job gets it
    status, elapsed = job.finish(30)
    check_clean_stop(job, out, reference, 143, "terminated", elapsed)


def test_sigterm_stops_train_with_the_log_so_far(tmp_path):
    log = tmp_path / "run.jsonl"
    job = Job(["train", "--env", "bandit_chain", "--steps", "400", "--out", str(log)], tmp_path)
    job.wait_for(lambda: log.is_file() and len(log.read_text().splitlines()) >= 3)
    os.kill(job.proc.pid, signal.SIGTERM)
    status, elapsed = job.finish(30)
    rows = len(log.read_text().splitlines()) - 1                 # the header aside
    assert (status, elapsed < STOP_S) == (143, True), job.stderr()[-3000:]
    assert job.stderr().strip().splitlines()[-1] == f"toyrl: terminated; the log so far is in {log} ({rows} rows)"
    assert job.survivors() == []


# ---- a dead worker ---------------------------------------------------------------------------------------------
def spec_entry(arm: str, seed: int) -> str:
    """The cache entry name of the probe's run (arm, seed)."""
    return f"{rc.stamp_id(fault_jobs.STAMP)}-{rc.spec_hash(ledger.run_spec((PROBE, arm, seed, True)))}.json.gz"


def died_line(pid: int, runs: int, out: Path) -> str:
    return (f"toyrl: error: run claim {PROBE}, arm grpo, seed 2 died: its worker (pid {pid}) was killed by SIGKILL (as "
            f"the out-of-memory killer does); {runs} of {RUNS} runs finished and are kept in {out / CACHE_DIR}; rerun "
            "with the same arguments to resume from them")


def test_a_killed_worker_stops_the_job_naming_its_run(tmp_path, reference, monkeypatch):
    monkeypatch.setitem(ledger.CLAIMS, PROBE, fault_jobs.PROBE)
    mark = tmp_path / "killed"
    job, out = start(tmp_path, env={fault_jobs.KILL: f"grpo 2 {mark}"})        # run (rloo, 2) SIGKILLs its worker
    job.wait_for(mark.is_file)
    status, elapsed = job.finish(30)
    err = job.stderr()
    assert (status, elapsed < STOP_S) == (1, True), (status, elapsed, err[-3000:])
    assert job.survivors() == []
    runs = check_kept(out, reference)
    assert spec_entry("grpo", 2) not in runs and 1 <= len(runs) < RUNS
    assert err.strip().splitlines()[-1] == died_line(int(mark.read_text()), len(runs), out)
    assert not (out / f"{PROBE}.json").exists()


def test_keep_going_runs_the_rest_after_a_killed_worker_and_a_rerun_computes_the_one_left(tmp_path, reference,
                                                                                          monkeypatch, capsys):
    monkeypatch.setitem(ledger.CLAIMS, PROBE, fault_jobs.PROBE)
    mark = tmp_path / "killed"
    job, out = start(tmp_path, "--keep-going", env={fault_jobs.KILL: f"grpo 2 {mark}"})
    status, _ = job.finish(50)
    err = job.stderr()
    assert status == 1 and job.survivors() == [], err[-3000:]
    runs = check_kept(out, reference)
    assert sorted(runs) == sorted(set(reference["runs"]) - {spec_entry("grpo", 2)})   # every other run finished
    assert err.strip().splitlines()[-1] == died_line(int(mark.read_text()), RUNS - 1, out)
    assert not (out / f"{PROBE}.json").exists()                  # its claim waits for the run that died
    monkeypatch.setattr(rc, "code_stamp", lambda: dict(fault_jobs.STAMP))
    assert main([*ARGS, "--workers", "1", "--out-dir", str(out)]) == 0
    assert f"{RUNS - 1} of {RUNS} runs reused" in capsys.readouterr().out
    assert kept(out) == reference["runs"]
    assert same_record(json.loads((out / f"{PROBE}.json").read_text()), reference["record"])


# ---- two jobs, one folder; a corrupt entry; a folder that cannot be written ------------------------------------
def test_a_second_job_on_the_same_folder_fails_at_once_and_the_first_is_intact(tmp_path, reference):
    gate = tmp_path / "gate"
    gate.write_text("the first job's run (rloo, 0) waits while this file exists\n")
    first, out = start(tmp_path, name="first", env={fault_jobs.GATE: f"rloo 0 {gate}"})
    first.wait_for(lambda: entries(out) >= 1)                    # running, held busy by the gate
    second = Job([*ARGS, "--workers", "2", "--out-dir", str(out)], tmp_path, "second")
    status, _ = second.finish(50)
    gate.unlink()
    assert status == 2 and second.stdout() == "", second.stderr()[-3000:]
    assert second.stderr().strip().splitlines() == [
        f"toyrl: error: {out} is in use by another job (pid {first.proc.pid}, toyrl reproduce); wait for it to "
        "finish, or write elsewhere (--out-dir)"]
    assert second.survivors() == []
    status, _ = first.finish(50)
    assert status == 0 and first.survivors() == [], first.stderr()[-3000:]
    assert kept(out) == reference["runs"]
    assert same_record(json.loads((out / f"{PROBE}.json").read_text()), reference["record"])


def test_a_corrupt_cache_entry_is_named_and_its_run_computed_again(tmp_path, reference):
    out = tmp_path / "out"
    shutil.copytree(reference["dir"] / CACHE_DIR, out / CACHE_DIR)
    names = sorted(reference["runs"])
    torn, flipped = out / CACHE_DIR / names[1], out / CACHE_DIR / names[5]
    torn.write_bytes(torn.read_bytes()[:40])                     # a write cut short
    data = bytearray(flipped.read_bytes())
    data[len(data) // 2] ^= 0xFF                                 # one byte changed on disk
    flipped.write_bytes(bytes(data))
    job, out = start(tmp_path, out=out)
    status, elapsed = job.finish(50)
    err = job.stderr()
    assert status == 0 and job.survivors() == [], err[-3000:]
    warned = sorted(line for line in err.splitlines() if line.startswith("toyrl: warning: "))
    assert len(warned) == 2 and all(line.endswith("; its run is computed again") for line in warned), err
    assert f"ignoring unreadable {torn} (" in warned[0] + warned[1] and f"ignoring unreadable {flipped} (" in err
    assert f"{RUNS - 2} of {RUNS} runs reused" in job.stdout()
    assert kept(out) == reference["runs"]
    assert same_record(json.loads((out / f"{PROBE}.json").read_text()), reference["record"])


def test_a_folder_that_cannot_be_written_fails_in_one_line_before_any_run(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(ledger.CLAIMS, PROBE, fault_jobs.PROBE)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    assert main([*ARGS, "--workers", "1", "--out-dir", str(blocker / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"toyrl: error: {blocker / 'out'} cannot be written ("), err
    full = shutil.disk_usage(tmp_path)._replace(free=3 * 2 ** 20)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: full)           # a disk with 3 MiB left
    assert main([*ARGS, "--workers", "1", "--out-dir", str(tmp_path / "full")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"toyrl: error: {tmp_path / 'full'}: 3.0 MiB free, about 16.0 MiB needed; free some space or write "
        "elsewhere (--out-dir)"]
    assert not list((tmp_path / "full").glob("*.json"))                      # no run, no record, not even pending


# ---- the runner on its own -------------------------------------------------------------------------------------
def test_a_run_that_raises_is_reported_once_with_its_traceback():
    labels = [f"x={x}" for x in range(6)]
    with pytest.raises(RunFailed) as e:
        run_tasks(fault_jobs.double_or_raise, range(6), workers=2, progress=False, labels=labels, keep_going=True)
    text, f = str(e.value), e.value.failures
    assert [(x.index, x.label, x.why) for x in f] == [(3, "x=3", "raised ValueError: three is not allowed")]
    assert text.count("Traceback") == 1 and text.count("ValueError: three is not allowed") == 2    # its end, the line
    assert e.value.done == 5 and text.endswith("run x=3 raised ValueError: three is not allowed; 5 of 6 runs had "
                                               "finished (nothing keeps them)")
    with pytest.raises(RunFailed) as e:                                       # without keep_going: the first one
        run_tasks(fault_jobs.double_or_raise, range(6), workers=1, progress=False)
    assert e.value.done == 3 and [x.label for x in e.value.failures] == ["job 3"]
