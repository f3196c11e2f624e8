"""Ledger claims on credit assignment, normalization, weighting, rollouts and warm starts (seed article,
second half). Same structure as ``stability.py``; runs of 60 RL steps (25 under --quick)."""
from __future__ import annotations

import numpy as np

from .spec import Claim, Test, final, success_metrics, tokens_per_episode

__all__ = ["CREDIT_CLAIMS"]

# a 4-stage chain with 12 turns: a failure is a truncation at the turn limit (the longest episode)
CHAIN_LONG = {"env": "bandit_chain", "env_kwargs": {"stages": 4, "layout_seed": 0, "max_turns": 12}}

# random 4x4 lakes: a new map per task, so some tasks are easy, some hard, some never solved
RANDOM_LAKES = dict(env="gridworld", env_kwargs={"size": 4, "max_turns": 12}, prompts_per_step=4)


def _outcome(s: dict) -> dict:
    tpe = tokens_per_episode(s)
    return {**success_metrics(s),
            "final_turns": final(s["turns_per_episode"]), "final_tokens_per_episode": final(tpe),
            "tokens_per_step": float(np.nanmean(s["tokens_generated"]))}


def _tree_metrics(s: dict) -> dict:
    ev = np.asarray(s["eval_success_rate"], float)
    ev = ev[np.isfinite(ev)]
    return {**_outcome(s), "final_eval_success": float(ev[-2:].mean()) if ev.size else float("nan"),
            "auc_eval_success": float(ev.mean()) if ev.size else float("nan")}


def _gigpo_metrics(s: dict) -> dict:
    out = _outcome(s)
    out["recur_states"] = float(np.mean(s.get("probe_recur_states", [np.nan])))
    out["recur_turns"] = float(np.mean(s.get("probe_recur_turns", [np.nan])))
    return out


gigpo = Claim(
    name="gigpo",
    claim="GiGPO beats GRPO at the same number of rollouts, and most states recur within a group.",
    source="GiGPO (Feng et al. 2025), arXiv 2505.10978: > 12% (ALFWorld) and > 9% (WebShop) over GRPO; "
           "> 65% of states recur within a group",
    metric="final success rate; share of anchor states visited at least twice within their group",
    base=dict(**RANDOM_LAKES),
    arms={"grpo": {"estimator": "grpo"}, "gigpo": {"estimator": "gigpo"}},
    probe="recurrence",
    tests=[Test("GiGPO - GRPO, final success", "final_success", "gigpo", "grpo"),
           Test("share of recurring anchor states (GiGPO arm) > 0.65", "recur_states", "gigpo", threshold=0.65)],
    metrics=_gigpo_metrics, steps=60, quick_steps=25,
    mechanism="Trajectories of a group revisit the same states; GiGPO's step-level advantage compares actions "
              "taken from one anchor state, a per-step credit GRPO's single trajectory advantage lacks.",
    faithfulness="Random deterministic 4x4 lakes (like ALFWorld's resets, rollouts of a group share a map and "
                 "revisit its cells); 12 turns instead of ALFWorld's 50, a tiny policy, equal rollouts per arm.",
    settings_tried=2,
    needed='a task where per-step credit is the bottleneck and the policy can exploit it: longer horizons with many distinct decisions per episode (ALFWorld has up to 50 steps), more steps and seeds to resolve a difference of a few points.',
    notes="Random 4x4 lakes, deterministic (like ALFWorld's resets): the rollouts of a group share a map and "
          "revisit its cells. Tried first: a fixed 5x5 lake with 16 turns, where neither arm got past ~5% success "
          "in 40 steps (a floor, not a comparison). "
          "Recurrence is measured every 10 steps on a fresh batch (anchor = equal state key within a group, any "
          "trajectory, any turn); recur_turns is the share of turns taken from a recurring state.")

rwnorm = Claim(
    name="rwnorm",
    claim="Dividing group advantages by the reward std costs performance when many tasks are always or never "
          "solved.",
    source="LOOP (Chen et al. 2025), arXiv 2502.01600: RwNorm 61.9 vs 71.3 task completion on AppWorld",
    metric="final success rate",
    base=dict(**RANDOM_LAKES),
    arms={"mean_only": {"estimator": "dr_grpo"}, "std_norm": {"estimator": "grpo"}},
    tests=[Test("mean-only - std-normalized, final success", "final_success", "mean_only", "std_norm")],
    metrics=_outcome, steps=60, quick_steps=25,
    mechanism="Groups with a tiny but non-zero std (nearly always or never solved) get their advantages blown "
              "up by 1/std, so a few lucky or unlucky rollouts dominate the update.",
    faithfulness="Random lakes mix trivially easy and hopeless maps, the regime of the claim; AppWorld is long "
                 "horizon and has ~700 training tasks. Adam's per-parameter scaling partly undoes a global rescale.",
    settings_tried=1,
    needed="a task mix with many always-solved and never-solved tasks over a long run (AppWorld), and more seeds: here both estimators give a zero advantage to such groups, and std division only rescales the sometimes-solved ones, which Adam's per-parameter scaling partly undoes.",
    notes="Random lakes mix trivially easy and hopeless maps, the regime the claim is about. Arms differ only in the "
          "std division (Dr. GRPO vs GRPO advantages), same PPO clip and aggregation.")

