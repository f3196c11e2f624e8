"""Plug-ins without a fork (toyrl.plugins): a user's env, estimator and clip scheme by --import and by entry points,
in the CLI and in a 2-worker sweep; unknown names say how to add one."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from toyrl import plugins
from toyrl.cli.commands import main
from toyrl.envs import ENVS
from toyrl.train import TrainConfig
from toyrl.train.runlog import RunLog

ROOT = Path(__file__).resolve().parents[1]
KEYDOOR = ROOT / "docs" / "examples" / "keydoor.py"
CREDIT = '''
import torch
from toyrl.credit import register_estimator
from toyrl.objectives import Scheme, register_clip_scheme
from toyrl.objectives.clipping import ppo

@register_estimator("my_centred", level="turn")
def my_centred(batch):
    """Outcome minus the batch mean on every valid turn."""
    R = batch.outcome()
    return (R - R.mean())[:, None] * batch.turn_mask

register_clip_scheme("tight_ppo", Scheme(ppo, hyper={"eps_low": 0.1, "eps_high": 0.1}))
'''
SMALL = ["--steps", "2", "--prompts", "2", "--group-size", "4"]


def toyrl(*args, cwd, extra_path=()) -> subprocess.CompletedProcess:
    """``python -m toyrl ARGS`` in ``cwd`` with this checkout (and ``extra_path``) on PYTHONPATH."""
    path = os.pathsep.join([str(ROOT), *map(str, extra_path), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}
    env.pop(plugins.ENV_VAR, None)
    return subprocess.run([sys.executable, "-m", "toyrl", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


def test_import_a_module_and_a_file_then_train_and_sweep_on_two_workers(tmp_path):
    """The env, estimator and clip scheme of two user files, by module name and by path; the sweep's two spawn
    workers import them too (their runs log the plug-ins' names)."""
    shutil.copy(KEYDOOR, tmp_path / "my_env.py")
    (tmp_path / "extra").mkdir()
    (tmp_path / "extra" / "my_credit.py").write_text(CREDIT)
    use = ["--import", "my_env", "--import", "extra/my_credit.py", "--env", "keydoor", "--estimator", "my_centred",
           "--clip", "tight_ppo"]
    one = toyrl("train", *use, *SMALL, "--out", "run.jsonl", cwd=tmp_path)
    assert one.returncode == 0, one.stderr
    log = RunLog.load(tmp_path / "run.jsonl")
    assert len(log.rows) == 2 and (log.config["env"], log.config["estimator"]) == ("keydoor", "my_centred")
    two = toyrl("sweep", *use, *SMALL, "--seed", "0", "1", "--workers", "2", "--out-dir", "runs", cwd=tmp_path)
    assert two.returncode == 0, two.stderr
    assert "2 runs on 2 worker(s)" in two.stdout and two.stdout.count(" 2 steps ") == 2
    logs = sorted((tmp_path / "runs").glob("keydoor__my_centred__tight_ppo__seed*.jsonl"))
    assert [RunLog.load(p).config["seed"] for p in logs] == [0, 1]


def write_dist(where: Path) -> None:
    """An installed distribution on ``where``: the package kd_plugin and its entry point in group toyrl.envs."""
    pkg = where / "kd_plugin"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(KEYDOOR.read_text().replace('register_env("keydoor", KeyDoorCore)\n', ""))
    info = where / "kd_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: kd-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[toyrl.envs]\nkeydoor = kd_plugin:KeyDoorCore\n")


def test_entry_point_plugin_sweeps_on_two_workers(tmp_path):
    """No --import: the env comes from an installed entry point, found by the parent and by each worker."""
    write_dist(tmp_path / "site")
    res = toyrl("sweep", "--env", "keydoor", *SMALL, "--seed", "0", "1", "--workers", "2", "--out-dir", "runs",
                cwd=tmp_path, extra_path=[tmp_path / "site"])
    assert res.returncode == 0, res.stderr
    assert len(list((tmp_path / "runs").glob("keydoor__grpo__ppo__seed*.jsonl"))) == 2


def test_entry_points_load_in_process_and_refuse_a_wrong_object(tmp_path, monkeypatch):
    write_dist(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(plugins, "_LOADED", {})
    try:
        assert "keydoor" in plugins.load_entry_points().get("env", []) and ENVS["keydoor"][1].__name__ == "KeyDoorCore"
        TrainConfig(env="keydoor", steps=1).validate()
    finally:
        ENVS.pop("keydoor", None)
    (tmp_path / "kd_plugin-0.1.dist-info" / "entry_points.txt").write_text("[toyrl.envs]\nbad = json:dumps\n")
    monkeypatch.setattr(plugins, "_LOADED", {})
    with pytest.raises(ValueError, match="entry point 'bad'.*expected a BatchedCore subclass"):
        plugins.load_entry_points()


def test_unknown_names_say_how_to_add_one(capsys):
    assert main(["train", "--env", "keydoor_nope", "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--import MODULE" in err and "toyrl.envs" in err and "docs/your_env.md" in err
    with pytest.raises(ValueError, match=r"unknown estimator 'nope'.*register_estimator.*toyrl\.estimators"):
        TrainConfig(estimator="nope").validate()
    with pytest.raises(ValueError, match="unknown clip 'nope'.*register_clip_scheme"):
        TrainConfig(clip="nope").validate()


def test_import_errors_are_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "broken.py").write_text("raise RuntimeError('no key here')\n")
    assert main(["train", "--import", "no_such_module_xyz", "--steps", "1"]) == 2
    assert "--import: no module 'no_such_module_xyz'" in capsys.readouterr().err
    assert main(["train", "--import", "broken", "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "RuntimeError: no key here" in err


def test_import_module_records_it_for_workers(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(plugins.ENV_VAR, raising=False)
    (tmp_path / "plug_a.py").write_text("VALUE = 3\n")
    assert plugins.import_module("plug_a").VALUE == 3
    assert plugins.import_module(str(tmp_path / "plug_a.py")).VALUE == 3
    listed = os.environ[plugins.ENV_VAR].split(os.pathsep)
    assert listed == ["plug_a", str((tmp_path / "plug_a.py").resolve())]
    assert [m.VALUE for m in plugins.load_environment()] == [3, 3]          # what a worker's initializer runs
