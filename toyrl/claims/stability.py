"""Claims 1-7 of the ledger: why multi-turn agent RL is unstable (seed article, first half).

Each claim is a ``Claim`` (see ``spec.py``): base config, arms, per-run metrics, tests. Settings
were chosen so the mechanism exists in the toy (e.g. slip and a high learning rate for collapse,
stale rollouts and several PPO epochs for ratio effects), never to force a verdict.
"""
from __future__ import annotations

import numpy as np

from .spec import Claim, Test, auc, collapse_times, early, final, log10_grad, peak_drop, success_metrics

__all__ = ["STABILITY_CLAIMS"]

# FrozenLake-like lake with slip, a high learning rate, no gradient clipping and two PPO epochs:
# the regime where the toy policy can learn and then fall into a template (RAGEN's Echo Trap).
ECHO_BASE = dict(env="gridworld", env_kwargs={"map_name": "4x4", "max_turns": 12, "slip": 0.2},
                 estimator="grpo", prompts_per_step=8, group_size=8, lr=1e-2, grad_clip=0.0, ppo_epochs=2)


def _echo_metrics(s: dict) -> dict:
    ts, tc = collapse_times(s["reward_mean"], s["reward_std"])
    return {"collapsed": float(np.isfinite(tc)), "t_std_drop": ts, "t_mean_collapse": tc, "lead": tc - ts,
            "final_success": final(s["success_rate"]), "peak_drop": peak_drop(s["success_rate"]),
            "auc_success": auc(s["success_rate"])}


echo_trap = Claim(
    name="echo_trap",
    claim="In a collapsing run, the within-group reward std drops before the mean reward collapses.",
    source="RAGEN (Wang et al. 2025), arXiv 2504.20073: FrozenLake PPO, std drop ~step 40, mean collapse ~step 90",
    metric="per seed: collapse indicator (smoothed mean reward falls below half its peak), and the lead "
           "t_mean_collapse - t_std_drop (steps) in the seeds that collapse",
    base=ECHO_BASE, arms={"grpo": {}}, steps=120, quick_steps=50,
    tests=[Test("runs collapse (share of seeds)", "collapsed", "grpo", threshold=0.0),
           Test("std drops before the mean collapses: lead (steps)", "lead", "grpo", threshold=0.0)],
    metrics=_echo_metrics, curve=("reward_mean", "reward_std"),
    needed="collapses in most seeds, so the ordering can be measured: longer runs (RAGEN trains for hundreds of steps), a task where a fixed template keeps earning some reward, or a larger policy. When this toy does collapse, the smoothed std and mean usually fall in the same few steps (see 'lead'), which is what a sudden jump into a deterministic bad policy looks like, not a slow loss of diversity.",
    notes="Collapse detector: 5-step trailing means; mean collapse = first step after the peak of the mean "
          "reward below 0.5 x peak (peak >= 0.2); std drop = first step after the std peak (before the "
          "collapse) below 0.5 x that peak. A converging run (std -> 0 because all succeed) is not a collapse. "
          "Toy settings: 4x4 lake with slip 0.2, lr 1e-2, no gradient clipping, 2 PPO epochs, P=8 x G=8.")

starpo_s = Claim(
    name="starpo_s",
    claim="Keeping only the 25% of groups with the highest reward std (StarPO-S) delays or prevents the collapse.",
    source="RAGEN (Wang et al. 2025), arXiv 2504.20073 (StarPO-S, rollout_filter_ratio 0.25)",
    metric="final success (last 20% of steps) and peak-to-final drop of the success rate",
    base=ECHO_BASE, arms={"grpo": {}, "starpo_s": {"filters": ["starpo_s"], "filter_kwargs": {"starpo_s": {"p": 0.25}}}},
    steps=120, quick_steps=50,
    tests=[Test("StarPO-S - GRPO, final success", "final_success", "starpo_s", "grpo", threshold=0.0),
           Test("StarPO-S - GRPO, peak-to-final drop", "peak_drop", "starpo_s", "grpo", sign=-1, threshold=0.0)],
    metrics=_echo_metrics,
    needed='a baseline that collapses reliably (see echo_trap), so that there is a collapse to delay, and the rest of the StarPO-S recipe (critic, clip-higher) for the full claim. Keeping 2 of 8 groups also cuts the batch to a quarter, which slows learning at this scale.',
    notes="Same runs and setting as echo_trap (the grpo arm is shared). Only the variance filter of StarPO-S is "
          "tested (no critic, no clip-higher), so the effect is the filter's alone.")


def _outcome_metrics(s: dict) -> dict:
    return {**success_metrics(s),
            "log10_grad_norm": log10_grad(s["grad_norm"]),
            "max_grad_norm": float(np.nanmax(np.asarray(s["grad_norm"], float))),
            "void_turn_rate": final(s["void_turn_rate"])}


