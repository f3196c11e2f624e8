"""The command line: flags generated from TrainConfig (every field by its own name, its docstring as
help, its default as default, a round trip of each type), one-line errors with exit code 2, short
train and sweep runs, listing, benchmarks in quick mode."""
import argparse
import dataclasses
import json
import pathlib
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Literal, Optional

import pytest

from toyrl.credit import ESTIMATORS
from toyrl.cli.commands import ALIASES, REGISTRIES, build_parser, configs_from, main
from toyrl.cli.args import add_fields, field_docs, specs, to_argv, values
from toyrl.train import TrainConfig

REQUIRED = ("step", "reward_mean", "reward_std", "zero_var_frac", "grad_norm", "clip_frac", "ratio_max", "entropy",
            "void_turn_rate", "success_rate")
FIELDS = [f.name for f in dataclasses.fields(TrainConfig)]


def run(*args):
    return subprocess.run([sys.executable, "-m", "toyrl", *args], capture_output=True, text=True, timeout=300)


def test_envs_lists_every_env():
    out = run("envs")
    assert out.returncode == 0
    from toyrl.envs import ENVS
    for name, (gym_id, _) in ENVS.items():
        assert name in out.stdout and gym_id in out.stdout


def test_unknown_benchmark_is_one_line_exit_2():
    out = run("bench", "nope")
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "valid benchmarks: envs" in out.stderr
    assert "Traceback" not in out.stderr


def test_bench_envs_quick(capsys):
    assert main(["bench", "envs", "--quick", "--num-envs", "64"]) == 0
    out = capsys.readouterr().out
    assert "speed-up:" in out and "GridCore" in out


def test_bench_credit_quick_prints_every_row():
    out = run("bench", "credit", "--quick", "--reps", "1", "--rounds", "1", "--only", "gigpo", "gigpo:dense", "grpo", "gae")
    assert out.returncode == 0, out.stderr
    assert "torch threads 1" in out.stdout and "malloc" in out.stdout
    rows = {line.split()[0]: line.split() for line in out.stdout.splitlines()[2:]}
    assert set(rows) == {"gigpo", "gigpo:dense", "grpo", "gae"}
    for r in rows.values():
        assert float(r[2]) > 0 and float(r[-1].rstrip("x")) > 0          # vectorized ms and speed-up
    bad = run("bench", "credit", "--only", "nope")
    assert bad.returncode == 2 and "unknown estimator 'nope'" in bad.stderr and "Traceback" not in bad.stderr


def parse(*argv, command="train"):
    """Field values of TrainConfig from ``toyrl <command> argv`` (no run)."""
    return values(build_parser().parse_args([command, *argv]), TrainConfig, multi=command == "sweep")


def flag(name):
    return "--" + name.replace("_", "-")


# ---- flags generated from TrainConfig ---------------------------------------------------------------
def test_every_field_has_its_own_flag_and_the_dataclass_default():
    sub = build_parser()._subparsers._group_actions[0].choices
    for command in ("train", "sweep"):
        options = sub[command]._option_string_actions
        assert all(flag(name) in options and options[flag(name)].dest == name for name in FIELDS), command
    parsed = parse()
    assert list(parsed) == FIELDS
    assert parsed == {f.name: getattr(TrainConfig(), f.name) for f in dataclasses.fields(TrainConfig)}
    assert TrainConfig(**parsed) == TrainConfig()
    swept = parse(command="sweep")
    assert swept["seed"] == [0, 1, 2] and all(swept[n] == [getattr(TrainConfig(), n)] for n in FIELDS if n != "seed")


def test_help_shows_every_field_with_its_docstring(capsys):
    with pytest.raises(SystemExit) as e:
        main(["train", "--help"])
    assert e.value.code == 0
    text = "".join(capsys.readouterr().out.split())            # argparse re-wraps lines
    docs = field_docs(TrainConfig)
    assert set(docs) == set(FIELDS) and all(docs.values())      # every field carries a docstring
    for name in FIELDS:
        assert flag(name) in text and "".join(docs[name].split()) in text, name
    assert "--no-mask-env-tokens" in text and "valid:" + ",".join(ESTIMATORS) + "(default:grpo)" in text   # names from the registry


