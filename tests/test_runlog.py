"""The run log on disk: the header, non-finite floats, torn and bad lines, missing columns, a killed run."""

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest
import torch

import toyrl
from toyrl.train.runlog import RunLog, decode, encode

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "data" / "runs" / "echo_trap" / "grpo_s0.jsonl"


def write_log(path, rows, config=None):
    log = RunLog(path, config or {"env": "gridworld", "estimator": "grpo", "seed": 0})
    for r in rows:
        log.append(r)
    log.close()
    return log


def test_first_line_is_the_header(tmp_path):
    path = tmp_path / "run.jsonl"
    write_log(path, [{"step": 0, "reward_mean": 0.5}])
    head = json.loads(path.read_text().splitlines()[0])
    assert set(head) == {"config", "toyrl", "torch", "started", "stats_over"}
    assert head["stats_over"].startswith("all minibatches x epochs, token-weighted")
    assert head["config"] == {"env": "gridworld", "estimator": "grpo", "seed": 0}
    assert head["toyrl"] == toyrl.__version__ and head["torch"] == torch.__version__
    started = datetime.fromisoformat(head["started"])
    assert started.utcoffset().total_seconds() == 0 and abs(datetime.now(timezone.utc) - started).total_seconds() < 60


def test_load_restores_config_and_meta(tmp_path):
    path = tmp_path / "run.jsonl"
    written = write_log(path, [{"step": 0, "reward_mean": 0.5}, {"step": 1, "reward_mean": 0.75}])
    log = RunLog.load(path)
    assert log.config == written.config and log.meta == written.meta and log.meta["toyrl"] == toyrl.__version__
    assert log.rows == [{"step": 0, "reward_mean": 0.5}, {"step": 1, "reward_mean": 0.75}]


def test_shipped_header_first_log_has_no_nan_step_row():
    log = RunLog.load(SHIPPED)
    assert log.config["estimator"] == "grpo" and log.config["seed"] == 0
    steps = log.column("step")
    assert np.isfinite(steps).all() and list(steps[:3]) == [0, 1, 2] and len(log.rows) == 120


def test_headerless_old_log_loads(tmp_path):
    path = tmp_path / "old.jsonl"
    path.write_text('{"step": 0, "reward_mean": 0.25, "grad_norm": null}\n{"step": 1, "reward_mean": 0.5}\n')
    log = RunLog.load(path)
    assert log.config == {} and log.meta == {} and len(log.rows) == 2
    assert np.isnan(log.column("grad_norm")).all()               # null (old logs' non-finite) reads as NaN


def test_nan_and_inf_stay_distinguishable(tmp_path):
    path = tmp_path / "run.jsonl"
    write_log(path, [{"step": 0, "a": float("nan"), "b": torch.tensor(float("inf")), "c": np.float32(-np.inf),
                      "d": [1.0, float("nan")]}])
    on_disk = json.loads(path.read_text().splitlines()[1])
    assert on_disk == {"step": 0, "a": "nan", "b": "inf", "c": "-inf", "d": [1.0, "nan"]}
    log = RunLog.load(path)
    assert math.isnan(log.rows[0]["a"]) and log.rows[0]["b"] == math.inf and log.rows[0]["c"] == -math.inf
    assert math.isnan(log.rows[0]["d"][1])
    df = log.to_pandas()
    assert df["b"].dtype == float and df["b"][0] == np.inf and np.isnan(df["a"][0]) and df["c"][0] == -np.inf
    assert log.column("b")[0] == np.inf


def test_encode_decode_worked_example():
    assert encode({"a": [1.0, float("inf")], "b": float("nan")}) == {"a": [1.0, "inf"], "b": "nan"}
    back = decode({"a": [1.0, "inf"], "b": "nan", "c": "text"})
    assert back["a"] == [1.0, math.inf] and math.isnan(back["b"]) and back["c"] == "text"


def test_rows_with_nan_compare_equal_after_a_round_trip(tmp_path):
    path = tmp_path / "run.jsonl"
    written = write_log(path, [{"step": 0, "x": float("nan")}])
    assert RunLog.load(path).rows == written.rows


def test_torn_final_line_is_skipped_with_a_warning(tmp_path):
    path = tmp_path / "run.jsonl"
    write_log(path, [{"step": 0, "reward_mean": 0.5}, {"step": 1, "reward_mean": 0.5}])
    with open(path, "a") as f:
        f.write('{"step": 2, "reward_me')
    with pytest.warns(UserWarning, match=re.escape(f"{path}:4: skipped a torn final line")):
        log = RunLog.load(path)
    assert [r["step"] for r in log.rows] == [0, 1]


