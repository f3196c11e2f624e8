"""Where a stored run replays: the build (CPU model, torch's CPU kernels, torch version) a lesson's stored runs
replay on, against the one a student runs.

A run is a long chain of floating-point sums; another CPU (or another torch build) adds them in another order, so
from the first rounding difference on it samples other tokens and the run's details part from the stored ones
(a live rerun of a stored seed on another CPU can end elsewhere). What holds on every machine is what the lessons
state about populations of seeds (k of n seeds, a mean with its interval), not one seed's curve. A lesson checks
the replay only on the build its stored runs replay on (``same_build``), and the population statement everywhere.

    same_build(SHIPPED)      # True on the build the shipped sweeps of lessons 07 and 08 replay on
    replay_note(SHIPPED)     # the line a live cell prints
"""
from __future__ import annotations

import platform
from pathlib import Path

__all__ = ["build", "same_build", "replay_note", "KEYS", "SHIPPED"]

KEYS = ("cpu", "kernels", "torch")
"""what a build is: the CPU model, the CPU kernels torch dispatches to, and the torch version"""
SHIPPED = {"cpu": "AMD EPYC", "kernels": "AVX2", "torch": "2.13.0+cpu"}
"""the build the stored sweeps of lessons 07 and 08 (data/runs/trees, data/runs/aggregation) replay on to 1e-4:
their live cells' replay checks pass there (run in CI on that build)"""


def _cpu_model() -> str:
    """The CPU's model name (Linux: /proc/cpuinfo; elsewhere ``platform.processor()``)."""
    info = Path("/proc/cpuinfo")
    if info.exists():
        for line in info.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def build() -> dict:
    """This machine's build: {"cpu": model name, "kernels": torch's CPU capability (e.g. "AVX2"), "torch": version}."""
    import torch
    return {"cpu": _cpu_model(), "kernels": torch.backends.cpu.get_cpu_capability(), "torch": torch.__version__}


def same_build(stamp: dict) -> bool:
    """True when ``stamp`` (a ``build()`` record) names this machine's build on every key of ``KEYS``."""
    here = build()
    return all(stamp.get(k) == here[k] for k in KEYS)


def replay_note(stamp: dict) -> str:
    """One line for a lesson: whether the bit check runs here, and why not when it does not."""
    if same_build(stamp):
        return f"this build ({', '.join(build()[k] for k in KEYS)}) is the one the stored runs replay on: checked"
    return (f"the stored runs replay on {', '.join(str(stamp.get(k)) for k in KEYS)}; this machine is "
            f"{', '.join(build()[k] for k in KEYS)}, so its runs differ in their details and the replay check is "
            f"skipped; the population statements are checked instead")
