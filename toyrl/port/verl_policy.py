"""verl 0.9.1's policy-loss API (``verl.trainer.ppo.core_algos``) on top of ``toyrl.objectives``.

Dimension legend: B responses (rows), L response tokens. A prototype written against these names
moves to verl by changing the import; the math is toyrl's (``policy_loss``, ``aggregate``,
``kl_estimate``), verl's semantics are matched where they matter:

- log-ratio clamps: vanilla / SAPO / CISPO clamp the token log-ratio to [-20, 20]; GSPO clamps
  only the sequence log-ratio from above at 10 and uses the straight-through GSPO-token form;
  geo_mean (GMPO) has no clamp.
- ``config`` may be a dict, an OmegaConf DictConfig or an object with verl ActorConfig attribute
  names: clip_ratio, clip_ratio_low / clip_ratio_high (None -> clip_ratio), clip_ratio_c (3.0),
  tau_pos (1.0), tau_neg (1.05), global_batch_info (dict of dp_size, batch_num_tokens,
  global_batch_size, loss_scale_factor, passed to ``agg_loss``).
- SAPO always aggregates with seq-mean-token-mean; geo_mean takes the plain mean over all B rows.
- dppo_tv / dppo_kl read the divergence thresholds from clip_ratio_low / high and the truncation
  cap from clip_ratio_c (20.0 when absent); dro reads ``policy_loss.dro_beta`` (must be > 0).
- clip_cov / kl_cov read ``policy_loss.{clip_cov_ratio, clip_cov_lb, clip_cov_ub, kl_cov_ratio,
  ppo_kl_coef}`` (verl's fallbacks 2e-4, 1, 5, 2e-4, 1 when None; ppo_kl_coef absent: 0.1, verl's
  PolicyLossConfig default); clip_cov's random choice of
  tokens (when there are more candidates than it detaches) draws from toyrl's generator, not verl's
  ``randperm``, so the same count of other tokens may be chosen.
- bypass_mode (old_log_prob are the rollout engine's): ``policy_loss.rollout_correction.loss_type``
  ppo_clip -> vanilla without IS weights, reinforce -> -A logp times the truncated IS weight
  sg(min(pi / pi_rollout, C)) at rollout_is token / sequence level (toyrl's ``tis_weights``),
  optionally normalized to mean 1. Rejection sampling (rollout_rs) and IcePop thresholds
  ("lower_upper") have no toyrl counterpart and raise ValueError; verl's rollout_corr/* diagnostic
  metrics are not reproduced (the actor/* ones are).
- Deliberate difference: an all-masked batch gives loss 0 here where verl divides 0 by 0.
  Assertions of verl (clip_ratio_c > 1, clip_cov_ratio > 0, kl_cov_ratio > 0, a config for
  bypass_mode) raise ``ValueError`` here. ``config=None`` means verl's field defaults (verl asserts a
  config); verl's config-type assertions (ActorConfig, not AlgoConfig) are not repeated.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Optional

import torch

from ..objectives import aggregate, kl_estimate, policy_loss, token_log_ratio
from ..objectives.rollout_correction import tis_weights

__all__ = ["agg_loss", "kl_penalty", "compute_policy_loss", "POLICY_LOSS_REGISTRY",
           "compute_policy_loss_vanilla", "compute_policy_loss_gspo", "compute_policy_loss_cispo",
           "compute_policy_loss_sapo", "compute_policy_loss_geo_mean", "compute_policy_loss_gpg",
           "compute_policy_loss_dppo_tv", "compute_policy_loss_dppo_kl", "compute_policy_loss_dro",
           "compute_policy_loss_clip_cov", "compute_policy_loss_kl_cov", "compute_policy_loss_bypass_mode"]

_KL_NAMES = {"kl": "k1", "k1": "k1", "abs": "abs", "mse": "k2", "k2": "k2", "low_var_kl": "k3", "k3": "k3"}


def agg_loss(loss_mat, loss_mask, loss_agg_mode: str, dp_size: int = 1, batch_num_tokens=None,
             global_batch_size=None, loss_scale_factor=None) -> torch.Tensor:
    """verl ``agg_loss``: token-mean, token-sum, seq-mean-token-sum, seq-mean-token-mean,
    seq-mean-token-sum-norm, scaled by dp_size (see ``toyrl.objectives.aggregate`` for the math)."""
    if dp_size > 1 and loss_agg_mode == "token-mean" and batch_num_tokens is None:
        raise ValueError("(global) batch_num_tokens is required when dp_size > 1")
    if dp_size > 1 and loss_agg_mode.startswith("seq-mean") and global_batch_size is None:
        raise ValueError("global_batch_size is required when dp_size > 1")
    return aggregate(loss_mat, loss_mask.bool(), loss_agg_mode, n_tokens=batch_num_tokens,
                     n_seqs=global_batch_size, norm_len=loss_scale_factor) * dp_size


def kl_penalty(logprob, ref_logprob, kl_penalty: str) -> torch.Tensor:
    """verl ``kl_penalty``: kl / k1, abs, mse / k2, low_var_kl / k3; a '+' suffix keeps the value and
    takes the gradient of k2 (straight-through). 'full' is not implemented (as in verl)."""
    base = kl_penalty[:-1] if kl_penalty.endswith("+") else kl_penalty
    if base == "full":
        raise NotImplementedError("kl_penalty='full' needs full-vocabulary logits")
    if base not in _KL_NAMES:
        raise ValueError(f"kl_penalty must be one of {sorted(_KL_NAMES)} (optionally with '+'), got {kl_penalty!r}")
    name = _KL_NAMES[base]
    return kl_estimate(logprob, ref_logprob, name + "+" if kl_penalty.endswith("+") and name != "k2" else name)


def _cfg(config, name: str, default=None):
    if config is None:
        return default
    value = config.get(name, None) if isinstance(config, Mapping) else getattr(config, name, None)
    return default if value is None else value


def _clip_range(config) -> tuple[float, float]:
    eps = _cfg(config, "clip_ratio", 0.2)
    return _cfg(config, "clip_ratio_low", eps), _cfg(config, "clip_ratio_high", eps)


def _batch_info(config, loss_agg_mode: str) -> tuple[dict, int]:
    info = dict(_cfg(config, "global_batch_info", {}) or {})
    dp = int(info.get("dp_size", 1) or 1)
    if dp > 1 and loss_agg_mode == "token-mean" and info.get("batch_num_tokens") is None:
        raise ValueError("(global) batch_num_tokens is required when dp_size > 1")
    if dp > 1 and loss_agg_mode.startswith("seq-mean") and info.get("global_batch_size") is None:
        raise ValueError("global_batch_size is required when dp_size > 1")
    return {"n_tokens": info.get("batch_num_tokens"), "n_seqs": info.get("global_batch_size"),
            "norm_len": info.get("loss_scale_factor")}, dp


def _run(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, rollout_is_weights, **kw):
    agg_kwargs, dp = _batch_info(config, loss_agg_mode)
    agg_kwargs.update(kw.pop("agg_kwargs", {}))
    mask = response_mask.bool()
    loss, info = policy_loss(log_prob, old_log_prob, advantages, mask, torch.zeros_like(mask, dtype=torch.long),
                             ratio=kw.pop("ratio", "token"), agg=loss_agg_mode, is_weights=rollout_is_weights,
                             H=1, adv_level="token", agg_kwargs=agg_kwargs, **kw)
    return loss * dp, info


def _metrics(info, clipfrac=None, lower=None) -> dict[str, Any]:
    return {"actor/pg_clipfrac": float(info["clip_frac"] if clipfrac is None else clipfrac),
            "actor/ppo_kl": float(info["ppo_kl"]),
            "actor/pg_clipfrac_lower": float(0.0 if lower is None else lower)}


def compute_policy_loss(old_log_prob, log_prob, advantages, response_mask, cliprange=None, cliprange_low=None,
                        cliprange_high=None, clip_ratio_c=3.0, loss_agg_mode: str = "token-mean"):
    """verl's (deprecated) dual-clip PPO loss -> (pg_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower)."""
    eps_low = cliprange if cliprange_low is None else cliprange_low
    eps_high = cliprange if cliprange_high is None else cliprange_high
    if eps_low is None or eps_high is None:
        raise ValueError("cliprange (or both cliprange_low and cliprange_high) must be given")
    loss, info = _run(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, None, None,
                      clip="dual_clip", eps_low=eps_low, eps_high=eps_high, c=clip_ratio_c)
    return loss, info["clip_frac"], info["ppo_kl"], info["extra_frac"]


