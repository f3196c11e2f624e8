"""Jobs small enough to interrupt, for tests/test_faults.py: a claim, a driver that runs ``toyrl`` with it, and a
job function for the runner.

    python tests/fault_jobs.py reproduce fault_probe --quick --seeds 3 --workers 2 --out-dir D

Run as a script, this module pins the code stamp (``STAMP``) and registers ``PROBE`` in the ledger; the spawn
workers run the script's top level again (as ``__mp_main__``), so they know the claim too. Imported by the tests,
it changes nothing until ``pin()`` is called. ``PROBE`` is the ledger code around runs that need no torch: each
run pauses ``RUN_S`` seconds and returns a series drawn from a generator seeded by its arm and seed (the same run
gives the same floats in any worker, in any order). With ``KILL`` set in the environment to "ARM SEED PATH", that run
writes its process id to PATH and SIGKILLs its own worker (a death at a known run, as the out-of-memory killer
would deal it); with ``GATE`` set to "ARM SEED PATH", that run waits while the file PATH exists (a job held busy
until the test lets it go on).
"""
from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import numpy as np

import toyrl.lab.claims as ledger
import toyrl.lab.runcache as rc
from toyrl.cli import main
from toyrl.lab.claims.spec import SERIES_KEYS, Claim, Test, success_metrics

STAMP = {"toyrl": "test", "source": "pinned-by-test_faults"}
"""the code stamp of every run here"""
KILL = "TOYRL_TEST_KILL_RUN"
"""environment variable naming the run that kills its worker: "ARM SEED PATH\""""
GATE = "TOYRL_TEST_GATE_RUN"
"""environment variable naming the run that waits while a file exists: "ARM SEED PATH\""""
RUN_S = 0.5
"""how long a probe run takes (a pause: the job's time goes to its runs, not to the CPU the tests share)"""


def _named(variable: str, arm: str, seed: int):
    """The PATH of ``variable`` if it names this run ("ARM SEED PATH", the ledger seed), else None."""
    words = os.environ.get(variable, "").split(" ", 2)
    return Path(words[2]) if words[:2] == [arm, str(seed % 1000)] else None


def probe_run(arm: str, seed: int, quick: bool) -> dict:
    """One run of ``PROBE``: its arm's config trained with trainer seed ``seed`` (its series and success metrics).
    First, if ``KILL`` names it, the SIGKILL of its own process; if ``GATE`` does, a wait while the gate exists
    (the ledger seed is the trainer seed mod 1000)."""
    kill, gate = _named(KILL, arm, seed), _named(GATE, arm, seed)
    if kill is not None:
        kill.write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)
    while gate is not None and gate.exists():
        time.sleep(0.05)
    time.sleep(RUN_S)
    rng = np.random.default_rng([list(PROBE.arms).index(arm), seed])
    series = {k: rng.random(PROBE.steps).tolist() for k in SERIES_KEYS}
    return {"series": series, "metrics": success_metrics(series)}


PROBE = Claim(name="fault_probe", claim="two arms of seeded random series (a test fixture)", source="test: none",
              metric="final success", base=dict(env="bandit_chain", prompts_per_step=2, group_size=4),
              arms={"grpo": {}, "rloo": {"estimator": "rloo"}}, steps=6, quick_steps=6, metrics=success_metrics,
              tests=[Test("rloo - grpo, final success", "final_success", "rloo", "grpo")], measure=probe_run)
"""the claim every fault test runs (2 arms x its seeds)"""


def pin() -> None:
    """The pinned code stamp and the probe claim, in this process."""
    rc.code_stamp = lambda: dict(STAMP)
    ledger.CLAIMS[PROBE.name] = PROBE


def double_or_raise(x: int) -> int:
    """2 x, after a short pause; raises ValueError for 3 (a run that fails)."""
    time.sleep(0.2)
    if x == 3:
        raise ValueError("three is not allowed")
    return 2 * x


if __name__ in ("__main__", "__mp_main__"):                 # the driver and its spawn workers
    pin()

if __name__ == "__main__":
    sys.exit(main())
