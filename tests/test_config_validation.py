"""Every bad input caught up front: ``TrainConfig.validate`` raises a ValueError naming
the field (names, ranges, the keys and value types of every ``*_kwargs`` dict); the CLI turns it into one
line naming the flag, exit code 2, before any work; Ctrl-C is one line and exit code 130; ``train --help``
lists the valid names of every registry flag."""
import inspect

import pytest

from toyrl.cli.commands import REGISTRIES, build_parser, main
from toyrl.train.config import (KWARG_RANGES, RANGES, TrainConfig, check_kwargs, envs_providing, filter_keywords,
                                in_interval, keywords)
from toyrl.credit import ESTIMATORS, NEEDS
from toyrl.envs import ENVS
from toyrl.filters import FILTERS
from toyrl.objectives import CLIP_SCHEMES
from toyrl.objectives.schemes import REQUIRED
from toyrl.rollout import CONTEXTS
from toyrl.train import Trainer
from toyrl.rollout.tree import STRATEGIES

RUN = ["--steps", "1", "--prompts", "2", "--group-size", "2", "--no-progress"]

# (flags, the flag the message must name, a fragment of the message)
BAD_TRAIN = [
    (["--est-kw", "bogus=1"], "--estimator-kwargs", "grpo takes no argument 'bogus'; it takes: ddof, eps, norm"),
    (["--est-kw", "gamma=abc"], "--estimator-kwargs", "grpo takes no argument 'gamma'"),
    (["--estimator", "gigpo", "--est-kw", "gamma=abc"], "--estimator-kwargs",
     "gamma of gigpo must be a number (default 0.95), got 'abc'"),
    (["--estimator", "gigpo", "--est-kw", "gamma=2.0"], "--estimator-kwargs",
     "gamma of gigpo must be a number in [0, 1], got 2.0"),
    (["--estimator", "gae", "--est-kw", "lam=-0.5"], "--estimator-kwargs", "lam of gae must be a number in [0, 1]"),
    (["--est-kw", "ddof=1.5"], "--estimator-kwargs", "ddof of grpo must be an integer (default 1), got 1.5"),
    (["--estimator", "gae", "--est-kw", "whiten=1"], "--estimator-kwargs", "whiten of gae must be true or false"),
    (["--estimator", "dr_grpo", "--est-kw", "eps=0.1"], "--estimator-kwargs", "dr_grpo takes no argument 'eps'; "
                                                                              "it takes no arguments"),
    (["--clip-kw", "bogus=1"], "--clip-kwargs", "clip='ppo' does not take ['bogus']"),
    (["--clip-kw", "eps_high=-0.1"], "--clip-kwargs", "eps_high of ppo must be a number in [0, inf), got -0.1"),
    (["--clip", "dual_clip", "--clip-kw", "c=0.5"], "--clip-kwargs", "c of dual_clip must be a number in (1, inf)"),
    (["--clip", "sorl", "--clip-kw", "scope=3"], "--clip-kwargs", "scope of sorl must be a string"),
    (["--filter", "starpo_s", "--filter-kw", "starpo_s.bogus=1"], "--filter-kwargs",
     "starpo_s takes no argument 'bogus'; it takes: p, include_zero_std, ddof"),
    (["--filter-kw", "starpo_s.p=2"], "--filter-kwargs", "p of starpo_s must be a number in (0, 1], got 2"),
    (["--filter-kw", "zero_variance.threshold=abc"], "--filter-kwargs", "threshold of zero_variance must be a number"),
    (["--filter-kw", "void_turn.x=1"], "--filter-kwargs", "void_turn takes no argument 'x'"),
    (["--filter-kw", "starpo_s=0.5"], "--filter-kwargs", "starpo_s takes a dict of keyword arguments, got 0.5"),
    (["--filter-kw", "nope.p=1"], "--filter-kwargs", "unknown filter 'nope'"),
    (["--env-kw", "bogus=1"], "--env-kwargs", "gridworld takes no argument 'bogus'; it takes: size, map_name"),
    (["--env-kw", 'map_name="9x9"'], "--env-kwargs", "map_name must be one of ['4x4', '5x5', '8x8'], got '9x9'"),
    (["--env-kw", "slip=1.5"], "--env-kwargs", "slip of gridworld must be a number in [0, 1], got 1.5"),
    (["--env-kw", "size=4.5"], "--env-kwargs", "size of gridworld must be an integer"),
    (["--env-kw", "seed=3"], "--env-kwargs", "gridworld takes no argument 'seed'"),
    (["--env-kw", "max_turns=0"], "--env-kwargs", "max_turns of gridworld must be a number in [1, inf), got 0"),
    (["--env", "mock_search", "--env-kw", "token_view=x"], "--env-kwargs", "token_view must be one of"),
    (["--env", "bandit_chain", "--env-kw", "on_wrong=x"], "--env-kwargs", "on_wrong must be one of"),
    (["--rollout", "tree", "--tree-kwargs", "bogus=1"], "--tree-kwargs", "tree_rollout takes no argument 'bogus'"),
    (["--rollout", "tree", "--tree-kwargs", "n_init=0"], "--tree-kwargs", "n_init of tree_rollout must be"),
    (["--lr", "-1"], "--lr", "lr must be a number in (0, inf), got -1.0"),
    (["--lr", "0"], "--lr", "lr must be a number in (0, inf), got 0.0"),
    (["--lr", "nan"], "--lr", "got nan"),
    (["--critic-lr", "0"], "--critic-lr", "critic_lr must be a number in (0, inf)"),
    (["--bc-lr", "-1"], "--bc-lr", "bc_lr must be a number in (0, inf)"),
    (["--entropy-coef", "-0.1"], "--entropy-coef", "entropy_coef must be a number in [0, 1e6]"),
    (["--temperature", "0"], "--temperature", "temperature must be a number in (0, inf), got 0.0"),
    (["--critic-gamma", "1.5"], "--critic-gamma", "critic_gamma must be a number in [0, 1]"),
    (["--max-turns", "0"], "--max-turns", "max_turns must be an integer in [1, 1e4], got 0"),
    (["--seed", "-1"], "--seed", "seed must be an integer in [0, 1e18], got -1"),
    (["--group-size", "0"], "--group-size", "group_size must be an integer in [1, 4096], got 0"),
    (["--minibatches", "100"], "--minibatches", "minibatches must be <= the batch size"),
    (["--kl-coef", "-1"], "--kl-coef", "kl_coef must be a number in [0, 1e6]"),
    (["--policy", "hf:/no/such/dir"], "--policy", "policy 'hf:/no/such/dir': path /no/such/dir does not exist"),
    (["--policy", "nope"], "--policy", "unknown policy 'nope'"),
    (["--autocast", "bf16"], "--autocast", "autocast applies to the language-model policies"),
    (["--ratio", "nope"], "--ratio", "unknown ratio level 'nope'"),
    (["--agg", "nope"], "--agg", "unknown aggregation 'nope'"),
    (["--kl", "nope"], "--kl", "unknown KL estimator 'nope'"),
    (["--estimator", "nope"], "--estimator", "unknown estimator 'nope'"),
]

