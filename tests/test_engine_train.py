"""The rollout engine and the rollout corrections inside the Trainer.

The exact engine is the trainer (its rollout_logp are old_logp, and the trainer's recompute gives them back to
float precision); any other engine samples with its own copy and the trainer rescores the same tokens; every engine
mode and every correction trains on every env; ``clip="tis"`` trains; a bad engine or correction is refused in one
line before any work.
"""
import math
import subprocess
import sys
import warnings

import pytest
import torch

from toyrl.envs import ENVS
from toyrl.objectives.rollout_correction import CORRECTIONS
from toyrl.rollout.flatten import recompute_logp
from toyrl.rollout.inference_engine import ENGINES
from toyrl.train import TrainConfig, Trainer, train

SMALL = {"gridworld": {"map_name": "4x4", "max_turns": 5}, "bandit_chain": {"layout_seed": 0, "stages": 2},
         "mock_search": {"noise_sentences": 0, "max_turns": 3}, "doors": {"rooms": 2, "max_turns": 3}}
"""short episodes on each env"""
TINY = dict(group_size=4, prompts_per_step=2, steps=2, progress=False, think_max=2)


def config(env="gridworld", **kw) -> TrainConfig:
    return TrainConfig(env=env, env_kwargs=SMALL[env], **{**TINY, **kw})


def finite_row(row: dict) -> bool:
    return all(math.isfinite(v) for k, v in row.items()
               if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "sweet_pair_acc")


@pytest.mark.parametrize("env", list(SMALL))
def test_exact_engine_is_the_trainer(env):
    t = Trainer(config(env))
    ro = t.collect()
    b = ro.batch
    assert t.engine is t.policy and torch.equal(b.rollout_logp, b.old_logp)
    lp, _ = recompute_logp(t.policy, ro, "matched")
    pm = b.policy_mask
    assert (lp[pm] - b.rollout_logp[pm]).abs().max().item() < 1e-5      # what was sampled is what is scored
    row = t.step()
    assert row["engine_kl"] == 0.0 and row["engine_ratio_max"] == 1.0 and row["engine_frac_far"] == 0.0


def test_a_mismatched_engine_is_rescored_by_the_trainer():
    t = Trainer(config(engine="noise", engine_strength=1.0))
    before = [p.detach().clone() for p in t.policy.parameters()]
    ro = t.collect()
    b, pm = ro.batch, ro.batch.policy_mask
    lp, _ = recompute_logp(t.policy, ro, "matched")
    assert (lp[pm] - b.old_logp[pm]).abs().max().item() < 1e-5          # old_logp: the trainer's own scores
    assert (b.old_logp[pm] - b.rollout_logp[pm]).abs().max().item() > 1e-2   # the engine sampled with others
    assert all(torch.equal(a, p) for a, p in zip(before, t.policy.parameters()))   # syncing never touches the policy
    q = Trainer(config(engine="int4"))
    q.collect()
    assert q.engine is not q.policy
    assert any(not torch.equal(a, p) for a, p in zip(q.engine.parameters(), q.policy.parameters()))


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize("env", list(SMALL))
def test_every_engine_mode_trains_on_every_env(engine, env):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                     # zero-variance warnings on 2 tiny steps
        log = train(config(env, engine=engine, steps=3))
    assert len(log.rows) == 3 and all(finite_row(r) for r in log.rows)
    kl = [r["engine_kl"] for r in log.rows]
    assert all(k >= 0 for k in kl)
    if engine == "exact":
        assert kl == [0.0, 0.0, 0.0]
    if engine == "lag":                                      # the engine trails by 2 updates once there are 2
        assert [r["policy_lag_max"] for r in log.rows] == [0, 1, 2]
    assert len(log.rows[0]["engine_gap_by_prob"]) == len(log.rows[0]["engine_count_by_prob"])


@pytest.mark.parametrize("correction", list(CORRECTIONS))
@pytest.mark.parametrize("env", list(SMALL))
def test_every_correction_trains_on_every_env(correction, env):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        log = train(config(env, engine="noise", engine_strength=1.0, correction=correction))
    assert len(log.rows) == 2 and all(finite_row(r) for r in log.rows)
    if correction != "none":
        assert any(k.startswith("correction_") for k in log.rows[-1])


@pytest.mark.parametrize("engine", ["exact", "topp"])
def test_clip_tis_trains(engine):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        log = train(config("bandit_chain", clip="tis", engine=engine))
    assert len(log.rows) == 2 and all(finite_row(r) for r in log.rows)


def test_the_correction_weights_reach_the_loss():
    t = Trainer(config(engine="noise", engine_strength=1.0, correction="tis"))
    ro = t.collect()
    prep = t.prepare(ro)
    b = ro.batch
    pm = b.policy_mask & prep.lmask
    want = torch.exp(b.old_logp - b.rollout_logp).clamp(max=2.0)          # token TIS, C = 2
    assert torch.allclose(prep.is_weights[pm], want[pm], atol=1e-5)
    assert bool((prep.is_weights[~pm] == 1).all()) and prep.is_weights.max().item() <= 2.0
    plain = Trainer(config(engine="noise", engine_strength=1.0))
    assert plain.prepare(plain.collect()).is_weights is None


def test_bypass_takes_the_engines_log_probs_as_old_logp():
    t = Trainer(config(engine="noise", engine_strength=1.0, bypass=True))
    b = t.collect().batch
    assert torch.equal(b.old_logp, b.rollout_logp)
    row = t.step()                                           # the first update's ratio already carries the gap
    assert row["engine_kl"] == 0.0 and (row["ratio_max"] > 1.0 or row["ratio_min"] < 1.0)


@pytest.mark.parametrize("kw,match", [
    (dict(engine="vllm"), r"^unknown engine 'vllm'; valid: exact, "),
    (dict(engine="topk", engine_strength=0), r"^engine_strength: .*topk"),
    (dict(engine="topp", engine_strength=1.5), r"^engine_strength: .*topp"),
    (dict(engine="bf16", engine_strength=2.0), r"^engine_strength: .*takes no strength"),
    (dict(engine="lag", staleness=2), r"^engine='lag' and staleness=2 are two lags"),
    (dict(correction="is"), r"^unknown correction 'is'; valid: none, "),
    (dict(engine="noise", bypass=True, correction="tis"), r"^correction='tis' with bypass=True"),
    (dict(correction="tis", correction_kwargs={"capp": 2}), r"^correction_kwargs: tis takes no argument 'capp'"),
])
def test_bad_engines_and_corrections_are_refused_in_one_line(kw, match):
    with pytest.raises(ValueError, match=match) as e:
        TrainConfig(**kw).validate()
    assert "\n" not in str(e.value)


def test_integer_strengths_from_flags():
    TrainConfig(engine="topk", engine_strength=3.0).validate()              # a flag gives 3.0
    assert Trainer(config(engine="lag", engine_strength=3.0)).lag == 3


def test_cli_engine_flags():
    base = [sys.executable, "-m", "toyrl", "train", "--env", "bandit_chain", "--steps", "1", "--group-size", "2",
            "--prompts-per-step", "2"]
    ok = subprocess.run(base + ["--engine", "topk", "--engine-strength", "2", "--correction", "mis"],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr[-2000:]
    bad = subprocess.run(base + ["--engine", "vllm"], capture_output=True, text=True)
    assert bad.returncode == 2 and "vllm" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_every_env_has_a_small_setting():
    assert set(SMALL) == set(ENVS)
