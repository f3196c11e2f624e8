"""The claims ledger: one claim end to end in quick mode, the JSON schema, the verdict rule, the table's page
markers, and the CLI's exit code for an unknown claim."""
import json

import numpy as np
import pytest
import torch

from toyrl.lab.claims import CLAIMS, REPO, SHIPPED_DIR, Claim, evaluate, redraw, run_claims
from toyrl.lab.claims import Test as ClaimTest
from toyrl.lab.claims.report import END, START, claims_table, load_series, update_page
from toyrl.lab.claims.spec import collapse_times, smooth, train_seed
from toyrl.lab.claims.stats import VERDICTS, classify, holm, p_value, paired_effect, t_interval, verdict
from toyrl.train import TrainConfig

SCHEMA = ("claim", "source", "metric", "mechanism", "faithfulness", "settings_tried", "setting", "seeds",
          "train_seeds", "result", "verdict", "verdict_rule", "command", "notes")


def test_t_interval_by_hand():
    # [1..5]: mean 3, sd sqrt(2.5), se 0.70711, t_{0.975,4} = 2.776445 -> half width 1.963243
    m, lo, hi = t_interval([1.0, 2.0, 3.0, 4.0, 5.0])
    assert m == 3.0 and lo == pytest.approx(3 - 1.963243, abs=1e-6) and hi == pytest.approx(3 + 1.963243, abs=1e-6)
    # paired: a - b = [0.2, 0.1, 0.3, 0.2]: mean 0.2, se 0.0408248, t_{0.975,3} = 3.182446 -> half 0.129923
    eff = paired_effect([1.2, 1.1, 1.3, 1.2], [1.0, 1.0, 1.0, 1.0])
    assert eff["mean"] == pytest.approx(0.2) and eff["ci95"][0] == pytest.approx(0.2 - 0.1299, abs=1e-4)
    assert eff["p"] == pytest.approx(0.016277, abs=1e-5)                      # t = 4.899, 3 dof
    assert t_interval([2.0]) == (2.0, 2.0, 2.0) and np.isnan(t_interval([np.nan])[0])
    assert p_value([1.0, 2.0, 3.0, 4.0, 5.0]) == pytest.approx(0.013236, abs=1e-6)
    assert np.isnan(p_value([1.0, 2.0]))                                      # < 3 seeds: no test
    assert p_value([1.0, 1.0, 1.0]) == 0.0 and p_value([1.0, 1.0, 1.0], 1.0) == 1.0   # zero spread


def test_holm_by_hand():
    assert holm([0.01, 0.04, 0.03]) == [True, False, False]                   # 0.03 > 0.05 / 2 stops
    assert holm([0.01, 0.02]) == [True, True]                                 # 0.01 <= .025, 0.02 <= .05
    assert holm([0.04]) == [True] and holm([0.06]) == [False]
    assert holm([0.3, 0.001, 0.02, 0.012]) == [False, True, True, True]       # .001<=.0125 .012<=.0167 .02<=.025
    assert holm([float("nan"), 0.001]) == [False, True]


def test_each_verdict():
    e = {"mean": 0.5, "n": 10}
    assert classify(e, True, sign=1, threshold=0.0) == "passed"
    assert classify(e, True, sign=-1, threshold=0.0) == "contradicted"       # wholly on the opposite side
    assert classify(e, False, sign=1, threshold=0.0) == "inconclusive"
    assert classify({"mean": 0.5, "n": 2}, True, sign=1, threshold=0.0) == "inconclusive"
    assert verdict(["passed", "passed"]) == "reproduced"
    assert verdict(["passed", "contradicted"]) == "partially reproduced"
    assert verdict(["inconclusive", "contradicted"]) == "contradicted"
    assert verdict(["inconclusive"]) == "not reproduced" and verdict([]) == "not reproduced"
    assert verdict(["passed"], check=True) == "check" and verdict(["inconclusive"], check=True) == "not reproduced"
    assert set(VERDICTS) == {"reproduced", "partially reproduced", "not reproduced", "contradicted", "check"}