def test_round_trip_of_each_type_by_hand():
    parsed = parse("--env", "bandit_chain", "--env-kwargs", "map_name=4x4", "slip=0.1", "--ppo-epochs", "3",
                   "--lr", "1e-3", "--no-mask-env-tokens", "--critic", "--max-turns", "5", "--ratio", "turn",
                   "--ratio", "none", "--kl", "k3", "--filters", "starpo_s,zero_variance", "--filters", "void_turn",
                   "--tree-kwargs", '{"n_init": 2, "tau": 0.5}', "--filter-kwargs", "starpo_s.p=0.25",
                   "--constrain", "false", "--progress", "none", "--device", "meta")
    want = TrainConfig(env="bandit_chain", env_kwargs={"map_name": "4x4", "slip": 0.1}, ppo_epochs=3, lr=1e-3,
                       mask_env_tokens=False, critic=True, max_turns=5, ratio=None, kl="k3",
                       filters=["starpo_s", "zero_variance", "void_turn"], tree_kwargs={"n_init": 2, "tau": 0.5},
                       filter_kwargs={"starpo_s": {"p": 0.25}}, constrain=False, progress=None, device="meta")
    assert TrainConfig(**parsed) == want


def other_value(s, names):
    """A non-default value of a field's type (a registry name where the field names one)."""
    reg = list(names[s.name][1]) if s.name in names else []
    if s.kind == "bool":
        return True if s.default is None else not s.default
    if s.kind == "dict":
        return {reg[0] if reg else "a": {"p": 0.5, "name": "x y"}, "b": [1, 2]}
    if s.kind == "list":
        return s.container(reg[:2]) if reg else s.container(s.item(v) for v in "12")
    if reg:
        return next(n for n in reg if n != s.default)
    if s.item is str:
        return f"{s.default}x"
    return (s.default or 0) + (3 if s.item is int else 0.25)


def test_round_trip_every_field_at_a_non_default_value():
    names = REGISTRIES
    for s in specs(TrainConfig):
        cfg = TrainConfig(**{s.name: other_value(s, names)})
        assert getattr(cfg, s.name) != s.default
        assert TrainConfig(**parse(*to_argv(cfg))) == cfg, s.name
        if s.optional and s.default is not None:              # and back to None
            cfg = TrainConfig(**{s.name: None})
            assert TrainConfig(**parse(*to_argv(cfg))) == cfg, s.name


def test_short_aliases_of_earlier_versions():
    assert set(ALIASES) <= set(FIELDS)
    parsed = parse("--env-kw", 'map_name="4x4"', "--est-kw", "gamma=0.9", "--clip-kw", "eps_high=0.28",
                   "--filter", "starpo_s", "--filter", "void_turn", "--filter-kw", "starpo_s.p=0.25", "--prompts",
                   "2", "--epochs", "4", "--no-progress", "--seed", "7")
    assert TrainConfig(**parsed) == TrainConfig(
        env_kwargs={"map_name": "4x4"}, estimator_kwargs={"gamma": 0.9}, clip_kwargs={"eps_high": 0.28},
        filters=["starpo_s", "void_turn"], filter_kwargs={"starpo_s": {"p": 0.25}}, prompts_per_step=2,
        ppo_epochs=4, progress=False, seed=7)


