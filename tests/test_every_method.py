"""Every registered estimator, clip scheme and filter trains through the Trainer.

Each method runs on an env derived from its declared needs (``toyrl.credit.NEEDS``: the first env
whose core provides them), tiny sizes, 2 steps; ``validate`` refuses every (method, env) it cannot
run in one line that names the method and the fix, and the fix validates.
"""
import math
import re
import warnings

import pytest

from toyrl.train.config import TrainConfig, envs_providing
from toyrl.credit import ESTIMATORS, NEEDS
from toyrl.envs import ENVS
from toyrl.filters import FILTERS
from toyrl.objectives import CLIP_SCHEMES
from toyrl.train import train
from toyrl.viz.credit_batch import ESTIMATOR_NEEDS, NEED_SUPPLY, estimator_needs

SMALL = {"gridworld": {"map_name": "4x4", "max_turns": 5}, "bandit_chain": {"layout_seed": 0, "stages": 2},
         "mock_search": {"noise_sentences": 0, "max_turns": 3}, "doors": {"rooms": 2, "max_turns": 3}}
"""short episodes on each env"""
TINY = dict(group_size=4, prompts_per_step=2, steps=2, minibatches=2, progress=False)
NAN_OK = {"sweet_pair_acc"}
"""columns that are NaN when undefined (no same-group pair with different outcomes)"""

METHODS = ([("estimator", n, e.needs) for n, e in ESTIMATORS.items()]
           + [("clip", n, s.needs) for n, s in CLIP_SCHEMES.items()]
           + [("filter", n, f.needs) for n, f in FILTERS.items()])
RUNNABLE = [m for m in METHODS if all(NEEDS[n].built for n in m[2])]


def method(kind: str, name: str) -> dict:
    return {"estimator": {"estimator": name}, "clip": {"clip": name}, "filter": {"filters": [name]}}[kind]


def config_for(kind: str, name: str, needs: tuple) -> TrainConfig:
    """The method on the first env that provides its needs; tree rollouts where it reads tree nodes."""
    env = envs_providing(needs)[0]
    tree = {"rollout": "tree"} if "node" in needs else {}
    return TrainConfig(env=env, env_kwargs=SMALL[env], **method(kind, name), **tree, **TINY)


def test_every_env_has_a_small_setting_and_every_need_an_env():
    assert set(SMALL) == set(ENVS)
    for kind, name, needs in RUNNABLE:
        assert envs_providing(needs), f"{kind} {name}: no env provides {needs}"


@pytest.mark.parametrize("kind,name,needs", RUNNABLE, ids=[f"{k}-{n}" for k, n, _ in RUNNABLE])
def test_every_method_trains_two_steps(kind, name, needs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                     # zero-variance warnings on 2 tiny steps
        log = train(config_for(kind, name, needs))
    assert len(log.rows) == 2
    for row in log.rows:
        for k, v in row.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in NAN_OK:
                assert math.isfinite(v), f"{kind} {name}: {k} = {v}"
        for n in needs:                                     # each provided model logs its loss and error
            assert set(NEEDS[n].logs) <= set(row), f"{kind} {name}: {n} did not log {NEEDS[n].logs}"
    if kind == "filter":
        assert any(k.startswith(f"filter_{name}_") for k in log.rows[-1])


@pytest.mark.parametrize("kind,name,needs", METHODS, ids=[f"{k}-{n}" for k, n, _ in METHODS])
def test_validate_refuses_every_unrunnable_env_in_one_line(kind, name, needs):
    built = all(NEEDS[n].built for n in needs)
    for env in ENVS:
        cfg = TrainConfig(env=env, **method(kind, name))
        if built and env in envs_providing(needs):
            cfg.validate()
            continue
        with pytest.raises(ValueError) as e:
            cfg.validate()
        msg = str(e.value)
        assert "\n" not in msg and f"{kind} {name!r}" in msg, msg
        fix = re.search(r"--env (\w+)", msg)
        assert fix or "choose another" in msg, msg
        if fix:                                             # the named fix validates
            TrainConfig(env=fix.group(1), **method(kind, name)).validate()
    if {"values", "token_values"} & set(needs):
        with pytest.raises(ValueError, match=rf"^{kind} {name!r} needs a value critic .* critic=False") as e:
            TrainConfig(critic=False, **method(kind, name)).validate()
        assert "\n" not in str(e.value)
        TrainConfig(critic=None, **method(kind, name)).validate()


def test_the_refusals_exist():
    """sweet / a2tgpo need mock_search: the loops above do refuse something (tis trains now: every rollout
    records its engine's log-probs)."""
    msgs = []
    for kw in (dict(estimator="sweet"), dict(estimator="a2tgpo", env="bandit_chain"), dict(clip="a2tgpo")):
        with pytest.raises(ValueError) as e:
            TrainConfig(**kw).validate()
        msgs.append(str(e.value))
    assert "use env='mock_search' (--env mock_search)" in msgs[0] and "privileged" in msgs[0]
    assert "ground-truth answer" in msgs[1] and "bandit_chain" in msgs[1]
    TrainConfig(clip="tis", env="mock_search").validate()


def test_needs_are_introspectable_and_the_notebook_table_follows_the_registry():
    assert ESTIMATORS["archer"].needs == ("double_critic",) and CLIP_SCHEMES["a2tgpo"].needs == ("info_gain",)
    assert FILTERS["t2po_resample"].needs == ("entropy",)
    assert set(ESTIMATOR_NEEDS) == {n for n, e in ESTIMATORS.items() if e.needs} == set(estimator_needs())
    declared = {n for e in ESTIMATORS.values() for n in e.needs}
    assert declared <= set(NEED_SUPPLY) <= set(NEEDS), declared - set(NEED_SUPPLY)
    import toyrl.train.trainer
    assert not hasattr(toyrl.train.trainer, "CRITIC_ESTIMATORS")


def test_a2tgpo_clip_gets_z_from_the_information_gain_and_t2po_masks_turns():
    from toyrl.credit import a2tgpo_z
    from toyrl.train import Trainer
    tr = Trainer(config_for("clip", "a2tgpo", ("info_gain",)))
    ro = tr.collect()
    prep = tr.prepare(ro)
    b = ro.batch
    assert set(prep.clip_inputs) == {"z"} and prep.clip_inputs["z"].shape == (b.B, b.H)
    assert b.info_gain is not None and abs(b.info_gain).sum() > 0
    assert prep.clip_inputs["z"].equal(a2tgpo_z(b.info_gain, b.turn_mask, b.group, outcome=b.outcome()))
    tr = Trainer(TrainConfig(env="gridworld", env_kwargs=SMALL["gridworld"], filters=["t2po_resample"],
                             filter_kwargs={"t2po_resample": {"eta": 10.0}}, **TINY))
    ro = tr.collect()
    prep = tr.prepare(ro)                                   # eta 10: every turn after the first that moved at all
    b = ro.batch
    later = b.policy_mask & (b.turn_id >= 1)
    assert prep.lmask[b.policy_mask & (b.turn_id == 0)].all() and not prep.lmask[later].any()
