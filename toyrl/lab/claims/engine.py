"""The rollout engine is not the trainer (issue 25): a quantized sampler degrades RL from a competent start.

The setting is the blind T-maze of ``echo.py`` started from its shipped warm start (``init="tmaze"``, the BC
optimizer continued, lr 1e-3), where GRPO with the exact engine holds its 0.93 success for 40 steps. The engine
arm samples with an int4 copy of the weights (``engine="int4"``, per-row absmax, synced every step); the trainer
rescores every token with its fp32 weights (the decoupled objective), and the arms differ only in what is done
with the gap: nothing, token TIS, IcePop, or verl's geometric-mean rejection of whole rows. The setting and the
arms were fixed on pilot seeds 100-103 (see ``claims.toml``) before the verdict seeds ran.
"""
from __future__ import annotations

import numpy as np

from .spec import Claim, Test, about, success_metrics

__all__ = ["ENGINE_CLAIMS", "ENGINE_BASE"]

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

ENGINE_CLAIMS = [engine_mismatch]