def compute_policy_loss_vanilla(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode: str = "token-mean",
                                config: Optional[Any] = None, rollout_is_weights=None):
    """verl ``vanilla``: dual-clip PPO with clip_ratio(_low / _high) and clip_ratio_c."""
    eps_low, eps_high = _clip_range(config)
    loss, info = _run(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, rollout_is_weights,
                      clip="dual_clip", eps_low=eps_low, eps_high=eps_high, c=_cfg(config, "clip_ratio_c", 3.0))
    return loss, _metrics(info, lower=info["extra_frac"])


def compute_policy_loss_gspo(old_log_prob, log_prob, advantages, response_mask,
                             loss_agg_mode: str = "seq-mean-token-mean", config: Optional[Any] = None,
                             rollout_is_weights=None):
    """verl ``gspo``: GSPO-token (straight-through sequence ratio), log-ratio clamped at 10 from above."""
    eps_low, eps_high = _clip_range(config)
    loss, info = _run(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, rollout_is_weights,
                      clip="gspo", ratio="sequence", straight_through=True, log_ratio_clamp=(-math.inf, 10.0),
                      eps_low=eps_low, eps_high=eps_high)
    return loss, _metrics(info)


def compute_policy_loss_cispo(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode: str = "token-mean",
                              config: Optional[Any] = None, rollout_is_weights=None):
    """verl ``cispo``: -sg(clip(r)) A logp with verl's clip_ratio_low / high."""
    eps_low, eps_high = _clip_range(config)
    loss, info = _run(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, rollout_is_weights,
                      clip="cispo", eps_low=eps_low, eps_high=eps_high)
    return loss, _metrics(info)


