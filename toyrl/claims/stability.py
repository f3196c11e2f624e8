"""Ledger claims on collapse and on what the policy should not learn from (seed article, first half).

Each claim is a ``Claim`` (see ``spec.py``) with its mechanism, a faithfulness note and the number
of settings run. Settings were fixed by reasoning about the mechanism and, where noted, one pilot on
seeds 100-102 (never the verdict's seeds).
"""
from __future__ import annotations

import numpy as np

from .spec import Claim, Test, auc, collapse_times, early, final, log10_grad, peak_drop, smooth, success_metrics

__all__ = ["STABILITY_CLAIMS", "ECHO_BASE", "FREE_BASE"]

# random deterministic 4x4 lakes (a new map per task), lr 1e-2, 2 PPO epochs, no gradient clip, 8 x 8:
# the group std is no longer a function of one task's mean, so variance can vanish before the mean moves;
# up to 4 reasoning tokens per turn and rollouts 2 steps stale: the channels RAGEN's collapse runs through
ECHO_BASE = dict(env="gridworld", env_kwargs={"size": 4, "max_turns": 12}, estimator="grpo", prompts_per_step=8,
                 group_size=8, lr=1e-2, grad_clip=0.0, ppo_epochs=2, think_max=4, staleness=2)


def _precursor(s: dict) -> float:
    """1 if the zero-variance share (5-step mean) reaches 0.8 while the mean reward is still >= 0.66 of its
    running peak; 0 if not; NaN for a seed that never learned (peak < 0.2)."""
    m, z = smooth(s["reward_mean"], 5), smooth(s["zero_var_frac"], 5)
    peak = np.maximum.accumulate(m)
    if peak[-1] < 0.2:
        return float("nan")
    return float(np.any((z >= 0.8) & (m >= 0.66 * peak) & (peak >= 0.2)))


def _echo_metrics(s: dict) -> dict:
    ts, tc = collapse_times(s["reward_mean"], s["reward_std"])
    mi = np.asarray(s["template_mi"], float)
    return {"collapsed": float(np.isfinite(tc)), "t_std_drop": ts, "t_mean_collapse": tc, "lead": tc - ts,
            "precursor": _precursor(s), "template_mi_change": final(mi) - early(mi),
            "final_success": final(s["success_rate"]), "peak_drop": peak_drop(s["success_rate"]),
            "auc_success": auc(s["success_rate"])}


ECHO_MECH = ("Echo Trap: GRPO sharpens each group onto one response template; within-group reward variance "
             "vanishes (zero-variance groups get no gradient) and the template stops depending on the input "
             "(template MI falls) while the mean reward is still high; the collapse of the mean follows.")

echo_trap = Claim(
    name="echo_trap",
    claim="Before a collapse, zero-variance groups take over and template mutual information falls while the mean "
          "reward is still high; the collapse of the mean follows.",
    source="RAGEN (Wang et al. 2025), arXiv 2504.20073: FrozenLake PPO, std drop ~step 40, mean collapse ~step 90",
    metric="per seed: precursor (zero-variance share >= 0.8 while mean >= 0.66 x peak), change of template MI "
           "(last 20% - first 25% of steps), collapse (smoothed mean < 0.5 x peak)",
    base=ECHO_BASE, arms={"grpo": {}}, steps=80, quick_steps=35,
    tests=[Test("template MI falls (last - first)", "template_mi_change", "grpo", sign=-1),
           Test("precursor before any collapse (share of learning seeds)", "precursor", "grpo"),
           Test("the mean then collapses (share of seeds)", "collapsed", "grpo")],
    metrics=_echo_metrics, curve=("reward_mean", "zero_var_frac", "template_mi"), curve_label="reward / share / MI",
    mechanism=ECHO_MECH,
    faithfulness="RAGEN trains a 0.5-3B LLM with reasoning for hundreds of steps on FrozenLake; here a tiny policy "
                 "on random deterministic 4x4 lakes for 80 steps. The precursor (variance and MI fall) can happen; "
                 "whether it is followed by a collapse depends on a bad template earning nothing, which the toy's "
                 "short runs rarely reach (GRPO freezes on a map-independent template instead).",
    settings_tried=2,
    needed="runs long enough for a frozen template to decay (hundreds of steps) or a policy whose template can "
           "drift to zero reward; the toy's GRPO freezes on a template that keeps some reward.",
    notes="Two settings piloted on seeds 100-102 (80 steps): the audit's (random deterministic maps, lr 1e-2, 2 "
          "epochs, 8 x 8, no gradient clip) and the same with up to 4 reasoning tokens and staleness 2. The second "
          "was chosen before the verdict seeds were run: it has RAGEN's reasoning and staleness channels and its "
          "template MI fell in 3 of 3 pilot seeds (-0.18 to -0.35; the first: 2 of 3, <= 0.01). Neither reached "
          "the precursor threshold in the pilot; 1 of 3 pilot seeds collapsed in the first, 0 of 3 in the second. "
          "Collapse detector: 5-step trailing means; a converging run is not a collapse.")

