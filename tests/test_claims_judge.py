"""Which tests are evidence (the marks), the verdict over them, the flip rule between seed blocks, and the shipped
ledger judged by them: every stored record equals its rejudged self, and docs/claims.md's table and prose follow."""
import json
import re

import pytest

from toyrl.lab.claims import CLAIMS, PAGE, SHIPPED_DIR, Claim, _records, evaluate, write_table
from toyrl.lab.claims import Test as ClaimTest
from toyrl.lab.claims.judge import judge_tests, rejudge, marks_for
from toyrl.lab.claims.report import END, START, findings
from toyrl.lab.claims.spec import WORDS, _words
from toyrl.lab.claims.stats import across_blocks, verdict


def _summary(xs):
    return {"per_seed": list(xs)}


def _result(arms: dict, tests: list) -> dict:
    """A result in the record's shape: arms {arm: {metric: per-seed list}}, tests [(name, per-seed effect)]."""
    return {"arms": {a: {m: _summary(v) for m, v in ms.items()} for a, ms in arms.items()},
            "tests": [{"name": n, "outcome": o, "effect": _summary(e)} for n, e, o in tests]}


def _claim(tests, **kw) -> Claim:
    return Claim("x", "c", "s", "m", base={}, arms={"a": {}, "b": {}, "c": {}}, metrics=lambda s: s, tests=tests,
                 steps=40, quick_steps=10, **kw)


def test_verdict_reads_only_the_evidence_tests():
    assert verdict(["inconclusive", "inconclusive", "contradicted", "passed"],
                   evidence=[True, True, True, False]) == "contradicted"           # a manipulation check passing
    assert verdict(["passed", "inconclusive"], evidence=[True, False]) == "reproduced"
    assert verdict(["passed"], evidence=[False]) == "not reproduced"                # no evidence at all
    with pytest.raises(ValueError, match="evidence"):
        verdict(["passed"], evidence=[True, True])


def test_declared_roles_cannot_fail():
    c = _claim([ClaimTest("t1", "u", "a", "b"),
                ClaimTest("t2", "v", "a", "b", role="manipulation", why="fitted to lower it"),
                ClaimTest("t3", "w", "a", role="construction", why="one corridor")])
    res = _result({"a": {"u": [1, 2, 3], "v": [1, 1, 1], "w": [5, 6, 7]}, "b": {"u": [0, 0, 0], "v": [2, 2, 2]}},
                  [("t1", [1, 2, 3], "passed"), ("t2", [-1, -1, -1], "passed"), ("t3", [5, 6, 7], "passed")])
    marks = marks_for(c, res)
    assert marks[0] == [] and marks[1] == [{"mark": "cannot fail", "why": "a manipulation check: fitted to lower it"}]
    assert marks[2] == [{"mark": "cannot fail", "why": "one corridor"}]
    tests = judge_tests(c, res)
    assert [t["evidence"] for t in tests] == [True, False, False]


def test_computed_marks_repeats_same_arms_censored_and_few_values():
    c = _claim([ClaimTest("t1", "s", "a", "b", sign=-1), ClaimTest("t2", "s", "c", "b", sign=-1),
                ClaimTest("t3", "u", "a", "c"), ClaimTest("t4", "f", "a")], censored=("s",))
    same = {"s": [10.0, 40.0, 40.0, 40.0], "u": [1.0, 1.0, 2.0, 2.0], "f": [1.0, None, None, None]}
    res = _result({"a": same, "c": dict(same), "b": {"s": [40.0] * 4, "u": [0.0] * 4}},
                  [("t1", [-30, 0, 0, 0], "inconclusive"), ("t2", [-30, 0, 0, 0], "inconclusive"),
                   ("t3", [0, 0, 0, 0], "inconclusive"), ("t4", [1.0, None, None, None], "inconclusive")])
    m = marks_for(c, res)
    assert [x["mark"] for x in m[0]] == ["note", "cannot pass"]                  # a: 3 of 4 censored; b: 4 of 4
    assert "censored at 40 on 3 of 4 runs" in m[0][0]["why"] and "on every run" in m[0][1]["why"]
    assert m[1][0] == {"mark": "repeats", "why": "repeats test 1: arm c's runs equal arm a's on every metric and seed"}
    assert m[2] == [{"mark": "cannot pass", "why": "its arms a and c ran the same runs"}]
    assert m[3] == [{"mark": "cannot pass", "why": "1 seed(s) give a finite value, fewer than 3"}]
    assert not any("censored" in x["why"] for x in marks_for(c, res, quick=True)[0])   # the censor is 10 there
    with pytest.raises(ValueError, match="tests"):
        marks_for(c, {**res, "tests": res["tests"][:2]})


