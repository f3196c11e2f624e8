"""Ledger claims on collapse and on what the policy should not learn from (seed article, first half).

Each claim is a ``Claim`` (see ``spec.py``) with its mechanism, a faithfulness note and the number
of settings run. Settings were fixed by reasoning about the mechanism and, where noted, one pilot on
seeds 100-102 or notebook 02's runs (never the verdict's seeds: those come from ``spec.train_seed``).
"""
from __future__ import annotations

import numpy as np

from ...collapse import RULE, classify
from .spec import Claim, Test, about, auc, early, final, log10_grad, peak_drop, smooth, success_metrics

__all__ = ["STABILITY_CLAIMS", "ECHO_BASE", "COLLAPSE_BASE", "FREE_BASE", "FORMAT_KW"]

# random deterministic 4x4 lakes (a new map per task), lr 1e-2, 2 PPO epochs, no gradient clip, 8 x 8:
# the group std is not a function of one task's mean alone, so variance can vanish before the mean moves;
# up to 4 reasoning tokens per turn and rollouts 2 steps stale: the channels RAGEN's collapse runs through
ECHO_BASE = dict(env="gridworld", env_kwargs={"size": 4, "max_turns": 12}, estimator="grpo", prompts_per_step=8,
                 group_size=8, lr=1e-2, grad_clip=0.0, ppo_epochs=2, think_max=4, staleness=2)

# notebook 02's setting (toyrl.viz.echo imports it): random 4x4 maps with more holes (p_frozen 0.9), an aggressive
# optimizer (lr 3e-2, 4 PPO epochs, no gradient clip), 4 tasks x 8 rollouts, 2 reasoning tokens per turn
# (think_max 2, as recorded in the notebook's stored runs); run length is the caller's (notebook 120, ledger 100)
COLLAPSE_BASE = dict(env="gridworld", env_kwargs={"size": 4, "p_frozen": 0.9, "max_turns": 10}, estimator="grpo",
                     lr=3e-2, ppo_epochs=4, grad_clip=0.0, prompts_per_step=4, group_size=8, n_think=2, think_max=2)


def _precursor(s: dict) -> float:
    """1 if the zero-variance share (5-step mean) reaches 0.8 while the mean reward is still >= 0.66 of its
    running peak; 0 if not; NaN for a seed that never learned (peak < 0.2)."""
    m, z = smooth(s["reward_mean"], 5), smooth(s["zero_var_frac"], 5)
    peak = np.maximum.accumulate(m)
    if peak[-1] < 0.2:
        return float("nan")
    return float(np.any((z >= 0.8) & (m >= 0.66 * peak) & (peak >= 0.2)))


def _nan(x) -> float:
    return float("nan") if x is None else float(x)


def _echo_metrics(s: dict) -> dict:
    """Per-run collapse and freeze metrics by ``toyrl.collapse.classify`` with the ledger's ``RULE`` (a fall
    that lasts, with a non-zero gradient in it; "collapse-v2"). ``std_first`` is 1 if the std dropped strictly
    before the mean collapsed, 0 if not, NaN for a run that did not collapse (the stats skip NaN, so it is a
    share of collapsed seeds); ``lead`` (steps) is NaN unless both drops happened; ``frozen`` is 1 for a run
    with a freeze (>= 10 zero-gradient steps with the reward held), ``freeze_len`` its length (0 if none)."""
    c = classify(s["reward_mean"], s["reward_std"], s["grad_norm"], **RULE)           # None (JSON) reads as NaN
    ts, tc = _nan(c["t_std_drop"]), _nan(c["t_collapse"])
    mi = np.asarray(s["template_mi"], float)
    return {"collapsed": float(c["collapsed"]), "t_std_drop": ts, "t_mean_collapse": tc, "lead": tc - ts,
            "std_first": _nan(c["std_first"]), "frozen": float(c["frozen"]), "freeze_len": float(c["freeze_len"]),
            "precursor": _precursor(s), "template_mi_change": final(mi) - early(mi),
            "final_success": final(s["success_rate"]), "peak_drop": peak_drop(s["success_rate"]),
            "auc_success": auc(s["success_rate"])}


echo_trap = Claim(
    name="echo_trap", **about("echo_trap"),
    base=ECHO_BASE, arms={"grpo": {}}, steps=80, quick_steps=25,
    tests=[Test("template MI falls (last - first)", "template_mi_change", "grpo", sign=-1),
           Test("precursor before any collapse (share of learning seeds)", "precursor", "grpo"),
           Test("the mean then collapses (share of seeds)", "collapsed", "grpo")],
    metrics=_echo_metrics, curve=("reward_mean", "zero_var_frac", "template_mi"), curve_label="reward / share / MI")

