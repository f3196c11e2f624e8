"""Ledger claims on importance ratios and clipping in the off-policy regime (seed article, first half).

Stale rollouts (``staleness``), several PPO epochs and reasoning tokens make the ratios move away
from 1, the channel every claim here runs through. Same structure as ``stability.py``.
"""
from __future__ import annotations

from .measures import RATIO_BASE, context_measure, ratio_grad_measure
from .spec import Claim, Test, early
from .stability import _outcome_metrics

__all__ = ["OFFPOLICY_CLAIMS"]

turn_ratio = Claim(
    name="turn_ratio",
    claim="A turn-level geometric-mean importance ratio cuts the policy-gradient norm by orders of magnitude "
          "compared with token-level ratios.",
    source="SORL (Li et al. 2025), arXiv 2511.20718",
    metric="log10(grad norm of the token-ratio loss / grad norm of the turn-ratio loss) on the same stale batch "
           "and parameters, mean over 6 batches per seed",
    base=RATIO_BASE, arms={"think12": {}, "think32": {}}, steps=10, quick_steps=6,
    tests=[Test("think_max 12: log10 token/turn > 0 (turn smaller)", "log10_token_over_turn", "think12"),
           Test("think_max 32: log10 token/turn > 0 (turn smaller)", "log10_token_over_turn", "think32"),
           Test("think_max 32: log10 token/turn > 1 (an order of magnitude)", "log10_token_over_turn", "think32",
                threshold=1.0)],
    metrics=lambda s: s, measure=ratio_grad_measure, curve=("grad_token", "grad_turn"),
    curve_label="pre-clip grad norm",
    mechanism="Averaging log-ratios over a turn shrinks the spread of the ratio when single tokens have extreme "
              "ratios (stale data); fewer extreme weights, a smaller gradient.",
    faithfulness="Both losses are measured on the same batch and parameters (no sampling noise between arms), "
                 "rollouts 4 updates stale. The toy policy chooses its reasoning length and ends reasoning after "
                 "~2-3 tokens, whatever think_max allows, so turns stay short (see reasoning_tokens_per_turn): "
                 "the long-turn regime of SORL cannot be reached without a minimum reasoning length.",
    settings_tried=1,
    needed="turns of tens to hundreds of tokens (a trainer option forcing a minimum reasoning length) and "
           "asynchronous rollouts much staler than 4 updates.",
    notes="'steps' counts warm-up steps before the measured batches (each measured batch then trains the policy).")

clip_tolerance = Claim(
    name="clip_tolerance",
    claim="Tolerant clipping (CISPO, SAPO) gains early and then collapses, while GSPO-style sequence clipping "
          "improves steadily.",
    source="ARLArena (Wang et al. 2026), arXiv 2602.21534",
    metric="early success (first third of the run) and peak-to-final drop of the success rate",
    base=dict(env="gridworld", env_kwargs={"size": 4, "max_turns": 12}, estimator="grpo", prompts_per_step=4,
              staleness=4, ppo_epochs=4, think_max=4, lr=1e-2),
    arms={"cispo": {"clip": "cispo"}, "sapo": {"clip": "sapo"}, "gspo": {"clip": "gspo"}},
    tests=[Test("CISPO - GSPO, early success", "early_success", "cispo", "gspo"),
           Test("SAPO - GSPO, early success", "early_success", "sapo", "gspo"),
           Test("CISPO - GSPO, peak-to-final drop", "peak_drop", "cispo", "gspo"),
           Test("SAPO - GSPO, peak-to-final drop", "peak_drop", "sapo", "gspo")],
    metrics=lambda s: {**_outcome_metrics(s), "early_success": early(s["success_rate"], 0.33)},
    steps=60, quick_steps=25, curve=("success_rate", "clip_frac"), curve_label="success / clip fraction",
    mechanism="With stale data many tokens have ratios far from 1: a tolerant clip keeps their gradients (fast "
              "early progress, then large unstable updates), a tight sequence clip drops them (slow, steady).",
    faithfulness="Staleness 4, 4 PPO epochs and up to 4 reasoning tokens per turn push ratios away from 1; each "
                 "scheme at its paper defaults (toyrl.objectives). ARLArena's runs are hundreds of LLM steps.",
    settings_tried=1,
    needed="longer runs at higher off-policy drift, where tolerant clipping has time to destabilize.",
    notes="Random 4x4 lakes, lr 1e-2, staleness 4, 4 epochs, think_max 4.")