def test_a_difference_of_differences_is_paired_by_seed():
    """minus: (a - b) - (c - d) per seed: [(3-1)-(1-1), (4-1)-(2-1), (5-1)-(2-0)] = [2, 2, 2] -> mean 2, zero spread."""
    c = Claim("x", "c", "s", "m", base={}, arms={k: {} for k in "abcd"}, metrics=lambda s: s,
              tests=[ClaimTest("grows", "u", "a", "b", minus=("c", "d"))])
    vals = {"a": [3, 4, 5], "b": [1, 1, 1], "c": [1, 2, 2], "d": [1, 1, 0]}
    runs = {arm: {s: {"metrics": {"u": float(v[s])}} for s in range(3)} for arm, v in vals.items()}
    result, v = evaluate(c, runs, range(3))
    (t,) = result["tests"]
    assert t["effect"]["per_seed"] == [2.0, 2.0, 2.0] and t["minus"] == ["c", "d"]
    assert t["outcome"] == "passed" and v == "reproduced"
    assert ClaimTest("g", "u", "a", "b", minus=("c", "d")).compared() == ["a", "b", "c", "d"]


def test_flip_rule_by_hand():
    def rec(v, outcomes, evidence=None, setting=1):
        ev = evidence or [True] * len(outcomes)
        return {"verdict": v, "setting": setting,
                "result": {"tests": [{"outcome": o, "evidence": e} for o, e in zip(outcomes, ev)]}}
    a = rec("reproduced", ["passed", "passed"])
    b = rec("partially reproduced", ["inconclusive", "passed"])
    assert across_blocks(a, b) == {"status": "flips", "verdicts": ["reproduced", "partially reproduced"],
                                   "both": [2], "flipped": [1]}
    c = rec("contradicted", ["contradicted", "inconclusive", "passed"], [True, True, False])
    d = rec("contradicted", ["contradicted", "inconclusive", "inconclusive"], [True, True, False])
    assert across_blocks(c, d) == {"status": "holds", "verdicts": ["contradicted"] * 2, "both": [1], "flipped": []}
    assert across_blocks(a, None)["status"] == "one block"
    assert across_blocks(a, rec("reproduced", ["passed", "passed"], setting=2))["status"] == "one block"


# ---- the shipped ledger ---------------------------------------------------------------------------------------------
def _shipped():
    return _records(SHIPPED_DIR), _records(SHIPPED_DIR / "heldout")


@pytest.mark.parametrize("block", ["", "heldout"])
def test_every_shipped_record_is_its_rejudged_self(block):
    """A stored record's verdict, marks and words are what the ledger's rule and claims.toml give from its stored
    numbers: after a rule or a note changes, ``python -m toyrl.lab.claims.rejudge`` rewrites them (no run)."""
    recs = _records(SHIPPED_DIR / block if block else SHIPPED_DIR)
    assert len(recs) == len(CLAIMS)
    for name, rec in recs.items():
        assert rejudge(CLAIMS[name], rec) == rec, f"{name}: run python -m toyrl.lab.claims.rejudge"


def test_the_tests_that_decide_nothing_are_marked_and_change_the_verdict():
    first, held = _shipped()
    marks = {(n, i): [m["mark"] for m in t["marks"]] for n, r in first.items() if "result" in r
             for i, t in enumerate(r["result"]["tests"], 1) if t["marks"]}
    assert "cannot fail" in marks["turn_critic_warm", 4] and "cannot fail" in marks["gigpo_horizon", 9]
    assert "cannot pass" in marks["gigpo_horizon", 8] and marks["turn_critic", 3] == ["repeats"]
    for recs in (first, held):
        tw = recs["turn_critic_warm"]
        assert tw["result"]["tests"][3]["outcome"] == "passed" and tw["verdict"] == "contradicted"
    assert held["gigpo_horizon"]["verdict"] == "reproduced" and first["gigpo_horizon"]["verdict"] == "partially reproduced"


