"""Rollout corrections: reweight or drop tokens where the rollout engine and the trainer disagree.

Dimension legend: B rollouts, T token positions, H turns.

The engine (vLLM / SGLang style: other kernels, quantized weights, a lagging copy) samples y_t with
log-prob ``rollout_logp``; the trainer recomputes ``old_logp`` in fp32. Even "on-policy" data is then
off-policy by log rho_t = old_logp_t - rollout_logp_t (trainer over engine, verl's sign). A correction
gives ``weights`` (B, T), detached, multiplied into the policy loss, and ``keep`` (B, T) bool, ANDed
into the loss mask:

    truncated IS (TIS)  w = clamp(rho_u, lower, C)            keep = mask
    masked IS (MIS)     w = rho_u * 1[lower <= rho_u <= C]    keep = mask (a zeroed token still counts
                                                              in the loss normalizer, as in verl and TRL)
    rejection (RS)      w = 1[keep]                           keep = mask & 1[unit divergence in bounds]

rho_u is the ratio of the token's unit (``correction_log_rho``): token, turn (product over the turn),
sequence (product over the row; unlike ``ratios.LEVELS``, where "sequence" is GSPO's mean) or
geometric (the row's geometric mean). Log-ratios are clamped to [-20, 20] before ``exp`` (verl).

| name        | function            | level    | defaults       | source |
|-------------|---------------------|----------|----------------|--------|
| none        | no_correction       | token    | -              | (identity) |
| tis         | truncated_is        | token    | upper 2        | Yao et al. 2025; verl token TIS; TRL token_truncate |
| mis         | masked_is           | token    | upper 2        | TRL token_mask |
| icepop      | masked_is           | token    | 0.5 .. 5       | IcePop arXiv 2510.18855; verl decoupled_token_icepop |
| turn_tis    | truncated_is        | turn     | upper 2        | toyrl: one TIS weight per turn |
| seq_tis     | truncated_is        | sequence | upper 2        | verl decoupled_seq_is; TRL sequence_truncate |
| seq_mis     | masked_is           | sequence | upper 3        | TRL sequence_mask (TRL's default mode) |
| geo_rs      | rs seq_mean_k1      | token    | 0.999 .. 1.001 | verl decoupled_geo_rs |
| turn_geo_rs | rs turn_mean_k1     | token    | 0.999 .. 1.001 | toyrl: geo_rs per turn |
| k3_rs       | rs seq_mean_k3      | token    | upper 0.01     | verl decoupled_k3_rs |
| token_rs_k3 | rs token_k3         | token    | upper 0.01     | verl rollout_rs token_k3 |
| seq_max_k3  | rs seq_max_k3       | token    | upper 0.01     | verl rollout_rs seq_max_k3 |
| opsm        | off_policy_seq_mask | token    | delta 0.5      | DeepSeek-V3.2 arXiv 2512.02556 Eq. 9; TRL |

``level``: the log rho handed to the function (rs = ``rejection_mask``, which pools by its option, as
does OPSM). verl documents a K3 threshold only for a sequence mean (0.01); per token it is stricter.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

from ..batch import token_to_turn, turn_to_token
from .ratios import check_like, floor_logp, pool

__all__ = ["CORRECTIONS", "Correction", "CORRECTION_LEVELS", "RS_OPTIONS", "LOG_BOUND", "correction_log_rho",
           "truncated_is", "tis_weights", "masked_is", "rejection_mask", "off_policy_seq_mask", "no_correction",
           "rollout_correction", "correction_stats"]

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


# ---- the registry and the entry point -------------------------------------------------------------
_CHECKS = {truncated_is: _check_is, masked_is: _check_is, rejection_mask: _parse_rs,
           off_policy_seq_mask: lambda delta: _positive("delta", delta), no_correction: lambda: None}


@dataclass(frozen=True)
class Correction:
    fn: Callable
    """pure function fn(log_rho, mask, **context, **fixed, **hyper) -> weights (float) or keep (bool) (B, T)"""
    level: str
    """the level of the log rho handed to fn (``correction_log_rho``); rejection / OPSM pool by themselves"""
    hyper: dict
    """every tunable keyword with this correction's default"""
    source: str
    """where the method and its defaults come from"""
    doc: str
    """one line: what it does"""
    fixed: dict = field(default_factory=dict)
    """keywords the name fixes (the rejection option), not tunable"""
    context: tuple = ()
    """inputs fn reads besides (log_rho, mask): turn_id, H, adv"""

    @property
    def uses_turns(self) -> bool:                                                      # needs turn_id
        return self.level == "turn" or str(self.fixed.get("option", "")).startswith("turn")

    def resolve(self, name: str, given: dict) -> dict:
        """Defaults with ``given`` applied, checked; ValueError names unknown keywords or bad values."""
        unknown = sorted(k for k in given if k not in self.hyper)
        if unknown:
            raise ValueError(f"correction {name!r} does not take {unknown}; it takes {sorted(self.hyper)}")
        params = {**self.hyper, **given}
        _CHECKS[self.fn](**self.fixed, **params)
        return params


