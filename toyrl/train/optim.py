"""The optimizer loop's small pieces: the learning-rate warmup and how far one update moved the weights. The
learning rates a policy starts with (``LR``, ``BC_LR``, ``resolve_rates``) live with the config's other
policy-dependent defaults in ``toyrl.train.defaults`` and are re-exported here.

``update_norm`` is what makes AdamW's momentum visible: on a step whose gradient is exactly zero (every group
silent) the weights still move, by the length it reports.
"""
from __future__ import annotations

import torch

from .defaults import BC_LR, LR, bc_learning_rate, learning_rate, policy_kind, resolve_rates

__all__ = ["LR", "BC_LR", "policy_kind", "learning_rate", "bc_learning_rate", "resolve_rates", "warmup_lr",
           "update_norm", "step_and_measure", "adamw"]

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


def step_and_measure(opt: torch.optim.Optimizer, chunk: int = 1 << 20) -> float:
    """Take ``opt.step()`` and return ``update_norm`` of that step, without a copy of the weights for AdamW.

    AdamW (no amsgrad, not maximize) moves each parameter by, with the step's moments m, v and count t,

        theta' = theta (1 - lr wd) - s m / d,   s = lr / (1 - beta1^t),   d = sqrt(v) / sqrt(1 - beta2^t) + eps

    so theta' - theta = -lr wd theta - s m / d, and theta = (theta' + s m / d) / (1 - lr wd) is read back after the
    step, ``chunk`` elements at a time in one reused buffer, instead of a snapshot of all the weights (a full
    fine-tune of a 135M model: 0.54 GB) or a fresh temporary per parameter (whose new pages cost more than the
    arithmetic). Any other optimizer: a snapshot, then ``update_norm``. Both agree within float rounding.
    Example: AdamW(lr 0.1) on one weight with gradient 1 at step 1: m / d = 0.1 / (0.1 + 1e-8 / sqrt(0.001)) -> 0.1.
    """
    groups = [(g, p) for g in opt.param_groups for p in g["params"] if p.grad is not None]
    plain = (isinstance(opt, torch.optim.AdamW) and not any(g["amsgrad"] or g["maximize"] for g in opt.param_groups)
             and all(g["weight_decay"] == 0 or g["lr"] * g["weight_decay"] < 1 for g in opt.param_groups))
    if not plain:
        params = [p for _, p in groups]
        before = [p.detach().clone() for p in params]
        opt.step()
        return update_norm(before, params)
    opt.step()
    sq, bufs, most = 0.0, {}, min(max((p.numel() for _, p in groups), default=0), chunk)
    for g, p in groups:
        st = opt.state[p]
        (b1, b2), lr, wd, t = g["betas"], float(g["lr"]), float(g["weight_decay"]), float(st["step"])
        v, m, theta = (x.detach().reshape(-1) for x in (st["exp_avg_sq"], st["exp_avg"], p))
        if (v.dtype, v.device) not in bufs:                                       # one buffer, reused: no new pages
            bufs[v.dtype, v.device] = v.new_empty(most)
        buf = bufs[v.dtype, v.device]
        for i in range(0, v.numel(), chunk):
            vi = v[i:i + chunk]
            move = torch.sqrt(vi, out=buf[:len(vi)])
            move.mul_((1 - b2 ** t) ** -0.5).add_(g["eps"])                         # d
            torch.div(m[i:i + chunk], move, out=move).mul_(lr / (1 - b1 ** t))     # s m / d
            if wd:
                move.add_(theta[i:i + chunk] + move, alpha=lr * wd / (1 - lr * wd))   # + lr wd theta (read back)
            sq = sq + torch.linalg.vector_norm(move).double().square()
    return float(sq) ** 0.5


def adamw(params, lr: float, fused: bool = False) -> torch.optim.Optimizer:
    """The policy's AdamW (no weight decay). ``fused``: torch's one-kernel step where this torch and device have
    it (CPU since torch 2.4), else the per-tensor loop. The same update at float rounding; a full fine-tune of
    SmolLM2-135M steps in 0.07 s instead of 0.4-1.2 s (2 threads). Which runs fuse: ``defaults.fused_adamw``.
    Example: adamw(model.parameters(), 1e-5, fused=True)."""
    params = list(params)
    if fused:
        try:
            return torch.optim.AdamW(params, lr=lr, weight_decay=0.0, fused=True)
        except (RuntimeError, ValueError, TypeError):                               # no fused kernel here
            pass
    return torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