def test_claims_that_flip_are_the_ones_the_issue_named():
    first, held = _shipped()
    f = findings(list(first.values()), held)
    assert {"starpo_cue", "tree_budget_tokens", "tree_budget", "blind_fixes"} <= set(f["flips"])
    assert {"env_mask", "bc_warmstart", "engine_blowup"} <= {n for n, v in f["holds"].items() if v == "reproduced"}


def test_settings_tried_follows_one_rule():
    """settings_tried = settings_own + the count of the claim it follows, and every note says how it counted."""
    words = _words()
    for name, c in CLAIMS.items():
        own = words[name]["settings_own"]
        follows = words[name].get("follows")
        assert c.settings_tried == own + (CLAIMS[follows].settings_tried if follows else 0), name
        assert own >= (0 if follows else 1) and "Settings counted" in c.notes, name
    assert CLAIMS["critic_delay_warm"].settings_tried > CLAIMS["blind_fixes"].settings_tried
    assert CLAIMS["engine_blowup"].settings_tried == 9                           # the benchmark's engine modes


def test_claim_words_speak_of_the_claims_only():
    text = WORDS.read_text()
    bad = re.findall(r"issue \d+|\(issue|earlier session|earlier version|as history|stays in the ledger|"
                     r"\bnow\b(?! and then)|today|last round|New claim", text)
    assert not bad, bad


def test_the_growth_of_the_gap_is_registered_before_its_seeds():
    """gigpo_horizon's sentence says the gap grows with the horizon; gigpo_horizon_growth tests it, registered
    (both blocks) in gigpo_horizon's setting, its arms a subset of gigpo_horizon's, not yet run."""
    g, h = CLAIMS["gigpo_horizon_growth"], CLAIMS["gigpo_horizon"]
    assert "grows with the horizon" in h.claim and "gigpo_horizon_growth" in h.untested
    assert g.base == h.base and all(g.arms[a] == h.arms[a] for a in g.arms)
    for folder, first in ((SHIPPED_DIR, 0), (SHIPPED_DIR / "heldout", 10)):
        reg = json.loads((folder / "gigpo_horizon_growth.pending.json").read_text())
        assert reg["verdict"] == "pending" and "result" not in reg and reg["seeds"] == list(range(first, first + 10))
        assert reg["tests_planned"][0]["minus"] == ["gigpo_s5", "grpo_s5"]
        assert not (folder / "gigpo_horizon_growth.json").exists()


def test_the_page_holds_the_generated_table(tmp_path):
    text = PAGE.read_text()
    copy = tmp_path / "claims.md"
    copy.write_text(text)
    assert write_table(page=copy) and copy.read_text().split(START)[1].split(END)[0] == \
        text.split(START)[1].split(END)[0].replace("](../data/", "](data/"), "run python -m toyrl.lab.claims.rejudge"
    assert "registered, not yet run" in text and "**cannot fail**: a manipulation check" in text


SECTIONS = {"## Findings: tests with the same outcome on both blocks": "both",
            "## Verdicts that flip between the blocks": "flips",
            "## Not reproduced on either block": "neither"}


def test_the_page_prose_follows_the_flip_rule():
    """Each bullet of docs/claims.md names its claims in backticks at its start; a claim under "Findings" has a test
    with the same outcome on both blocks, one under "flip" a verdict that flips, one under "Not reproduced" the
    verdict 'not reproduced' on both blocks. Every claim with a result is under at least one heading."""
    first, held = _shipped()
    text = PAGE.read_text()
    seen = set()
    for head, kind in SECTIONS.items():
        body = text.split(head, 1)[1].split("\n## ", 1)[0]
        for bullet in re.findall(r"^- (`.*?):", body, re.M):
            for name in re.findall(r"`(\w+)`", bullet):
                b = across_blocks(first[name], held.get(name))
                ok = {"both": bool(b["both"]), "flips": b["status"] == "flips",
                      "neither": b["status"] == "holds" and b["verdicts"][0] == "not reproduced"}[kind]
                assert ok, (head, name, b)
                seen.add(name)
    assert seen == {n for n, r in first.items() if "result" in r}