echo_collapse = Claim(
    name="echo_collapse", **about("echo_collapse"),
    base=COLLAPSE_BASE, arms={"grpo": {}}, steps=100, quick_steps=30,
    tests=[Test("the mean collapses (share of seeds)", "collapsed", "grpo"),
           Test("std drops before the mean (share of collapsed seeds > 0.5)", "std_first", "grpo", threshold=0.5),
           Test("template MI falls (last - first)", "template_mi_change", "grpo", sign=-1)],
    metrics=_echo_metrics, curve=("reward_mean", "reward_std", "template_mi"), curve_label="reward / std / MI")

starpo_s = Claim(
    name="starpo_s", **about("starpo_s"),
    base=COLLAPSE_BASE,
    arms={"grpo": {}, "starpo_s": {"filters": ["starpo_s"], "filter_kwargs": {"starpo_s": {"p": 0.25}}}},
    steps=100, quick_steps=30,
    tests=[Test("StarPO-S - GRPO, final success", "final_success", "starpo_s", "grpo"),
           Test("StarPO-S - GRPO, peak-to-final drop", "peak_drop", "starpo_s", "grpo", sign=-1)],
    metrics=_echo_metrics, curve=("success_rate", "zero_var_frac"), curve_label="success / zero-variance share")

critic_delay = Claim(
    name="critic_delay", **about("critic_delay"),
    base=COLLAPSE_BASE, arms={"grpo": {}, "critic": {"estimator": "gae"}}, steps=100, quick_steps=30,
    tests=[Test("critic - GRPO, peak-to-final drop (delays)", "peak_drop", "critic", "grpo", sign=-1),
           Test("critic arm still collapses (share of seeds)", "collapsed", "critic")],
    metrics=_echo_metrics, curve=("reward_mean", "reward_std"), curve_label="reward mean / within-group std")


def _outcome_metrics(s: dict) -> dict:
    g = np.asarray(s["grad_norm"], float)
    return {**success_metrics(s), "log10_grad_norm": log10_grad(g),
            "log10_max_grad": float(np.log10(max(np.nanmax(g), 1e-12))),
            "void_turn_rate": final(s["void_turn_rate"]), "obs_token_rate": final(s["obs_token_rate"]),
            "void_collapse": float(final(s["void_turn_rate"]) > 0.5)}


# free sampling (whole vocabulary) after a behaviour-cloning start: the policy can write observation
# tokens and malformed turns, the events both claims are about
FREE_BASE = dict(env="gridworld", env_kwargs={"size": 4, "max_turns": 12}, estimator="grpo", prompts_per_step=4,
                 constrain=False, bc_steps=60)

env_mask = Claim(
    name="env_mask", **about("env_mask"),
    base=dict(FREE_BASE, kl="k3", kl_coef=0.01),
    arms={"masked": {"mask_env_tokens": True}, "unmasked": {"mask_env_tokens": False}},
    tests=[Test("masked - unmasked, final success", "final_success", "masked", "unmasked"),
           Test("unmasked - masked, observation tokens written by the policy", "obs_token_rate", "unmasked", "masked")],
    metrics=_outcome_metrics, steps=60, quick_steps=15, curve=("success_rate", "obs_token_rate"))

void_filter = Claim(
    name="void_filter", **about("void_filter"),
    base=dict(FREE_BASE, staleness=2, ppo_epochs=4, grad_clip=0.0, lr=1e-2),
    arms={"no_filter": {}, "void_filter": {"filters": ["void_turn"]}},
    tests=[Test("void filter - none, log10 largest gradient norm", "log10_max_grad", "void_filter", "no_filter",
                sign=-1),
           Test("void filter - none, final void-turn rate", "void_turn_rate", "void_filter", "no_filter", sign=-1)],
    metrics=_outcome_metrics, steps=60, quick_steps=15, curve=("grad_norm", "void_turn_rate"),
    curve_label="grad norm / void-turn rate")

# a shorter BC start (30 steps: between the ~80% void turns of 20 and the ~8% of 60), so the format is still
# being learned when RL starts and a format penalty has malformed turns to act on
FORMAT_KW = {"size": 4, "max_turns": 12, "void_penalty": 0.1}
bc_format_kl = Claim(
    name="bc_format_kl", **about("bc_format_kl"),
    base=dict(FREE_BASE, bc_steps=30),
    arms={"bc": {}, "bc_format": {"env_kwargs": FORMAT_KW},
          "bc_format_kl": {"env_kwargs": FORMAT_KW, "kl": "k3", "kl_coef": 0.01}},
    tests=[Test("BC + format penalty - BC, final success", "final_success", "bc_format", "bc"),
           Test("BC + format + KL - BC + format, final success", "final_success", "bc_format_kl", "bc_format")],
    metrics=_outcome_metrics, steps=60, quick_steps=15, curve=("success_rate", "void_turn_rate"),
    curve_label="success / void-turn rate")

STABILITY_CLAIMS = [echo_trap, echo_collapse, starpo_s, critic_delay, env_mask, void_filter, bc_format_kl]