def test_evaluate_applies_holm_and_pairs_seeds():
    """Two tests with p = 0.0305 and 0.0390: each alone clears 0.05, but Holm's first step needs
    p_(1) <= 0.05 / 2, so neither passes and the claim is not reproduced."""
    c = Claim("x", "c", "s", "m", base={}, arms={"a": {}, "b": {}}, metrics=lambda s: s,
              tests=[ClaimTest("t1", "u", "a", "b"), ClaimTest("t2", "v", "a", "b", sign=-1)])
    u = {"a": [1.3, 1.1, 1.4, 1.2], "b": [1.0] * 4}                            # a - b = [.3, .1, .4, .2]
    v = {"a": [0.0] * 4, "b": [0.3, 0.1, 0.45, 0.2]}                           # a - b = -[.3, .1, .45, .2]
    runs = {arm: {s: {"metrics": {"u": u[arm][s], "v": v[arm][s]}} for s in range(4)} for arm in "ab"}
    result, v_ = evaluate(c, runs, range(4))
    assert [t["effect"]["p"] for t in result["tests"]] == [pytest.approx(0.030466, abs=1e-5),
                                                           pytest.approx(0.039020, abs=1e-5)]
    assert [t["outcome"] for t in result["tests"]] == ["inconclusive", "inconclusive"] and v_ == "not reproduced"
    c.tests = c.tests[:1]                                                      # one test: no correction
    result, v_ = evaluate(c, runs, range(4))
    assert result["tests"][0]["outcome"] == "passed" and v_ == "reproduced"
    assert result["tests"][0]["effect"]["ci95"][0] > 0                         # == the 95% interval excludes 0
    assert train_seed("echo_trap", 3) != train_seed("starpo_s", 3)            # no run shared between claims
    assert train_seed("echo_trap", 3) - train_seed("echo_trap", 0) == 3


def test_collapse_detector():
    std = [.5, .5, .1, .1, .1, .1]
    mean = [.5, .6, .6, .5, .1, .1]
    assert collapse_times(mean, std, w=1) == (2.0, 4.0)
    ts, tc = collapse_times([0.1, 0.5, 0.9, 1.0, 1.0], [0.3, 0.4, 0.2, 0.0, 0.0], w=1)    # convergence
    assert np.isnan(ts) and np.isnan(tc)
    assert smooth([1, 3, 5], 2).tolist() == [1.0, 2.0, 4.0]


def test_std_first_is_a_share_of_collapsed_seeds():
    """echo_collapse's std-first metric: 1 / 0 for a collapsed run, NaN otherwise, so the stats average it over
    collapsed seeds only (NaN is skipped and does not count towards n)."""
    from toyrl.lab.claims.stability import COLLAPSE_BASE, _echo_metrics
    rest = {"template_mi": [0.5] * 20, "success_rate": [0.5] * 20, "zero_var_frac": [0.0] * 20,
            "grad_norm": [1.0] * 20}
    m = lambda mean, std: _echo_metrics({**rest, "reward_mean": mean, "reward_std": std})     # noqa: E731
    first = m([0.8] * 10 + [0.0] * 10, [0.4] * 5 + [0.0] * 15)               # std falls at 7, mean at 12
    assert first["collapsed"] == 1.0 and first["std_first"] == 1.0 and first["lead"] > 0
    late = m([0.8] * 10 + [0.0] * 10, [0.4] * 20)                            # the mean fell, the std never did
    assert late["collapsed"] == 1.0 and late["std_first"] == 0.0
    steady = m([0.8] * 20, [0.4] * 5 + [0.0] * 15)                           # converged: no collapse
    assert steady["collapsed"] == 0.0 and np.isnan(steady["std_first"])
    eff = paired_effect([first["std_first"], late["std_first"], steady["std_first"]], None, threshold=0.5)
    assert eff["n"] == 2 and eff["mean"] == 0.5
    c = CLAIMS["echo_collapse"]
    assert c.base is COLLAPSE_BASE and CLAIMS["starpo_s"].base is COLLAPSE_BASE and CLAIMS["critic_delay"].base is c.base
    assert {t.metric for t in c.tests} == {"collapsed", "std_first", "template_mi_change"}
    assert min(train_seed("echo_collapse", s) for s in range(20)) > 1000        # never a notebook seed (0-7)


