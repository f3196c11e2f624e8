"""toyrl grade: shipped and ledger runs pass their lesson, doctored runs fail with the right line, bad input exits 2.

Ledger runs are rebuilt as run logs from the shipped series (data/claims/NAME.series.json.gz and heldout/): the
header is the arm's TrainConfig at the run's trainer seed, one row per step. That every one of them passes is
what the bounds in toyrl.lab.grade were derived to do; ``test_bounds_are_the_ledgers_extremes`` checks that each
bound is also tight (no looser than the ledger's extreme by more than a rounding step).
"""
import gzip
import json
import shlex
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest

from toyrl.cli import main
from toyrl.cli.commands import build_parser
from toyrl.cli.grade import train_command
from toyrl.cli.trainflags import configs_from
from toyrl.lab.claims.spec import train_seed
from toyrl.lab.grade import (LESSONS, at_least, complete, grade, judge, lesson, mismatches, setting_of)
from toyrl.train import TrainConfig
from toyrl.train.runlog import RunLog

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "data" / "runs" / "echo_trap"
BLOCKS = (ROOT / "data" / "claims", ROOT / "data" / "claims" / "heldout")


def ledger_logs(claim: str, arm: str) -> list:
    """The ledger's runs of one arm (both seed blocks) as in-memory RunLogs."""
    logs = []
    for block in BLOCKS:
        series = json.loads(gzip.open(block / f"{claim}.series.json.gz").read())["arms"][arm]
        for seed, s in series.items():
            from toyrl.lab.claims import CLAIMS
            log = RunLog()
            log.config = json.loads(json.dumps(asdict(TrainConfig(**CLAIMS[claim].config(arm, quick=False),
                                                                  seed=train_seed(claim, int(seed))))))
            n = len(s["reward_mean"])
            log.rows = [{"step": i, **{k: v[i] for k, v in s.items() if isinstance(v, list) and len(v) == n}}
                        for i in range(n)]
            logs.append(log)
    return logs


LEDGER_ARMS = [(n, e) for n, les in LESSONS.items() for e in les.runs if e.claim and n != "02"]


@pytest.fixture(scope="module")
def ledger():
    return {(e.claim, e.name): ledger_logs(e.claim, e.name) for _, e in LEDGER_ARMS}


@pytest.mark.parametrize("number,expected", LEDGER_ARMS, ids=lambda x: getattr(x, "name", x))
def test_every_ledger_run_passes_its_lesson(ledger, number, expected):
    logs = ledger[(expected.claim, expected.name)]
    assert len(logs) == 20
    for log in logs:
        report = grade(log, number)
        assert report.expected.name == expected.name
        assert report.passed, [v.line() for v in report.verdicts if v.passed is False]


@pytest.mark.parametrize("number,expected", LEDGER_ARMS, ids=lambda x: getattr(x, "name", x))
def test_bounds_are_the_ledgers_extremes(ledger, number, expected):
    """Each bound sits within a rounding step of the ledger's lowest (>=) or highest (<=) value."""
    from toyrl.lab.grade import outcome
    from toyrl.lab.claims.spec import SERIES_KEYS
    values = {c.metric: [] for c in expected.criteria}
    for log in ledger[(expected.claim, expected.name)]:
        m = outcome({k: log.column(k, strict=False) for k in SERIES_KEYS}, expected.claim)
        for k in values:
            values[k].append(m[k])
    for c in expected.criteria:
        v = np.array(values[c.metric])
        extreme = v.min() if c.op == ">=" else v.max()
        slack = max(0.1 * abs(extreme), 0.01) if c.metric != "engine_kl" else 0.2 * max(abs(extreme), 1e-12)
        assert abs(extreme - c.bound) <= slack, (c.metric, extreme, c.bound)


def test_a_shipped_run_passes_lesson_02():
    report = grade(RunLog.load(SHIPPED / "grpo_s0.jsonl"), "02")
    assert report.passed and report.expected.name == "grpo"
    assert [v.passed for v in report.verdicts] == [True, True, True, True, None, None]
    assert "frozen from step 60 for 17 steps" in report.verdicts[4].text


def test_shipped_seed_without_the_precursor_fails_on_it():
    report = grade(RunLog.load(SHIPPED / "grpo_s4.jsonl"), "2")
    failed = [v.text for v in report.verdicts if v.passed is False]
    assert len(failed) == 1 and failed[0].startswith("groups go silent while the reward is high: no")


