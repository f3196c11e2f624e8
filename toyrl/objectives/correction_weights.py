"""The pure functions of the rollout corrections (registered by name in ``toyrl.objectives.rollout_correction``, whose
docstring has the table): the log-ratio of each token's unit, trainer over rollout engine, and from it per-token
weights (truncated or masked importance sampling) or a keep mask (rejection sampling, the off-policy sequence mask).
Every function checks its inputs before any tensor work and returns a (B, T) tensor, 0 / False off the mask.

Dimension legend: B rollouts, T token positions, H turns.

    log_rho = correction_log_rho(old_logp, rollout_logp, mask, turn_id, "turn", H)   # (B, T), one value per turn
    w = truncated_is(log_rho, mask, upper=2.0)                                         # (B, T) min(rho, 2)
"""
from __future__ import annotations

import math
from typing import Optional

import torch

from ..batch import token_to_turn, turn_to_token
from .ratios import check_like, floor_logp, pool

__all__ = ["CORRECTION_LEVELS", "RS_OPTIONS", "LOG_BOUND", "correction_log_rho", "truncated_is", "tis_weights",
           "masked_is", "rejection_mask", "off_policy_seq_mask", "no_correction"]

LOG_BOUND = 20.0
"""log-ratios are clamped to [-LOG_BOUND, LOG_BOUND] before exp (verl's SAFETY_BOUND)"""
CORRECTION_LEVELS = ("token", "turn", "sequence", "geometric")
_POOLED = {"turn": ("turn", "sum"), "sequence": ("sequence", "sum"), "geometric": ("sequence", "mean")}
RS_OPTIONS = tuple(f"{u}_k{k}" for u in ("token", "turn_sum", "turn_mean", "seq_sum", "seq_mean") for k in (1, 2, 3)) \
    + tuple(f"{u}_k{k}" for u in ("turn_max", "seq_max") for k in (2, 3))
"""verl's rollout_rs options plus turn_* (the same statistic over each turn instead of the row)"""


# ---- checks (all run before any tensor work) -------------------------------------------------------
def _positive(name: str, x, allow_none: bool = False) -> None:
    if x is None and allow_none:
        return
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x <= 0:
        raise ValueError(f"{name} must be a positive finite number{' or None' if allow_none else ''}, got {x!r}")


def _check_is(upper=2.0, lower=None) -> None:
    _positive("upper", upper)
    _positive("lower", lower, allow_none=True)
    if lower is not None and lower > upper:
        raise ValueError(f"lower must be <= upper, got lower={lower}, upper={upper}")


def _parse_rs(option, upper, lower=None) -> tuple[str, str, int, Optional[float], float]:
    """(scope, reduce, k, lower, upper) of a rejection option, with verl's threshold rules."""
    if option not in RS_OPTIONS:
        raise ValueError(f"option must be one of {RS_OPTIONS}, got {option!r}")
    _positive("upper", upper)
    k = int(option[-1])
    if k == 1:
        lower = 1.0 / upper if lower is None else lower            # verl: a lone k1 bound implies lower 1/upper
        _positive("lower", lower)
        if lower > upper:
            raise ValueError(f"{option} needs lower <= upper (the default lower is 1/upper, so upper >= 1), "
                             f"got lower={lower}, upper={upper}")
    elif lower is not None:
        raise ValueError(f"lower applies to k1 options only; {option!r} takes an upper bound only, got lower={lower}")
    scope, _, how = option[:-3].partition("_")
    return scope, how, k, lower, upper


def _check_inputs(old_logp, rollout_logp, mask, turn_id, need_turns: bool, H) -> None:
    if not isinstance(old_logp, torch.Tensor) or old_logp.dim() != 2 or not old_logp.is_floating_point():
        got = f"{old_logp.dtype} {tuple(old_logp.shape)}" if isinstance(old_logp, torch.Tensor) else type(old_logp)
        raise ValueError(f"old_logp must be a (B, T) float tensor, got {got}")
    check_like(old_logp, "old_logp", rollout_logp=rollout_logp, mask=mask, turn_id=turn_id)
    if mask.dtype != torch.bool:
        raise ValueError(f"mask must be a bool tensor (True = token in the loss), got {mask.dtype}")
    if turn_id is None and need_turns:
        raise ValueError("turn_id (B, T) long is required by a turn-level correction, got None")
    if turn_id is not None and (turn_id.is_floating_point() or turn_id.dtype == torch.bool):
        raise ValueError(f"turn_id must be an integer tensor, got {turn_id.dtype}")
    if H is not None and (isinstance(H, bool) or not isinstance(H, int) or H < 1
                          or (turn_id is not None and turn_id.numel() and int(turn_id.max()) >= H)):
        raise ValueError(f"H must be None or a positive int above every turn_id (number of turns), got {H!r}")


