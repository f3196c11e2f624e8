"""Importance ratios at four granularities, computed in log space.

Dimension legend: B rollouts, T token positions, H turns.

With the token log-ratio d_t = log pi(y_t) - log pi_old(y_t) on the loss-mask tokens:

    token       log r_t = d_t                                   (PPO)
    turn        log r_t = mean_{t' in turn(t)} d_t'             (SORL / ST-PPO, arXiv 2511.20718)
    sequence    log r_t = mean_{t' in row(t)}  d_t'             (GSPO, arXiv 2507.18071)
    trajectory  log r_t = sum_{t' in row(t)}   d_t'             (LOOP bandit, arXiv 2502.01600)

Every unit-level ratio is broadcast back to the unit's tokens, so one (B, T) tensor serves every
clipping scheme and the same advantage can be trained at each granularity. Exponentiation happens
only after ``clamp_log`` (verl uses [-20, 20]), so log-ratios of any size stay finite. A log-prob
may be -inf (a token the policy can no longer pick); ``floor_logp`` raises such values to
``LOGP_FLOOR`` before any arithmetic, so d_t, its pools and every scheme stay finite.
"""
from __future__ import annotations

import math
import torch

from ..batch import token_to_turn, turn_to_token

__all__ = ["LEVELS", "token_log_ratio", "pool", "log_ratio", "clamp_log", "check_like", "floor_logp",
           "LOGP_FLOOR"]

LEVELS = ("token", "turn", "sequence", "trajectory")
LOGP_FLOOR = -1e3
"""lowest log-prob the loss computes with: e^-1000 is 0 in every float dtype (float64 ends near e^-745)"""
_POOL = {"token": None, "turn": "mean", "sequence": "mean", "trajectory": "sum"}


def check_like(ref: torch.Tensor, ref_name: str = "logp", **named) -> None:
    """Raise ``ValueError`` unless every named tensor has the shape of ``ref`` (no silent broadcasting)."""
    for name, x in named.items():
        if x is not None and (not isinstance(x, torch.Tensor) or x.shape != ref.shape):
            got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"{name} must have the shape of {ref_name} (B, T)={tuple(ref.shape)}, got {got}")


def token_log_ratio(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """d_t = logp_t - old_logp_t on mask tokens, exactly 0 elsewhere (so padding never leaks a NaN).

    Example: logp [0., -1., 5.], old [0., -2., 0.], mask [T, T, F] -> [0., 1., 0.].
    """
    check_like(logp, old_logp=old_logp, mask=mask)
    return torch.where(mask, logp - old_logp, torch.zeros_like(logp))          # (B, T)


def pool(x: torch.Tensor, mask: torch.Tensor, turn_id: torch.Tensor, unit: str, how: str = "mean",
         H: int | None = None) -> torch.Tensor:
    """Reduce x (B, T) over the mask tokens of each unit and broadcast back to the unit's tokens.

    ``unit`` is token (identity), turn, sequence or trajectory (sequence and trajectory are the same
    unit, the whole row); ``how`` is mean or sum. Empty units give 0.
    Example: x [[1., 3., 5.]], mask all True, turn_id [[0, 0, 1]], unit turn, mean -> [[2., 2., 5.]].
    """
    check_like(x, "x", mask=mask, turn_id=turn_id)
    x = torch.where(mask, x, torch.zeros_like(x))                              # (B, T)
    if unit == "token":
        return x
    if unit in ("sequence", "trajectory"):
        s = x.sum(1, keepdim=True)                                             # (B, 1)
        if how == "mean":
            s = s / mask.sum(1, keepdim=True).clamp(min=1)
        return s.expand_as(x)                                                  # (B, T)
    if unit != "turn":
        raise ValueError(f"unit must be one of {LEVELS}, got {unit!r}")
    H = int(turn_id.max()) + 1 if H is None else H
    s = token_to_turn(x, turn_id, max(H, 1), "sum", mask)                      # (B, H)
    if how == "mean":
        s = s / token_to_turn(mask.to(x.dtype), turn_id, max(H, 1), "sum", mask).clamp(min=1)
    return turn_to_token(s, turn_id)                                           # (B, T)


def log_ratio(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor, turn_id: torch.Tensor,
              level: str = "token", *, H: int | None = None, straight_through: bool = False) -> torch.Tensor:
    """Unit log-ratio of every mask token (B, T), unclamped; 0 off the mask.

    ``straight_through`` gives GSPO-token's form log r_t = sg(log r_unit) + logp_t - sg(logp_t): the
    same value, but the gradient reaches each token through its own log-prob only (so per-token
    advantages stay per-token). verl 0.9.1's GSPO uses it; the paper's GSPO is the plain form.
    Example (sequence): logp [[-1., -3.]], old [[-2., -2.]] -> d [1., -1.] -> [[0., 0.]].
    """
    if level not in LEVELS:
        raise ValueError(f"ratio level must be one of {LEVELS}, got {level!r}")
    d = token_log_ratio(logp, old_logp, mask)                                  # (B, T)
    if level == "token":
        return d
    unit = pool(d, mask, turn_id, level, _POOL[level], H)                      # (B, T)
    if straight_through:
        unit = unit.detach() + torch.where(mask, logp - logp.detach(), torch.zeros_like(logp))
    return unit


def floor_logp(logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Log-probs safe for arithmetic: max(logp, LOGP_FLOOR) on the mask, exactly 0 off it (B, T).

    -inf (or anything below the floor) becomes -1000 with zero gradient (clamp, so no where-gradient
    NaN), so logp - old_logp, their unit means and -A logp are finite. Example: [-inf, -2., nan],
    mask [T, T, F] -> [-1000., -2., 0.].
    """
    return torch.where(mask, logp.clamp(min=LOGP_FLOOR), torch.zeros_like(logp))


def clamp_log(x: torch.Tensor, bounds: tuple[float, float] = (-20.0, 20.0)) -> torch.Tensor:
    """Clamp a log-ratio before ``exp`` (infinite bounds are skipped). Example: [-50., 0., 50.] -> [-20., 0., 20.]."""
    lo, hi = (None if math.isinf(b) else b for b in bounds)
    return x if lo is None and hi is None else x.clamp(min=lo, max=hi)
