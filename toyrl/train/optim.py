"""The optimizer loop's small pieces: the policy's AdamW, the learning-rate warmup and how far one update moved
the weights. The learning rates a policy starts with live in ``toyrl.train.defaults`` (``LR``, ``BC_LR``).

``update_norm`` is what makes AdamW's momentum visible: on a step whose gradient is exactly zero (every group
silent) the weights still move, by the length it reports.
"""
from __future__ import annotations

import torch


__all__ = ["warmup_lr", "update_norm", "step_and_measure", "adamw"]

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


def step_and_measure(opt: torch.optim.Optimizer) -> float:
    """Take ``opt.step()`` and return how far it moved the weights, ``update_norm(before, after)``.

        ||theta' - theta||_2 over every parameter with a gradient (AdamW moves one on a zero gradient too)

    Example: SGD(lr 0.5) on w = [0, 0] with gradient [-6, -8] -> 5.0.
    """
    params = [p for g in opt.param_groups for p in g["params"] if p.grad is not None]
    before = [p.detach().clone() for p in params]
    opt.step()
    return update_norm(before, params)


def adamw(params, lr: float, fused: bool = False) -> torch.optim.Optimizer:
    """The policy's AdamW (no weight decay). ``fused``: torch's one-kernel step where this torch and device have
    it (CPU since torch 2.4), else the per-tensor loop: the same update at float rounding, in fewer kernel launches.
    Which runs fuse: ``defaults.fused_adamw``.
    Example: adamw(model.parameters(), 1e-5, fused=True)."""
    params = list(params)
    if fused:
        try:
            return torch.optim.AdamW(params, lr=lr, weight_decay=0.0, fused=True)
        except (RuntimeError, ValueError, TypeError):                               # no fused kernel here
            pass
    return torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
