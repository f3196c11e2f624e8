"""The config's defaults that depend on the policy, resolved in one place: ``TrainConfig`` leaves ``lr``, ``bc_lr``
and ``context`` as None ("the policy's own"), and ``resolve_defaults(cfg, policy)`` fills them in once the policy
is built (the Trainer does; the run log records the values used).

Learning rates depend on what is trained. 3e-3 suits the small models this project trains from scratch (toy
presets, TinyLM), for RL and for behaviour cloning alike. A pretrained LLM trained in full at that rate forgets its
language within a few steps (SmolLM2-135M after 8 BC steps at 3e-3: 99% of its turns void), so an hf policy
clones at 1e-4 (the order of supervised fine-tuning of models this size) and takes RL steps ten times smaller, 1e-5;
LoRA adapters, which start at zero and move a rank-r slice only, take ten times more (1e-3 and 1e-4).

The context: a TinyLM checkpoint records the context it was trained with (``TinyLM.trained_context``), and a run
that names none reads what its policy learned on; every other policy reads the full history.
"""
from __future__ import annotations

from dataclasses import replace

from .build import is_hf_policy

__all__ = ["LR", "BC_LR", "policy_kind", "learning_rate", "bc_learning_rate", "fused_adamw", "resolve_rates",
           "resolve_context", "resolve_defaults"]

LR = {"scratch": 3e-3, "hf": 1e-5, "hf_lora": 1e-4}
"""RL's default learning rate: toy presets and TinyLM | a pretrained hf policy in full | its LoRA adapters"""
BC_LR = {"scratch": 3e-3, "hf": 1e-4, "hf_lora": 1e-3}
"""behaviour cloning's default learning rate, by the same kinds"""


def policy_kind(cfg) -> str:
    """Which row of ``LR`` / ``BC_LR`` a config's policy takes: "scratch" (a toy preset or TinyLM), "hf" (a
    pretrained Hugging Face model: ``hf:PATH`` or a zoo name such as smollm2), "hf_lora" (one with lora_r > 0)."""
    if not is_hf_policy(cfg.policy):
        return "scratch"
    return "hf_lora" if cfg.lora_r else "hf"


def learning_rate(cfg) -> float:
    """RL's learning rate: ``cfg.lr`` when set, else ``LR`` of the policy's kind.
    Example: TrainConfig(policy="smollm2") -> 1e-5; with lora_r=8 -> 1e-4; policy="tiny" -> 3e-3."""
    return float(cfg.lr) if cfg.lr is not None else LR[policy_kind(cfg)]


def bc_learning_rate(cfg) -> float:
    """Behaviour cloning's learning rate: ``cfg.bc_lr`` when set, else ``BC_LR`` of the policy's kind.
    Example: TrainConfig(policy="smollm2") -> 1e-4; with lora_r=8 -> 1e-3; policy="tiny" -> 3e-3."""
    return float(cfg.bc_lr) if cfg.bc_lr is not None else BC_LR[policy_kind(cfg)]


def fused_adamw(cfg) -> bool:
    """Whether the run's AdamW (RL and BC) takes torch's fused one-kernel step (``toyrl.train.optim.adamw``): for hf
    policies, whose step over every weight of a pretrained LLM it shortens; not for the models trained from
    scratch, so their stored runs replay bit for bit. Example: TrainConfig(policy="smollm2") -> True."""
    return policy_kind(cfg) != "scratch"


def resolve_rates(cfg):
    """``cfg`` with ``lr`` and ``bc_lr`` filled in (``learning_rate``, ``bc_learning_rate``); the same object when
    both are set. Example: resolve_rates(TrainConfig(policy="smollm2", lora_r=8)) -> lr 1e-4, bc_lr 1e-3."""
    if cfg.lr is not None and cfg.bc_lr is not None:
        return cfg
    return replace(cfg, lr=learning_rate(cfg), bc_lr=bc_learning_rate(cfg))


def resolve_context(cfg, policy):
    """``cfg`` itself if it names a context; else a copy with the policy's own ``(context, context_k)``
    (``policy.trained_context``, e.g. ("last_k", 1) of the shipped TinyLM checkpoint) or ``full``."""
    if cfg.context is not None:
        return cfg
    own = getattr(policy, "trained_context", None)
    return replace(cfg, context=own[0], context_k=int(own[1])) if own else replace(cfg, context="full")


def resolve_defaults(cfg, policy):
    """``cfg`` with every policy-dependent default filled in: the context (``resolve_context``), then the learning
    rates (``resolve_rates``); the same object when all are set. Example: TrainConfig(policy="tiny") and its policy
    -> context "full", lr 3e-3, bc_lr 3e-3."""
    return resolve_rates(resolve_context(cfg, policy))