BAD_OTHER = [
    (["demo", "--steps", "0"], "--steps", "must be >= 1, got 0"),
    (["demo", "--seed", "-1"], "--seed", "must be >= 0, got -1"),
    (["demos", "--n", "0"], "--n", "must be >= 1, got 0"),
    (["sweep", "--workers", "0"], "--workers", "must be >= 1, got 0"),
    (["sweep", "--lr", "0.01", "-1", "--steps", "1"], "--lr", "lr must be a number in (0, inf), got -1.0"),
    (["sweep", "--estimator", "gigpo", "grpo", "--est-kw", "gamma=0.9", "--steps", "1"], "--estimator-kwargs",
     "grpo takes no argument 'gamma'"),
    (["reproduce", "--seeds", "0"], "--seeds", "must be >= 1, got 0"),
    (["reproduce", "--workers", "0"], "--workers", "must be >= 1, got 0"),
    (["scorecard", "--steps", "0"], "--steps", "must be >= 1, got 0"),
    (["scorecard", "--seeds", "0"], "--seeds", "must be >= 1, got 0"),
    (["scorecard", "--cells", "0"], "--cells", "must be >= 1, got 0"),
    (["scorecard", "--workers", "0"], "--workers", "must be >= 1, got 0"),
]


def check_one_line(argv, flag, message, capsys):
    assert main(argv) == 2, argv
    cap = capsys.readouterr()
    lines = cap.err.strip().splitlines()
    assert len(lines) == 1, cap.err
    assert lines[0].startswith(f"toyrl: error: {flag}: ") and message in lines[0], lines[0]
    assert "Traceback" not in cap.err + cap.out


@pytest.mark.parametrize("flags,flag,message", BAD_TRAIN, ids=[" ".join(b[0]) for b in BAD_TRAIN])
def test_bad_train_flag_is_one_line_exit_2(flags, flag, message, capsys, tmp_path):
    out = tmp_path / "run.jsonl"
    check_one_line(["train", *RUN, *flags, "--out", str(out)], flag, message, capsys)
    assert not out.exists()                                   # before any work


@pytest.mark.parametrize("argv,flag,message", BAD_OTHER, ids=[" ".join(b[0]) for b in BAD_OTHER])
def test_bad_flag_of_other_subcommands_is_one_line_exit_2(argv, flag, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)                               # nothing may be written; if it were, not in the repo
    check_one_line([*argv, *(["--out-dir", str(tmp_path / "o")] if argv[0] == "sweep" else [])], flag, message,
                   capsys)
    assert not (tmp_path / "o").exists() and not list(tmp_path.iterdir())


