"""Ledger claims on importance ratios and clipping in the off-policy regime (seed article, first half).

Stale rollouts (``staleness``), several PPO epochs and reasoning tokens make the ratios move away
from 1, the channel every claim here runs through. Same structure as ``stability.py``.
"""
from __future__ import annotations

from .measures import RATIO_BASE, context_measure, ratio_grad_measure
from .spec import Claim, Test, about, early
from .stability import _outcome_metrics

__all__ = ["OFFPOLICY_CLAIMS"]

turn_ratio = Claim(
    name="turn_ratio", **about("turn_ratio"),
    base=RATIO_BASE, arms={"think12": {}, "think32": {}}, steps=10, quick_steps=6,
    tests=[Test("think_max 12: log10 token/turn > 0 (turn smaller)", "log10_token_over_turn", "think12"),
           Test("think_max 32: log10 token/turn > 0 (turn smaller)", "log10_token_over_turn", "think32"),
           Test("think_max 32: log10 token/turn > 1 (an order of magnitude)", "log10_token_over_turn", "think32",
                threshold=1.0)],
    metrics=lambda s: s, measure=ratio_grad_measure, curve=("grad_token", "grad_turn"),
    curve_label="pre-clip grad norm")

clip_tolerance = Claim(
    name="clip_tolerance", **about("clip_tolerance"),
    base=dict(env="gridworld", env_kwargs={"size": 4, "max_turns": 12}, estimator="grpo", prompts_per_step=4,
              staleness=4, ppo_epochs=4, think_max=4, lr=1e-2),
    arms={"cispo": {"clip": "cispo"}, "sapo": {"clip": "sapo"}, "gspo": {"clip": "gspo"}},
    tests=[Test("CISPO - GSPO, early success", "early_success", "cispo", "gspo"),
           Test("SAPO - GSPO, early success", "early_success", "sapo", "gspo"),
           Test("CISPO - GSPO, peak-to-final drop", "peak_drop", "cispo", "gspo"),
           Test("SAPO - GSPO, peak-to-final drop", "peak_drop", "sapo", "gspo")],
    metrics=lambda s: {**_outcome_metrics(s), "early_success": early(s["success_rate"], 0.33)},
    steps=60, quick_steps=15, curve=("success_rate", "clip_frac"), curve_label="success / clip fraction")

context_mismatch = Claim(
    name="context_mismatch", **about("context_mismatch"),
    base=dict(env="gridworld", env_kwargs={"map_name": "4x4", "max_turns": 12, "slip": 0.2}, context="last_k",
              context_k=1), arms={"measure": {}},
    steps=20, quick_steps=5, check=True,
    tests=[Test("flat recompute, |log ratio| > 0.01 (biased)", "flat_abs_logratio", "measure", threshold=0.01),
           Test("matched recompute, |log ratio| < 1e-4 (unbiased)", "matched_abs_logratio", "measure", sign=-1,
                threshold=1e-4),
           Test("flat bias, turns 4-8 minus turns 1-3 (grows with the turn)", "late_minus_early", "measure")],
    metrics=lambda s: s, measure=context_measure, curve=("flat_by_turn", "matched_by_turn"),
    curve_label="|log ratio| per token")

context_harm = Claim(
    name="context_harm", **about("context_harm"),
    base=dict(env="gridworld", env_kwargs={"size": 4, "max_turns": 12}, estimator="grpo", prompts_per_step=4,
              context="last_k", context_k=1, ppo_epochs=2),
    arms={"matched": {"recompute": "matched"}, "flat": {"recompute": "flat"}},
    tests=[Test("matched - flat, final success", "final_success", "matched", "flat"),
           Test("matched - flat, success AUC", "auc_success", "matched", "flat")],
    metrics=_outcome_metrics, steps=60, quick_steps=25, curve=("success_rate", "clip_frac"),
    curve_label="success / clip fraction")

OFFPOLICY_CLAIMS = [turn_ratio, clip_tolerance, context_mismatch, context_harm]
