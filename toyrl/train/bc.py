"""Behaviour cloning: the loss the trainer's warm start (``Trainer.behaviour_clone``) minimises on the
shipped demonstrations (``toyrl.envs.experts``); TinyLM's pretraining (``toyrl.train.pretrain``) weights
the same negative log-likelihood by how often each example repeats.

Its learning rate depends on what is cloned into (``toyrl.train.optim.bc_learning_rate``: 3e-3 for the small
models trained from scratch, 1e-4 for a pretrained LLM, 1e-3 for its LoRA adapters)."""
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

