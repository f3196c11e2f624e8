"""Divergence-masked policy gradients: DPPO-Binary-TV and DPPO-Binary-KL (Qi et al., arXiv 2602.04879).

Dimension legend: B rollouts, T token positions. Same contract as ``clipping.py``:
``scheme(ratio, adv, *, <context>, <hyperparameters>) -> Clip`` on (B, T) tensors.

Ratio clipping bounds r = p / p_old, which over-penalizes rare tokens (a small p_old makes r move a
lot for a tiny change of probability) and under-penalizes confident ones. DPPO masks a token
instead when a direct estimate of the policy divergence on the sampled token leaves a trust
region, and only in the direction the advantage pushes:

    l_t = -A_t sg(min(r_t, C)) logp_t valid_t            (valid detached; gradient -A min(r, C) grad logp)

The loss value is not the PPO surrogate (do not compare loss curves); its gradient equals the
unclipped PPO gradient wherever r < C and the token is valid. ``high`` marks masked tokens with
A > 0, ``low`` masked tokens with A <= 0, ``extra`` valid tokens whose weight was capped at C.

Paper vs library: the paper's full method uses a Top-K divergence over the vocabulary (only in
sail-sg/Stable-RL); verl 0.9.1 ships the binary (sampled token vs the rest) forms below, which we
follow. verl reads delta_low / delta_high from the actor's clip_ratio_low / high and C from
clip_ratio_c (config default 3.0, code fallback 20.0, the DPPO recipe 1e4); our C default is 20.
"""
from __future__ import annotations

import torch

from .clipping import Clip
from .ratios import check_like

__all__ = ["dppo_tv", "dppo_kl", "binary_kl"]


def _masked_pg(ratio, adv, logp, valid, cap: float) -> Clip:
    """-A sg(min(r, C)) logp on valid tokens; the Clip masks of the module docstring."""
    w = ratio.clamp(max=cap).detach()                                           # (B, T) truncated IS weight
    loss = -adv * w * logp * valid.to(logp.dtype)
    pos = adv > 0
    return Clip(loss, ~valid & pos, ~valid & ~pos, valid & (ratio > cap))


def dppo_tv(ratio, adv, *, logp, old_logp, delta_low: float = 0.15, delta_high: float = 0.15,
            cap: float = 20.0) -> Clip:
    """DPPO-Binary-TV: mask a token whose probability moved by more than delta in the advantage's direction.

        valid_t = (p_t - p_old,t <= delta_high)  if A_t > 0  else  (p_t - p_old,t >= -delta_low)
        l_t = -A_t sg(min(r_t, C)) logp_t valid_t,     p = exp(logp), C = 20

    Defaults: delta 0.15 / 0.15 (verl's DPPO recipe). A = 0 falls in the second branch (loss 0 anyway).
    Example: p_old [0.5, 0.5, 0.5], p [0.6, 0.8, 0.2] (r [1.2, 1.6, 0.4]), A = 1, logp = log p ->
    valid [T, F, T]; l = -r logp = [0.6130, 0, 0.6438].
    """
    check_like(ratio, "ratio", adv=adv, logp=logp, old_logp=old_logp)
    dp = (torch.exp(logp) - torch.exp(old_logp)).detach()                       # (B, T)
    valid = torch.where(adv > 0, dp <= delta_high, dp >= -delta_low)
    return _masked_pg(ratio, adv, logp, valid, cap)


def binary_kl(logp: torch.Tensor, old_logp: torch.Tensor) -> torch.Tensor:
    """KL(old || new) of the two-outcome distribution (sampled token, everything else), detached (B, T).

        D = p_old (logp_old - logp) + (1 - p_old) log((1 - p_old + 1e-8) / (1 - p + 1e-8))

    Example: p_old 0.5, p 0.8 -> 0.5 log(0.625) + 0.5 log(2.5) = 0.2231.
    """
    lp, lo = logp.detach(), old_logp.detach()
    p, po = torch.exp(lp), torch.exp(lo)
    return po * (lo - lp) + (1.0 - po) * torch.log((1.0 - po + 1e-8) / (1.0 - p + 1e-8))


def dppo_kl(ratio, adv, *, logp, old_logp, delta_low: float = 0.05, delta_high: float = 0.05,
            cap: float = 20.0) -> Clip:
    """DPPO-Binary-KL: mask a token whose binary KL exceeds delta while moving in the advantage's direction.

        valid_t = (D_t <= delta_high) or (p_t <= p_old,t)   if A_t > 0
        valid_t = (D_t <= delta_low)  or (p_t >= p_old,t)   if A_t <= 0
        l_t = -A_t sg(min(r_t, C)) logp_t valid_t           (D = ``binary_kl``)

    Defaults: delta 0.05 / 0.05 (verl's DPPO recipe), C = 20.
    Example: p_old [0.5, 0.5, 0.5], p [0.55, 0.8, 0.2], A = 1 -> D [0.005, 0.2231, 0.2231]; valid
    [T, F, T] (the third moved against A, so it stays); l = -r logp = [0.6576, 0, 0.6438].
    """
    check_like(ratio, "ratio", adv=adv, logp=logp, old_logp=old_logp)
    D = binary_kl(logp, old_logp)                                               # (B, T)
    p, po = torch.exp(logp.detach()), torch.exp(old_logp.detach())
    valid = torch.where(adv > 0, (D <= delta_high) | (p <= po), (D <= delta_low) | (p >= po))
    return _masked_pg(ratio, adv, logp, valid, cap)
