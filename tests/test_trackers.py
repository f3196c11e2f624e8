"""Run trackers (toyrl.train.trackers): a shipped run log exported to TensorBoard reads back, through TensorBoard's
own event reader, as the same steps and values (float32), its config as hyperparameters and its per-turn lists as
one series per turn index; a short Trainer run with logger="tensorboard" writes events as it goes; wandb logs
offline without a network; bad names and bad logs are one-line errors (exit 2 at the CLI)."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from toyrl.train import RunLog, TrainConfig, Trainer
from toyrl.train.trackers import (TensorBoardTracker, WandbTracker, check_logger, export, hparams, run_names,
                                  scalars, tracker_folder)

ROOT = Path(__file__).resolve().parents[1]
ECHO = ROOT / "data" / "runs" / "echo_trap" / "grpo_s0.jsonl"                      # a header, 120 rows of scalars
SMALL_LLM = ROOT / "data" / "runs" / "small_llm" / "grid4x4_bc_grpo__seed0.jsonl"   # per-turn lists, no header
TINY = dict(env="bandit_chain", steps=2, group_size=2, prompts_per_step=2, progress=False)


def events(folder: Path):
    """TensorBoard's own reader over one run folder, every scalar kept."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def series(acc, tag):
    """(steps, values) of one scalar tag."""
    ev = acc.Scalars(tag)
    return [e.step for e in ev], np.array([e.value for e in ev])


def session_hparams(acc) -> dict:
    """The hyperparameters of the run's HParams session, as plain Python values."""
    from tensorboard.plugins.hparams import plugin_data_pb2
    content = acc.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    info = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info
    return {k: getattr(v, v.WhichOneof("kind")) for k, v in info.hparams.items()}


# ---- the pure parts ---------------------------------------------------------------------------------
def test_scalars_example():
    assert scalars({"step": 3, "loss": 0.5, "clip_frac_turn": [0.1, 0.2], "sample_replies": ["left"]}) == {
        "loss": 0.5, "clip_frac/turn_0": 0.1, "clip_frac/turn_1": 0.2}


def test_scalars_other_lists_dicts_bools_and_non_finite():
    out = scalars({"engine_gap_by_prob": [0.0, 2.0], "counts": {"kept": 3}, "skipped": True, "ratio_max": float("inf"),
                   "note": "text", "eval": None})
    assert out == {"engine_gap_by_prob/0": 0.0, "engine_gap_by_prob/1": 2.0, "counts/kept": 3.0, "skipped": 1.0,
                   "ratio_max": float("inf")}


def test_hparams_example():
    got = hparams({"lr": 0.1, "env_kwargs": {"size": 4}, "filters": ["starpo_s"], "kl": None, "clip_kwargs": {}})
    assert got == {"lr": 0.1, "env_kwargs.size": 4, "filters": '["starpo_s"]', "kl": "none", "clip_kwargs": "{}"}


def test_tracker_folder_and_run_names():
    assert tracker_folder("tensorboard", None, "out/grpo.jsonl") == Path("out/tensorboard")
    assert tracker_folder("wandb", "wb", "out/grpo.jsonl") == Path("wb")
    assert tracker_folder("tensorboard") == Path("runs/tensorboard")
    assert run_names(["a/run.jsonl", "b/run.jsonl", "c/x.jsonl"]) == ["a/run", "b/run", "x"]
    with pytest.raises(ValueError, match="same run name 'a/run'"):
        run_names(["x/a/run.jsonl", "y/a/run.jsonl"])


# ---- bad names --------------------------------------------------------------------------------------
def test_bad_logger_name_is_a_value_error():
    with pytest.raises(ValueError, match="logger must be one of none, tensorboard, wandb, trackio, got 'tensorbord'"):
        TrainConfig(logger="tensorbord").validate()
    with pytest.raises(ValueError, match="logger_dir must be a folder path"):
        TrainConfig(logger="tensorboard", logger_dir=3).validate()
    TrainConfig(logger="tensorboard", logger_dir="tb").validate()          # both installed in [dev]


def test_a_missing_extra_names_it(monkeypatch):
    monkeypatch.setattr(TensorBoardTracker, "package", "toyrl_no_such_package")
    with pytest.raises(ValueError, match=r"pip install 'toyrl\[tensorboard\]'"):
        check_logger("tensorboard")
    monkeypatch.setitem(sys.modules, "wandb", None)                    # import wandb -> ImportError
    with pytest.raises(ImportError, match=r"logger 'wandb' needs wandb: pip install 'toyrl\[wandb\]'"):
        WandbTracker("wb", "run").open({})


