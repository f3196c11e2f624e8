"""Clipping schemes of the PPO family: a pessimistic min over a clipped and an unclipped surrogate.

Dimension legend: B rollouts, T token positions, H turns.

Every scheme is a pure function ``scheme(ratio, adv, *, <context>, <hyperparameters>) -> Clip`` on
(B, T) tensors: ``ratio`` is already at the chosen level (token / turn / sequence / trajectory,
see ``ratios.py``) and ``adv`` is broadcast to tokens. ``Clip`` carries the token loss l (to be
aggregated) and three boolean masks: ``high`` (upper bound active), ``low`` (lower bound active)
and ``extra`` (the scheme's own intervention: the dual-clip bound, a covariance selection).

The shared core is one line (PPO, arXiv 1707.06347), ``clipped_surrogate``:

    l = -min(r A, clip(r, lo, hi) A)

and the schemes below differ only in lo / hi (``ppo``, ``loop``, ``a2tgpo``), in what is done to l
afterwards (``dual_clip``, ``sorl``, ``tis``), or in where the clip happens (``gmpo``, log space).
Context arguments (``mask``, ``turn_id``, ``token_log_ratio``, ``pool``, ``log_clamp``,
``old_logp``, ``rollout_logp``) are filled in by ``policy_loss`` from the names in the signature.
"""
from __future__ import annotations

from typing import NamedTuple

import torch

from ..batch import turn_to_token
from .ratios import check_like, clamp_log
from .rollout_correction import tis_weights

__all__ = ["Clip", "clipped_surrogate", "ppo", "dual_clip", "loop", "sorl", "a2tgpo", "tis",
           "gmpo"]


class Clip(NamedTuple):
    loss: torch.Tensor
    """(B, T) token loss before aggregation."""
    high: torch.Tensor
    """(B, T) bool: the upper clip bound is active (gradient cut / weight capped from above)."""
    low: torch.Tensor
    """(B, T) bool: the lower clip bound is active."""
    extra: torch.Tensor
    """(B, T) bool: the scheme's own intervention (dual-clip bound, covariance selection)."""


def clipped_surrogate(ratio: torch.Tensor, adv: torch.Tensor, lo, hi) -> Clip:
    """l = -min(r A, clip(r, lo, hi) A); lo / hi are floats or (B, T) tensors (PPO: 1 - eps_low, 1 + eps_high).

    A bound is *active* when the clipped term wins strictly: clip(r) A < r A (verl's clipfrac);
    there the gradient through r is cut. Example: r [0.5, 1.0, 1.5], A [1, -1, 1], lo 0.8, hi 1.2 ->
    l [-0.5, 1.0, -1.2], high [F, F, T].
    """
    check_like(ratio, "ratio", adv=adv)
    r_clip = torch.clamp(ratio, lo, hi) if isinstance(lo, torch.Tensor) else ratio.clamp(lo, hi)   # (B, T)
    surr, surr_clip = ratio * adv, r_clip * adv                                 # (B, T) the two surrogates
    active = surr_clip < surr                                                   # the pessimistic min takes the clip
    return Clip(-torch.minimum(surr, surr_clip), active & (ratio > 1), active & (ratio < 1), torch.zeros_like(active))


def ppo(ratio, adv, *, eps_low: float = 0.2, eps_high: float = 0.2) -> Clip:
    """PPO clip (arXiv 1707.06347); with eps_high > eps_low it is DAPO's clip-higher (arXiv 2503.14476).

        l = -min(r A, clip(r, 1 - eps_low, 1 + eps_high) A)                          # Eq. 7

    Defaults 0.2 / 0.2; ``clip_higher`` is this function with eps_high = 0.28 (DAPO, StarPO-S).
    Example: r [0.5, 1.0, 1.5], A [1, -1, 1] -> [-0.5, 1.0, -1.2], only the third token clipped.
    """
    return clipped_surrogate(ratio, adv, 1.0 - eps_low, 1.0 + eps_high)


def dual_clip(ratio, adv, *, eps_low: float = 0.2, eps_high: float = 0.2, c: float = 3.0) -> Clip:
    """Dual-clip PPO (Ye et al., arXiv 1912.09729): for A < 0 also bound the loss by -c A.

        l = min(l_ppo, -c A)  if A < 0  else l_ppo,   c = 3 (verl ``clip_ratio_c``)

    Example: r [4.0, 2.0, 0.5], A [-1, -1, -1] -> [3.0, 2.0, 0.8]; ``extra`` (dual) on the first token.
    """
    if not c > 1.0:
        raise ValueError(f"dual-clip c must be > 1, got {c}")
    base = ppo(ratio, adv, eps_low=eps_low, eps_high=eps_high)
    l3 = -adv * c
    neg = adv < 0
    return base._replace(loss=torch.where(neg, torch.minimum(base.loss, l3), base.loss), extra=neg & (base.loss > l3))


def loop(ratio, adv, *, eps: float = 0.2) -> Clip:
    """LOOP's asymmetric multiplicative clip (arXiv 2502.01600): bounds [1 / (1 + eps), 1 + eps].

    Used at token level (LOOP token) or trajectory level (LOOP bandit, ratio = prod_t r_t).
    eps = 0.2 is the PPO default (the release's value was not confirmed).
    Example: r [0.5, 1.1, 1.5], A [-1, 1, 1] -> [0.8333, -1.1, -1.2].
    """
    return clipped_surrogate(ratio, adv, 1.0 / (1.0 + eps), 1.0 + eps)


