"""Schemes that keep every token's gradient and act on its weight: CISPO, SAPO, GPG, Clip-Cov, KL-Cov, DRO, VESPO.

Dimension legend: B rollouts, T token positions. Same contract as ``clipping.py``:
``scheme(ratio, adv, *, <context>, <hyperparameters>) -> Clip`` on (B, T) tensors.

    cispo     l = -sg(clip(r, 1 - eps_low, 1 + eps_high)) A logp        MiniMax-M1, arXiv 2506.13585
    sapo      l = -(4 / tau) sigmoid(tau (r - 1)) A                     arXiv 2511.20347
    gpg       l = -A logp   (no ratio)                                  arXiv 2504.02546
    clip_cov  PPO, then a few high-covariance tokens lose their gradient     arXiv 2505.22617
    kl_cov    -A r, plus |d| on the top covariance tokens                    arXiv 2505.22617
    dro       l = -(A logp - (beta / 2) d^2)                            verl 0.9.1 ``dro``, arXiv 2405.19107
    vespo     l = -sg(phi(W)) A logp, W = prod_t r_t over the unit     arXiv 2602.10693 (TRL ``vespo``)
"""
from __future__ import annotations

import math

import torch

from .clipping import Clip, ppo
from .ratios import check_like

__all__ = ["cispo", "sapo", "gpg", "clip_cov", "kl_cov", "centered_cov", "dro", "vespo"]