starpo_s = Claim(
    name="starpo_s",
    claim="Keeping only the 25% of groups with the highest reward std (StarPO-S) keeps learning signal and "
          "delays or prevents the collapse.",
    source="RAGEN (Wang et al. 2025), arXiv 2504.20073 (StarPO-S, rollout_filter_ratio 0.25)",
    metric="final success (last 20% of steps) and peak-to-final drop of the success rate",
    base=ECHO_BASE, arms={"grpo": {}, "starpo_s": {"filters": ["starpo_s"], "filter_kwargs": {"starpo_s": {"p": 0.25}}}},
    steps=80, quick_steps=35,
    tests=[Test("StarPO-S - GRPO, final success", "final_success", "starpo_s", "grpo"),
           Test("StarPO-S - GRPO, peak-to-final drop", "peak_drop", "starpo_s", "grpo", sign=-1)],
    metrics=_echo_metrics, curve=("success_rate", "zero_var_frac"), curve_label="success / zero-variance share",
    mechanism="Ranking groups by reward std keeps the groups that still carry a gradient, so updates are not "
              "averaged with zero-advantage groups; this should slow the sharpening that leads to the Echo Trap.",
    faithfulness="On random maps (own runs, not echo_trap's) a group's std reflects its map's difficulty, so the "
                 "filter selects informative tasks rather than sampling noise. Only the variance filter is tested "
                 "(no critic, no clip-higher), and keeping 2 of 8 groups quarters the batch.",
    settings_tried=2,
    needed="a baseline that collapses (see echo_trap), so there is a collapse to delay, and the rest of StarPO-S.",
    notes="Same setting as echo_trap (chosen there from 2 piloted), separate runs (trainer seeds from this "
          "claim's name).")

critic_delay = Claim(
    name="critic_delay",
    claim="A learned critic (PPO with GAE) delays the collapse but does not prevent it.",
    source="RAGEN (Wang et al. 2025), arXiv 2504.20073: PPO collapses later than GRPO",
    metric="collapse share of the critic arm; peak-to-final drop and AUC of success, critic vs GRPO",
    base=ECHO_BASE, arms={"grpo": {}, "critic": {"estimator": "gae"}}, steps=80, quick_steps=35,
    tests=[Test("critic - GRPO, peak-to-final drop (delays)", "peak_drop", "critic", "grpo", sign=-1),
           Test("critic arm still collapses (share of seeds)", "collapsed", "critic")],
    metrics=_echo_metrics, curve=("reward_mean", "reward_std"), curve_label="reward mean / within-group std",
    mechanism="A value baseline gives non-zero advantages inside zero-variance groups, so the gradient does not "
              "vanish with the group std; the sharpening is slowed, not removed.",
    faithfulness="Same toy setting as echo_trap; the critic is toyrl's token-level GAE critic. Whether the critic "
                 "arm collapses inherits echo_trap's limit (collapses are rare in 80 toy steps).",
    settings_tried=2,
    needed="a baseline that collapses within the run (see echo_trap).",
    notes="New claim (seed article: the critic delays but does not prevent collapse).")


def _outcome_metrics(s: dict) -> dict:
    g = np.asarray(s["grad_norm"], float)
    return {**success_metrics(s), "log10_grad_norm": log10_grad(g),
            "log10_max_grad": float(np.log10(max(np.nanmax(g), 1e-12))),
            "void_turn_rate": final(s["void_turn_rate"]), "obs_token_rate": final(s["obs_token_rate"]),
            "void_collapse": float(final(s["void_turn_rate"]) > 0.5)}


