"""The Echo Trap re-registered where reasoning is necessary (issue 30): a blind T-maze from a BC start.

The earlier echo claims (``stability.py``) ran where reasoning carried nothing the action needed, and GRPO froze
there instead of collapsing; they stay in the ledger as history. Here the task is a 5x5 T-maze whose goal side is
shown at turn 0 only, read through a blind context (``context="blind"``, one past turn), so the cue survives only
in the policy's reasoning tokens; forgetting it halves success (scrambled reasoning: 0.46 vs 0.98 intact after 200
BC steps). Each run starts from its own 60-step behaviour clone of an expert that writes the cue as reasoning
(``bc_reasoning``), and RL goes on with the BC optimizer (``bc_optimizer="continue"``), so a fresh AdamW's first
steps are not what is measured. The setting is pilot D of the closing note (seeds 100-104 only, 3 of 5
collapsed), fixed here before the verdict seeds ran; the arms are a fix a learner reaches for (KL to the BC
start) and the one this toy's measurements point at (no optimizer step on an all-zero-advantage batch).
"""
from __future__ import annotations

from .spec import Claim, Test, about
from .stability import _echo_metrics

__all__ = ["ECHO_CLAIMS", "BLIND_BASE"]

BLIND_BASE = dict(env="gridworld", env_kwargs={"size": 5, "layout": "tmaze"}, policy="small", context="blind",
                  context_k=1, n_think=4, think_max=2, estimator="grpo", prompts_per_step=8, group_size=8,
                  lr=3e-3, grad_clip=1.0, ppo_epochs=2, bc_steps=60, bc_reasoning=True, bc_optimizer="continue")
"""pilot D: T-maze 5x5, blind context, per-seed 60-step BC with reasoning, GRPO at lr 3e-3, clip 1, 2 epochs"""

blind_echo = Claim(
    name="blind_echo", **about("blind_echo"),
    base=BLIND_BASE,
    arms={"grpo": {}, "kl": {"kl": "k3", "kl_coef": 0.1}, "skip_zero_adv": {"skip_zero_adv": True}},
    steps=60, quick_steps=20,
    tests=[Test("GRPO collapses (share of seeds > 0.5)", "collapsed", "grpo", threshold=0.5),
           Test("std drops before the mean (share of collapsed seeds > 0.5)", "std_first", "grpo", threshold=0.5),
           Test("template MI falls under GRPO (last - first)", "template_mi_change", "grpo", sign=-1),
           Test("KL to the BC start - GRPO, collapsed", "collapsed", "kl", "grpo", sign=-1),
           Test("skip zero-advantage steps - GRPO, collapsed", "collapsed", "skip_zero_adv", "grpo", sign=-1)],
    metrics=_echo_metrics, curve=("success_rate", "reward_std", "template_mi"), curve_label="success / std / MI")

ECHO_CLAIMS = [blind_echo]
