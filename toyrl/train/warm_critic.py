"""A warm critic: the value critic fitted on the starting policy's own episodes before RL's first step.

Dimension legend: B rollouts (P tasks x G), H turns, D feature size.

toyrl's value critic (``credit.critics.TurnCritic`` on the policy's hidden states, ``CreditModels.values``) is
built at RL's first step and starts from its random initialization, outputting about 0 everywhere. PPO in RAGEN
and Turn-PPO (arXiv 2512.17008) start the critic from a pretrained model instead; a critic that knows nothing
gives GAE the advantages of "every state is worth 0" for as long as it takes to learn, on top of a policy that is
already competent (a BC or warm start). ``critic_warmup_steps = N`` closes that gap the cheap way: policy
evaluation before policy improvement,

    for k in 0..N-1:  episodes_k ~ pi_0 (frozen);  one regression step of V on their returns R_k
                      (``credit.fit.value_warmup``; L = 0.5 mean_valid (V(s) - R)^2, ``critics.value_loss``)

with the targets RL fits it to (Monte Carlo returns at ``critic_gamma``, ``TurnBatch.returns``), the critic's own
AdamW (RL goes on with it, moments kept) and the features RL reads (``credit_models.policy_features``). The
episodes come from an env core, task generator and torch generator of their own (independent rollouts at the
run's sampling settings), so the RL run's tasks and samples are those of a run without warm-up: two arms of one
seed differ only in the critic they start with. Example: ``TrainConfig(estimator="turn_gae", init="snake7",
env_kwargs={"size": 7, "layout": "snake"}, critic_warmup_steps=30)``; the trainer calls ``warm_critic`` at the
start of step 0 and keeps the losses in ``log.config["critic_warmup_losses"]``.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from ..credit.critics import value_loss
from ..credit.fit import value_warmup
from ..envs import make_core
from ..rollout.play import rollout
from .credit_models import policy_features

__all__ = ["check_warmup", "warm_critic", "start_episodes", "fresh_value_loss", "WARMUP_STREAM"]

WARMUP_STREAM = 11
"""the stream id of the warm-up's generators (tasks: default_rng([seed, 11]); samples: seed + 11; env core:
seed + 2_000_011), apart from training's (seed), the minibatch order's ([seed, 2]) and evaluation's"""


def check_warmup(steps, use_critic: bool) -> None:
    """Raise ValueError naming ``critic_warmup_steps`` unless it is an int >= 0, and > 0 only with a value critic."""
    if not isinstance(steps, (int, np.integer)) or isinstance(steps, bool) or steps < 0:
        raise ValueError(f"critic_warmup_steps must be an int >= 0 (0: no warm-up), got {steps!r}")
    if steps > 0 and not use_critic:
        raise ValueError(f"critic_warmup_steps={steps} fits a value critic, but this run has none: use an "
                         "estimator that declares the need 'values' (gae, turn_gae, ...) or critic=True")


def start_episodes(trainer, stream: int = WARMUP_STREAM):
    """A draw function k -> Rollout of P x G fresh independent episodes of ``trainer.policy`` (no gradient), on
    an env core and generators of stream ``stream`` (the training streams are not touched)."""
    cfg, P, G = trainer.cfg, trainer.cfg.prompts_per_step, trainer.cfg.group_size
    core = make_core(cfg.env, trainer.B, seed=cfg.seed + 2_000_000 + stream, **trainer.env_kwargs)
    rng = np.random.default_rng([cfg.seed, stream])
    gen = torch.Generator(device=trainer.device).manual_seed(cfg.seed + stream)
    sampling = replace(trainer.sampling, generator=gen)

    def draw(k: int):
        tasks = np.repeat(core.sample_tasks(rng, P), G, 0)
        group = -(k + 1) * P + np.repeat(np.arange(P), G)                      # negative ids: not training's
        trainer.policy.eval()
        return rollout(trainer.policy, core, tasks, group, codec=trainer.codec, sampling=sampling)
    return draw


def _targets(trainer, ro) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(state features (B, H, D), return targets (B, H), turn mask (B, H)) of a rollout: what RL fits on."""
    b = ro.batch
    _, state, _ = policy_features(trainer.policy, b)                            # detached
    return state, b.returns(trainer.models.gamma), b.turn_mask


def warm_critic(trainer, steps: int) -> list[float]:
    """Fit ``trainer.models.critic`` for ``steps`` regression steps on fresh episodes of the frozen policy -> the
    losses (each measured before its step, on a batch the critic had not seen). The policy's weights and the
    training RNG streams are left as they were."""
    check_warmup(steps, trainer.use_critic)
    if steps == 0:
        return []
    draw_ro = start_episodes(trainer)
    first = _targets(trainer, draw_ro(0))
    critic = trainer.models.value_critic(first[0].shape[-1], trainer.device)
    opt = trainer.models._opt("critic", critic)                                 # RL goes on with this AdamW
    return value_warmup(critic, opt, lambda k: first if k == 0 else _targets(trainer, draw_ro(k)), steps)


@torch.no_grad()
def fresh_value_loss(trainer, batches: int = 1, stream: int = WARMUP_STREAM + 1) -> float:
    """The value critic's loss 0.5 mean_valid (V - R)^2 on ``batches`` fresh batches of the current policy (a
    stream apart from the warm-up's and training's; no step). A critic not built yet is built as RL would."""
    draw_ro = start_episodes(trainer, stream)
    out = []
    for k in range(batches):
        state, ret, mask = _targets(trainer, draw_ro(k))
        out.append(float(value_loss(trainer.models.value_critic(state.shape[-1], trainer.device)(state), ret, mask)))
    return float(np.mean(out))
