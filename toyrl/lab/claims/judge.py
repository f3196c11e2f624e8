"""Judging a claim's record: which of its tests are evidence, the verdict over them, the words the record carries.

A test is evidence only when its outcome was open before the runs. Its marks say where it was not:

- declared in the claim's design (``Test.role``): a **manipulation** check (the intervention did what it does by
  construction: a critic fitted before RL has a lower early value loss) or an outcome the task's
  **construction** makes certain (every rollout of a one-corridor snake walks the same cells, so they recur):
  the test cannot fail;
- computed from the record's per-seed values: the test's arm ran the same runs as another arm (every metric
  equal on every seed) that an earlier test already compares against the same baseline, so it **repeats** that
  test; its two arms ran the same runs (the effect is 0 on every seed by construction: it cannot pass); a
  ``Claim.censored`` metric sits at its censor (the run's length: the event never happened) on every run of one
  of its arms, so the effect is a bound set by the censor, not a difference (it cannot pass); fewer than
  ``MIN_SEEDS`` seeds give a finite effect (it cannot pass).

A mark "cannot fail", "cannot pass" or "repeats" takes the test out of the verdict (``stats.verdict(...,
evidence=...)``); a "note" (a metric censored on half the runs of an arm or more) is shown and changes nothing.

    rec = rejudge(CLAIMS["turn_critic_warm"], json.loads(path.read_text()))    # no run: the stored numbers
    python -m toyrl.lab.claims.rejudge   # every shipped record (both blocks), then docs/claims.md's table

Example: turn_critic_warm's fourth test (warm - zero critic, early value loss) is declared a manipulation check;
its other three are inconclusive, inconclusive and contradicted, so its verdict is "contradicted".
"""
from __future__ import annotations

from .stats import MIN_SEEDS, VERDICT_RULE, verdict

__all__ = ["marks_for", "judge_tests", "rejudge", "notes_for", "NOT_EVIDENCE", "WORDS"]

NOT_EVIDENCE = ("cannot fail", "cannot pass", "repeats")
"""the marks that take a test out of the verdict"""
WORDS = ("source", "metric", "mechanism", "faithfulness", "settings_tried")
"""the record's words refreshed from the claim (``claims.toml``) when it is rejudged; the sentence itself is not"""


def notes_for(claim, verdict_: str) -> str:
    """The claim's notes, plus what a reproduction would need unless it was reproduced (or is a check)."""
    if verdict_ not in ("reproduced", "check") and claim.needed:
        return f"{claim.notes} What a reproduction would need: {claim.needed}"
    return claim.notes


def _per_seed(result: dict, arm: str, metric: str) -> list:
    return result["arms"].get(arm, {}).get(metric, {}).get("per_seed", [])


def _same_runs(result: dict, a: str, b: str) -> bool:
    """Every metric of arms a and b equal on every seed (the two arms ran the same runs)."""
    x, y = result["arms"].get(a), result["arms"].get(b)
    if not x or not y or x.keys() != y.keys():
        return False
    return all(x[k]["per_seed"] == y[k]["per_seed"] for k in x)


def marks_for(claim, result: dict, *, quick: bool = False) -> list:
    """One list of marks per test of ``result`` ({"arms", "tests"}, as ``evaluate`` writes it): each mark
    {"mark": "cannot fail" | "cannot pass" | "repeats" | "note", "why": one line}. ``quick``: the run length
    under --quick (the censor of ``claim.censored`` metrics)."""
    if [t["name"] for t in result["tests"]] != [t.name for t in claim.tests]:
        raise ValueError(f"result: its tests are not claim {claim.name}'s tests {[t.name for t in claim.tests]}")
    censor = float(claim.quick_steps if quick else claim.steps)
    out = []
    for i, (spec, t) in enumerate(zip(claim.tests, result["tests"])):
        marks = []
        if spec.role == "manipulation":
            marks.append({"mark": "cannot fail", "why": f"a manipulation check: {spec.why}"})
        elif spec.role == "construction":
            marks.append({"mark": "cannot fail", "why": spec.why})
        for j, other in enumerate(claim.tests[:i]):
            twin = other.arm
            same_test = (other.metric, other.baseline, other.minus, other.sign, other.threshold) == \
                (spec.metric, spec.baseline, spec.minus, spec.sign, spec.threshold)
            if same_test and twin not in spec.compared() and _same_runs(result, spec.arm, twin):
                marks.append({"mark": "repeats", "why": f"repeats test {j + 1}: arm {spec.arm}'s runs equal "
                                                        f"arm {twin}'s on every metric and seed"})
                break
        effect = [v for v in t["effect"]["per_seed"] if v is not None]
        if len(effect) < MIN_SEEDS:
            marks.append({"mark": "cannot pass", "why": f"{len(effect)} seed(s) give a finite value, fewer than "
                                                        f"{MIN_SEEDS}"})
        elif spec.baseline and _same_runs(result, spec.arm, spec.baseline):
            marks.append({"mark": "cannot pass", "why": f"its arms {spec.arm} and {spec.baseline} ran the same runs"})
        if spec.metric in claim.censored:
            for arm in spec.compared():
                vals = [v for v in _per_seed(result, arm, spec.metric) if v is not None]
                k = sum(v == censor for v in vals)
                if vals and k == len(vals):
                    marks.append({"mark": "cannot pass", "why": f"{arm}'s {spec.metric} is censored at {censor:g} "
                                  f"(never reached) on every run: the effect is a bound set by the censor"})
                elif vals and 2 * k >= len(vals):
                    marks.append({"mark": "note", "why": f"{arm}'s {spec.metric} is censored at {censor:g} on {k} "
                                                         f"of {len(vals)} runs"})
        out.append(marks)
    return out


def judge_tests(claim, result: dict, *, quick: bool = False) -> list:
    """``result["tests"]`` with each test's ``marks`` and ``evidence`` (no mark in NOT_EVIDENCE) set."""
    marks = marks_for(claim, result, quick=quick)
    return [{**t, "marks": m, "evidence": not any(x["mark"] in NOT_EVIDENCE for x in m)}
            for t, m in zip(result["tests"], marks)]


def rejudge(claim, record: dict) -> dict:
    """The record under the ledger's rule, from its stored numbers (nothing is re-run): each test's marks and
    evidence, the verdict over the evidence tests, the rule's text, and the words of ``claims.toml`` (``WORDS``
    and the notes); the claim's sentence, setting, seeds and numbers stay as they are. A registration without a
    result gets its words refreshed only. ValueError if the record is not of this claim's sentence."""
    if record.get("claim") != claim.claim:
        raise ValueError(f"record: its claim sentence is not {claim.name}'s in claims.toml")
    out = {**record, **{k: getattr(claim, k) for k in WORDS}}
    if "result" not in record:
        return {**out, "notes": claim.notes}
    tests = judge_tests(claim, record["result"], quick=bool(record.get("setting", {}).get("quick")))
    v = verdict([t["outcome"] for t in tests], check=claim.check, evidence=[t["evidence"] for t in tests])
    return {**out, "result": {**record["result"], "tests": tests}, "verdict": v, "verdict_rule": VERDICT_RULE,
            "notes": notes_for(claim, v)}