def _is(fn, level, upper, source, doc, lower=None):
    return Correction(fn, level, {"upper": upper, "lower": lower}, source, doc)


def _rs(option, upper, source, doc, lower=None):
    hyper = {"upper": upper, "lower": lower} if option.endswith("k1") else {"upper": upper}
    return Correction(rejection_mask, "token", hyper, source, doc, {"option": option}, ("turn_id", "H"))


_GEO = dict(upper=1.001, lower=0.999)
CORRECTIONS: dict[str, Correction] = {
    "none": Correction(no_correction, "token", {}, "-", "no correction: weight 1 on every mask token"),
    "tis": _is(truncated_is, "token", 2.0, "Yao et al. 2025; verl token TIS; TRL token_truncate", "w = min(rho_t, C)"),
    "mis": _is(masked_is, "token", 2.0, "TRL token_mask", "w = rho_t, 0 where rho_t > C"),
    "icepop": _is(masked_is, "token", 5.0, "arXiv 2510.18855; verl decoupled_token_icepop",
                  "w = rho_t, 0 outside [0.5, 5]", lower=0.5),
    "turn_tis": _is(truncated_is, "turn", 2.0, "toyrl (TIS per turn)", "w = min(prod_turn rho, C), one per turn"),
    "seq_tis": _is(truncated_is, "sequence", 2.0, "verl decoupled_seq_is; TRL sequence_truncate",
                   "w = min(prod_row rho, C), one per row"),
    "seq_mis": _is(masked_is, "sequence", 3.0, "TRL sequence_mask (default mode)", "w = prod_row rho, 0 where > C"),
    "geo_rs": _rs("seq_mean_k1", source="verl decoupled_geo_rs", doc="drop rows whose geometric-mean ratio "
                  "leaves [0.999, 1.001]", **_GEO),
    "turn_geo_rs": _rs("turn_mean_k1", source="toyrl (geo_rs per turn)", doc="drop turns whose geometric-mean "
                       "ratio leaves [0.999, 1.001]", **_GEO),
    "k3_rs": _rs("seq_mean_k3", 0.01, "verl decoupled_k3_rs", "drop rows whose mean k3 exceeds 0.01"),
    "token_rs_k3": _rs("token_k3", 0.01, "verl rollout_rs token_k3 (K3 value 0.01)", "drop tokens with k3 > 0.01"),
    "seq_max_k3": _rs("seq_max_k3", 0.01, "verl rollout_rs seq_max_k3 (K3 value 0.01)",
                      "drop rows holding a token with k3 > 0.01"),
    "opsm": Correction(off_policy_seq_mask, "token", {"delta": 0.5}, "DeepSeek-V3.2 arXiv 2512.02556 Eq. 9; TRL",
                       "drop A < 0 tokens of rows whose mean KL(engine||trainer) > delta", context=("adv",)),
}