# ---- the Python API: ValueError naming the field ----------------------------------------------------------
BAD_API = [
    (dict(estimator_kwargs={"bogus": 1}),
     "estimator_kwargs: grpo takes no argument 'bogus'; it takes: ddof, eps, norm"),
    (dict(estimator="gigpo", estimator_kwargs={"gamma": "abc"}), "estimator_kwargs: gamma of gigpo must be a number"),
    (dict(estimator="gigpo", estimator_kwargs={"gamma": 2.0}),
     "estimator_kwargs: gamma of gigpo must be a number in [0, 1], got 2.0"),
    (dict(estimator="bilevel_gae", estimator_kwargs={"gamma_turn": 1.01}), "estimator_kwargs: gamma_turn of"),
    (dict(estimator="gigpo", estimator_kwargs={"gamma": True}), "estimator_kwargs: gamma of gigpo must be a number"),
    (dict(estimator_kwargs=[1]), "estimator_kwargs: grpo takes a dict of keyword arguments"),
    (dict(clip_kwargs={"bogus": 1}), "clip_kwargs: clip='ppo' does not take ['bogus']"),
    (dict(clip="gspo", clip_kwargs={"eps_low": -1e-4}), "clip_kwargs: eps_low of gspo must be a number in [0, inf)"),
    (dict(clip="sapo", clip_kwargs={"tau_pos": 0}), "clip_kwargs: tau_pos of sapo must be a number in (0, inf)"),
    (dict(clip="tis", clip_kwargs={"cap": 0}), "clip_kwargs: cap of tis must be a number in (0, inf)"),
    (dict(clip="dppo_tv", clip_kwargs={"delta_low": -1}), "clip_kwargs: delta_low of dppo_tv"),
    (dict(clip="clip_cov", clip_kwargs={"clip_cov_ratio": 2}), "clip_kwargs: clip_cov_ratio of clip_cov"),
    (dict(filter_kwargs={"starpo_s": {"p": 0}}), "filter_kwargs: p of starpo_s must be a number in (0, 1], got 0"),
    (dict(filter_kwargs={"nope": {}}), "filter_kwargs: unknown filter 'nope'"),
    (dict(filter_kwargs={"t2po_resample": {"eta": -1}}), "filter_kwargs: eta of t2po_resample"),
    (dict(env_kwargs={"bogus": 1}), "env_kwargs: gridworld takes no argument 'bogus'"),
    (dict(env_kwargs={"map_name": "9x9"}), "env_kwargs: map_name must be one of"),
    (dict(env_kwargs={"p_frozen": 1.5}), "env_kwargs: p_frozen of gridworld must be a number in [0, 1]"),
    (dict(env="bandit_chain", env_kwargs={"arms": 1}), "env_kwargs: need stages >= 1, arms >= 2"),
    (dict(tree_kwargs={"branch": 0}), "tree_kwargs: branch of tree_rollout must be a number in [1, inf)"),
    (dict(lr=-1.0), "lr must be a number in (0, inf), got -1.0"),
    (dict(critic_lr=0.0), "critic_lr must be"), (dict(bc_lr=0.0), "bc_lr must be"),
    (dict(entropy_coef=-1.0), "entropy_coef must be"), (dict(temperature=0.0), "temperature must be"),
    (dict(critic_gamma=2.0), "critic_gamma must be a number in [0, 1]"),
    (dict(max_turns=0), "max_turns must be an integer in [1, 1e4], got 0"),
    (dict(max_turns=2.5), "max_turns must be an integer"), (dict(steps=2.5), "steps must be an integer"),
    (dict(group_size=True), "group_size must be an integer"), (dict(seed=-1), "seed must be"),
    (dict(policy="hf:/no/such/dir"), "policy 'hf:/no/such/dir': path /no/such/dir does not exist"),
    (dict(autocast="int8", policy="tinylm:scratch"), "autocast must be one of"),
    (dict(filters="starpo_s"), "filters must be a list of filter names"),
]


@pytest.mark.parametrize("kw,message", BAD_API, ids=[str(b[0]) for b in BAD_API])
def test_validate_raises_naming_the_field(kw, message):
    with pytest.raises(ValueError) as e:
        TrainConfig(**kw).validate()
    field = message.split(":")[0].split(" ")[0]               # the message starts with a field that was set
    assert field in kw and str(e.value).startswith(message), str(e.value)