def compute_policy_loss_sapo(old_log_prob, log_prob, advantages, response_mask,
                             loss_agg_mode: str = "seq-mean-token-mean", config: Optional[Any] = None,
                             rollout_is_weights=None):
    """verl ``sapo``: soft gate with tau_pos / tau_neg; always seq-mean-token-mean (as verl)."""
    loss, info = _run(old_log_prob, log_prob, advantages, response_mask, "seq-mean-token-mean", config,
                      rollout_is_weights, clip="sapo", tau_pos=_cfg(config, "tau_pos", 1.0),
                      tau_neg=_cfg(config, "tau_neg", 1.05))
    return loss, _metrics(info, clipfrac=0.0)


def compute_policy_loss_geo_mean(old_log_prob, log_prob, advantages, response_mask,
                                 loss_agg_mode: str = "token-mean", config: Optional[Any] = None,
                                 rollout_is_weights=None):
    """verl ``geo_mean`` (GMPO): log-space clip with clip_ratio_low / high, mean over all B rows;
    rollout weights enter as their per-row geometric mean. ``loss_agg_mode`` is ignored (as verl)."""
    eps_low, eps_high = _clip_range(config)
    mask = response_mask.bool()
    w = None
    if rollout_is_weights is not None:
        logw = torch.where(mask, torch.log(rollout_is_weights + 1e-10), torch.zeros_like(rollout_is_weights))
        w = torch.exp(logw.sum(1, keepdim=True) / (mask.sum(1, keepdim=True) + 1e-8)).expand_as(logw)   # (B, L)
    loss, info = _run(old_log_prob, log_prob, advantages, response_mask, "seq-mean-token-mean", None, w,
                      clip="gmpo", ratio="sequence", log_ratio_clamp=(-math.inf, math.inf),
                      eps_low=eps_low, eps_high=eps_high, agg_kwargs={"n_seqs": mask.shape[0]})
    with torch.no_grad():                       # verl counts a token clipped if d leaves the box
        d = token_log_ratio(log_prob, old_log_prob, mask)
        out = mask & ((d < -eps_low) | (d > eps_high))
        n = mask.sum().clamp(min=1)
        hi, lo = (out & (advantages > 0)).sum() / n, (out & (advantages < 0)).sum() / n
    return loss, _metrics(info, clipfrac=hi, lower=lo)


def compute_policy_loss_gpg(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode: str = "token-mean",
                            config: Optional[Any] = None, rollout_is_weights=None):
    """verl ``gpg``: -A logp, no ratio; returns (loss, {})."""
    loss, _ = _run(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, rollout_is_weights,
                   clip="gpg")
    return loss, {}


def _dppo(clip, old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, rollout_is_weights):
    delta_low, delta_high = _clip_range(config)
    loss, info = _run(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, rollout_is_weights,
                      clip=clip, delta_low=delta_low, delta_high=delta_high, cap=_cfg(config, "clip_ratio_c", 20.0))
    return loss, _metrics(info, lower=info["extra_frac"])


def compute_policy_loss_dppo_tv(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode: str = "token-mean",
                                config: Optional[Any] = None, rollout_is_weights=None):
    """verl ``dppo_tv``: TV-divergence mask (clip_ratio_low / high as thresholds), TIS cap clip_ratio_c."""
    return _dppo("dppo_tv", old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config,
                 rollout_is_weights)