def rollout_correction(name: str, old_logp: torch.Tensor, rollout_logp: torch.Tensor, mask: torch.Tensor,
                       turn_id: Optional[torch.Tensor] = None, *, H: Optional[int] = None,
                       adv: Optional[torch.Tensor] = None, **hyper) -> tuple[torch.Tensor, torch.Tensor]:
    """Apply the registered correction ``name``: -> (weights (B, T) float detached, keep (B, T) bool).

    Multiply the policy loss by ``weights`` and AND ``keep`` into the loss mask; weights are 0 off
    the mask and wherever keep is False. ``hyper`` overrides the entry's defaults; ``adv`` (B,) or
    (B, T) is read only by corrections whose context names it (opsm). Every name, keyword and input
    is checked before any work. Example: rollout_correction("tis", old [[0., 0.]], rollout [[0., -1.]],
    mask [[T, T]]) -> weights [[1., 2.]], keep [[T, T]]; with upper=1.5 -> [[1., 1.5]].
    """
    if name not in CORRECTIONS:
        raise ValueError(f"correction name must be one of {sorted(CORRECTIONS)}, got {name!r}")
    corr = CORRECTIONS[name]
    params = corr.resolve(name, hyper)
    _check_inputs(old_logp, rollout_logp, mask, turn_id, corr.uses_turns, H)
    if "adv" in corr.context:
        if not isinstance(adv, torch.Tensor) or adv.shape not in (old_logp.shape, old_logp.shape[:1]):
            got = tuple(adv.shape) if isinstance(adv, torch.Tensor) else adv
            raise ValueError(f"correction {name!r} needs adv (B,) or (B, T)={tuple(old_logp.shape)}, got {got}")
    log_rho = correction_log_rho(old_logp, rollout_logp, mask, turn_id, corr.level, H)      # (B, T)
    ctx = {"turn_id": turn_id, "H": H, "adv": adv}
    out = corr.fn(log_rho, mask, **{k: ctx[k] for k in corr.context}, **corr.fixed, **params)
    return (out.to(log_rho.dtype), out) if out.dtype == torch.bool else (out, mask.clone())


def correction_stats(weights: torch.Tensor, keep: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """Floats over the n mask tokens (all NaN if n = 0): weight_mean / _min / _max of w_t;
    ess = (sum w)^2 / (n sum w^2) (effective sample size fraction; 0 if every w = 0); zero_weight_frac
    (w = 0: masked IS or rejection); kept_token_frac (keep); kept_row_frac (non-empty rows that lost no
    token to keep = False, verl's row count).
    Example: weights [[1., 2., 0.]], keep [[T, T, F]], mask all -> mean 1, min 0, max 2, ess 9/15 = 0.6,
    zero_weight_frac 1/3, kept_token_frac 2/3, kept_row_frac 0.
    """
    check_like(weights, "weights", keep=keep, mask=mask)
    if mask.dtype != torch.bool or keep.dtype != torch.bool:
        raise ValueError(f"keep and mask must be bool tensors, got {keep.dtype} and {mask.dtype}")
    keys = ("weight_mean", "weight_min", "weight_max", "ess", "zero_weight_frac", "kept_token_frac", "kept_row_frac")
    n = int(mask.sum())
    if n == 0:
        return dict.fromkeys(keys, float("nan"))
    w = weights.detach()[mask].double()                                                 # (n,)
    s1, s2 = float(w.sum()), float((w * w).sum())
    rows = mask.any(1)
    intact = rows & ~(mask & ~keep).any(1)
    return dict(zip(keys, (s1 / n, float(w.min()), float(w.max()), s1 * s1 / (n * s2) if s2 > 0 else 0.0,
                           float((w == 0).sum()) / n, float((keep & mask).sum()) / n,
                           float(intact.sum()) / float(rows.sum()))))