def test_registry_is_consistent():
    assert len(CLAIMS) >= 14
    for c in CLAIMS.values():
        assert c.mechanism and c.faithfulness and c.settings_tried >= 1, c.name
        for t in c.tests:
            assert t.arm in c.arms and (t.baseline is None or t.baseline in c.arms), (c.name, t.name)
        if c.measure is None:
            for arm in c.arms:
                for quick in (False, True):
                    TrainConfig(**c.config(arm, quick)).validate()


def test_unknown_claim_exits_2(capsys):
    assert run_claims(["no_such_claim"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no_such_claim" in err[0] and "echo_trap" in err[0]
    assert run_claims(["echo_trap"], seeds=0) == 2
    assert "--seeds" in capsys.readouterr().err


def test_figure_title_names_the_setting():
    from toyrl.lab.claims.report import setting_label
    assert setting_label({"env": "gridworld", "env_kwargs": {"size": 4}, "lr": 0.01}) == "gridworld size=4, lr=0.01"
    assert "staleness=2" in setting_label(CLAIMS["echo_trap"].base)


def test_page_markers(tmp_path, capsys):
    page = tmp_path / "claims.md"
    page.write_text(f"# title\nbefore\n{START}\nold table\n{END}\nafter\n")
    assert update_page(page, "| new |")
    text = page.read_text()
    assert text == f"# title\nbefore\n{START}\n| new |\n{END}\nafter\n"
    plain = tmp_path / "PLAIN.md"
    plain.write_text("no markers here\n")
    assert not update_page(plain, "| new |")
    assert plain.read_text() == "no markers here\n"
    assert "warning" in capsys.readouterr().err
    rec = {"name": "x", "claim": "a |ratio| claim", "source": "P, arXiv 1: detail", "verdict": "not reproduced",
           "seeds": [0, 1, 2], "result": {"tests": [{"name": "t", "claimed": "> 0", "outcome": "contradicted",
                                                      "effect": {"mean": -1.0, "ci95": [-1.5, -0.5]}}]}}
    row = claims_table([rec]).splitlines()[-1]
    assert "contradicted" in row and "3 (0-2)" in row
    assert row.count(" | ") == 5 and "\\|ratio\\|" in row                      # a | in text cannot split a cell
    same = {**rec, "setting": {"lr": 1}}
    other = {**same, "verdict": "reproduced", "seeds": [10, 11, 12]}
    rows = claims_table([same], {"x": other}).splitlines()
    assert rows[0].endswith(" held-out block | across blocks |")
    assert rows[-1].endswith(" reproduced (10-12) | **flips**: not reproduced / reproduced (test 1 on both) |")
    changed = {**other, "setting": {"lr": 2}}                                # an older setting: not shown
    assert claims_table([same], {"x": changed}).splitlines()[-1].endswith(" - | - |")
    assert claims_table([same], {}).splitlines()[-1] == claims_table([same]).splitlines()[-1]


def test_claims_table_puts_the_smollm2_twin_beside_the_toy_claim():
    toy = {"name": "x", "claim": "c", "source": "P", "verdict": "reproduced", "seeds": [0, 1], "setting": {"a": 1},
           "result": {"tests": []}}
    twin = {**toy, "name": "smollm2_x", "verdict": "not reproduced", "setting": {"a": 2}}
    held = {**twin, "verdict": "contradicted", "seeds": [10, 11]}
    rows = claims_table([toy, twin], {"smollm2_x": held}).splitlines()
    assert rows[0].endswith(" on SmolLM2 |") and rows[1].count("|") == rows[2].count("|")
    assert claims_table([toy], link="../").count("](../data/claims/x.json)") == 1       # from docs/
    assert rows[2].endswith("[smollm2_x](data/claims/smollm2_x.json): **not reproduced** (0-1); contradicted (10-11) |")
    assert rows[3].endswith(" - |")                                       # the twin's own row has no twin
    assert "on SmolLM2" not in claims_table([toy])                       # no twin: no column


def test_one_claim_quick_end_to_end(tmp_path):
    """context_mismatch is a measurement (5 warm-up steps per seed under --quick): fast, 3 seeds from 7."""
    page = tmp_path / "claims.md"
    page.write_text(f"intro\n{START}\n{END}\noutro\n")
    out = tmp_path / "claims"
    assert run_claims(["context_mismatch"], seeds=3, first_seed=7, quick=True, workers=1, out_dir=out, page=page,
                      progress=False) == 0
    rec = json.loads((out / "context_mismatch.json").read_text())
    for key in SCHEMA:
        assert key in rec, key
    assert rec["seeds"] == [7, 8, 9] and rec["train_seeds"] == [train_seed("context_mismatch", s) for s in (7, 8, 9)]
    assert rec["verdict"] in VERDICTS and rec["kind"] == "check"
    assert rec["command"] == "toyrl reproduce context_mismatch --seeds 3 --first-seed 7 --quick"
    assert "arXiv" in rec["source"] and rec["setting"]["env"] == "gridworld" and rec["mechanism"]
    for arm in rec["result"]["arms"].values():
        for m in arm.values():
            assert {"mean", "ci95", "per_seed"} <= set(m) and len(m["per_seed"]) == 3
    assert all({"effect", "passed", "claimed", "outcome", "holm_rejected", "marks", "evidence"} <= set(t)
               for t in rec["result"]["tests"])
    assert verdict([t["outcome"] for t in rec["result"]["tests"]], check=True,
                   evidence=[t["evidence"] for t in rec["result"]["tests"]]) == rec["verdict"]   # never by hand
    arms = rec["result"]["arms"]["measure"]
    assert arms["matched_abs_logratio"]["mean"] < 1e-4 < arms["flat_abs_logratio"]["mean"]
    series = load_series(out / "context_mismatch.series.json.gz")             # per-run series stored
    assert sorted(series["measure"]) == [7, 8, 9] and len(series["measure"][7]["flat_by_turn"]) >= 2
    png = out / "context_mismatch.png"
    png.unlink()
    assert redraw("context_mismatch", out) == png and png.stat().st_size > 1000   # redrawn without re-running
    text = page.read_text()
    assert text.startswith(f"intro\n{START}\n| # |") and text.endswith(f"{END}\noutro\n")
    assert "context_mismatch" in text and claims_table([rec]) in text


def test_registered_before_run(tmp_path):
    """The setting, mechanism and faithfulness note are on disk before any result (verdict 'pending')."""
    from toyrl.lab.claims import register
    rec = register(CLAIMS["echo_trap"], [0, 1], quick=True)
    assert rec["verdict"] == "pending" and "result" not in rec and rec["settings_tried"] >= 1
    assert "registered, not yet run" in claims_table([rec]) and "planned: template MI falls" in claims_table([rec])
    # the code it is computed with: versions, and the commit in this git checkout
    import toyrl
    assert rec["code"]["toyrl"] == toyrl.__version__ and rec["code"]["torch"] == torch.__version__
    if (REPO / ".git").exists():
        assert rec["code"]["git"] and len(rec["code"]["git"].split("+")[0]) >= 7


# ---- toyrl reproduce leaves the shipped ledger alone unless told --------------------------------------------------
def replay(name, stop_after=None):
    """An instant ``_execute`` for claim ``name``: job (arm, seed) returns the shipped record's metrics and series
    of that seed, so everything after the runs (verdict, files) is the real code; ``stop_after`` jobs: Ctrl-C."""
    rec = json.loads((SHIPPED_DIR / f"{name}.json").read_text())
    series = load_series(SHIPPED_DIR / f"{name}.series.json.gz")
    done = []

    def execute(job):
        if len(done) == stop_after:
            raise KeyboardInterrupt
        done.append(job)
        _, arm, seed, _ = job
        i = rec["seeds"].index(seed)
        metrics = {k: float("nan") if v["per_seed"][i] is None else v["per_seed"][i]
                   for k, v in rec["result"]["arms"][arm].items()}
        return {"metrics": metrics, "series": series[arm][seed]}
    return execute, done


def shipped_bytes() -> dict:
    """Every file of the shipped ledger and the page of its table, as bytes."""
    from toyrl.lab.claims import PAGE
    files = [p for p in sorted(SHIPPED_DIR.rglob("*")) if p.is_file()] + [PAGE, REPO / "README.md"]
    return {p: p.read_bytes() for p in files}


def test_reproduce_writes_under_the_cwd_or_out_dir_never_the_shipped_ledger(tmp_path, monkeypatch, capsys):
    """The issue's command, ``toyrl reproduce env_mask --seeds 3``, as a student runs it: results in
    ./toyrl-results/claims/, data/claims/ and docs/claims.md byte-identical; --out-dir names another folder."""
    import toyrl.lab.claims as ledger
    from toyrl.cli import main
    before = shipped_bytes()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(ledger, "_execute", replay("env_mask")[0])
    argv = ["reproduce", "env_mask", "--seeds", "3", "--workers", "1", "--no-progress"]
    assert main(argv) == 0
    out = tmp_path / "toyrl-results" / "claims"
    rec = json.loads((out / "env_mask.json").read_text())
    assert rec["seeds"] == [0, 1, 2] and rec["verdict"] in VERDICTS and "result" in rec
    assert (out / "env_mask.png").stat().st_size > 1000 and load_series(out / "env_mask.series.json.gz")
    held = {".toyrl-lock"}                                  # the folder's job lock (toyrl.lab.results.hold)
    assert sorted(p.name for p in out.iterdir() if p.name not in held) == [
        ".runcache", "env_mask.json", "env_mask.png", "env_mask.series.json.gz"]
    assert main([*argv, "--out-dir", "mine"]) == 0
    assert json.loads((tmp_path / "mine" / "env_mask.json").read_text())["result"] == rec["result"]
    assert main(["reproduce", "env_mask", "--redraw", "--out", "figs"]) == 0      # from the shipped record
    assert (tmp_path / "figs" / "env_mask.png").stat().st_size > 1000
    assert shipped_bytes() == before
    capsys.readouterr()
    assert main([*argv, "--out-dir", str(SHIPPED_DIR / "heldout")]) == 2            # the shipped tree needs the flag
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "add --update-shipped" in err and shipped_bytes() == before


def test_interrupted_reproduce_keeps_the_previous_record(tmp_path, monkeypatch):
    """Ctrl-C after some of a claim's runs: its last record, figure and series stay byte for byte; only the
    registration of the unfinished run is on disk (``<claim>.pending.json``)."""
    import toyrl.lab.claims as ledger
    from toyrl.cli import main
    out = tmp_path / "ledger"
    argv = ["reproduce", "env_mask", "--seeds", "3", "--workers", "1", "--no-progress", "--out-dir", str(out)]
    monkeypatch.setattr(ledger, "_execute", replay("env_mask")[0])
    assert main(argv) == 0
    previous = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}    # .runcache/: the runs kept
    execute, done = replay("env_mask", stop_after=5)
    monkeypatch.setattr(ledger, "_execute", execute)
    assert main([*argv[:3], "5", *argv[4:], "--fresh"]) == 130 and len(done) == 5  # 5 of 2 arms x 5 seeds ran
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and p.name != "env_mask.pending.json"} \
        == previous
    pending = json.loads((out / "env_mask.pending.json").read_text())
    assert pending["verdict"] == "pending" and pending["seeds"] == [0, 1, 2, 3, 4] and "result" not in pending
    monkeypatch.setattr(ledger, "_execute", replay("env_mask")[0])
    assert main([*argv[:3], "5", *argv[4:]]) == 0                                  # a finished run replaces it all
    assert json.loads((out / "env_mask.json").read_text())["seeds"] == [0, 1, 2, 3, 4]
    assert sorted(p.name for p in out.iterdir() if p.is_file()) == sorted(previous)


def test_update_shipped_targets_the_ledger_and_its_table(tmp_path, monkeypatch):
    """--update-shipped: data/claims/ (or a folder inside it) and then the table; without it neither."""
    import toyrl.lab.claims as ledger
    from toyrl.cli import main
    calls = []
    monkeypatch.setattr(ledger, "run_claims", lambda names, **kw: calls.append(("run", kw["out_dir"])) or 0)
    monkeypatch.setattr(ledger, "write_table", lambda *a: calls.append(("table", a)))
    monkeypatch.chdir(tmp_path)
    assert main(["reproduce", "env_mask", "--update-shipped"]) == 0
    assert main(["reproduce", "env_mask", "--update-shipped", "--out-dir", str(SHIPPED_DIR / "heldout"),
                 "--no-table"]) == 0
    assert main(["reproduce", "env_mask"]) == 0
    assert calls == [("run", SHIPPED_DIR), ("table", ()), ("run", SHIPPED_DIR / "heldout"),
                     ("run", tmp_path / "toyrl-results" / "claims")]
