"""Behaviour cloning: the negative log-likelihood of an expert's turns, and the trainer's warm start on it.

``behaviour_clone(trainer, steps)`` clones the shipped demonstrations (``toyrl.envs.experts``) or the planner into
the trainer's policy before RL; TinyLM's pretraining (``toyrl.train.pretrain``) weights the same ``bc_loss`` by how
often each example repeats. Its learning rate depends on what is cloned into (``toyrl.train.defaults.BC_LR``).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from ..envs.experts import DEMO_CONFIGS, expert_memo, load_demos, noisy_expert
from ..policies.scripted import ScriptedPolicy, replay_chooser
from ..rollout.flatten import recompute_logp
from ..rollout.play import rollout
from .defaults import fused_adamw
from .optim import adamw

__all__ = ["bc_loss", "behaviour_clone"]


def bc_loss(logp: torch.Tensor, policy_mask: torch.Tensor) -> torch.Tensor:
    """Behaviour cloning: mean negative log-likelihood of the expert's policy tokens.

        L_BC = - sum_{i,t} m_{i,t} log pi(y_{i,t} | y_{i,<t}) / sum_{i,t} m_{i,t}

    Example: logp [[-1., -3.]] with mask [[1, 1]] -> 2.0.
    """
    m = policy_mask.to(logp.dtype)
    return -(logp * m).sum() / m.sum().clamp(min=1)


def _demos(cfg):
    """The shipped demonstrations of ``cfg.env`` when they fit its settings and the teacher is not noisy, else None."""
    if cfg.env not in DEMO_CONFIGS or cfg.env_kwargs != DEMO_CONFIGS[cfg.env] or cfg.bc_noise:
        return None
    try:
        return load_demos(cfg.env)
    except FileNotFoundError:
        return None


def behaviour_clone(trainer, steps: int) -> list[float]:
    """``steps`` AdamW updates of ``bc_loss`` on expert episodes -> the losses.

    The expert replays the shipped demos when they fit the env's settings (``bc_noise`` 0), else plays the planner
    on freshly drawn tasks (a random action with probability ``bc_noise``), writing ``expert_memo`` as reasoning
    with ``bc_reasoning``. With ``bc_optimizer="continue"`` RL goes on with this AdamW (``trainer.opt``: moments and
    step count kept, lr set to ``lr``). Example: ``behaviour_clone(Trainer(TrainConfig(bc_steps=3)), 3)`` -> 3 losses.
    """
    cfg, B, losses = trainer.cfg, trainer.B, []
    demos = _demos(cfg)
    opt = adamw(trainer.policy.parameters(), cfg.bc_lr, fused=fused_adamw(cfg))
    s = replace(trainer.sampling, temperature=1.0, tti=None, t2po_eta=0.0, generator=None)   # the expert's turns
    memo = expert_memo if cfg.bc_reasoning else None
    for _ in range(steps):
        if demos:
            pick = trainer.rng.choice(len(demos), B)
            tasks = np.array([demos[i]["task"] for i in pick])
            choose = replay_chooser([demos[i]["actions"] for i in pick])
        else:
            tasks, choose = trainer.core.sample_tasks(trainer.rng, B), noisy_expert(cfg.bc_noise, trainer.rng)
        expert = ScriptedPolicy(trainer.core, trainer.codec, choose, trainer.device, reason=memo)
        ro = rollout(expert, trainer.core, tasks, np.arange(B), codec=trainer.codec, sampling=s)
        logp, _ = recompute_logp(trainer.policy, ro, "matched")
        loss = bc_loss(logp, ro.batch.policy_mask)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    if cfg.bc_optimizer == "continue":
        for g in opt.param_groups:
            g["lr"] = cfg.lr
        trainer.opt = opt
    return losses
