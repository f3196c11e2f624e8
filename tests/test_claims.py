"""The claims ledger: one claim end to end in quick mode, the JSON schema, the verdict rule, the README
markers, and the CLI's exit code for an unknown claim."""
import json

import numpy as np
import pytest

from toyrl.claims import CLAIMS, run_claims
from toyrl.claims.report import END, START, claims_table, update_readme
from toyrl.claims.spec import collapse_times, smooth
from toyrl.claims.stats import bootstrap_ci, paired_effect, passes, verdict
from toyrl.train import TrainConfig

SCHEMA = ("claim", "source", "metric", "setting", "seeds", "result", "verdict", "command", "notes")
VERDICTS = ("reproduced", "partially reproduced", "not reproduced")


def test_bootstrap_and_verdict_rule():
    m, lo, hi = bootstrap_ci([1.0, 2.0, 3.0, 4.0, 5.0])
    assert m == 3.0 and 1.0 < lo < 3.0 < hi < 5.0
    assert bootstrap_ci([1.0, 2.0, 3.0], seed=7) == bootstrap_ci([1.0, 2.0, 3.0], seed=7)   # seeded
    eff = paired_effect([1.0, 1.1, 0.9, 1.2, 1.0], [0.0, 0.1, 0.0, 0.1, 0.0])            # paired by seed
    assert eff["mean"] == pytest.approx(1.0) and passes(eff, sign=1, threshold=0.5)
    assert not passes(eff, sign=-1, threshold=0.0)
    assert not passes(paired_effect([1.0, 2.0], None), sign=1, threshold=0.0)           # < 3 seeds
    assert verdict([True, True]) == "reproduced"
    assert verdict([True, False]) == "partially reproduced"
    assert verdict([False]) == "not reproduced" and verdict([]) == "not reproduced"


def test_collapse_detector():
    std = [.5, .5, .1, .1, .1, .1]
    mean = [.5, .6, .6, .5, .1, .1]
    assert collapse_times(mean, std, w=1) == (2.0, 4.0)
    ts, tc = collapse_times([0.1, 0.5, 0.9, 1.0, 1.0], [0.3, 0.4, 0.2, 0.0, 0.0], w=1)    # convergence
    assert np.isnan(ts) and np.isnan(tc)
    assert smooth([1, 3, 5], 2).tolist() == [1.0, 2.0, 4.0]


def test_registry_is_consistent():
    assert len(CLAIMS) >= 14
    for c in CLAIMS.values():
        for t in c.tests:
            assert t.arm in c.arms and (t.baseline is None or t.baseline in c.arms), (c.name, t.name)
        if c.measure is None:
            for arm in c.arms:
                for quick in (False, True):
                    TrainConfig(**c.config(arm, quick)).validate()


def test_unknown_claim_exits_2(capsys):
    assert run_claims(["no_such_claim"], update_readme=False) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no_such_claim" in err[0] and "echo_trap" in err[0]


def test_readme_markers(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text(f"# title\nbefore\n{START}\nold table\n{END}\nafter\n")
    assert update_readme(readme, "| new |")
    text = readme.read_text()
    assert text == f"# title\nbefore\n{START}\n| new |\n{END}\nafter\n"
    plain = tmp_path / "PLAIN.md"
    plain.write_text("no markers here\n")
    assert not update_readme(plain, "| new |")
    assert plain.read_text() == "no markers here\n"
    assert "warning" in capsys.readouterr().err
    rec = {"name": "x", "claim": "a |ratio| claim", "source": "P, arXiv 1: detail", "verdict": "not reproduced",
           "result": {"tests": [{"name": "t", "effect": {"mean": 1.0, "ci95": [0.5, 1.5]}}]}}
    row = claims_table([rec]).splitlines()[-1]
    assert row.count(" | ") == 4 and "\\|ratio\\|" in row                      # a | in text cannot split a cell


def test_one_claim_quick_end_to_end(tmp_path):
    """context_mismatch is a measurement (5 warm-up steps per seed under --quick): fast, 5 seeds."""
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{START}\n{END}\noutro\n")
    out = tmp_path / "claims"
    assert run_claims(["context_mismatch"], seeds=5, quick=True, workers=1, out_dir=out, readme=readme) == 0
    rec = json.loads((out / "context_mismatch.json").read_text())
    for key in SCHEMA:
        assert key in rec, key
    assert rec["seeds"] == [0, 1, 2, 3, 4] and len(rec["seeds"]) >= 5
    assert rec["verdict"] in VERDICTS
    assert rec["command"] == "toyrl reproduce context_mismatch --seeds 5 --quick"
    assert "arXiv" in rec["source"] and rec["setting"]["env"] == "gridworld"
    for arm in rec["result"]["arms"].values():
        for m in arm.values():
            assert {"mean", "ci95", "per_seed"} <= set(m) and len(m["per_seed"]) == 5
    assert all({"effect", "passed", "claimed"} <= set(t) for t in rec["result"]["tests"])
    assert verdict([t["passed"] for t in rec["result"]["tests"]]) == rec["verdict"]            # never by hand
    # the matched recompute is exact; the flat one is not (the mechanism the claim is about)
    arms = rec["result"]["arms"]["measure"]
    assert arms["matched_abs_logratio"]["mean"] < 1e-4 < arms["flat_abs_logratio"]["mean"]
    assert (out / "context_mismatch.png").stat().st_size > 1000
    text = readme.read_text()
    assert text.startswith(f"intro\n{START}\n| # |") and text.endswith(f"{END}\noutro\n")
    assert "context_mismatch" in text and claims_table([rec]) in text