def compute_policy_loss_dppo_kl(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode: str = "token-mean",
                                config: Optional[Any] = None, rollout_is_weights=None):
    """verl ``dppo_kl``: binary-KL mask (clip_ratio_low / high as thresholds), TIS cap clip_ratio_c."""
    return _dppo("dppo_kl", old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config,
                 rollout_is_weights)


def compute_policy_loss_dro(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode: str = "token-mean",
                            config: Optional[Any] = None, rollout_is_weights=None):
    """verl ``dro``: -(A logp - beta / 2 d^2) with beta = policy_loss.dro_beta; metrics: ppo_kl only."""
    beta = _cfg(_cfg(config, "policy_loss", None), "dro_beta", None)
    if beta is None or not beta > 0:
        raise ValueError("policy_loss.dro_beta must be a positive value when using DRO")
    loss, info = _run(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, rollout_is_weights,
                      clip="dro", beta=beta, log_ratio_clamp=(-math.inf, math.inf))
    return loss, {"actor/ppo_kl": float(info["ppo_kl"])}


def _has(config, name: str) -> bool:
    """Whether ``config`` has the field ``name`` at all (set to None counts)."""
    if config is None:
        return False
    return name in config if isinstance(config, Mapping) else hasattr(config, name)


def _positive(value, message: str):
    if value is None or not value > 0:
        raise ValueError(f"{message}, got {value!r}")
    return value


def compute_policy_loss_clip_cov(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode: str = "token-mean",
                                 config: Optional[Any] = None, rollout_is_weights=None):
    """verl ``clip_cov``: PPO, then the loss of a few unclipped tokens with clip_cov_lb < cov < clip_cov_ub
    is detached (max(1, clip_cov_ratio N) of them); no log-ratio clamp; metrics: the detached fraction."""
    eps_low, eps_high = _clip_range(config)
    pl = _cfg(config, "policy_loss", None)
    ratio = _positive(_cfg(pl, "clip_cov_ratio", 2e-4), "policy_loss.clip_cov_ratio should be larger than 0")
    loss, info = _run(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, rollout_is_weights,
                      clip="clip_cov", eps_low=eps_low, eps_high=eps_high, clip_cov_ratio=ratio,
                      clip_cov_lb=_cfg(pl, "clip_cov_lb", 1.0), clip_cov_ub=_cfg(pl, "clip_cov_ub", 5.0),
                      log_ratio_clamp=(-math.inf, math.inf))
    return loss, {"actor/pg_clipfrac": float(info["extra_frac"]), "actor/ppo_kl": float(info["ppo_kl"])}


def compute_policy_loss_kl_cov(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode: str = "token-mean",
                               config: Optional[Any] = None, rollout_is_weights=None):
    """verl ``kl_cov``: -A r, plus ppo_kl_coef |d| on the max(1, kl_cov_ratio N) highest-covariance tokens;
    no log-ratio clamp; metrics: actor/ppo_kl is verl's mean |d| here."""
    pl = _cfg(config, "policy_loss", None)
    ratio = _positive(_cfg(pl, "kl_cov_ratio", 2e-4), "policy_loss.kl_cov_ratio should be larger than 0")
    coef = _cfg(pl, "ppo_kl_coef", 1.0 if _has(pl, "ppo_kl_coef") else 0.1)   # None: verl's 1; absent: its config's 0.1
    loss, _ = _run(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, rollout_is_weights,
                   clip="kl_cov", kl_cov_ratio=ratio, ppo_kl_coef=coef, log_ratio_clamp=(-math.inf, math.inf))
    mask = response_mask.bool()
    d = token_log_ratio(log_prob.detach(), old_log_prob, mask)                  # (B, L), 0 off the mask
    return loss, {"actor/ppo_kl": float(d.abs().sum() / mask.sum().clamp(min=1))}


def _is_bounds(threshold) -> tuple[float, Optional[float]]:
    """verl's rollout_is_threshold -> (upper, lower): a float or float-like string is a TIS cap (lower None),
    "lower_upper" an IcePop band; verl's checks (positive, lower <= upper). Example: "0.5_4" -> (4.0, 0.5)."""
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float, str)):
        raise ValueError(f"rollout_is_threshold must be a float or a string threshold specification, got {threshold!r}")
    try:
        lower, upper = ((float(x) for x in threshold.split("_", 1)) if isinstance(threshold, str) and "_" in threshold
                        else (None, float(threshold)))
    except ValueError:
        raise ValueError(f"Invalid rollout_is_threshold '{threshold}'.") from None
    _positive(upper, "rollout_is_threshold upper bound must be positive")
    if lower is not None and (not lower > 0 or lower > upper):
        raise ValueError(f"rollout_is_threshold lower bound must be positive and <= the upper bound, got {threshold!r}")
    return upper, lower