# ---- TensorBoard from a shipped log -----------------------------------------------------------------
def test_exported_events_equal_the_run_log(tmp_path):
    assert export([ECHO], "tensorboard", tmp_path) == ["grpo_s0"]
    acc, log = events(tmp_path / "grpo_s0"), RunLog.load(ECHO)
    keys = [k for k in log.keys() if k != "step"]
    assert sorted(acc.Tags()["scalars"]) == sorted(keys) and len(keys) == 12
    for key in keys:
        steps, values = series(acc, key)
        assert steps == [int(s) for s in log.column("step")] == list(range(120))
        np.testing.assert_array_equal(values, log.column(key).astype(np.float32))    # event files store float32


def test_exported_hyperparameters_are_the_header(tmp_path):
    export([ECHO], "tensorboard", tmp_path)
    hp, cfg = session_hparams(events(tmp_path / "grpo_s0")), RunLog.load(ECHO).config
    assert hp["lr"] == cfg["lr"] == 0.03 and hp["estimator"] == "grpo" and hp["env"] == "gridworld"
    assert hp["env_kwargs.size"] == 4 and hp["kl"] == "none" and hp["mask_env_tokens"] == "true"
    assert set(hp) == set(hparams(cfg))


def test_per_turn_lists_become_series_per_turn_index(tmp_path):
    export([SMALL_LLM], "tensorboard", tmp_path)
    acc, log = events(tmp_path / "grid4x4_bc_grpo__seed0"), RunLog.load(SMALL_LLM)
    tags = set(acc.Tags()["scalars"])
    turns = len(log.rows[0]["clip_frac_turn"])
    assert turns == 6 and {f"ratio_max/turn_{h}" for h in range(turns)} <= tags
    assert not any(t.startswith("sample_replies") for t in tags)               # text stays in the run log
    for h in range(turns):
        steps, values = series(acc, f"approx_kl/turn_{h}")
        want = [r["approx_kl_turn"][h] for r in log.rows]
        assert steps == [r["step"] for r in log.rows]
        np.testing.assert_array_equal(values, np.float32(want))


def test_a_second_export_replaces_the_first(tmp_path):
    export([ECHO], "tensorboard", tmp_path)
    export([ECHO], "tensorboard", tmp_path)
    assert len(list((tmp_path / "grpo_s0").glob("events.out.tfevents.*"))) == 1
    assert len(events(tmp_path / "grpo_s0").Scalars("reward_mean")) == 120


def test_logs_sharing_a_file_name_get_their_folder(tmp_path):
    for who in ("alice", "bob"):
        (tmp_path / who).mkdir()
        shutil.copy(ECHO, tmp_path / who / "run.jsonl")
    names = export([tmp_path / "alice" / "run.jsonl", tmp_path / "bob" / "run.jsonl"], "tensorboard", tmp_path / "tb")
    assert names == ["alice/run", "bob/run"]
    assert len(events(tmp_path / "tb" / "bob" / "run").Scalars("reward_mean")) == 120


def test_bad_logs_are_value_errors_before_anything_is_written(tmp_path):
    torn_inside = tmp_path / "bad.jsonl"
    torn_inside.write_text('{"step": 0, "loss": 1.0}\nnot json\n{"step": 1}\n')
    for paths, match in (([tmp_path / "nope.jsonl"], "no run log at"), ([torn_inside], "bad.jsonl:2"),
                         ([ROOT / "data" / "runs" / "trees" / "curves.json"], "not a run log"),
                         ([ECHO, torn_inside], "bad.jsonl:2")):
        with pytest.raises(ValueError, match=match):
            export(paths, "tensorboard", tmp_path / "tb")
    assert not (tmp_path / "tb").exists()
    with pytest.raises(ValueError, match="to must be one of tensorboard, wandb, trackio"):
        export([ECHO], "none", tmp_path / "tb")


# ---- the trainer -------------------------------------------------------------------------------------
def test_a_trainer_run_with_logger_tensorboard_writes_events(tmp_path):
    log = Trainer(TrainConfig(**TINY, logger="tensorboard"), str(tmp_path / "run.jsonl")).run()
    acc = events(tmp_path / "tensorboard" / "run")                  # the default folder: beside the run log
    steps, values = series(acc, "reward_mean")
    assert steps == [0, 1]
    np.testing.assert_array_equal(values, log.column("reward_mean").astype(np.float32))
    H = len(log.rows[0]["clip_frac_turn"])
    assert {f"clip_frac/turn_{h}" for h in range(H)} <= set(acc.Tags()["scalars"])
    assert session_hparams(acc)["logger"] == "tensorboard" and session_hparams(acc)["steps"] == 2
    assert RunLog.load(tmp_path / "run.jsonl").rows == log.rows                   # the run log is unchanged


def test_a_trainer_built_only_to_check_a_config_writes_nothing(tmp_path):
    trainer = Trainer(TrainConfig(**TINY, logger="tensorboard", logger_dir=str(tmp_path / "tb")))   # toyrl sweep's
    assert trainer.log.tracker is not None and not (tmp_path / "tb").exists()                       # check of a run
    trainer.step()
    assert series(events(tmp_path / "tb" / "grpo_ppo_bandit_chain_seed0"), "reward_mean")[0] == [0]