@pytest.mark.parametrize("text,line", [
    ('{"step": 0}\n{"step": 1, oops}\n{"step": 2}\n', 2),            # a bad line in the middle
    ('{"step": 0}\n{"step": 1, oops}\n', 2),                         # a bad final line that was written whole
    ('{"step": 0}\n[1, 2]\n', 2)])                                   # valid JSON, not a row
def test_a_bad_line_names_file_and_line(tmp_path, text, line):
    path = tmp_path / "bad.jsonl"
    path.write_text(text)
    with pytest.raises(ValueError, match=re.escape(f"{path}:{line}: not a run-log row")):
        RunLog.load(path)


def test_missing_column_raises_listing_the_columns(tmp_path):
    path = tmp_path / "run.jsonl"
    write_log(path, [{"step": 0, "reward_mean": 0.5}, {"step": 1, "reward_mean": 0.5, "eval_success_rate": 1.0}])
    log = RunLog.load(path)
    with pytest.raises(KeyError, match="no column 'reward_mena'.*columns: step, reward_mean, eval_success_rate"):
        log.column("reward_mena")
    np.testing.assert_array_equal(log.column("eval_success_rate"), [np.nan, 1.0])    # in some rows: NaN elsewhere
    assert np.isnan(log.column("reward_mena", strict=False)).all()


def test_a_killed_training_run_loads(tmp_path):
    """Write, SIGKILL mid-run, load: every row before the kill is there, with the config."""
    path = tmp_path / "killed.jsonl"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "toyrl", "train", "--steps", "200", "--prompts", "2",
                             "--group-size", "2", "--out", str(path), "--no-progress"], env=env, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not (path.exists() and path.read_text().count("\n") >= 4):   # the header and 3 rows
            assert proc.poll() is None and time.monotonic() < deadline, "the run ended or stalled before 3 rows"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    log = RunLog.load(path)
    assert log.config["steps"] == 200 and log.config["group_size"] == 2 and log.meta["toyrl"] == toyrl.__version__
    steps = [r["step"] for r in log.rows]
    assert 3 <= len(steps) < 200 and steps == list(range(len(steps)))


# ---- columns a config fixes ---------------------------------------------------------------------------------
def test_one_on_policy_epoch_is_said_once_not_logged_as_measured(tmp_path):
    """At the defaults the ratio is 1, clip 0 and KL 0 by construction: the header says so, the rows keep the
    measured |ratio - 1| instead, and column() gives the constant; a second epoch measures them again."""
    from toyrl.train import TrainConfig, train
    from toyrl.train.runlog import ON_POLICY
    kw = dict(env="bandit_chain", env_kwargs={"layout_seed": 0}, steps=2, prompts_per_step=2, group_size=4,
              progress=False)
    train(TrainConfig(**kw), str(tmp_path / "on.jsonl"))
    log = RunLog.load(tmp_path / "on.jsonl")
    assert "by_construction" in log.meta and "ratio_max" in log.meta["by_construction"]["columns"]
    assert not any(k in r for r in log.rows for k in ON_POLICY)
    assert all(r["onpolicy_ratio_err"] < 1e-5 for r in log.rows)
    assert log.column("ratio_max").tolist() == [1.0, 1.0] and log.column("clip_frac").tolist() == [0.0, 0.0]
    assert "undefined" in log.meta and np.isnan(log.column("template_mi")).all()     # think_max = 0: no reasoning
    assert all("template_mi" not in r and 0 <= r["anchor_share"] <= 1 and r["group_size_min"] == 4 for r in log.rows)
    two = train(TrainConfig(**kw, ppo_epochs=2, think_max=2))
    assert "by_construction" not in two.meta and "undefined" not in two.meta
    assert all("ratio_max" in r and "template_mi" in r and "onpolicy_ratio_err" not in r for r in two.rows)
    assert any(r["ratio_max"] > 1 + 1e-4 or r["ratio_min"] < 1 - 1e-4 for r in two.rows)   # the second epoch moved


def test_the_train_command_says_it_once(tmp_path, capsys):
    from toyrl.cli.commands import main
    assert main(["train", "--env", "bandit_chain", "--steps", "1", "--prompts", "2", "--group-size", "4"]) == 0
    out = capsys.readouterr().out
    assert out.count("by construction") == 1 and "ratio_max=" not in out and "clip_frac=" not in out