is_granularity = Claim(
    name="is_granularity",
    claim="The granularity of PPO's importance weight matters: token beats turn beats trajectory.",
    source="LOOP (Chen et al. 2025), arXiv 2502.01600: 71.3 / 64.1 / 53.3 on AppWorld Test-N",
    metric="final success rate",
    base=dict(**RANDOM_LAKES, estimator="rloo", clip="loop", ppo_epochs=2, staleness=2, think_max=8),
    arms={"token": {"ratio": "token"}, "turn": {"ratio": "turn"}, "trajectory": {"ratio": "trajectory"}},
    tests=[Test("token - turn, final success", "final_success", "token", "turn"),
           Test("turn - trajectory, final success", "final_success", "turn", "trajectory")],
    metrics=_outcome, steps=60, quick_steps=25,
    mechanism="A coarser importance weight clips or keeps a whole turn or trajectory at once: one extreme token "
              "switches off (or keeps) the gradient of all its neighbours, which wastes or destabilizes updates.",
    faithfulness="LOOP recipe (leave-one-out advantages, asymmetric clip, 2 epochs) plus staleness 2 and up to 8 "
                 "reasoning tokens so the three levels differ; the toy's turns stay a few tokens long (the policy "
                 "ends reasoning early), AppWorld's are hundreds.",
    settings_tried=1,
    needed='longer turns and more off-policy epochs (LOOP: 2 epochs over 40 tasks x 6 rollouts, turns of hundreds of tokens), so that where the ratio is clipped changes which tokens are updated.',
    notes="LOOP recipe: leave-one-out advantages, asymmetric clip [1/(1+eps), 1+eps], 2 PPO epochs. toyrl's turn "
          "ratio is the per-turn geometric mean (SORL); LOOP's turn variant is not in its released code.")

length_bias = Claim(
    name="length_bias",
    claim="seq-mean-token-mean aggregation biases optimization toward shorter trajectories (where failing "
          "episodes are long; where they are short it biases toward longer ones).",
    source="ARLArena (Wang et al. 2026), arXiv 2602.21534",
    metric="policy tokens per episode at the end of training (and turns per episode)",
    base=dict(**RANDOM_LAKES, think_max=4),
    arms={"chain_tm": {**CHAIN_LONG, "agg": "token-mean"}, "chain_smtm": {**CHAIN_LONG, "agg": "seq-mean-token-mean"},
          "lake_tm": {"agg": "token-mean"}, "lake_smtm": {"agg": "seq-mean-token-mean"}},
    tests=[Test("chain (failures long): smtm - token-mean, tokens per episode", "final_tokens_per_episode",
                "chain_smtm", "chain_tm", sign=-1),
           Test("lakes (failures short): smtm - token-mean, tokens per episode", "final_tokens_per_episode",
                "lake_smtm", "lake_tm")],
    metrics=_outcome, curve="tokens_per_episode", curve_label="policy tokens per episode", steps=60, quick_steps=25,
    mechanism="Under seq-mean-token-mean a token weighs 1/(B |o_i|), so the update follows the gradient of "
              "E[(R - b) / L]: above-baseline episodes are pushed shorter, below-baseline ones longer. Where "
              "failures are long (truncations) episodes get shorter; where failures are short they get longer.",
    faithfulness="Two tasks show the two faces: a 4-stage chain whose failures run to the turn limit, and random "
                 "lakes whose failures are short falls into holes; up to 4 reasoning tokens per turn.",
    settings_tried=2,
    needed='trajectories whose length varies a lot within a group and is not tied to success. A positive effect (longer episodes under seq-mean-token-mean) is the other face of the same weighting: a long failing episode gets a smaller penalty per token, so little pushes it shorter; which face dominates depends on whether long episodes mostly fail (here) or mostly succeed.',
    notes="Up to 4 thinking tokens per turn, so an episode's length is the policy's choice twice over "
          "(turns and thinking). Under seq-mean-token-mean a token weighs 1/(B |o_i|).")