def compute_policy_loss_bypass_mode(old_log_prob, log_prob, advantages, response_mask,
                                    loss_agg_mode: str = "token-mean", config: Optional[Any] = None,
                                    rollout_is_weights=None):
    """verl ``bypass_mode``: old_log_prob are the rollout engine's log-probs, the IS weights are computed here
    (``rollout_is_weights`` is ignored, as verl). Per ``policy_loss.rollout_correction``:

        ppo_clip:  vanilla (dual-clip PPO) on r = pi / pi_rollout, no IS weights
        reinforce: l_t = -A_t logp_t w_t,  w = sg(min(pi / pi_rollout, C)) per token or per sequence
                   (rollout_is, C = rollout_is_threshold; None: w = 1), optionally scaled to mean 1

    Example (reinforce, token, C = 2): A = 1, logp = rollout = -1 -> w = 1, l = 1.
    """
    rc = _cfg(_cfg(config, "policy_loss", None), "rollout_correction", None)
    if config is None or rc is None:
        raise ValueError("rollout_correction config not found in policy_loss. When using loss_mode='bypass_mode', "
                         "ensure rollout_correction config is passed.")
    loss_type = _cfg(rc, "loss_type", "ppo_clip")
    if loss_type not in ("ppo_clip", "reinforce"):
        raise ValueError(f"Invalid loss_type: {loss_type}. Must be 'reinforce' or 'ppo_clip'.")
    if _cfg(rc, "rollout_rs", None) is not None:
        raise ValueError(f"rollout_correction.rollout_rs={_cfg(rc, 'rollout_rs')!r} (rejection sampling on the rollout "
                         "ratio) has no toyrl counterpart; set it to None")
    mask = response_mask.bool()
    if not bool(mask.any()):
        raise ValueError("response_mask must contain at least one valid token (1).")
    level, threshold = _cfg(rc, "rollout_is", None), _cfg(rc, "rollout_is_threshold", None)
    if level is not None and level not in ("token", "sequence"):
        raise ValueError(f"Invalid rollout_is: {level}. Must be one of {{'token', 'sequence'}}.")
    cap, lower = _is_bounds(threshold) if level is not None and threshold is not None else (None, None)
    if loss_type == "ppo_clip":                   # the weights would only feed verl's rollout_corr/* metrics
        return compute_policy_loss_vanilla(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config)
    if lower is not None:
        raise ValueError(f"rollout_is_threshold={threshold!r} is IcePop (zero weights outside [lower, upper]), which "
                         "has no toyrl counterpart; use a single cap (truncated IS)")
    w = None
    if cap is not None:
        w = tis_weights(log_prob.detach(), old_log_prob, mask, torch.zeros_like(mask, dtype=torch.long), cap=cap,
                        level=level)                                            # (B, L) sg(min(pi / pi_rollout, C))
        if _cfg(rc, "rollout_is_batch_normalize", False):
            if level == "token":
                mean = w[mask].mean()
            else:
                rows = mask.any(1)
                mean = (w.sum(1)[rows] / mask.sum(1)[rows]).mean()              # one weight per non-empty row
            w = w / mean if mean > 1e-8 else w
    loss, info = _run(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, w, clip="gpg")
    return loss, {"actor/ppo_kl": float(info["ppo_kl"])}


POLICY_LOSS_REGISTRY = {
    "vanilla": compute_policy_loss_vanilla, "gspo": compute_policy_loss_gspo, "cispo": compute_policy_loss_cispo,
    "sapo": compute_policy_loss_sapo, "geo_mean": compute_policy_loss_geo_mean, "gpg": compute_policy_loss_gpg,
    "dppo_tv": compute_policy_loss_dppo_tv, "dppo_kl": compute_policy_loss_dppo_kl, "dro": compute_policy_loss_dro,
    "clip_cov": compute_policy_loss_clip_cov, "kl_cov": compute_policy_loss_kl_cov,
    "bypass_mode": compute_policy_loss_bypass_mode,
}
"""every policy-loss mode verl 0.9.1 registers, by verl's name"""