env_mask = Claim(
    name="env_mask",
    claim="Masking environment (observation) tokens out of the loss and the KL improves the final score.",
    source="Search-R1 (Jin et al. 2025), arXiv 2503.09516: average EM 0.343 -> 0.431 with retrieved-token masking",
    metric="final success rate (last 20% of steps)",
    base=dict(env="gridworld", env_kwargs={"size": 4, "max_turns": 12}, estimator="grpo", prompts_per_step=4,
              kl="k3", kl_coef=0.01),
    arms={"masked": {"mask_env_tokens": True}, "unmasked": {"mask_env_tokens": False}},
    tests=[Test("masked - unmasked, final success", "final_success", "masked", "unmasked"),
           Test("masked - unmasked, success over the run (AUC)", "auc_success", "masked", "unmasked")],
    metrics=_outcome_metrics,
    needed='a task where observations are long compared with actions (retrieved passages) and that the toy policy can learn, e.g. MockSearch with a curriculum or a larger policy.',
    notes="Random 4x4 lakes (a new map per task; the observation token is the agent's cell). MockSearch, the "
          "closer analogue of retrieval, was tried first (1-hop questions, 1 noise sentence, 3 turns): the toy "
          "policy did not learn it within 80 steps in either arm (success ~0.02), so it cannot show a "
          "difference at this scale; a larger policy or a curriculum on the search task would be needed.")

void_filter = Claim(
    name="void_filter",
    claim="Dropping trajectories that contain a void turn from the update prevents gradient-norm explosions.",
    source="SimpleTIR (Xue et al. 2025), arXiv 2509.02479",
    metric="largest pre-clip gradient norm of a run and mean log10 gradient norm",
    base=dict(env="bandit_chain", env_kwargs={"stages": 3, "layout_seed": 0, "max_turns": 10}, estimator="grpo",
              prompts_per_step=4, think_max=4, grad_clip=0.0, lr=1e-2),
    arms={"no_filter": {}, "void_filter": {"filters": ["void_turn"]}},
    tests=[Test("void filter - none, log10 of the largest gradient norm", "log10_max_grad", "void_filter",
                "no_filter", sign=-1)],
    metrics=lambda s: {**_outcome_metrics(s), "log10_max_grad": float(np.log10(max(np.nanmax(s["grad_norm"]), 1e-12)))},
    curve="grad_norm",
    needed="gradient explosions to begin with. Here pre-clip gradient norms stay within a small band in both arms; SimpleTIR's explosions come from low-probability tokens after off-distribution tool output in a 7B model. Dropping trajectories also shrinks the batch, so each update averages fewer tokens and its norm is, if anything, larger.",
    notes="Void turns here are turns that end (EOT) or run out of room (4 thinking tokens) without an action "
          "token; no gradient clipping, lr 1e-2, a fixed 3-stage chain. Tried first: unconstrained sampling (any "
          "vocabulary token may be written): ~75-85% of turns were void, so the filter dropped almost every "
          "trajectory and its arm never learned (a degenerate comparison).")

turn_ratio = Claim(
    name="turn_ratio",
    claim="A turn-level geometric-mean importance ratio cuts the policy-gradient norm by orders of magnitude "
          "compared with token-level ratios.",
    source="SORL (Li et al. 2025), arXiv 2511.20718",
    metric="mean log10 gradient norm (pre-clip) over steps with a non-zero gradient",
    base=dict(env="gridworld", env_kwargs={"map_name": "4x4", "max_turns": 12}, estimator="grpo", prompts_per_step=4,
              staleness=2, ppo_epochs=4, think_max=4, lr=1e-2),
    arms={"token": {"ratio": "token"}, "turn": {"ratio": "turn"}},
    tests=[Test("token - turn, log10 grad norm (> 0: turn smaller)", "log10_grad_norm", "token", "turn"),
           Test("token - turn, log10 grad norm > 1 (an order of magnitude)", "log10_grad_norm", "token", "turn",
                threshold=1.0)],
    metrics=_outcome_metrics, curve="grad_norm",
    needed='extreme per-token ratios for the turn average to tame: turns of tens to hundreds of tokens, much staler data, asynchronous rollouts. With at most 6 tokens per turn, the geometric mean has little to average.',
    notes="Off-policy regime: rollouts from the policy 2 updates old and 4 PPO epochs, up to 6 tokens per turn. "
          "Both arms use the same PPO clip (eps 0.2) and token-mean aggregation; only the ratio level differs.")


def _clip_metrics(s: dict) -> dict:
    return {**_outcome_metrics(s), "early_success": early(s["success_rate"], 0.33)}


