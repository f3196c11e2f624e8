"""Statistics of the claims ledger: seeded bootstrap intervals and the one verdict rule.

Every number a claim file reports is a mean over seeds with a 95% percentile-bootstrap interval
(Efron & Tibshirani 1993). An effect compares two arms run with the same seeds, so it is *paired*:
the bootstrap resamples seeds and recomputes the mean of the per-seed differences.

    CI_95(x) = [q_2.5, q_97.5] of { mean(x[s]) : s = n indices drawn with replacement }, 10 000 draws

Example: x = [1., 2., 3., 4., 5.] -> mean 3.0, CI about [1.8, 4.2].

The verdict comes from the numbers only (``verdict``): a test passes when its whole interval lies
on the claimed side of its threshold.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

__all__ = ["bootstrap_ci", "summary", "paired_effect", "one_sample_effect", "verdict", "VERDICT_RULE",
           "N_BOOT", "LEVEL"]

N_BOOT = 10_000
"""bootstrap resamples"""
LEVEL = 0.95
"""coverage of every interval"""
MIN_SEEDS = 3
"""a test with fewer finite per-seed values than this cannot pass (too few to say anything)"""

VERDICT_RULE = (
    "Each test's effect is a mean over seeds (paired by seed for a difference of two arms) with a 95% "
    "percentile-bootstrap interval (10,000 resamples, seeded). A test passes when the whole interval lies on "
    "the claimed side of its threshold (and at least 3 seeds give a finite value). Verdict: 'reproduced' if "
    "every test passes, 'partially reproduced' if at least one does, 'not reproduced' otherwise.")


def _finite(x: Sequence[float]) -> np.ndarray:
    x = np.asarray(x, dtype=float)
    return x[np.isfinite(x)]


def bootstrap_ci(x: Sequence[float], *, seed: int = 0, n_boot: int = N_BOOT, level: float = LEVEL):
    """(mean, lo, hi) of the finite values of ``x`` by the percentile bootstrap; NaNs if none.

    A single value gives a zero-width interval. Example: [1., 2., 3., 4., 5.] -> (3.0, ~1.8, ~4.2).
    """
    x = _finite(x)
    if x.size == 0:
        return float("nan"), float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(n_boot, x.size))].mean(1)          # (n_boot,)
    a = (1.0 - level) / 2
    return float(x.mean()), float(np.quantile(means, a)), float(np.quantile(means, 1 - a))


def summary(x: Sequence[float], *, seed: int = 0) -> dict:
    """{"mean", "ci95", "sd", "n", "per_seed"} of per-seed values (NaN kept in per_seed as None)."""
    m, lo, hi = bootstrap_ci(x, seed=seed)
    f = _finite(x)
    return {"mean": _r(m), "ci95": [_r(lo), _r(hi)], "sd": _r(float(f.std(ddof=1)) if f.size > 1 else 0.0),
            "n": int(f.size), "per_seed": [_r(v) for v in np.asarray(x, dtype=float)]}


def paired_effect(a: Sequence[float], b: Optional[Sequence[float]], *, seed: int = 0) -> dict:
    """Mean of a - b over seeds present in both (paired), with its interval; b None: one-sample a."""
    a = np.asarray(a, dtype=float)
    d = a if b is None else a - np.asarray(b, dtype=float)
    return summary(d, seed=seed)


one_sample_effect = lambda a, *, seed=0: paired_effect(a, None, seed=seed)  # noqa: E731


def passes(effect: dict, *, sign: int, threshold: float) -> bool:
    """Whole interval on the claimed side: sign * CI beyond threshold, with >= MIN_SEEDS values."""
    lo, hi = effect["ci95"]
    if effect["n"] < MIN_SEEDS or lo is None or hi is None:
        return False
    return (lo > threshold) if sign > 0 else (hi < threshold)


def verdict(passed: Sequence[bool]) -> str:
    """The ledger's one rule: all tests pass -> reproduced; some -> partially; none -> not reproduced.

    Example: [True, False] -> "partially reproduced".
    """
    passed = list(passed)
    if passed and all(passed):
        return "reproduced"
    if any(passed):
        return "partially reproduced"
    return "not reproduced"


def _r(v, nd: int = 4):
    """Round for JSON; non-finite -> None."""
    if v is None or not np.isfinite(v):
        return None
    return float(round(float(v), nd))
