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
- Deliberate difference: an all-masked batch gives loss 0 here where verl divides 0 by 0.
  Assertions of verl (clip_ratio_c > 1) raise ``ValueError`` here.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Optional

import torch

from ..objectives import aggregate, kl_estimate, policy_loss, token_log_ratio

__all__ = ["agg_loss", "kl_penalty", "compute_policy_loss", "get_policy_loss_fn", "POLICY_LOSS_REGISTRY",
           "compute_policy_loss_vanilla", "compute_policy_loss_gspo", "compute_policy_loss_cispo",
           "compute_policy_loss_sapo", "compute_policy_loss_geo_mean", "compute_policy_loss_gpg",
           "compute_policy_loss_dppo_tv", "compute_policy_loss_dppo_kl", "compute_policy_loss_dro"]

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


POLICY_LOSS_REGISTRY = {
    "vanilla": compute_policy_loss_vanilla, "gspo": compute_policy_loss_gspo, "cispo": compute_policy_loss_cispo,
    "sapo": compute_policy_loss_sapo, "geo_mean": compute_policy_loss_geo_mean, "gpg": compute_policy_loss_gpg,
    "dppo_tv": compute_policy_loss_dppo_tv, "dppo_kl": compute_policy_loss_dppo_kl, "dro": compute_policy_loss_dro,
}


def get_policy_loss_fn(name: str):
    """verl ``get_policy_loss_fn``: the loss function registered under ``name``."""
    if name not in POLICY_LOSS_REGISTRY:
        raise ValueError(f"Unsupported loss mode: {name}. Supported modes are: {list(POLICY_LOSS_REGISTRY)}")
    return POLICY_LOSS_REGISTRY[name]
