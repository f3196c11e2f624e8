"""Behaviour cloning: the loss the trainer's warm start (``Trainer.behaviour_clone``) minimises on the
shipped demonstrations (``toyrl.envs.experts``); TinyLM's pretraining (``toyrl.train.pretrain``) weights
the same negative log-likelihood by how often each example repeats."""
from __future__ import annotations

import torch

__all__ = ["bc_loss"]


def bc_loss(logp: torch.Tensor, policy_mask: torch.Tensor) -> torch.Tensor:
    """Behaviour cloning: mean negative log-likelihood of the expert's policy tokens.

        L_BC = - sum_{i,t} m_{i,t} log pi(y_{i,t} | y_{i,<t}) / sum_{i,t} m_{i,t}

    Example: logp [[-1., -3.]] with mask [[1, 1]] -> 2.0.
    """
    m = policy_mask.to(logp.dtype)
    return -(logp * m).sum() / m.sum().clamp(min=1)