def sorl(ratio, adv, *, mask, eps_low: float = 0.2, eps_high: float = 0.2, kappa: float = 1.0,
         phi0: float = 0.0, scope: str = "batch") -> Clip:
    """SORL / ST-PPO (arXiv 2511.20718): turn-level ratio, PPO clip, clipping-triggered normalization.

        l_k = ppo(r_k, A) * s,   s = 1 / (1 + kappa * phi)  if phi > phi0  else 1

    phi = (detached) fraction of loss tokens whose turn is clipped, over the batch (``scope="batch"``)
    or over each trajectory (``scope="trajectory"``). [S] The paper's exact normalizer is not
    public; this is the pluggable rescale of FORMULAS.md 2.6 with kappa = 1, phi0 = 0 (our choice).
    Example: r [1.5, 1.5, 1.0] (turn 0 = tokens 0-1), A = 1 -> base [-1.2, -1.2, -1.0], phi = 2/3,
    s = 0.6 -> [-0.72, -0.72, -0.6].
    """
    base = ppo(ratio, adv, eps_low=eps_low, eps_high=eps_high)
    clipped = ((base.high | base.low) & mask).to(ratio.dtype)                   # (B, T)
    if scope == "batch":
        phi = clipped.sum() / mask.sum().clamp(min=1)
    elif scope == "trajectory":
        phi = clipped.sum(1, keepdim=True) / mask.sum(1, keepdim=True).clamp(min=1)   # (B, 1)
    else:
        raise ValueError(f"sorl scope must be 'batch' or 'trajectory', got {scope!r}")
    scale = torch.where(phi > phi0, 1.0 / (1.0 + kappa * phi), torch.ones_like(phi)).detach()
    return base._replace(loss=base.loss * scale)


def a2tgpo(ratio, adv, *, turn_id, z, eps: float = 0.2, kappa: float = 0.5) -> Clip:
    """A2TGPO adaptive turn clip range (arXiv 2605.06200): wider bounds for informative turns.

        eps_{i,k} = eps * h(z_{i,k}),   h(z) = 1 + kappa * tanh(z)                  # [S]
        l = -min(r A, clip(r, 1 - eps_{i,k}, 1 + eps_{i,k}) A)

    z (B, H) is the group-normalized information gain of each turn (same prompt, same turn index).
    [S] h is only said to be increasing; tanh keeps eps in [eps (1 - kappa), eps (1 + kappa)].
    Example: z [0, +inf, -inf], eps 0.2 -> ranges [0.2, 0.3, 0.1]; r = 1.25, A = 1 -> [-1.2, -1.25, -1.1].
    """
    if z.dim() != 2 or z.shape[0] != ratio.shape[0]:
        raise ValueError(f"a2tgpo z must be (B, H) with B={ratio.shape[0]}, got {tuple(z.shape)}")
    if not 0.0 <= kappa < 1.0:
        raise ValueError(f"a2tgpo kappa must lie in [0, 1), got {kappa}")
    e = eps * (1.0 + kappa * torch.tanh(turn_to_token(z.to(ratio.dtype), turn_id)))   # (B, T)
    return clipped_surrogate(ratio, adv, 1.0 - e, 1.0 + e)


def tis(ratio, adv, *, old_logp, rollout_logp, mask, turn_id, eps_low: float = 0.2, eps_high: float = 0.2,
        cap: float = 2.0, tis_level: str = "token") -> Clip:
    """PPO times truncated importance weights for the rollout-engine mismatch (Yao et al. 2025).

        l = sg(min(pi_old / pi_rollout, C)) * l_ppo,   C = 2                      (decoupled form)

    ``tis_level`` token (per-token weight) or sequence (one weight per trajectory).
    Example: r = 1, A = 1, old_logp 0, rollout_logp [0, -1, 1] -> weights [1, 2, .3679] -> [-1, -2, -.3679].
    """
    if rollout_logp is None:
        raise ValueError("clip='tis' needs rollout_logp (B, T), the rollout engine's log-probs")
    w = tis_weights(old_logp, rollout_logp, mask, turn_id, cap=cap, level=tis_level)
    base = ppo(ratio, adv, eps_low=eps_low, eps_high=eps_high)
    return base._replace(loss=base.loss * w)


def gmpo(ratio, adv, *, token_log_ratio, pool, log_clamp, eps_low: float = 0.4, eps_high: float = 0.4) -> Clip:
    """GMPO (arXiv 2507.20673): geometric mean of token ratios, clipped pessimistically in log space.

        d'_t = sgn(A) min(sgn(A) d_t, sgn(A) clip(d_t, -eps_low, eps_high))
        l_u  = -mean_u(A) exp(mean_{t in u} d'_t)                    (u = the ratio level's unit)

    eps = 0.4 (ratio range e^{+-0.4}); the unit is the sequence by default. The level ratio is
    unused (the clip acts before pooling). Example: d [0.5, 0, -0.5], A = 1 -> d' [0.4, 0, -0.5],
    every token's loss -exp(-1/30) = -0.9672.
    """
    check_like(ratio, "ratio", adv=adv, token_log_ratio=token_log_ratio)
    d = token_log_ratio                                                         # (B, T)
    sgn = torch.sign(adv)
    d_pess = sgn * torch.minimum(sgn * d, sgn * d.clamp(-eps_low, eps_high))
    loss = -pool(adv, "mean") * torch.exp(clamp_log(pool(d_pess, "mean"), log_clamp))
    return Clip(loss, (adv > 0) & (d > eps_high), (adv < 0) & (d < -eps_low), torch.zeros_like(adv, dtype=torch.bool))
