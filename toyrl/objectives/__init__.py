"""Objectives: importance ratios (token / turn / sequence / trajectory), clipping schemes, aggregation, KL.

    from toyrl.objectives import policy_loss, loss_mask, CLIP_SCHEMES, AGGREGATIONS, KL_ESTIMATORS

Modules: ``ratios`` (log-space ratios at four levels, TIS weights), ``clipping`` (the PPO family),
``weighting`` (CISPO, SAPO, GPG, Clip-Cov, KL-Cov, DRO, VESPO), ``divergence`` (DPPO-TV / -KL),
``schemes`` (the registry and ``LossContext``), ``aggregate``, ``kl``, ``loss`` (``policy_loss``,
``loss_mask``, input checks, per-turn statistics), ``rollout_correction`` (rollout-engine vs trainer
corrections: TIS, MIS / IcePop, rejection, OPSM; ``CORRECTIONS``, ``rollout_correction``).
"""
from .aggregate import AGGREGATIONS, agg_weights, aggregate
from .clipping import Clip, a2tgpo, clipped_surrogate, dual_clip, gmpo, loop, ppo, sorl, tis
from .kl import KL_ESTIMATORS, kl_estimate
from .divergence import binary_kl, dppo_kl, dppo_tv
from .loss import check_loss_inputs, loss_mask, loss_stats, policy_loss, turn_stats
from .ratios import LEVELS, clamp_log, log_ratio, pool, token_log_ratio
from .rollout_correction import (CORRECTION_LEVELS, CORRECTIONS, RS_OPTIONS, Correction, correction_log_rho,
                                 correction_stats, masked_is, off_policy_seq_mask, rejection_mask, rollout_correction,
                                 tis_weights, truncated_is)
from .schemes import CLIP_SCHEMES, LossContext, Scheme, register_clip_scheme
from .weighting import cispo, clip_cov, dro, gpg, kl_cov, sapo, vespo

__all__ = [
    "policy_loss", "loss_mask", "turn_stats", "check_loss_inputs", "loss_stats", "CLIP_SCHEMES", "Scheme",
    "register_clip_scheme", "LossContext", "AGGREGATIONS", "agg_weights", "aggregate",
    "KL_ESTIMATORS", "kl_estimate", "LEVELS", "log_ratio", "token_log_ratio", "pool", "clamp_log", "tis_weights",
    "Clip", "clipped_surrogate", "ppo", "dual_clip", "loop", "sorl", "a2tgpo", "tis", "gmpo",
    "cispo", "sapo", "gpg", "clip_cov", "kl_cov", "dro", "vespo", "dppo_tv", "dppo_kl", "binary_kl",
    "CORRECTIONS", "Correction", "CORRECTION_LEVELS", "RS_OPTIONS", "rollout_correction", "correction_log_rho",
    "truncated_is", "masked_is", "rejection_mask", "off_policy_seq_mask", "correction_stats",
]