def test_new_fields_need_no_edit_and_bad_types_fail_loudly():
    @dataclass
    class Extended(TrainConfig):
        eval_every: int = 0
        """evaluate every this many steps (0: never)"""
        tti: Optional[dict] = None
        """test-time interaction settings"""
        ids: tuple[int, ...] = (1,)
        """some ids"""
        mode: Literal["a", "b"] = "a"
        """a mode"""

    p = argparse.ArgumentParser()
    add_fields(p, Extended)
    assert "evaluate every this many steps" in p.format_help() and "--eval-every" in p.format_help()
    v = values(p.parse_args(["--eval-every", "5", "--tti", "k=1", "--ids", "3,4", "--ids", "5", "--mode", "b"]),
               Extended)
    assert (v["eval_every"], v["tti"], v["ids"], v["mode"]) == (5, {"k": 1}, (3, 4, 5), "b")
    assert values(p.parse_args(["--tti", "none"]), Extended)["tti"] is None

    @dataclass
    class Bad:
        x: set = field(default_factory=set)
        """a set"""

    with pytest.raises(TypeError, match="'x'.*no command-line syntax"):
        add_fields(argparse.ArgumentParser(), Bad)
    with pytest.raises(TypeError, match="no command-line syntax"):
        add_fields(argparse.ArgumentParser(), dataclasses.make_dataclass("Mixed", [("t", tuple[int, str], (1, "a"))]))