def test_every_registry_name_with_its_own_defaults_validates():
    """The paper defaults of every estimator, clip scheme, env core, filter and tree pass the range table."""
    def given(params):
        return {k: v for k, v in params.items() if v is not None and v is not REQUIRED}
    TrainConfig().validate()
    for name, est in ESTIMATORS.items():                       # each on the first env that provides its needs
        TrainConfig(env=envs_providing(est.needs)[0], estimator=name,
                    estimator_kwargs=given(keywords(est.fn))).validate()
    for name, scheme in CLIP_SCHEMES.items():                  # tis: refused (tests/test_every_method.py)
        if all(NEEDS[n].built for n in scheme.needs):
            TrainConfig(env=envs_providing(scheme.needs)[0], clip=name,
                        clip_kwargs=given(scheme.hyperparameters())).validate()
    for name, (_, core) in ENVS.items():
        TrainConfig(env=name, env_kwargs=given(keywords(core.__init__, ("seed",)))).validate()
    for name in FILTERS:
        TrainConfig(filters=[name], filter_kwargs={name: given(filter_keywords(name))}).validate()
    for rollout in ("independent",) + STRATEGIES:
        TrainConfig(rollout=rollout, tree_kwargs={"n_init": 2, "branch": 2, "tau": 0.5, "beta": 0.2}).validate()
    for context in list(CONTEXTS) + [None]:
        TrainConfig(context=context).validate()
    TrainConfig(kl="k3", kl_coef=0.0, max_turns=None, env_kwargs={"max_turns": 8}, seed=2**40).validate()
    assert filter_keywords("starpo_s") == {"p": 0.25, "include_zero_std": True, "ddof": 1}
    assert filter_keywords("loop_abs_adv") == {"adv": None, "threshold": 0.01}


def test_range_table_and_kwargs_check_by_hand():
    assert in_interval(1, "(0, 1]") and not in_interval(0, "(0, 1]") and in_interval(0, "[0, 1]")
    assert not in_interval(float("inf"), "(0, inf)") and not in_interval(float("nan"), "[0, 1]")
    assert set(RANGES) <= set(inspect.signature(TrainConfig).parameters)
    assert KWARG_RANGES["gamma"] == KWARG_RANGES["lam"] == "[0, 1]" and KWARG_RANGES["eps_high"] == "[0, inf)"
    check_kwargs("x", "f", {"gamma": 1, "any": "thing"}, None)          # int is a float; None: any key
    check_kwargs("x", "f", {"hops": [1, 2], "kb": object()}, {"hops": (1, 2, 3), "kb": None})
    with pytest.raises(ValueError, match=r"^x: f takes no argument 'b'; it takes: a$"):
        check_kwargs("x", "f", {"b": 1}, {"a": 1.0})
    with pytest.raises(ValueError, match=r"^x: a of f must be a number \(default 1.0\), got '1'$"):
        check_kwargs("x", "f", {"a": "1"}, {"a": 1.0})
    assert keywords(lambda batch, *, gamma=0.95, norm="std": 0) == {"gamma": 0.95, "norm": "std"}
    assert keywords(lambda batch, **kw: 0) is None and keywords(lambda batch, **kw: 0, closed=True) == {}


# ---- help lists the valid names; Ctrl-C is one line --------------------------------------------------------
def test_train_help_lists_the_valid_names(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "2000")                     # no line wrapping inside names such as token-mean
    with pytest.raises(SystemExit) as e:
        main(["train", "--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0
    assert all(name in out for name in ("gigpo", "dual_clip", "token-mean", "seq-mean-token-sum", "k3", "trajectory",
                                        "starpo_s", "mock_search", "last_k", "arpo", "turn_ppo"))
    train = build_parser()._subparsers._group_actions[0].choices["train"]
    helps = {a.dest: a.help for a in train._actions}
    for field in ("estimator", "clip", "agg", "kl", "ratio", "filters", "env", "context", "rollout"):
        assert all(str(n) in helps[field] for n in REGISTRIES[field][1]), field


def test_ctrl_c_is_one_line_exit_130(capsys, tmp_path, monkeypatch):
    real = Trainer.step

    def step(self):
        if self.step_idx == 2:
            raise KeyboardInterrupt
        return real(self)

    monkeypatch.setattr(Trainer, "step", step)
    out = tmp_path / "run.jsonl"
    assert main(["train", *RUN[2:], "--steps", "5", "--out", str(out)]) == 130
    assert capsys.readouterr().err.strip().splitlines() == [f"toyrl: interrupted; the log so far is in {out} (2 rows)"]
    assert main(["train", *RUN[2:], "--steps", "5"]) == 130
    assert capsys.readouterr().err.strip().splitlines() == ["toyrl: interrupted"]

    def stop(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr("toyrl.lab.runcache.iter_tasks", stop)        # where a sweep's runs go (the run cache)
    assert main(["sweep", "--steps", "1", "--seed", "0", "--workers", "1", "--out-dir", str(tmp_path / "sw")]) == 130
    assert capsys.readouterr().err.strip().splitlines() == ["toyrl: interrupted"]