def _none(x: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(x, dtype=torch.bool)


def cispo(ratio, adv, *, logp, eps_low: float = 1.0, eps_high: float = 0.28) -> Clip:
    """CISPO: clip the detached importance weight, never drop a token's gradient.

        l_t = -sg(clip(r_t, 1 - eps_low, 1 + eps_high)) A_t logp_t

    MiniMax-M1 sets no lower bound (eps_low = 1 -> bound 0) and tunes eps_high only; it gives no
    value, so eps_high = 0.28 (DAPO's) is our default. verl reads both from clip_ratio_low / high.
    Example: r [0.5, 1.0, 2.0], A = 1, logp = -1 -> weights [0.5, 1, 1.28] -> l [0.5, 1.0, 1.28].
    """
    check_like(ratio, "ratio", adv=adv, logp=logp)
    w = ratio.clamp(1.0 - eps_low, 1.0 + eps_high)                              # (B, T)
    return Clip(-w.detach() * adv * logp, ratio > 1.0 + eps_high, ratio < 1.0 - eps_low, _none(ratio))


def sapo(ratio, adv, *, tau_pos: float = 1.0, tau_neg: float = 1.05) -> Clip:
    """SAPO soft gate instead of a hard clip (verl defaults tau_pos = 1.0, tau_neg = 1.05).

        f(r) = (4 / tau) sigmoid(tau (r - 1)),  tau = tau_pos if A > 0 else tau_neg,  l = -f(r) A

    f(1) = 2 / tau and f'(1) = 1, so near r = 1 it is the plain surrogate; the gradient decays
    smoothly away from 1. Example: r [1, 1, 2], A [1, -1, 1] -> [-2.0, 1.9048, -2.9242].
    """
    check_like(ratio, "ratio", adv=adv)
    tau = torch.where(adv > 0, torch.full_like(adv, tau_pos), torch.full_like(adv, tau_neg))   # (B, T)
    return Clip(-(4.0 / tau) * torch.sigmoid(tau * (ratio - 1.0)) * adv, _none(ratio), _none(ratio), _none(ratio))


def gpg(ratio, adv, *, logp) -> Clip:
    """GPG: plain policy gradient, no ratio and no clip. l_t = -A_t logp_t.

    Example: logp [-1, -2, -0.5], A [1, -1, 2] -> [1, -2, 1].
    """
    check_like(ratio, "ratio", adv=adv, logp=logp)
    return Clip(-adv * logp, _none(adv), _none(adv), _none(adv))


def centered_cov(adv: torch.Tensor, logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-token covariance term (A - mean A)(logp - mean logp) over the mask tokens, detached (B, T).

    Example: A [1, -1], logp [-1, -3] (both masked) -> [1, 1].
    """
    check_like(adv, "adv", logp=logp, mask=mask)
    m = mask.to(adv.dtype)
    n = m.sum().clamp(min=1)
    a = adv.detach() - (adv.detach() * m).sum() / n
    lp = logp.detach() - (torch.where(mask, logp.detach(), torch.zeros_like(logp)) * m).sum() / n
    return torch.where(mask, a * lp, torch.zeros_like(a))


def clip_cov(ratio, adv, *, logp, mask, eps_low: float = 0.2, eps_high: float = 0.2, clip_cov_ratio: float = 2e-4,
             clip_cov_lb: float = 1.0, clip_cov_ub: float = 5.0, generator: torch.Generator | None = None) -> Clip:
    """Clip-Cov (Cui et al., arXiv 2505.22617; verl defaults): PPO, then detach a few tokens.

    Among unclipped mask tokens with clip_cov_lb < cov_t < clip_cov_ub, choose
    max(1, floor(clip_cov_ratio * N)) uniformly at random (``generator``) and zero their loss.
    Example: 3 tokens, cov [0.5, 2.0, 6.0] -> only the second is a candidate and it is detached.
    """
    base = ppo(ratio, adv, eps_low=eps_low, eps_high=eps_high)
    cov = centered_cov(adv, logp, mask)                                         # (B, T)
    cand = mask & ~(base.high | base.low) & (cov > clip_cov_lb) & (cov < clip_cov_ub)
    n = max(int(clip_cov_ratio * int(mask.sum())), 1)
    score = torch.rand(ratio.shape, generator=generator, device=ratio.device, dtype=torch.float32)
    score = torch.where(cand, score, torch.full_like(score, -1.0)).flatten()
    top = torch.topk(score, min(n, score.numel())).indices
    chosen = torch.zeros_like(score, dtype=torch.bool)
    chosen[top] = score[top] >= 0
    chosen = chosen.view_as(ratio)
    return base._replace(loss=torch.where(chosen, base.loss.detach() * 0, base.loss), extra=chosen)


def kl_cov(ratio, adv, *, logp, mask, token_log_ratio, kl_cov_ratio: float = 2e-4, ppo_kl_coef: float = 1.0) -> Clip:
    """KL-Cov (Cui et al., arXiv 2505.22617): unclipped surrogate plus |d| on top-covariance tokens.

        l_t = -A r_t + ppo_kl_coef |d_t|  for the top max(1, floor(kl_cov_ratio * N)) cov_t,  else -A r_t

    verl's function default ppo_kl_coef = 1 (its config default is 0.1).
    Example: cov [0.1, 3.0, 0.2], one token chosen -> the second gets + |d_2|.
    """
    cov = centered_cov(adv, logp, mask)
    k = max(1, int(int(mask.sum()) * kl_cov_ratio))
    score = torch.where(mask, cov, torch.full_like(cov, float("-inf"))).flatten()
    top = torch.topk(score, min(k, score.numel())).indices
    chosen = torch.zeros_like(score, dtype=torch.bool)
    chosen[top] = mask.flatten()[top]
    chosen = chosen.view_as(ratio)
    loss = -adv * ratio + torch.where(chosen, ppo_kl_coef * token_log_ratio.abs(), torch.zeros_like(ratio))
    return Clip(loss, _none(ratio), _none(ratio), chosen)


def dro(ratio, adv, *, logp, token_log_ratio, beta: float = 0.05) -> Clip:
    """DRO as verl 0.9.1 / Tinker: advantage-weighted log-likelihood minus a quadratic log-ratio penalty.

        l_t = -(A_t logp_t - (beta / 2) d_t^2),   d_t = logp_t - logp_old,t;  grad = -(A - beta d) grad logp

    No ratio and no clip: the penalty pulls logp back toward logp_old (stationary at d = A / beta).
    beta = 0.05 (verl PR 7245's and Tinker's example; verl's default is null and must be set > 0).
    Paper vs library: Richemond et al. (arXiv 2405.19107) regress a learned value with a log-ratio
    to a reference policy; verl's "dro" is this simplified penalty to the old policy.
    Example: A [1, -1, 0], logp [-1, -1, -1], d [0, 1, 2], beta 0.5 -> [1.0, -0.75, 1.0].
    """
    check_like(ratio, "ratio", adv=adv, logp=logp, token_log_ratio=token_log_ratio)
    if not beta > 0:
        raise ValueError(f"dro beta must be > 0, got {beta}")
    return Clip(-(logp * adv - 0.5 * beta * token_log_ratio.square()), _none(ratio), _none(ratio), _none(ratio))


def vespo(ratio, adv, *, logp, token_log_ratio, pool, k_pos: float = 2.0, lambda_pos: float = 3.0,
          k_neg: float = 3.0, lambda_neg: float = 2.0) -> Clip:
    """VESPO (arXiv 2602.10693; TRL ``loss_type="vespo"``): a gamma-shaped weight of the unit's full ratio.

        log W = clamp(sum_{t in unit} clamp(d_t, -20, 20), ln 1e-8, 20)       (a sum: the product ratio)
        phi(W) = exp(lambda + k log W - lambda W)                             (phi(1) = 1, peak at W = k / lambda)
        l_t = -sg(phi) A_t logp_t,   (k, lambda) = (2, 3) if A_t >= 0 else (3, 2)

    The unit is the trajectory by default (TRL: the completion); ``ratio="turn"`` weighs each turn
    by its own product ratio. NaN / inf weights become 0 (as TRL). TRL folds the vLLM importance
    ratio into W; here pass it as ``is_weights`` only if you want it multiplied instead.
    Example: one-token units, log W [0, ln 2, -50 -> ln 1e-8], A = 1, logp = -1 -> phi [1, 4 e^-3, ~0],
    l = [1.0, 0.1991, 0.0].
    """
    check_like(ratio, "ratio", adv=adv, logp=logp, token_log_ratio=token_log_ratio)
    log_w = pool(token_log_ratio.detach().clamp(-20.0, 20.0), "sum").clamp(math.log(1e-8), 20.0)   # (B, T)
    pos = adv >= 0
    k = torch.where(pos, torch.full_like(adv, k_pos), torch.full_like(adv, k_neg))
    lam = torch.where(pos, torch.full_like(adv, lambda_pos), torch.full_like(adv, lambda_neg)).clamp(min=1e-4)
    phi = torch.exp(lam + k * log_w - lam * torch.exp(log_w)).nan_to_num(0.0, 0.0, 0.0)
    return Clip(-phi * adv * logp, _none(ratio), _none(ratio), _none(ratio))