# ---- the pure functions ----------------------------------------------------------------------------
def correction_log_rho(old_logp: torch.Tensor, rollout_logp: torch.Tensor, mask: torch.Tensor,
                       turn_id: Optional[torch.Tensor] = None, level: str = "token",
                       H: Optional[int] = None) -> torch.Tensor:
    """Log importance ratio of the unit holding each token, trainer over rollout engine (B, T), detached.

        token      log rho_t = old_logp_t - rollout_logp_t
        turn       log rho_t = sum_{t' in turn(t)} log rho_t'        (one ratio per turn)
        sequence   log rho_t = sum_{t' in row(t)}  log rho_t'        (verl / TRL sequence IS)
        geometric  log rho_t = mean_{t' in row(t)} log rho_t'        (verl's geometric mean, seq_mean_k1)

    0 off the mask; log-probs below -1000 (-inf) are floored (``floor_logp``); NaN -> 0 (TRL). A mask
    token with turn_id -1 is in no turn (turn level: 0).
    Example: old [[0., 0., 0.]], rollout [[0., -1., -2.]], turn_id [[0, 0, 1]] -> token [[0., 1., 2.]],
    turn [[1., 1., 2.]], sequence [[3., 3., 3.]], geometric [[1., 1., 1.]].
    """
    if level not in CORRECTION_LEVELS:
        raise ValueError(f"level must be one of {CORRECTION_LEVELS}, got {level!r}")
    _check_inputs(old_logp, rollout_logp, mask, turn_id, level == "turn", H)
    d = torch.nan_to_num(floor_logp(old_logp.detach(), mask) - floor_logp(rollout_logp.detach(), mask))  # (B, T)
    if level != "token":
        unit, how = _POOLED[level]
        d = pool(d, mask, turn_id, unit, how, H)                                        # (B, T)
    return torch.where(mask, d, torch.zeros_like(d))


def truncated_is(log_rho: torch.Tensor, mask: torch.Tensor, *, upper: float = 2.0,
                 lower: Optional[float] = None) -> torch.Tensor:
    """Truncated importance sampling (TIS; Yao et al. 2025, "Your efficient RL framework secretly brings
    you off-policy RL training"; verl rollout_is with a float threshold; TRL *_truncate).

        w_t = clamp(rho_t, lower, C),   C = upper = 2, lower = None (no lower bound)

    Detached, 0 off the mask. Example: rho [0.25, 1., 3.], C 2 -> [0.25, 1., 2.]; lower 0.5 -> [0.5, 1., 2.].
    """
    _check_is(upper, lower)
    check_like(log_rho, "log_rho", mask=mask)
    w = torch.exp(log_rho.detach().clamp(-LOG_BOUND, LOG_BOUND)).clamp(min=lower, max=upper)   # (B, T)
    return torch.where(mask, w, torch.zeros_like(w))


def tis_weights(old_logp: torch.Tensor, rollout_logp: torch.Tensor, mask: torch.Tensor, turn_id: torch.Tensor,
                *, cap: float = 2.0, level: str = "token", H: Optional[int] = None) -> torch.Tensor:
    """``truncated_is`` of ``correction_log_rho`` in one call, at a ratio level of ``ratios.LEVELS`` (what the
    ``tis`` clip scheme and ``port.verl_policy`` take):

        w_t = min(exp(old_logp_t - rollout_logp_t), C)                   token TIS, C = 2
        w   = min(prod_{t in row} exp(old_logp_t - rollout_logp_t), C)   sequence TIS

    Detached (B, T); 0 off the mask. ``level`` is token, turn (product over the turn), sequence or trajectory
    (both: product over the row). Example (token, C=2): old [0., 0., 0.], rollout [0., -1., 1.] ->
    [1., 2., 0.3679].
    """
    unit = "sequence" if level == "trajectory" else level
    return truncated_is(correction_log_rho(old_logp, rollout_logp, mask, turn_id, unit, H), mask, upper=cap)


def masked_is(log_rho: torch.Tensor, mask: torch.Tensor, *, upper: float = 2.0,
              lower: Optional[float] = None) -> torch.Tensor:
    """Masked importance sampling (MIS / IcePop, arXiv 2510.18855; verl "lower_upper" threshold; TRL *_mask).

        w_t = rho_t * 1[lower <= rho_t <= C]      (lower None: no lower bound)

    A token outside the band (bounds inclusive) gets weight 0, not a capped weight. Detached, 0 off the
    mask. Example: rho [0.25, 1., 3.], lower 0.5, C 2 -> [0., 1., 0.].
    """
    _check_is(upper, lower)
    check_like(log_rho, "log_rho", mask=mask)
    rho = torch.exp(log_rho.detach().clamp(-LOG_BOUND, LOG_BOUND))                     # (B, T)
    inside = rho <= upper if lower is None else (rho >= lower) & (rho <= upper)
    return torch.where(mask & inside, rho, torch.zeros_like(rho))


