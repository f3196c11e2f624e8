"""Behaviour cloning: the loss the trainer's warm start (``Trainer.behaviour_clone``) minimises on the
shipped demonstrations (``toyrl.envs.experts``); TinyLM's pretraining (``toyrl.train.pretrain``) weights
the same negative log-likelihood by how often each example repeats.

The learning rate (``bc_learning_rate``) depends on what is cloned into: 3e-3 suits the small models this
project trains from scratch (toy presets, TinyLM); a pretrained LLM fine-tuned in full at that rate forgets its
language within a few steps (SmolLM2-135M after 8 steps at 3e-3: 99% of its turns void), so an hf policy clones at
1e-4 (the order of the learning rates of supervised fine-tuning of models this size), and its LoRA adapters,
which start at zero and move a rank-r slice only, at 1e-3."""
from __future__ import annotations

import torch

__all__ = ["bc_loss", "BC_LR", "bc_learning_rate"]

BC_LR = {"scratch": 3e-3, "hf": 1e-4, "hf_lora": 1e-3}
"""behaviour cloning's default learning rate: toy presets and TinyLM | a pretrained hf policy in full | its LoRA"""


def bc_loss(logp: torch.Tensor, policy_mask: torch.Tensor) -> torch.Tensor:
    """Behaviour cloning: mean negative log-likelihood of the expert's policy tokens.

        L_BC = - sum_{i,t} m_{i,t} log pi(y_{i,t} | y_{i,<t}) / sum_{i,t} m_{i,t}

    Example: logp [[-1., -3.]] with mask [[1, 1]] -> 2.0.
    """
    m = policy_mask.to(logp.dtype)
    return -(logp * m).sum() / m.sum().clamp(min=1)


def bc_learning_rate(cfg) -> float:
    """The learning rate of behaviour cloning: ``cfg.bc_lr`` when set, else ``BC_LR`` of the policy's kind.
    Example: TrainConfig(policy="smollm2") -> 1e-4; with lora_r=8 -> 1e-3; policy="tiny" -> 3e-3."""
    from .build import is_hf_policy
    if cfg.bc_lr is not None:
        return float(cfg.bc_lr)
    if not is_hf_policy(cfg.policy):
        return BC_LR["scratch"]
    return BC_LR["hf_lora"] if cfg.lora_r else BC_LR["hf"]