bc_warmstart = Claim(
    name="bc_warmstart",
    claim="A behaviour-cloning warm start on expert demonstrations raises the success rate reached by RL.",
    source="ARLArena (Wang et al. 2026), arXiv 2602.21534: +20.71 points on ALFWorld with GRPO",
    metric="final success rate after the same RL budget",
    base=dict(env="gridworld", env_kwargs={"size": 4}, prompts_per_step=4),
    arms={"rl_only": {"bc_steps": 0}, "bc_then_rl": {"bc_steps": 20}},
    tests=[Test("BC + RL - RL, early success (first quarter)", "early_success", "bc_then_rl", "rl_only"),
           Test("BC + RL - RL, success AUC", "auc_success", "bc_then_rl", "rl_only")],
    metrics=_outcome, steps=60, quick_steps=25,
    mechanism="Demonstrations put the policy where rewards are frequent, so RL starts with a signal instead of "
              "exploring; the gain shows early and in the area under the success curve.",
    faithfulness="Planner demonstrations on random 4x4 lakes (data/demos/gridworld.jsonl); RL alone catches up "
                 "within ~100 steps here, so the test is on early success and AUC, not the final level.",
    settings_tried=1,
    needed='an RL budget where RL alone has not caught up with the warm start, or a task RL alone cannot crack.',
    notes="20 behaviour-cloning steps on the shipped planner demonstrations (data/demos/gridworld.jsonl, random "
          "4x4 lakes) before RL; the RL budget is the same in both arms.")

tree_rollout = Claim(
    name="tree_rollout",
    claim="Tree rollouts beat independent rollouts at an equal token budget.",
    source="Tree-GRPO (Ji et al. 2025), arXiv 2509.21240",
    metric="final success rate; tokens generated per step (budget check)",
    base=dict(**RANDOM_LAKES, eval_every=10, eval_episodes=32),
    arms={"independent": {"rollout": "independent", "estimator": "grpo"},
          "tree": {"rollout": "tree", "estimator": "tree_grpo"}},
    tests=[Test("tree - independent, final fresh-episode success", "final_eval_success", "tree", "independent"),
           Test("tree - independent, fresh-episode success AUC", "auc_eval_success", "tree", "independent")],
    metrics=_tree_metrics, steps=60, quick_steps=25, curve="eval_success_rate",
    curve_label="fresh-episode success (eval)",
    mechanism="Forking from stored states shares prefixes, so one budget yields more leaves and advantages that "
              "compare siblings at a branch point (a step-level signal).",
    faithfulness="Success is measured on fresh evaluation episodes (32 every 10 steps), not on the training "
                 "leaves the tree chose to expand. Lakes have short prefixes, so sharing saves little.",
    settings_tried=1,
    needed='tasks where sharing a prefix saves a large share of the budget (long, expensive prefixes with decisions late in the episode) and a longer run.',
    notes="Trees start G/2 chains per task and branch from stored states until the task's tokens reach G x the "
          "mean cost of its first chains (toyrl.tree), Tree-GRPO intra + inter tree advantages.")

# a 6-stage chain learned by heart: sparse success needs 6 right pulls in 12 turns
CHAIN = dict(env="bandit_chain", prompts_per_step=4, estimator="turn_gae")
CHAIN_KW = {"stages": 6, "layout_seed": 0, "max_turns": 12}

dense_reward = Claim(
    name="dense_reward",
    claim="Dense per-turn rewards beat sparse ones, but naively treating turns as independent episodes "
          "underperforms trajectory-level PPO.",
    source="Wei et al. 2025 (MT-GRPO / MT-PPO), arXiv 2505.11821",
    metric="success rate averaged over the run (AUC: learning speed and level) and final success",
    base=CHAIN,
    arms={"sparse_traj": {"env_kwargs": CHAIN_KW, "estimator_kwargs": {"gamma": 1.0, "lam": 1.0}},
          "dense_traj": {"env_kwargs": {**CHAIN_KW, "dense": True}, "estimator_kwargs": {"gamma": 1.0, "lam": 1.0}},
          "dense_turn_naive": {"env_kwargs": {**CHAIN_KW, "dense": True}, "estimator_kwargs": {"gamma": 0.0, "lam": 0.0}}},
    tests=[Test("dense - sparse (trajectory PPO), success AUC", "auc_success", "dense_traj", "sparse_traj"),
           Test("trajectory - naive per-turn (dense), success AUC", "auc_success", "dense_traj", "dense_turn_naive")],
    metrics=_outcome, steps=60, quick_steps=25,
    mechanism="Dense rewards give each turn its own signal (less variance than one outcome); but a turn credited "
              "only with its immediate reward can be optimized locally against the outcome.",
    faithfulness="BanditChain with a learned turn critic. Every dense reward advances the chain, so a local "
                 "reward cannot be farmed: the second half of the claim (naive per-turn underperforms) has no "
                 "channel in this toy, and a contrary result is expected and reported as such.",
    settings_tried=1,
    needed="a task where per-turn rewards can be earned without progress towards the outcome (Wei et al.'s retrieval signals). In BanditChain every dense reward is a step towards success, so crediting a turn with its own reward is just a lower-variance estimate of the same thing.",
    notes="PPO with a learned turn-level critic (turn GAE). Trajectory-level: gamma = lambda = 1 (each turn is "
          "credited with the return to go). Naive per-turn decomposition: gamma = lambda = 0 (each turn is its own "
          "episode, credited with its immediate reward only). In BanditChain every dense reward is aligned with "
          "the outcome (a right pull always helps), so local over-optimization is not possible in this toy.")

CREDIT_CLAIMS = [gigpo, rwnorm, is_granularity, length_bias, bc_warmstart, tree_rollout, dense_reward]