def rejection_mask(log_rho: torch.Tensor, mask: torch.Tensor, option: str, upper: float, *,
                   lower: Optional[float] = None, turn_id: Optional[torch.Tensor] = None,
                   H: Optional[int] = None) -> torch.Tensor:
    """Keep mask of divergence-based rejection sampling (verl 0.9.1 ``compute_rollout_rejection_mask``).

    From the TOKEN log rho d_t (clamped to +-20), three per-token divergences (Schulman's k1/k2/k3):

        k1 = -d_t = log(pi_roll / pi_old)     k2 = d_t^2 / 2     k3 = exp(d_t) - 1 - d_t  (>= 0)

    ``option`` = <unit>_k<n>: token, or sum / mean / max over the row (seq_*) or over the token's turn
    (turn_*, toyrl's multi-turn variant); max only for k2 / k3. Keep the unit's tokens if k1:
    log(lower) <= stat <= log(upper) (lower defaults to 1/upper); k2, k3: stat <= upper. seq_mean_k1 is
    geometric-mean rejection, lower <= (prod_t pi_roll/pi_old)^(1/n) <= upper: verl bounds 1/rho's mean.
    Example: d [[0.5, 0., 0.]], token_k2, upper 0.1 -> [[F, T, T]]; seq_max_k2 -> [[F, F, F]];
    seq_mean_k2 (mean 0.0417) -> [[T, T, T]].
    """
    scope, how, k, lower, upper = _parse_rs(option, upper, lower)
    check_like(log_rho, "log_rho", mask=mask, turn_id=turn_id)
    if scope == "turn" and turn_id is None:
        raise ValueError(f"option {option!r} needs turn_id (B, T), got None")
    d = torch.where(mask, log_rho.detach(), torch.zeros_like(log_rho)).clamp(-LOG_BOUND, LOG_BOUND)   # (B, T)
    div = -d if k == 1 else 0.5 * d * d if k == 2 else torch.expm1(d) - d             # (B, T) 0 off the mask
    if scope == "token":
        stat = div
    elif how == "max":                                  # k2, k3 >= 0, so the zeros off the mask never win
        if scope == "seq":
            stat = div.amax(1, keepdim=True).expand_as(div)                            # (B, T)
        else:
            n_turns = H or max(int(turn_id.max()) + 1, 1)
            stat = turn_to_token(token_to_turn(div, turn_id, n_turns, "max", mask), turn_id)    # (B, T)
    else:
        stat = pool(div, mask, turn_id, "turn" if scope == "turn" else "sequence", how, H)   # (B, T)
    ok = (stat >= math.log(lower)) & (stat <= math.log(upper)) if k == 1 else stat <= upper
    return ok & mask


def off_policy_seq_mask(log_rho: torch.Tensor, mask: torch.Tensor, *, adv: torch.Tensor,
                        delta: float = 0.5) -> torch.Tensor:
    """Off-policy sequence masking (DeepSeek-V3.2, arXiv 2512.02556, Eq. 9; TRL ``off_policy_mask_threshold``).

        KL_i = mean_{t in row i} (rollout_logp_t - old_logp_t) = -mean_t log rho_t
        keep_{i,t} = mask_{i,t} & (A_{i,t} >= 0  or  KL_i <= delta)

    Drops only discouraged tokens (A < 0) of rows far from the engine; ``adv`` (B,) or (B, T). TRL uses
    the current policy at each step, here the engine gap (fixed per batch); delta 0.5 is TRL's example.
    Example: log_rho [[-1., -1.], [-1., -1.]], adv [1., -1.], delta 0.5 -> [[T, T], [F, F]].
    """
    _positive("delta", delta)
    check_like(log_rho, "log_rho", mask=mask)
    adv = adv.detach()
    if adv.shape == log_rho.shape[:1]:
        adv = adv[:, None].expand_as(log_rho)                                           # (B, T)
    check_like(log_rho, "log_rho", adv=adv)
    d = torch.where(mask, log_rho.detach(), torch.zeros_like(log_rho))                  # (B, T)
    kl = -d.sum(1, keepdim=True) / mask.sum(1, keepdim=True).clamp(min=1)              # (B, 1)
    return mask & ((adv >= 0) | (kl <= delta))


def no_correction(log_rho: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """No correction: w_t = 1 on the mask, 0 off it. Example: mask [T, F] -> [1., 0.]."""
    check_like(log_rho, "log_rho", mask=mask)
    return mask.to(log_rho.dtype)
