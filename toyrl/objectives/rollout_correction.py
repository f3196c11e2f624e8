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

The functions themselves live in ``toyrl.objectives.correction_weights`` (re-exported here); this module is the
registry, the entry point ``rollout_correction`` and the statistics a run logs.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

from .correction_weights import (CORRECTION_LEVELS, LOG_BOUND, RS_OPTIONS, _check_inputs, _check_is, _parse_rs,
                                 _positive, correction_log_rho, masked_is, no_correction, off_policy_seq_mask,
                                 rejection_mask, tis_weights, truncated_is)
from .ratios import check_like

__all__ = ["CORRECTIONS", "Correction", "CORRECTION_LEVELS", "RS_OPTIONS", "LOG_BOUND", "correction_log_rho",
           "truncated_is", "tis_weights", "masked_is", "rejection_mask", "off_policy_seq_mask", "no_correction",
           "rollout_correction", "correction_stats"]

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