def _write(tmp_path, log, name="run.jsonl", rows=None):
    path = tmp_path / name
    lines = [json.dumps({"config": log.config})] + [json.dumps(r) for r in (log.rows if rows is None else rows)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_wrong_setting_fails_naming_the_flag(tmp_path, capsys):
    log = RunLog.load(SHIPPED / "grpo_s0.jsonl")
    log.config["lr"] = 0.01
    assert main(["grade", str(_write(tmp_path, log)), "--lesson", "02"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[1] == ("FAIL  setting: not the lesson's grpo run: --lr is 0.01 in the run; the lesson's run has 0.03")
    assert out[-1] == "failed: 1 of 4 checks"


def test_lowered_success_fails_the_success_line(ledger, tmp_path, capsys):
    log = ledger[("gigpo_horizon", "gigpo_s5")][0]
    rows = [{**r, "success_rate": r["success_rate"] - 0.1} for r in log.rows]
    assert main(["grade", str(_write(tmp_path, log, rows=rows)), "--lesson", "13"]) == 1
    out = capsys.readouterr().out
    line, = [x for x in out.splitlines() if x.startswith("FAIL")]
    assert line.startswith("FAIL  final success rate (last 20% of steps): 0.865 (needs >= 0.96;")
    assert main(["grade", str(_write(tmp_path, log, "ok.jsonl")), "--lesson", "13"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "passed: 4 of 4 checks"


def test_a_cut_off_run_fails_completeness(tmp_path):
    log = RunLog.load(_write(tmp_path, ledger_logs("env_mask", "unmasked")[0]))
    log.rows = log.rows[:30]
    verdicts = grade(log, "03").verdicts
    assert verdicts[1].passed is False and verdicts[1].text == "the run is complete: 30 of 60 steps logged"
    assert complete(60, 60).passed


def test_the_run_is_read_as_the_arm_it_matches():
    masked, unmasked = ledger_logs("env_mask", "masked")[0], ledger_logs("env_mask", "unmasked")[0]
    assert grade(masked, "03").expected.name == "masked" and grade(unmasked, "03").expected.name == "unmasked"
    masked.config["mask_env_tokens"] = False
    assert grade(masked, "03").expected.name == "unmasked"


def test_mismatches_reads_a_missing_field_as_its_default():
    setting = setting_of(LESSONS["02"].runs[0])
    config = {k: v for k, v in setting.items() if k != "engine"}       # an older log without the engine field
    assert mismatches(config, setting) == []
    assert mismatches({**config, "estimator": "gae"}, setting) == [
        '--estimator is "gae" in the run; the lesson\'s run has "grpo"']


def test_a_toy_policys_context_none_reads_as_full():
    """The Trainer logs context None as "full" for a toy policy (resolve_context); both match a None setting."""
    setting = setting_of(LESSONS["03"].runs[0])
    assert setting["context"] == "full"
    for context in (None, "full"):
        assert mismatches({**setting, "context": context}, setting) == []
    assert mismatches({**setting, "context": "last_k"}, setting) == [
        '--context is "last_k" in the run; the lesson\'s run has "full"']


@pytest.mark.slow
def test_a_run_trained_now_passes_lesson_04(tmp_path):
    """End to end: train lesson 04's run (seed 0, the ledger's ~3 s run), write its log, grade it from the file."""
    import torch
    from toyrl.train import train
    torch.set_num_threads(1)
    path = tmp_path / "run.jsonl"
    train(TrainConfig(**LESSONS["04"].runs[0].setting, seed=0, progress=False), str(path))
    report = grade(RunLog.load(path), "04")
    assert report.passed, [v.line() for v in report.verdicts]
    assert report.verdicts[0].text == "setting: the lesson's bc_format run"


def test_judge_fails_a_metric_not_measured():
    c = at_least("final_success", 0.5, "final success", "a source")
    assert judge(c, {"final_success": 0.75}).line() == "PASS  final success: 0.75 (needs >= 0.5; a source)"
    assert judge(c, {"final_success": float("nan")}).passed is False
    assert judge(at_least("x", 1, "x", "s", required=False), {"x": 0.0}).passed is None


def test_each_lessons_command_makes_its_setting(capsys):
    for les in LESSONS.values():
        for e in les.runs:
            argv = shlex.split(train_command(e))[1:]
            cfg, = configs_from(build_parser().parse_args(argv))
            assert mismatches(json.loads(json.dumps(asdict(cfg))), setting_of(e)) == [], e.name
    assert main(["grade", "--lesson", "13"]) == 0
    assert "toyrl train --env-kwargs" in capsys.readouterr().out


@pytest.mark.parametrize("number", ["01", "00", "7", "99", "abc"])
def test_a_lesson_without_a_run_names_the_gradable_ones(number, capsys):
    with pytest.raises(ValueError, match="gradable lessons: 02, 03, 04, 12, 13"):
        lesson(number)
    assert main(["grade", str(SHIPPED / "grpo_s0.jsonl"), "--lesson", number]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has no run to grade; gradable lessons: 02, 03, 04, 12, 13" in err


def test_bad_run_logs_exit_2_with_one_line(tmp_path, capsys):
    headerless = tmp_path / "headerless.jsonl"
    headerless.write_text('{"step": 0, "reward_mean": 0.5}\n')
    junk = tmp_path / "junk.jsonl"
    junk.write_text("not json\nnot json either\n")
    empty = tmp_path / "empty.jsonl"
    empty.write_text(json.dumps({"config": {"env": "gridworld"}}) + "\n")
    text = RunLog.load(SHIPPED / "grpo_s0.jsonl")
    text.rows[3]["reward_mean"] = "high"
    for path, words in [(tmp_path / "missing.jsonl", "no such run log"), (headerless, "no config header"),
                        (junk, "not a run-log row"), (empty, "a header and no steps"),
                        (_write(tmp_path, text, "text.jsonl"), "column 'reward_mean' holds something that is not")]:
        assert main(["grade", str(path), "--lesson", "02"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and words in err, err