# free sampling (whole vocabulary) after a behaviour-cloning start: the policy can now write observation
# tokens and malformed turns, the events both claims are about
FREE_BASE = dict(env="gridworld", env_kwargs={"size": 4, "max_turns": 12}, estimator="grpo", prompts_per_step=4,
                 constrain=False, bc_steps=60)

env_mask = Claim(
    name="env_mask",
    claim="Masking environment (observation) tokens out of the loss and the KL improves the final score.",
    source="Search-R1 (Jin et al. 2025), arXiv 2503.09516: average EM 0.343 -> 0.431 with retrieved-token masking",
    metric="final success rate; rate of observation tokens the policy writes itself",
    base=dict(FREE_BASE, kl="k3", kl_coef=0.01),
    arms={"masked": {"mask_env_tokens": True}, "unmasked": {"mask_env_tokens": False}},
    tests=[Test("masked - unmasked, final success", "final_success", "masked", "unmasked"),
           Test("unmasked - masked, observation tokens written by the policy", "obs_token_rate", "unmasked", "masked")],
    metrics=_outcome_metrics, steps=60, quick_steps=25, curve=("success_rate", "obs_token_rate"),
    mechanism="Without the mask, the loss raises the likelihood of tokens the environment wrote; a policy that "
              "samples freely then writes observation tokens in its own turns (invalid actions), which costs reward.",
    faithfulness="Search-R1's retrieved passages are long; the toy's observation is a few tokens per turn. Free "
                 "sampling (constrain=False) after 20 BC steps makes the harmful channel (writing env tokens) "
                 "possible; with the turn grammar it is not.",
    settings_tried=2,
    needed="observations long compared with actions (retrieved passages), so that training on them dominates.",
    notes="Random 4x4 lakes, free sampling, 60 BC steps, k3 KL 0.01 to the BC start. Piloted first with 20 BC "
          "steps (seeds 100-101): ~80% of free-sampled turns stayed void and neither arm succeeded, so the policy "
          "never reached the regime of the claim; 60 BC steps give ~8% void turns and ~30% success at the start.")

void_filter = Claim(
    name="void_filter",
    claim="Dropping trajectories that contain a void turn from the update prevents gradient-norm explosions.",
    source="SimpleTIR (Xue et al. 2025), arXiv 2509.02479",
    metric="log10 of the largest pre-clip gradient norm of a run; final void-turn rate",
    base=dict(FREE_BASE, staleness=2, ppo_epochs=4, grad_clip=0.0, lr=1e-2),
    arms={"no_filter": {}, "void_filter": {"filters": ["void_turn"]}},
    tests=[Test("void filter - none, log10 largest gradient norm", "log10_max_grad", "void_filter", "no_filter",
                sign=-1),
           Test("void filter - none, final void-turn rate", "void_turn_rate", "void_filter", "no_filter", sign=-1)],
    metrics=_outcome_metrics, steps=60, quick_steps=25, curve=("grad_norm", "void_turn_rate"),
    curve_label="grad norm / void-turn rate",
    mechanism="Void turns are low-probability, off-distribution tokens; trained on with stale ratios and several "
              "epochs they produce huge per-token gradients; dropping their trajectories removes that source.",
    faithfulness="SimpleTIR's void turns follow tool output in a 7B model; here a void turn is a malformed free-"
                 "sampled turn (no action token). Off-policy regime (staleness 2, 4 epochs, no clip) as in the "
                 "audit's pilot (4 of 4 paired seeds lower max grad norm with the filter).",
    settings_tried=2,
    needed="gradient explosions large enough to dominate seed noise.",
    notes="Random 4x4 lakes, free sampling after 60 BC steps, lr 1e-2, staleness 2, 4 PPO epochs, no grad clip. "
          "Piloted first with 20 BC steps (seeds 100-101): ~80% of turns void, so the filter dropped nearly every "
          "trajectory (a degenerate comparison); 60 BC steps start from ~8% void turns.")

STABILITY_CLAIMS = [echo_trap, starpo_s, critic_delay, env_mask, void_filter]
