"""Statistics of the claims ledger: paired t intervals, Holm's step-down correction, the one verdict rule.

Every number a claim file reports is a mean over seeds with a 95% Student-t interval. An effect
compares two arms run with the same seeds, so it is *paired*: the interval is the one-sample t
interval of the per-seed differences d_s = a_s - b_s (Student 1908; any statistics text):

    mean = (1/n) sum_s d_s,   se = sd(d) / sqrt(n),   CI_95 = mean -/+ t_{0.975, n-1} * se

Example: d = [1., 2., 3., 4., 5.] -> mean 3.0, se 0.7071, t_{0.975,4} = 2.7764, CI [1.0368, 4.9632].

A test of "effect > threshold" (or "<") has the two-sided p-value of H0: effect = threshold,
p = 2 P(T_{n-1} > |mean - threshold| / se). When a claim has m tests, Holm's step-down procedure
(Holm 1979) controls the family-wise error at 5%: sort the p-values, reject p_(k) while
p_(k) <= 0.05 / (m - k + 1). Example: p = [0.01, 0.04, 0.03] -> reject [True, False, False]
(0.01 <= 0.05/3, then 0.03 > 0.05/2 stops). With m = 1 a rejection is exactly "the 95% interval
excludes the threshold". A rejected test *passes* when its mean lies on the claimed side and is
*contradicted* when it lies on the opposite side.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
from scipy import stats as _st

__all__ = ["t_interval", "summary", "paired_effect", "p_value", "holm", "classify", "verdict", "across_blocks",
           "VERDICT_RULE", "FLIP_RULE", "LEVEL", "ALPHA", "MIN_SEEDS", "VERDICTS"]

LEVEL = 0.95
"""coverage of every reported interval"""
ALPHA = 0.05
"""family-wise error rate of one claim's tests (Holm)"""
MIN_SEEDS = 3
"""a test with fewer finite per-seed values than this cannot pass or be contradicted"""
VERDICTS = ("reproduced", "partially reproduced", "not reproduced", "contradicted", "check")
"""every verdict a claim file can carry"""

VERDICT_RULE = (
    "Each test's effect is a mean over seeds, paired by seed for a difference of two arms, with a 95% Student-t "
    "interval (mean +/- t_{0.975,n-1} sd/sqrt(n)); a test needs at least 3 seeds with a finite value. Its p-value "
    "is the two-sided t test of effect = threshold, and one claim's tests are corrected together by Holm's "
    "step-down procedure at family-wise level 0.05 (with one test: the 95% interval excludes the threshold). A "
    "test passes if it is rejected with its mean on the claimed side, and is contradicted if it is rejected with "
    "its mean on the opposite side. A test that cannot fail (a manipulation check, an outcome the task's design "
    "makes certain, a repeat of another test) or cannot pass (a metric censored on every run of one of its arms, "
    "fewer than 3 finite values) is shown with its mark and is not evidence: the verdict reads only the other "
    "tests. Verdict: 'check' for an identity that holds by construction and whose tests all pass; 'reproduced' if "
    "every evidence test passes; 'partially reproduced' if some but not all pass; 'contradicted' if none passes "
    "and at least one is contradicted; 'not reproduced' otherwise. Every arm of a claim has its own runs (no run "
    "is shared between claims), seeded from the claim's name and the seed number.")

FLIP_RULE = (
    "Two seed blocks (0-9 and 10-19) of one setting: a claim's verdict holds across the blocks when both blocks give "
    "it the same verdict; otherwise it flips, and a flipped verdict is not a finding, whichever block passed. A "
    "single evidence test is a finding only when it passed on both blocks, or was contradicted on both; a test whose "
    "outcome differs between the blocks flips. A claim run on one block only, or whose second block ran another "
    "setting, has no cross-block reading.")


def _finite(x: Sequence[float]) -> np.ndarray:
    x = np.asarray(x, dtype=float)
    return x[np.isfinite(x)]


def t_interval(x: Sequence[float], *, level: float = LEVEL):
    """(mean, lo, hi) of the finite values of ``x`` by Student's t; NaNs if none.

    One value, or values with zero spread, give a zero-width interval. Example: [1., 2., 3., 4., 5.]
    -> (3.0, 1.0368, 4.9632).
    """
    x = _finite(x)
    if x.size == 0:
        return float("nan"), float("nan"), float("nan")
    m = float(x.mean())
    if x.size == 1:
        return m, m, m
    half = float(_st.t.ppf(0.5 + level / 2, x.size - 1)) * float(x.std(ddof=1)) / np.sqrt(x.size)
    return m, m - half, m + half


def p_value(x: Sequence[float], threshold: float = 0.0) -> float:
    """Two-sided one-sample t-test p-value of mean(x) = threshold (finite values; NaN below MIN_SEEDS).

    Zero spread: 0 if the mean differs from the threshold, 1 if it equals it.
    Example: [1., 2., 3., 4., 5.], threshold 0 -> t = 4.243, p = 0.0132.
    """
    x = _finite(x)
    if x.size < MIN_SEEDS:
        return float("nan")
    sd = float(x.std(ddof=1))
    if sd == 0.0:
        return 0.0 if x.mean() != threshold else 1.0
    t = (float(x.mean()) - threshold) / (sd / np.sqrt(x.size))
    return float(2 * _st.t.sf(abs(t), x.size - 1))


