"""The rollout engine is not the trainer: a quantized sampler degrades RL from a competent start.

The setting is the blind T-maze of ``echo.py`` started from its shipped warm start (``init="tmaze"``, the BC
optimizer continued, lr 1e-3), where GRPO with the exact engine holds its 0.93 success for 40 steps. The engine
arm samples with an int4 copy of the weights (``engine="int4"``, per-row absmax, synced every step); the trainer
rescores every token with its fp32 weights (the decoupled objective), and the arms differ only in what is done
with the gap: nothing, token TIS, IcePop, or verl's geometric-mean rejection of whole rows. The setting and the
arms were fixed on pilot seeds 100-103 (see ``claims.toml``) before the verdict seeds ran.

``engine_blowup`` is the asynchronous case on notebook 12's BanditChain: the engine samples with the trainer's
weights of 2 updates ago (``engine="lag"``), so its tokens are two updates off-policy, and the arms differ in the
rollout correction: none, sequence-level masked IS, token TIS, IcePop or geometric-mean rejection.
"""
from __future__ import annotations

import numpy as np

from .spec import Claim, Test, about, success_metrics

__all__ = ["ENGINE_CLAIMS", "ENGINE_BASE", "BLOWUP_BASE"]

ENGINE_BASE = dict(env="gridworld", env_kwargs={"size": 5, "layout": "tmaze"}, policy="small", context="blind",
                   context_k=1, n_think=4, think_max=2, init="tmaze", bc_optimizer="continue", estimator="grpo",
                   lr=1e-3, group_size=8, prompts_per_step=8, eval_every=10, eval_episodes=64)
"""pilot P3/P4: the shipped T-maze warm start, GRPO at lr 1e-3 with the BC optimizer continued, 8 x 8, exact evals"""
INT4 = {"engine": "int4"}


def _engine_metrics(s: dict) -> dict:
    """Training success (the engine's episodes), the trainer's own success on fresh episodes sampled exactly
    (the mean of the last two evaluations), and the size of the gap."""
    ev = np.asarray(s["eval_success_rate"], float)
    ev = ev[np.isfinite(ev)]
    return {**success_metrics(s), "final_eval_success": float(ev[-2:].mean()) if ev.size else float("nan"),
            "engine_kl": float(np.nanmean(s["engine_kl"])), "engine_ratio_max": float(np.nanmax(s["engine_ratio_max"]))}


engine_mismatch = Claim(
    name="engine_mismatch", **about("engine_mismatch"),
    base=ENGINE_BASE,
    arms={"exact": {}, "int4": INT4, "int4_tis": {**INT4, "correction": "tis"},
          "int4_icepop": {**INT4, "correction": "icepop"}, "int4_geo_rs": {**INT4, "correction": "geo_rs"}},
    steps=40, quick_steps=10,
    tests=[Test("int4 - exact, final success (engine's episodes)", "final_success", "int4", "exact", sign=-1),
           Test("int4 - exact, trainer's fresh-episode success", "final_eval_success", "int4", "exact", sign=-1),
           Test("int4 + TIS - int4, final success", "final_success", "int4_tis", "int4"),
           Test("int4 + IcePop - int4, final success", "final_success", "int4_icepop", "int4"),
           Test("int4 + geo-mean rejection - int4, final success", "final_success", "int4_geo_rs", "int4"),
           Test("int4 + geo-mean rejection - int4, trainer's fresh-episode success", "final_eval_success",
                "int4_geo_rs", "int4")],
    metrics=_engine_metrics, curve="success_rate", curve_label="success (engine-sampled training episodes)")


# ---- the lagging engine: asynchronous rollouts, k updates stale -------------------------------------------------
BLOWUP_ENV = {"stages": 3, "arms": 4, "on_wrong": "stay", "max_turns": 8, "layout_seed": 0}
"""notebook 12's BanditChain (``toyrl.viz.engine.ENV_KWARGS``): one fixed layout, GRPO solves it in ~15 steps"""
BLOWUP_BASE = dict(env="bandit_chain", env_kwargs=BLOWUP_ENV, estimator="grpo", lr=1e-2, group_size=8,
                   prompts_per_step=4, eval_every=20, eval_episodes=64)
"""notebook 12's ``engine_config`` (P=4 x G=8, lr 1e-2), the trainer's own weights scored on 64 fresh exact
episodes after the last step (step 20)"""
LAG = {"engine": "lag", "engine_strength": 2}

engine_blowup = Claim(
    name="engine_blowup", **about("engine_blowup"),
    base=BLOWUP_BASE,
    arms={"exact": {}, "lag": LAG, "lag_seq_mis": {**LAG, "correction": "seq_mis"},
          "lag_tis": {**LAG, "correction": "tis"}, "lag_icepop": {**LAG, "correction": "icepop"},
          "lag_geo_rs": {**LAG, "correction": "geo_rs"}},
    steps=20, quick_steps=10,
    tests=[Test("lag 2 - exact, final success (engine's episodes)", "final_success", "lag", "exact", sign=-1),
           Test("lag 2 - exact, trainer's fresh-episode success", "final_eval_success", "lag", "exact", sign=-1),
           Test("lag 2 + sequence masked IS - lag 2, final success", "final_success", "lag_seq_mis", "lag"),
           Test("lag 2 + sequence masked IS - lag 2, trainer's fresh-episode success", "final_eval_success",
                "lag_seq_mis", "lag")],
    metrics=_engine_metrics, curve="success_rate", curve_label="success (engine-sampled training episodes)")

ENGINE_CLAIMS = [engine_mismatch, engine_blowup]