# ---- wandb, offline ----------------------------------------------------------------------------------
@pytest.fixture
def offline_wandb(tmp_path, monkeypatch):
    """wandb with no account and no network, every file it writes under tmp_path."""
    for var, value in (("WANDB_MODE", "offline"), ("WANDB_SILENT", "true"), ("WANDB_DISABLE_GIT", "true"),
                       ("WANDB_CONFIG_DIR", tmp_path / "cfg"), ("WANDB_CACHE_DIR", tmp_path / "cache"),
                       ("WANDB_DATA_DIR", tmp_path / "data")):
        monkeypatch.setenv(var, str(value))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    return tmp_path


def offline_run_file(folder: Path) -> bytes:
    """The bytes of the one offline run's .wandb file under ``folder``/wandb."""
    files = list((folder / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 1, files
    return files[0].read_bytes()


def test_wandb_logs_offline_from_the_trainer(offline_wandb):
    Trainer(TrainConfig(**TINY, logger="wandb", logger_dir=str(offline_wandb / "wb")),
            str(offline_wandb / "run.jsonl")).run()
    data = offline_run_file(offline_wandb / "wb")
    assert b"reward_mean" in data and b"clip_frac/turn_0" in data and b"bandit_chain" in data


def test_cli_export_to_wandb_is_offline(offline_wandb, monkeypatch):
    monkeypatch.delenv("WANDB_MODE")                                # export writes offline by itself
    from toyrl.cli.commands import main
    assert main(["export", str(SMALL_LLM), "--to", "wandb", str(offline_wandb / "wb")]) == 0
    data = offline_run_file(offline_wandb / "wb")
    assert b"grid4x4_bc_grpo__seed0" in data and b"ratio_max/turn_5" in data


# ---- trackio: only where it is installed (not in [dev]) -------------------------------------------------
def test_trackio_stores_the_rows(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACKIO_DIR", str(tmp_path / "trackio"))        # read when trackio is first imported
    pytest.importorskip("trackio")
    from trackio.sqlite_storage import SQLiteStorage
    export([ECHO], "trackio")
    logs = SQLiteStorage.get_logs("toyrl", "grpo_s0")
    assert [r["step"] for r in logs] == list(range(120))
    assert logs[5]["reward_mean"] == RunLog.load(ECHO).rows[5]["reward_mean"]


# ---- the command line --------------------------------------------------------------------------------
def run(*args):
    return subprocess.run([sys.executable, "-m", "toyrl", *map(str, args)], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)


def test_cli_train_logger_tensorboard(tmp_path):
    out = run("train", "--env", "bandit_chain", "--steps", "1", "--group-size", "2", "--prompts-per-step", "2",
              "--logger", "tensorboard", "--logger-dir", tmp_path / "tb", "--out", tmp_path / "r.jsonl")
    assert out.returncode == 0, out.stderr
    assert series(events(tmp_path / "tb" / "r"), "reward_mean")[0] == [0]


def test_cli_train_bad_logger_is_one_line_exit_2():
    out = run("train", "--logger", "tensorbord")
    assert out.returncode == 2 and out.stderr.strip().count("\n") == 0
    assert "--logger" in out.stderr and "tensorboard" in out.stderr


def test_cli_train_logger_without_its_extra_is_one_line_exit_2(monkeypatch, capsys):
    from toyrl.cli.commands import main
    from toyrl.train.trackers import TrackioTracker
    monkeypatch.setattr(TrackioTracker, "package", "toyrl_no_such_package")         # as if trackio were missing
    assert main(["train", "--env", "bandit_chain", "--logger", "trackio"]) == 2
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0 and "--logger: logger 'trackio' needs" in err and "toyrl[trackio]" in err


def test_cli_export_and_its_errors(tmp_path, capsys):
    from toyrl.cli.commands import main
    assert main(["export", str(ECHO), "--to", "tensorboard", str(tmp_path / "tb")]) == 0
    assert "grpo_s0" in capsys.readouterr().out and (tmp_path / "tb" / "grpo_s0").is_dir()
    for argv, said in (([str(tmp_path / "nope.jsonl"), "--to", "tensorboard", str(tmp_path)], "no run log at"),
                       ([str(ROOT / "data" / "runs" / "trees" / "curves.json"), "--to", "tensorboard"], "not a run"),
                       ([str(ECHO), "--to", "tensorbord"], "unknown backend 'tensorbord'"),
                       ([str(ECHO), "--to", "tensorboard", "a", "b"], "at most one folder")):
        assert main(["export", *argv]) == 2
        err = capsys.readouterr().err
        assert said in err and err.strip().count("\n") == 0, err
