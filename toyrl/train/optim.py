"""The optimizer loop's small pieces: the learning rates a policy starts with, their warmup, and how far one
update moved the weights.

The rates depend on what is trained. 3e-3 suits the small models this project trains from scratch (toy presets,
TinyLM), for RL and for behaviour cloning alike. A pretrained LLM trained in full at that rate forgets its language
within a few steps (SmolLM2-135M after 8 BC steps at 3e-3: 99% of its turns void), so an hf policy clones at 1e-4
(the order of supervised fine-tuning of models this size) and takes RL steps ten times smaller, 1e-5; LoRA
adapters, which start at zero and move a rank-r slice only, take ten times more (1e-3 and 1e-4). ``resolve_rates``
turns a config's ``lr=None`` / ``bc_lr=None`` into these, and the run log records the rates used.

``update_norm`` is what makes AdamW's momentum visible: on a step whose gradient is exactly zero (every group
silent) the weights still move, by the length it reports.
"""
from __future__ import annotations

from dataclasses import replace

import torch

from .build import is_hf_policy

__all__ = ["LR", "BC_LR", "policy_kind", "learning_rate", "bc_learning_rate", "resolve_rates", "warmup_lr",
           "update_norm"]

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


def resolve_rates(cfg):
    """``cfg`` with ``lr`` and ``bc_lr`` filled in (``learning_rate``, ``bc_learning_rate``); the same object when
    both are set. Example: resolve_rates(TrainConfig(policy="smollm2", lora_r=8)) -> lr 1e-4, bc_lr 1e-3."""
    if cfg.lr is not None and cfg.bc_lr is not None:
        return cfg
    return replace(cfg, lr=learning_rate(cfg), bc_lr=bc_learning_rate(cfg))


def warmup_lr(step: int, lr: float, warmup: int) -> float:
    """Linear learning-rate warmup (Goyal et al., arXiv 1706.02677; for Adam's early steps see RAdam, 1908.03265).

        lr_k = lr * min(1, (k + 1) / W)        (W = warmup; W = 0: lr_k = lr)

    ``step`` is k, the 0-based index of the optimizer update. Example: lr 1e-3, warmup 4 -> updates 0, 1, 2, 3, 4
    get 2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3.
    """
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be an integer >= 0, got {step!r}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be an integer >= 0, got {warmup!r}")
    if not lr > 0:
        raise ValueError(f"lr must be a number > 0, got {lr!r}")
    return lr if warmup == 0 else lr * min(1.0, (step + 1) / warmup)


def update_norm(before: list, after: list) -> float:
    """The length of one optimizer update: the L2 norm of the change of every parameter, taken together.

        ||theta_after - theta_before||_2 = sqrt( sum_k sum_j (after_k[j] - before_k[j])^2 )

    Example: before [tensor([0., 0.]), tensor([1.])], after [tensor([3., 0.]), tensor([5.])] -> 5.0.
    """
    if len(before) != len(after):
        raise ValueError(f"before and after must hold as many tensors, got {len(before)} and {len(after)}")
    for k, (b, a) in enumerate(zip(before, after)):
        if b.shape != a.shape:
            raise ValueError(f"before[{k}] and after[{k}] must have one shape, "
                             f"got {tuple(b.shape)} and {tuple(a.shape)}")
    sq = [(a.detach().float() - b.detach().float()).pow(2).sum() for b, a in zip(before, after)]   # one per tensor
    return torch.stack(sq).sum().sqrt().item() if sq else 0.0