def holm(p: Sequence[float], *, alpha: float = ALPHA) -> list:
    """Holm's step-down rejections, in the input order (NaN p-values are never rejected).

    Example: [0.01, 0.04, 0.03] -> [True, False, False]; [0.01, 0.02] -> [True, True].
    """
    p = np.array([np.inf if not np.isfinite(v) else v for v in p], dtype=float)
    m, reject = p.size, [False] * p.size
    for k, i in enumerate(np.argsort(p, kind="stable")):
        if p[i] > alpha / (m - k):
            break
        reject[int(i)] = True
    return reject


def summary(x: Sequence[float]) -> dict:
    """{"mean", "ci95", "sd", "n", "per_seed"} of per-seed values (NaN kept in per_seed as None)."""
    m, lo, hi = t_interval(x)
    f = _finite(x)
    return {"mean": _r(m), "ci95": [_r(lo), _r(hi)], "sd": _r(float(f.std(ddof=1)) if f.size > 1 else 0.0),
            "n": int(f.size), "per_seed": [_r(v) for v in np.asarray(x, dtype=float)]}


def paired_effect(a: Sequence[float], b: Optional[Sequence[float]], *, threshold: float = 0.0) -> dict:
    """Summary of a - b per seed (paired; b None: a itself) plus the p-value against ``threshold``."""
    a = np.asarray(a, dtype=float)
    d = a if b is None else a - np.asarray(b, dtype=float)
    return {**summary(d), "p": _r(p_value(d, threshold), 6)}


def classify(effect: dict, rejected: bool, *, sign: int, threshold: float) -> str:
    """'passed' | 'contradicted' | 'inconclusive' for one test after the Holm decision."""
    if not rejected or effect["n"] < MIN_SEEDS or effect["mean"] is None:
        return "inconclusive"
    return "passed" if sign * (effect["mean"] - threshold) > 0 else "contradicted"


def verdict(outcomes: Sequence[str], *, check: bool = False, evidence: Optional[Sequence[bool]] = None) -> str:
    """The ledger's one rule over the outcomes of the evidence tests (see VERDICT_RULE); ``evidence`` (one bool per
    outcome, default all True) leaves out the tests that cannot fail or cannot pass (``toyrl.lab.claims.judge``).

    Examples: ["passed", "passed"] -> "reproduced"; ["passed", "inconclusive"] -> "partially reproduced";
    ["inconclusive", "contradicted"] -> "contradicted"; ["inconclusive"] -> "not reproduced";
    ["passed"] with check=True -> "check"; ["inconclusive", "passed"] with evidence [True, False] -> "not reproduced".
    """
    outcomes = list(outcomes)
    if evidence is not None:
        if len(evidence) != len(outcomes):
            raise ValueError(f"evidence: expected one bool per outcome ({len(outcomes)}), got {len(evidence)}")
        outcomes = [o for o, e in zip(outcomes, evidence) if e]
    n_pass = sum(o == "passed" for o in outcomes)
    if outcomes and n_pass == len(outcomes):
        return "check" if check else "reproduced"
    if n_pass:
        return "partially reproduced"
    if any(o == "contradicted" for o in outcomes):
        return "contradicted"
    return "not reproduced"


def across_blocks(first: dict, second: Optional[dict]) -> dict:
    """FLIP_RULE over two judged records of one claim (``verdict``, ``result.tests`` with ``outcome`` and
    ``evidence``; ``second`` None or of another setting: no reading).

    Returns {"status": "holds" | "flips" | "one block", "verdicts": [v1, v2], "both": test numbers (1-based) that
    passed on both blocks or were contradicted on both, "flipped": evidence tests whose outcome differs}.
    Example: verdicts "reproduced" / "partially reproduced", outcomes [passed, passed] / [inconclusive, passed]
    -> {"status": "flips", "both": [2], "flipped": [1], ...}.
    """
    if (second is None or "result" not in first or "result" not in second
            or first.get("setting") != second.get("setting")):
        return {"status": "one block", "verdicts": [first.get("verdict")], "both": [], "flipped": []}
    a, b = first["result"]["tests"], second["result"]["tests"]
    both, flipped = [], []
    for i, (x, y) in enumerate(zip(a, b), 1):
        if not (x.get("evidence", True) and y.get("evidence", True)):
            continue
        if x["outcome"] != y["outcome"]:
            flipped.append(i)
        elif x["outcome"] in ("passed", "contradicted"):
            both.append(i)
    v = [first["verdict"], second["verdict"]]
    return {"status": "holds" if v[0] == v[1] else "flips", "verdicts": v, "both": both, "flipped": flipped}


def _r(v, nd: int = 4):
    """Round for JSON; non-finite -> None."""
    if v is None or not np.isfinite(v):
        return None
    return float(round(float(v), nd))
