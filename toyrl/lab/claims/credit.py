"""Ledger claims on credit assignment, normalization, weighting, rollouts and warm starts (seed article,
second half). Same structure as ``stability.py``; runs of 60 RL steps (25 under --quick)."""
from __future__ import annotations

import numpy as np

from .spec import Claim, Test, about, final, success_metrics, tokens_per_episode

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
    name="gigpo", **about("gigpo"),
    base=dict(**RANDOM_LAKES),
    arms={"grpo": {"estimator": "grpo"}, "gigpo": {"estimator": "gigpo"}},
    probe="recurrence",
    tests=[Test("GiGPO - GRPO, final success", "final_success", "gigpo", "grpo"),
           Test("share of recurring anchor states (GiGPO arm) > 0.65", "recur_states", "gigpo", threshold=0.65)],
    metrics=_gigpo_metrics, steps=60, quick_steps=15)

rwnorm = Claim(
    name="rwnorm", **about("rwnorm"),
    base=dict(**RANDOM_LAKES),
    arms={"mean_only": {"estimator": "dr_grpo"}, "std_norm": {"estimator": "grpo"}},
    tests=[Test("mean-only - std-normalized, final success", "final_success", "mean_only", "std_norm")],
    metrics=_outcome, steps=60, quick_steps=15)

is_granularity = Claim(
    name="is_granularity", **about("is_granularity"),
    base=dict(**RANDOM_LAKES, estimator="rloo", clip="loop", ppo_epochs=2, staleness=2, think_min=8,
              think_max=8),
    arms={"token": {"ratio": "token"}, "turn": {"ratio": "turn"}, "trajectory": {"ratio": "trajectory"}},
    tests=[Test("token - turn, final success", "final_success", "token", "turn"),
           Test("turn - trajectory, final success", "final_success", "turn", "trajectory")],
    metrics=_outcome, steps=60, quick_steps=15)

length_bias = Claim(
    name="length_bias", **about("length_bias"),
    base=dict(**RANDOM_LAKES, think_max=4),
    arms={"chain_tm": {**CHAIN_LONG, "agg": "token-mean"}, "chain_smtm": {**CHAIN_LONG, "agg": "seq-mean-token-mean"},
          "lake_tm": {"agg": "token-mean"}, "lake_smtm": {"agg": "seq-mean-token-mean"}},
    tests=[Test("chain (failures long): smtm - token-mean, tokens per episode", "final_tokens_per_episode",
                "chain_smtm", "chain_tm", sign=-1),
           Test("lakes (failures short): smtm - token-mean, tokens per episode", "final_tokens_per_episode",
                "lake_smtm", "lake_tm")],
    metrics=_outcome, curve="tokens_per_episode", curve_label="policy tokens per episode", steps=60, quick_steps=15)

bc_warmstart = Claim(
    name="bc_warmstart", **about("bc_warmstart"),
    base=dict(env="gridworld", env_kwargs={"size": 4}, prompts_per_step=4),
    arms={"rl_only": {"bc_steps": 0}, "bc_then_rl": {"bc_steps": 20}},
    tests=[Test("BC + RL - RL, early success (first quarter)", "early_success", "bc_then_rl", "rl_only"),
           Test("BC + RL - RL, success AUC", "auc_success", "bc_then_rl", "rl_only")],
    metrics=_outcome, steps=60, quick_steps=15)

tree_rollout = Claim(
    name="tree_rollout", **about("tree_rollout"),
    base=dict(**RANDOM_LAKES, eval_every=10, eval_episodes=32),
    arms={"independent": {"rollout": "independent", "estimator": "grpo"},
          "tree": {"rollout": "tree", "estimator": "tree_grpo"}},
    tests=[Test("tree - independent, final fresh-episode success", "final_eval_success", "tree", "independent"),
           Test("tree - independent, fresh-episode success AUC", "auc_eval_success", "tree", "independent")],
    metrics=_tree_metrics, steps=60, quick_steps=15, curve="eval_success_rate",
    curve_label="fresh-episode success (eval)")

# a 6-stage chain learned by heart: sparse success needs 6 right pulls in 12 turns
CHAIN = dict(env="bandit_chain", prompts_per_step=4, estimator="turn_gae")
CHAIN_KW = {"stages": 6, "layout_seed": 0, "max_turns": 12}

dense_reward = Claim(
    name="dense_reward", **about("dense_reward"),
    base=CHAIN,
    arms={"sparse_traj": {"env_kwargs": CHAIN_KW, "estimator_kwargs": {"gamma": 1.0, "lam": 1.0}},
          "dense_traj": {"env_kwargs": {**CHAIN_KW, "dense": True}, "estimator_kwargs": {"gamma": 1.0, "lam": 1.0}},
          "dense_turn_naive": {"env_kwargs": {**CHAIN_KW, "dense": True}, "estimator_kwargs": {"gamma": 0.0, "lam": 0.0}}},
    tests=[Test("dense - sparse (trajectory PPO), success AUC", "auc_success", "dense_traj", "sparse_traj"),
           Test("trajectory - naive per-turn (dense), success AUC", "auc_success", "dense_traj", "dense_turn_naive")],
    metrics=_outcome, steps=60, quick_steps=15)

CREDIT_CLAIMS = [gigpo, rwnorm, is_granularity, length_bias, bc_warmstart, tree_rollout, dense_reward]