clip_tolerance = Claim(
    name="clip_tolerance",
    claim="Tolerant clipping (CISPO, SAPO) gains early and then collapses, while GSPO-style sequence clipping "
          "improves steadily.",
    source="ARLArena (Wang et al. 2026), arXiv 2602.21534",
    metric="early success (first third of the run) and peak-to-final drop of the success rate",
    base=dict(env="gridworld", env_kwargs={"size": 4, "max_turns": 12}, estimator="grpo", prompts_per_step=4,
              staleness=2, ppo_epochs=2, lr=1e-2),
    arms={"cispo": {"clip": "cispo"}, "sapo": {"clip": "sapo"}, "gspo": {"clip": "gspo"}},
    tests=[Test("CISPO - GSPO, early success", "early_success", "cispo", "gspo"),
           Test("SAPO - GSPO, early success", "early_success", "sapo", "gspo"),
           Test("CISPO - GSPO, peak-to-final drop", "peak_drop", "cispo", "gspo"),
           Test("SAPO - GSPO, peak-to-final drop", "peak_drop", "sapo", "gspo")],
    metrics=_clip_metrics,
    needed="for the early-gain half, a regime where GSPO's tight sequence clip (eps 3e-4) measurably slows the first steps; ARLArena's runs are hundreds of steps on LLM agents.",
    notes="Off-policy regime (staleness 2, 2 PPO epochs, lr 1e-2) on random 4x4 lakes; each scheme with its "
          "paper defaults from toyrl.objectives (GSPO eps 3e-4 / 4e-4 on the sequence ratio).")


def _context_measure(arm: str, seed: int, quick: bool) -> dict:
    """Train briefly under a last-1 context, then score a fresh batch with the trainer's flat recompute
    (full history) and with the matched one; |log ratio| per turn index before any update."""
    import torch
    torch.set_num_threads(1)
    from ..rollout import recompute_logp
    from ..train import Trainer, TrainConfig
    tr = Trainer(TrainConfig(env="gridworld", env_kwargs={"map_name": "4x4", "max_turns": 12, "slip": 0.2},
                             context="last_k", context_k=1, prompts_per_step=4, steps=0, seed=seed, progress=False))
    for _ in range(5 if quick else 20):
        tr.step()
    ro = tr.sample()
    b = ro.batch
    with torch.no_grad():
        flat, _ = recompute_logp(tr.policy, ro, "flat")
        matched, _ = recompute_logp(tr.policy, ro, "matched")
    pm = b.policy_mask & (b.turn_id >= 0)
    H = int(b.turn_id.max()) + 1
    per_turn = {}
    for name, lp in (("flat", flat), ("matched", matched)):
        d = (lp - b.old_logp).abs()
        per_turn[name] = [float(d[pm & (b.turn_id == k)].mean()) if (pm & (b.turn_id == k)).any() else float("nan")
                          for k in range(H)]
    f = np.array(per_turn["flat"])
    late = f[4:9]
    return {"metrics": {"flat_abs_logratio": float((flat - b.old_logp).abs()[pm].mean()),
                        "matched_abs_logratio": float((matched - b.old_logp).abs()[pm].mean()),
                        "flat_turn0": float(f[0]), "flat_turns_1_3": float(np.nanmean(f[1:4])),
                        "flat_turns_4_8": float(np.nanmean(late)) if np.isfinite(late).any() else float("nan"),
                        "late_minus_early": float(np.nanmean(late) - np.nanmean(f[1:4]))
                        if np.isfinite(late).any() else float("nan")},
            "series": {"flat_by_turn": per_turn["flat"], "matched_by_turn": per_turn["matched"]}}


context_mismatch = Claim(
    name="context_mismatch",
    claim="When rollouts see a truncated context but the trainer recomputes on the full history, the importance "
          "ratio is biased, and more so in later turns.",
    source="RTPO (Li et al. 2026), arXiv 2608.18682",
    metric="mean |log pi_train - log pi_rollout| over policy tokens, by turn index, before any update",
    base=dict(env="gridworld", env_kwargs={"map_name": "4x4", "max_turns": 12, "slip": 0.2}, context="last_k",
              context_k=1), arms={"measure": {}},
    steps=20, quick_steps=5,
    tests=[Test("flat recompute, |log ratio| > 0.01 (biased)", "flat_abs_logratio", "measure", threshold=0.01),
           Test("matched recompute, |log ratio| < 1e-4 (unbiased)", "matched_abs_logratio", "measure", sign=-1,
                threshold=1e-4),
           Test("flat bias, turns 4-8 minus turns 1-3 (grows with the turn)", "late_minus_early", "measure")],
    metrics=lambda s: s, measure=_context_measure, curve=("flat_by_turn", "matched_by_turn"),
    notes="Measured on a fresh batch after 20 RL steps (5 under --quick) under a last-1 context on a slippery "
          "4x4 lake; 'steps' counts those warm-up steps. Turn 0 sees the same context either way.")

STABILITY_CLAIMS = [echo_trap, starpo_s, env_mask, void_filter, turn_ratio, clip_tolerance, context_mismatch]
