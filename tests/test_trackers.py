"""Run trackers (toyrl.train.trackers): a shipped run log exported to TensorBoard reads back, through TensorBoard's
own event reader, as the same steps and values (float32), its config as hyperparameters and its per-turn lists as
one series per turn index; a short Trainer run with logger="tensorboard" writes events as it goes; wandb logs
offline without a network, and its .wandb run file reads back as the run log's steps, values and config; trackio
writes where logger_dir says; bad names and bad logs are one-line errors (exit 2 at the CLI)."""
from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import shutil
import struct
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from toyrl.train import RunLog, TrainConfig, Trainer
from toyrl.train.trackers import (TensorBoardTracker, TrackioTracker, WandbTracker, check_logger, export, hparams,
                                  run_names, scalars, tracker_folder)

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
    H = len(log.rows[0]["tokens_turn"])
    assert {f"tokens/turn_{h}" for h in range(H)} <= set(acc.Tags()["scalars"])
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


def offline_records(folder: Path) -> list:
    """The records of the one offline run's .wandb file under ``folder``/wandb, parsed with wandb's own protobuf
    ``Record``. The file is a LevelDB-style log: a 7-byte header (":W&B", magic, version), then 32 KiB blocks of
    chunks, each a 7-byte header (checksum, little-endian length, type) and its bytes; a block's last < 7 bytes are
    padding; a record is one FULL chunk (type 1) or FIRST, MIDDLE..., LAST (types 2, 3..., 4)."""
    from wandb.proto.wandb_internal_pb2 import Record
    files = list((folder / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 1, files
    data = files[0].read_bytes()
    assert data[:4] == b":W&B"
    pos, block, chunks, records = 7, 32768, [], []
    while pos + 7 <= len(data):
        if block - pos % block < 7:
            pos += block - pos % block
            continue
        length, kind = struct.unpack_from("<HB", data, pos + 4)
        chunks.append(data[pos + 7:pos + 7 + length])
        pos += 7 + length
        if kind in (1, 4):
            records.append(Record.FromString(b"".join(chunks)))
            chunks = []
    return records


def wandb_history(records) -> dict:
    """step -> {series: value} of the run's history records (wandb's own _step, _runtime, _timestamp left out)."""
    out = {}
    for r in records:
        if r.WhichOneof("record_type") == "history":
            items = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
            out[r.history.step.num] = {k: v for k, v in items.items() if not k.startswith("_")}
    return out


def wandb_config(records) -> dict:
    """The run's config, as wandb stored it with the run record (its own _wandb key left out)."""
    run = next(r.run for r in records if r.WhichOneof("record_type") == "run")
    return {i.key: json.loads(i.value_json) for i in run.config.update if i.key != "_wandb"}


def assert_history_is_the_log(history: dict, log) -> None:
    """Every step of the run log in wandb's history, with exactly its scalars (same names, same float values)."""
    assert sorted(history) == [r["step"] for r in log.rows]
    for row in log.rows:
        want, got = scalars(row), history[row["step"]]
        assert sorted(got) == sorted(want), row["step"]
        np.testing.assert_array_equal([got[k] for k in sorted(want)], [want[k] for k in sorted(want)])


def test_wandb_logs_offline_from_the_trainer(offline_wandb):
    log = Trainer(TrainConfig(**TINY, logger="wandb", logger_dir=str(offline_wandb / "wb")),
                  str(offline_wandb / "run.jsonl")).run()
    records = offline_records(offline_wandb / "wb")
    history = wandb_history(records)
    assert_history_is_the_log(history, log)
    assert [history[s]["reward_mean"] for s in (0, 1)] == list(log.column("reward_mean"))
    H = len(log.rows[0]["tokens_turn"])
    assert [history[1][f"tokens/turn_{h}"] for h in range(H)] == log.rows[1]["tokens_turn"]
    cfg = wandb_config(records)
    assert cfg["env"] == "bandit_chain" and cfg["steps"] == 2 and cfg["logger"] == "wandb"


def test_cli_export_to_wandb_is_offline(offline_wandb, monkeypatch):
    monkeypatch.delenv("WANDB_MODE")                                # export writes offline by itself
    from toyrl.cli.commands import main
    assert main(["export", str(SMALL_LLM), "--to", "wandb", str(offline_wandb / "wb")]) == 0
    records, log = offline_records(offline_wandb / "wb"), RunLog.load(SMALL_LLM)
    history = wandb_history(records)
    assert_history_is_the_log(history, log)
    assert [history[r["step"]]["ratio_max/turn_5"] for r in log.rows] == [r["ratio_max_turn"][5] for r in log.rows]
    run = next(r.run for r in records if r.WhichOneof("record_type") == "run")
    assert run.display_name == "grid4x4_bc_grpo__seed0"


def test_exported_wandb_config_is_the_header(offline_wandb):
    export([ECHO], "wandb", offline_wandb / "wb")
    records, log = offline_records(offline_wandb / "wb"), RunLog.load(ECHO)
    assert wandb_config(records) == json.loads(json.dumps(log.config, default=str))
    assert_history_is_the_log(wandb_history(records), log)


# ---- trackio: its folder (a stand-in module), and the real one only where it is installed (not in [dev]) ---
@pytest.fixture
def fake_trackio(monkeypatch):
    """A stand-in ``trackio`` module that records $TRACKIO_DIR when a run starts, and the steps it is given;
    trackio.utils not imported yet, $TRACKIO_DIR restored afterwards."""
    seen: dict = {"steps": []}
    fake = types.ModuleType("trackio")
    fake.__spec__ = importlib.machinery.ModuleSpec("trackio", None)            # found by check_logger
    fake.init = lambda project, name, config: seen.update(dir=os.environ["TRACKIO_DIR"], name=name, config=config)
    fake.log = lambda row, step: seen["steps"].append(step)
    fake.finish = lambda: seen.update(finished=True)
    monkeypatch.setitem(sys.modules, "trackio", fake)
    monkeypatch.delitem(sys.modules, "trackio.utils", raising=False)
    monkeypatch.setenv("TRACKIO_DIR", "not-this-one")                  # so the tracker's setting is undone
    return seen


def test_trackio_is_pointed_at_logger_dir_before_its_import(fake_trackio, tmp_path):
    assert export([ECHO], "trackio", tmp_path / "tr") == ["grpo_s0"]
    assert fake_trackio["dir"] == str((tmp_path / "tr").resolve()) and fake_trackio["name"] == "grpo_s0"
    assert fake_trackio["steps"] == list(range(120)) and fake_trackio["finished"]


def test_trackio_default_folder_is_beside_the_run_log(fake_trackio, tmp_path):
    Trainer(TrainConfig(**TINY, logger="trackio"), str(tmp_path / "run.jsonl")).run()
    assert fake_trackio["dir"] == str((tmp_path / "trackio").resolve()) and fake_trackio["steps"] == [0, 1]


def test_trackio_imported_for_another_folder_is_a_value_error(fake_trackio, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "trackio.utils", types.SimpleNamespace(TRACKIO_DIR=tmp_path / "a"))
    TrackioTracker(tmp_path / "a", "run")                                        # the same folder is fine
    with pytest.raises(ValueError, match=r"logger_dir: trackio already writes to .*a in this process"):
        TrackioTracker(tmp_path / "b", "run")
    with pytest.raises(ValueError, match="one trackio folder per process"):
        Trainer(TrainConfig(**TINY, logger="trackio", logger_dir=str(tmp_path / "b")))
    assert "dir" not in fake_trackio and not (tmp_path / "b").exists()


READ_TRACKIO = ("import json, sys; from toyrl.train.trackers import export;"
                "export([sys.argv[1]], 'trackio', sys.argv[2]);"
                "from trackio.sqlite_storage import SQLiteStorage;"
                "print(json.dumps(SQLiteStorage.get_logs('toyrl', 'grpo_s0'), default=str))")


def test_real_trackio_writes_where_logger_dir_says(tmp_path):
    if importlib.util.find_spec("trackio") is None:
        pytest.skip("trackio is not installed (pip install 'toyrl[trackio]')")
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "TRACKIO_DIR": str(tmp_path / "not-here"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("TRACKIO_PROJECT", None)
    out = subprocess.run([sys.executable, "-c", READ_TRACKIO, str(ECHO), str(tmp_path / "tr")], capture_output=True,
                         text=True, timeout=300, cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "tr" / "toyrl.db").is_file()
    assert not (tmp_path / "hf" / "trackio").exists() and not (tmp_path / "not-here").exists()
    logs, log = json.loads(out.stdout.strip().splitlines()[-1]), RunLog.load(ECHO)
    assert [r["step"] for r in logs] == [r["step"] for r in log.rows] == list(range(120))
    for got, row in zip(logs, log.rows):
        want = scalars(row)
        assert {k: got[k] for k in want} == want


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