context_mismatch = Claim(
    name="context_mismatch",
    claim="When rollouts see a truncated context but the trainer recomputes on the full history, the importance "
          "ratio is biased, and more so in later turns.",
    source="RTPO (Li et al. 2026), arXiv 2608.18682",
    metric="mean |log pi_train - log pi_rollout| over policy tokens, by turn index, before any update",
    base=dict(env="gridworld", env_kwargs={"map_name": "4x4", "max_turns": 12, "slip": 0.2}, context="last_k",
              context_k=1), arms={"measure": {}},
    steps=20, quick_steps=5, check=True,
    tests=[Test("flat recompute, |log ratio| > 0.01 (biased)", "flat_abs_logratio", "measure", threshold=0.01),
           Test("matched recompute, |log ratio| < 1e-4 (unbiased)", "matched_abs_logratio", "measure", sign=-1,
                threshold=1e-4),
           Test("flat bias, turns 4-8 minus turns 1-3 (grows with the turn)", "late_minus_early", "measure")],
    metrics=lambda s: s, measure=context_measure, curve=("flat_by_turn", "matched_by_turn"),
    curve_label="|log ratio| per token",
    mechanism="The rollout policy conditioned on a truncated context; recomputing on the full history scores the "
              "same tokens under a different context, so the ratio differs from 1 before any update.",
    faithfulness="An identity that holds by construction (a check of the recompute code), not a finding; the claim "
                 "RTPO makes about harm to training is context_harm.",
    settings_tried=1,
    notes="Measured on a fresh batch after 20 RL steps (5 under --quick) under a last-1 context on a slippery "
          "4x4 lake; 'steps' counts those warm-up steps. Turn 0 sees the same context either way.")

context_harm = Claim(
    name="context_harm",
    claim="Training on ratios recomputed with the full history while rollouts saw a truncated context hurts "
          "learning, compared with the matched recompute.",
    source="RTPO (Li et al. 2026), arXiv 2608.18682",
    metric="final success and success AUC, matched vs flat recompute",
    base=dict(env="gridworld", env_kwargs={"size": 4, "max_turns": 12}, estimator="grpo", prompts_per_step=4,
              context="last_k", context_k=1, ppo_epochs=2),
    arms={"matched": {"recompute": "matched"}, "flat": {"recompute": "flat"}},
    tests=[Test("matched - flat, final success", "final_success", "matched", "flat"),
           Test("matched - flat, success AUC", "auc_success", "matched", "flat")],
    metrics=_outcome_metrics, steps=60, quick_steps=25, curve=("success_rate", "clip_frac"),
    curve_label="success / clip fraction",
    mechanism="The flat recompute's biased ratios make the clip fire on the wrong tokens and weight the rest "
              "wrongly; the update is for a policy the rollouts did not come from.",
    faithfulness="RTPO's agents truncate long tool histories; here a last-1 context on random 4x4 lakes. The "
                 "trainer learns under the full-history policy but acts under the truncated one in both arms.",
    settings_tried=1,
    needed="a task where the bias is large (long histories, later turns) and learning depends on the ratio.",
    notes="New claim (the harm half of RTPO's claim; the bias itself is the check context_mismatch).")

OFFPOLICY_CLAIMS = [turn_ratio, clip_tolerance, context_mismatch, context_harm]
