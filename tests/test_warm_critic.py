"""The warm critic (``critic_warmup_steps``, toyrl.train.warm_critic): off by default and inert at 0, a lower value
loss on fresh episodes of the start policy, the policy and the training streams untouched, bad values refused."""
import math

import pytest
import torch
from torch import nn

from toyrl.credit.fit import value_warmup
from toyrl.lab.claims.horizon import critic_probe
from toyrl.train import Trainer, TrainConfig, train
from toyrl.train.warm_critic import fresh_value_loss, warm_critic

SMALL = dict(env="gridworld", env_kwargs={"size": 4, "max_turns": 8}, estimator="turn_gae", prompts_per_step=4,
             group_size=4, bc_steps=10, progress=False, seed=3)


def _trainer(**kw) -> Trainer:
    tr = Trainer(TrainConfig(**{**SMALL, **kw}))
    tr.behaviour_clone(tr.cfg.bc_steps)              # a start policy that succeeds sometimes: returns vary
    return tr


class Zero(nn.Module):
    """A linear critic that starts at 0: (B, H, 1) -> (B, H)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(1, 1)
        nn.init.zeros_(self.lin.weight), nn.init.zeros_(self.lin.bias)

    def forward(self, x):
        return self.lin(x).squeeze(-1)


def test_value_warmup_by_hand():
    state, ret, mask = torch.ones(1, 2, 1), torch.ones(1, 2), torch.ones(1, 2, dtype=torch.bool)
    module = Zero()
    opt = torch.optim.SGD(module.parameters(), lr=0.1)
    losses = value_warmup(module, opt, lambda k: (state, ret, mask), 3)
    assert losses[0] == pytest.approx(0.5)                                      # 0.5 * (0 - 1)^2
    assert losses[0] > losses[1] > losses[2]
    assert value_warmup(module, opt, lambda k: (state, ret, mask), 0) == []
    with pytest.raises(ValueError, match="steps"):
        value_warmup(module, opt, lambda k: (state, ret, mask), -1)


def test_zero_is_the_default_and_does_nothing():
    assert TrainConfig().critic_warmup_steps == 0
    tr = _trainer()
    assert warm_critic(tr, 0) == [] and tr.models.critic is None                # nothing built, nothing drawn
    tr.step()
    assert "critic_warmup_losses" not in tr.log.config and tr.models.critic is not None


def test_warmup_lowers_the_value_loss_on_fresh_start_episodes_and_freezes_the_policy():
    cold, warm = _trainer(), _trainer()
    before = {k: v.clone() for k, v in warm.policy.state_dict().items()}
    torch.manual_seed(0)
    loss_cold = fresh_value_loss(cold, batches=3)                               # the critic RL would start from
    torch.manual_seed(0)
    losses = warm_critic(warm, 40)
    loss_warm = fresh_value_loss(warm, batches=3)
    assert len(losses) == 40 and all(math.isfinite(x) for x in losses)
    assert loss_warm < 0.7 * loss_cold, (loss_warm, loss_cold)
    assert all(torch.equal(v, warm.policy.state_dict()[k]) for k, v in before.items())   # the policy is frozen


def test_warmup_leaves_the_training_streams_alone_and_trains_through_the_trainer():
    cold, warm = _trainer(), _trainer(critic_warmup_steps=20)
    r0, r1 = cold.step(), warm.step()
    assert len(warm.log.config["critic_warmup_losses"]) == 20 and warm.log.config["critic_warmup_s"] > 0
    for k in ("reward_mean", "success_rate", "tokens_generated", "turns_per_episode"):   # the same first batch
        assert r0[k] == r1[k], k
    assert r1["critic_loss"] < r0["critic_loss"]                                # the warm critic knows pi_0
    log = train(TrainConfig(**{**SMALL, "critic_warmup_steps": 3, "steps": 3}))
    assert len(log.rows) == 3 and len(log.config["critic_warmup_losses"]) == 3
    assert all(math.isfinite(r["critic_loss"]) for r in log.rows)


@pytest.mark.parametrize("bad", [-1, 1.5, True, "3"])
def test_bad_warmup_values_raise_naming_the_field(bad):
    with pytest.raises(ValueError, match="critic_warmup_steps"):
        Trainer(TrainConfig(**{**SMALL, "critic_warmup_steps": bad}))


def test_warmup_without_a_critic_raises():
    with pytest.raises(ValueError, match="critic_warmup_steps=5.*value critic"):
        Trainer(TrainConfig(**{**SMALL, "estimator": "grpo", "critic_warmup_steps": 5}))
    Trainer(TrainConfig(**{**SMALL, "estimator": "grpo", "critic": True, "critic_warmup_steps": 5}))   # critic on


def test_critic_probe_reads_the_log_and_samples_nothing():
    tr = _trainer()
    assert all(math.isnan(v) for v in critic_probe(tr).values())               # no row yet
    state = tr.rng.bit_generator.state
    rows = [tr.step() for _ in range(2)]
    got = critic_probe(tr)
    assert tr.rng.bit_generator.state != state                                  # training drew tasks ...
    state = tr.rng.bit_generator.state
    critic_probe(tr)
    assert tr.rng.bit_generator.state == state                                  # ... the probe did not
    assert got["critic_loss"] == pytest.approx(sum(r["critic_loss"] for r in rows) / 2)
    assert got["ratio_mean"] == pytest.approx(1.0)                              # 1 epoch, 1 minibatch