# ---- one-line errors, exit code 2, before any work ------------------------------------------------------
@pytest.mark.parametrize("name", sorted(REGISTRIES))
def test_unknown_name_is_one_line_exit_2(name, capsys, tmp_path):
    what = REGISTRIES[name][0]
    bad = "nope=1" if name.endswith("_kwargs") else "nope"
    out = tmp_path / "run.jsonl"
    assert main(["train", flag(name), bad, "--steps", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0 and f"{flag(name)}: unknown {what} 'nope'; valid {what}s: " in err
    assert all(str(n) in err for n in list(REGISTRIES[name][1])[:3]) and not out.exists()


@pytest.mark.parametrize("flag_,value,message", [
    ("--estimator", "nope", "unknown estimator 'nope'; valid estimators: "),
    ("--clip", "nope", "unknown clip scheme 'nope'"), ("--env", "nope", "unknown env 'nope'"),
    ("--context", "nope", "unknown context policy 'nope'"), ("--filter", "nope", "unknown filter 'nope'"),
    ("--env-kw", "notakv", "--env-kwargs: takes KEY=VALUE or a JSON object"),
    ("--mask-env-tokens", "maybe", "--mask-env-tokens: expected true or false"),
    ("--tree-kwargs", "{bad json", "--tree-kwargs: "), ("--recompute", "nope", "recompute must be")])
def test_cli_unknown_name_is_one_line_exit_2(flag_, value, message, capsys):
    assert main(["train", flag_, value, "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0 and message in err and "Traceback" not in err


def test_unknown_name_one_line_from_a_shell():
    res = subprocess.run([sys.executable, "-m", "toyrl", "sweep", "--estimator", "grpo", "nope", "--steps", "1"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and res.stderr.strip().count("\n") == 0 and "Traceback" not in res.stderr
    assert "--estimator: unknown estimator 'nope'" in res.stderr and res.stdout == ""


# ---- a quick parser: torch only for the command that needs it ------------------------------------------------
NO_TORCH = """
import contextlib, io, json, sys
from toyrl.cli.commands import build_parser, main
def quiet(argv):                                   # --help exits 0, a usage error exits 2 (argparse)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            return main(argv)
        except SystemExit as e:
            return e.code
build_parser()
built = "torch" in sys.modules
codes = [quiet(a) for a in (["--help"], ["nope"], ["reproduce", "--help"], ["scorecard", "--help"],
                            ["precompute", "--help"], ["plot", "--help"], ["compare", "--help"], ["bench", "--help"],
                            ["reproduce", "--seeds", "0"], ["reproduce", "--out-dir", "data/claims"])]
helped = "torch" in sys.modules
build_parser().parse_args(["train", "--steps", "1"])  # choosing train builds its flags: TrainConfig, torch
print(json.dumps({"built": built, "helped": helped, "codes": codes, "train": "torch" in sys.modules}))
"""


def test_help_and_usage_errors_do_not_import_torch():
    """``toyrl --help``, a subcommand's help (but train's and sweep's) and a usage error import no torch: the
    train / sweep flags are built only when that subcommand is chosen."""
    res = subprocess.run([sys.executable, "-c", NO_TORCH], capture_output=True, text=True, timeout=300,
                         cwd=pathlib.Path(__file__).parents[1])
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == {"built": False, "helped": False, "codes": [0, 2, 0, 0, 0, 0, 0, 0, 2, 2],
                                      "train": True}


# ---- train and sweep runs ---------------------------------------------------------------------------------------
def test_cli_train_writes_log(tmp_path, capsys):
    out = tmp_path / "run.jsonl"
    assert main(["train", "--env", "gridworld", "--env-kw", 'map_name="4x4"', "--estimator", "gigpo", "--clip",
                 "turn_ppo", "--steps", "3", "--seed", "1", "--out", str(out), "--prompts", "2", "--group-size", "4",
                 "--ppo-epochs", "2", "--no-progress"]) == 0
    head, *rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert head["config"]["estimator"] == "gigpo" and head["config"]["seed"] == 1
    assert len(rows) == 3 and all(k in rows[0] for k in REQUIRED)
    assert "gigpo/turn_ppo on gridworld, 3 steps, seed 1" in capsys.readouterr().out


def test_sweep_runs_the_product_of_any_fields():
    cfgs = configs_from(build_parser().parse_args(
        ["sweep", "--estimator", "rtpo", "gigpo", "--seed", "0", "1", "--est-kw", "gamma=0.9", "gamma=1.0",
         "--filters", "none", "starpo_s,void_turn", "--mask-env-tokens", "--no-mask-env-tokens", "--lr", "0.01"]),
        multi=True, progress=False)
    assert len(cfgs) == 2 * 2 * 2 * 2 * 2
    combos = {(c.estimator, c.seed, c.estimator_kwargs["gamma"], tuple(c.filters), c.mask_env_tokens) for c in cfgs}
    assert len(combos) == 32 and ("gigpo", 1, 0.9, ("starpo_s", "void_turn"), False) in combos
    assert all(c.lr == 0.01 and c.progress is False and c.env == "gridworld" for c in cfgs)


def test_cli_sweep(tmp_path, capsys):
    assert main(["sweep", "--env", "bandit_chain", "--env-kw", "layout_seed=0", "--estimator", "grpo", "rloo",
                 "--seeds", "0", "--lr", "0.01", "0.001", "--steps", "2", "--workers", "1", "--out-dir",
                 str(tmp_path)]) == 0
    names = sorted(p.name for p in tmp_path.glob("*.jsonl"))
    assert names == ["bandit_chain__grpo__ppo__lr-0.001__seed0.jsonl", "bandit_chain__grpo__ppo__lr-0.01__seed0.jsonl",
                     "bandit_chain__rloo__ppo__lr-0.001__seed0.jsonl", "bandit_chain__rloo__ppo__lr-0.01__seed0.jsonl"]
    assert all(len((tmp_path / n).read_text().splitlines()) == 1 + 2 for n in names)      # the header, 2 rows
    assert "sweep: 4 runs on 1 worker(s)" in capsys.readouterr().out


def test_a_run_the_policy_cannot_hold_is_one_line_exit_2(capsys, tmp_path):
    """Trainer-time checks (a full-context episode longer than TinyLM's 1024 positions) reach the CLI as usage
    errors."""
    out = tmp_path / "run.jsonl"
    assert main(["train", "--policy", "tinylm", "--context", "full", "--steps", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "max_len=1024" in err[0] and "think_max=0" in err[0]
    assert not out.exists()
    assert main(["sweep", "--policy", "tiny", "tinylm", "--context", "full", "--steps", "1", "--out-dir",
                 str(tmp_path / "sw")]) == 2
    assert not (tmp_path / "sw").exists()
