"""Credit that pays off: the credit claims registered again on long-horizon tasks, where credit matters.

The credit claims of ``credit.py`` run on random 4x4 lakes and a 6-stage chain, where a learned policy walks
straight and there is little left to credit. Here:

- **the snake** (``GridWorld(layout="snake")``): one winding corridor, 16 / 30 / 48 turns at sizes 5 / 7 / 9 and no
  shorter way, so the horizon stays long once solved; every side step is fatal, so a failed episode is a run of
  right turns ended by one wrong one, and GRPO's one trajectory advantage blames them all. Every run starts from
  the shipped warm start of its size (``init="snake7"``: a clone of a teacher that errs 5% of the time; success
  0.72 / 0.40 / 0.39 at sizes 5 / 7 / 9), with the BC optimizer continued;
- **the fork** (``layout="fork"``, size 9): the first moves choose one of two 8-cell corridors; the wrong one ends
  in a hole 8 turns later (``init="fork9"``, success 0.24);
- **random 6x6 lakes** from a per-seed 40-step clone, where about half the groups are always or never solved
  (the regime of LOOP's RwNorm finding);
- **an 8-stage chain** learned by heart from scratch (``BanditChain(layout_seed=0)``), with MT-GRPO's turn signal
  aligned (a right pull) or farmable (``lures=1``: a lure arm "finds something" as a right pull does, without
  advancing).

A sample-efficiency metric beside final success: ``steps_to_halve``, the first step at which the 5-step mean
success has closed half the gap between the run's first batch and 1 (both arms of a seed share that first batch:
same trainer seed, same start); it is censored at the run's length (``Claim.censored``: a run that never halves its
failure rate reads 40). Each setting was fixed on pilot seeds 100-101 (``claims.toml``) before the verdict seeds ran;
``gigpo_horizon_growth`` takes ``gigpo_horizon``'s setting unchanged to test the one part of its sentence that
``gigpo_horizon`` has no test for (the gap grows with the horizon).
"""
from __future__ import annotations

import numpy as np

from .engine import ENGINE_BASE
from .spec import PROBE_EVERY, PROBES, Claim, Test, about, final, smooth, success_metrics, tokens_per_episode

__all__ = ["HORIZON_CLAIMS", "SNAKE_BASE", "GROWTH", "steps_to_halve", "snake", "critic_probe", "WARMUP_STEPS"]

SNAKE_BASE = dict(env="gridworld", policy="small", context="full", n_think=2, think_max=0, estimator="grpo",
                  prompts_per_step=8, group_size=8, lr=1e-3, bc_optimizer="continue")
"""the warm starts' settings (``toyrl.train.warmstart``: snake5/7/9, fork9), GRPO at lr 1e-3, 8 x 8, BC optimizer on"""


def snake(n: int, layout: str = "snake") -> dict:
    """The config fields of the size-n snake (or fork) started from its shipped warm start."""
    return {"env_kwargs": {"size": n, "layout": layout}, "init": f"{layout}{n}"}


def steps_to_halve(success, w: int = 5) -> float:
    """Sample efficiency: the first step whose trailing ``w``-step mean success reaches 1 - (1 - s_0) / 2, s_0 the
    first step's success (half the failure rate gone); the run's length when it never does (censored).
    Example: [0.5, 0.6, 0.8, 0.9], w 1 -> level 0.75 -> 2; [0.5, 0.5] -> 2."""
    x = np.nan_to_num(np.asarray(success, float))
    level = 1.0 - (1.0 - x[0]) / 2.0
    # success rates are multiples of 1/B, so a smoothed mean and the level differ by a multiple of 1/(2 w B) or tie;
    # the tolerance counts a tie as reached also in a stored series rounded to 5 significant digits
    hit = np.flatnonzero(smooth(x, w) >= level - 1e-4)
    return float(hit[0]) if hit.size else float(len(x))


def _metrics(s: dict) -> dict:
    out = {**success_metrics(s), "steps_to_halve": steps_to_halve(s["success_rate"]),
           "final_turns": final(s["turns_per_episode"]), "tokens_per_step": float(np.nanmean(s["tokens_generated"])),
           "final_tokens_per_episode": final(tokens_per_episode(s)),
           "zero_var_frac": float(np.nanmean(s["zero_var_frac"]))}
    for k in ("recur_states", "recur_turns"):
        if f"probe_{k}" in s:
            out[k] = float(np.mean(s[f"probe_{k}"]))
    ev = np.asarray(s.get("eval_success_rate", []), float)
    ev = ev[np.isfinite(ev)]
    if ev.size:
        out["final_eval_success"], out["auc_eval_success"] = float(ev[-2:].mean()), float(ev.mean())
    return out


TASKS = {"s5": snake(5), "s7": snake(7), "s9": snake(9), "fork": snake(9, "fork")}
"""the long-horizon tasks: snake 5x5 (16 turns), 7x7 (30), 9x9 (48), fork 9x9 (12 turns, the choice paid 8 later)"""
TURNS = {"s5": 16, "s7": 30, "s9": 48, "fork": 12}

gigpo_horizon = Claim(
    name="gigpo_horizon", **about("gigpo_horizon"),
    base=SNAKE_BASE,
    arms={f"{est}_{t}": {**TASKS[t], "estimator": est} for t in TASKS for est in ("grpo", "gigpo")},
    probe="recurrence",
    tests=[*(Test(f"GiGPO - GRPO, final success ({t}, {TURNS[t]} turns)", "final_success", f"gigpo_{t}", f"grpo_{t}")
             for t in TASKS),
           *(Test(f"GiGPO - GRPO, steps to halve the failure rate ({t})", "steps_to_halve", f"gigpo_{t}", f"grpo_{t}",
                  sign=-1) for t in TASKS),
           Test("share of recurring anchor states (GiGPO, snake 7x7) > 0.65", "recur_states", "gigpo_s7",
                threshold=0.65, role="construction",
                why="every rollout of a group walks the snake's one corridor, so its cells recur by the task's design")],
    metrics=_metrics, steps=40, quick_steps=10, censored=("steps_to_halve",))

GROWTH = ("s5", "s9")
"""the shortest and the longest snake: 16 and 48 turns"""
gigpo_horizon_growth = Claim(
    name="gigpo_horizon_growth", **about("gigpo_horizon_growth"),
    base=SNAKE_BASE,
    arms={f"{est}_{t}": {**TASKS[t], "estimator": est} for t in GROWTH for est in ("grpo", "gigpo")},
    tests=[Test("(GiGPO - GRPO at 48 turns) - (GiGPO - GRPO at 16 turns), final success", "final_success",
                "gigpo_s9", "grpo_s9", minus=("gigpo_s5", "grpo_s5")),
           Test("(GiGPO - GRPO at 48 turns) - (GiGPO - GRPO at 16 turns), steps to halve the failure rate",
                "steps_to_halve", "gigpo_s9", "grpo_s9", minus=("gigpo_s5", "grpo_s5"), sign=-1)],
    metrics=_metrics, steps=40, quick_steps=10, censored=("steps_to_halve",))

turn_critic = Claim(
    name="turn_critic", **about("turn_critic"),
    base={**SNAKE_BASE, **TASKS["s7"]},
    arms={"grpo": {}, "turn_gae": {"estimator": "turn_gae"}, "turn_ppo": {"estimator": "turn_gae", "clip": "turn_ppo"}},
    tests=[Test("turn critic (turn GAE) - GRPO, final success", "final_success", "turn_gae", "grpo"),
           Test("turn critic (turn GAE) - GRPO, steps to halve the failure rate", "steps_to_halve", "turn_gae", "grpo",
                sign=-1),
           Test("Turn-PPO (turn GAE + turn-level ratio) - GRPO, final success", "final_success", "turn_ppo", "grpo")],
    metrics=_metrics, steps=40, quick_steps=10, censored=("steps_to_halve",))

WARMUP_STEPS = 30
"""the warm critic's regression steps before RL (``critic_warmup_steps``): pilot s100 on the snake 7x7 start, its
value loss on fresh start episodes 0.27 at initialization, 0.123 after 30 steps, 0.121 after 60"""


def critic_probe(trainer) -> dict:
    """Reads the run log, samples nothing: the means over the last ``PROBE_EVERY`` rows (the steps since the last
    probe; NaN at step 0) of the critic's loss on each step's fresh batch before its update (``critic_loss``),
    |V - R| (``value_error``) and the mean importance ratio (``ratio_mean``)."""
    n = min(PROBE_EVERY, len(trainer.log.rows))             # column: a ratio one on-policy epoch fixes reads as 1
    return {k: float(np.mean(trainer.log.column(k, strict=False)[-n:])) if n else float("nan")
            for k in ("critic_loss", "value_error", "ratio_mean")}


PROBES.setdefault("critic", critic_probe)      # spec.run_job looks probes up by name; this module adds its own


def _critic_metrics(s: dict) -> dict:
    """``_metrics`` plus the critic's value loss over RL steps 0-9 (``value_loss_early``) and steps 0-29
    (``value_loss``), and the importance ratio: the largest of the run (``ratio_max``, its log10), the mean of
    each step's largest (``ratio_max_mean``), the mean ratio over steps 0-29 (``ratio_mean``)."""
    vl, r = np.asarray(s.get("probe_critic_loss", []), float), np.asarray(s["ratio_max"], float)
    ok = vl[np.isfinite(vl)]
    rm = np.asarray(s.get("probe_ratio_mean", []), float)
    return {**_metrics(s), "value_loss_early": float(ok[0]) if ok.size else float("nan"),
            "value_loss": float(ok.mean()) if ok.size else float("nan"),
            "ratio_max": float(np.nanmax(r)), "log10_ratio_max": float(np.log10(max(np.nanmax(r), 1e-12))),
            "ratio_max_mean": float(np.nanmean(r)),
            "ratio_mean": float(np.nanmean(rm)) if np.isfinite(rm).any() else float("nan")}


TURN_GAE = {"estimator": "turn_gae"}
turn_critic_warm = Claim(
    name="turn_critic_warm", **about("turn_critic_warm"),
    base={**SNAKE_BASE, **TASKS["s7"]},
    arms={"grpo": {}, "zero_critic": TURN_GAE, "warm_critic": {**TURN_GAE, "critic_warmup_steps": WARMUP_STEPS}},
    probe="critic",
    tests=[Test("warm - zero critic (turn GAE), final success", "final_success", "warm_critic", "zero_critic"),
           Test("warm - zero critic, steps to halve the failure rate", "steps_to_halve", "warm_critic",
                "zero_critic", sign=-1),
           Test("warm critic (turn GAE) - GRPO, final success", "final_success", "warm_critic", "grpo"),
           Test("warm - zero critic, value loss over RL steps 0-9", "value_loss_early", "warm_critic", "zero_critic",
                sign=-1, role="manipulation",
                why="the warm critic was fitted before RL to lower exactly this loss on the start policy's episodes")],
    metrics=_critic_metrics, steps=40, quick_steps=10, censored=("steps_to_halve",))

PPO4 = {"estimator": "turn_gae", "ppo_epochs": 4, "minibatches": 2, "clip": "ppo", "lr": 2.5e-4}
"""Turn-PPO where the ratio moves: turn GAE (a critic from zero, as in turn_critic), 4 epochs x 2 minibatches = 8
updates per batch at lr 2.5e-4 (about twice the weight movement per batch of one update at 1e-3)"""
turn_ppo_ratio = Claim(
    name="turn_ppo_ratio", **about("turn_ppo_ratio"),
    base={**ENGINE_BASE, **PPO4},
    arms={"token": {"ratio": "token"}, "turn": {"ratio": "turn"}, "sequence": {"ratio": "sequence"}},
    probe="critic",
    tests=[Test("turn-level - token-level ratio, final success", "final_success", "turn", "token"),
           Test("turn-level - sequence-level ratio, final success", "final_success", "turn", "sequence")],
    metrics=_critic_metrics, steps=40, quick_steps=10, curve=("success_rate", "ratio_max"),
    curve_label="success / largest ratio of the step")

CHAIN8 = {"stages": 8, "arms": 4, "max_turns": 16, "layout_seed": 0}
"""8 right pulls in 16 turns, one fixed layout: random success 0.027"""

dense_farmable = Claim(
    name="dense_farmable", **about("dense_farmable"),
    base=dict(env="bandit_chain", env_kwargs=CHAIN8, prompts_per_step=8, group_size=8),
    arms={"sparse": {"estimator": "grpo"}, "dense": {"estimator": "mt_grpo"},
          "farmable": {"estimator": "mt_grpo", "env_kwargs": {**CHAIN8, "lures": 1}}},
    tests=[Test("MT-GRPO dense turn signal - sparse GRPO, success AUC", "auc_success", "dense", "sparse"),
           Test("MT-GRPO dense turn signal - sparse GRPO, final success", "final_success", "dense", "sparse"),
           Test("farmable - aligned turn signal (MT-GRPO), final success", "final_success", "farmable", "dense",
                sign=-1)],
    metrics=_metrics, steps=40, quick_steps=10)

tree_budget = Claim(
    name="tree_budget", **about("tree_budget"),
    base={**SNAKE_BASE, **TASKS["s7"], "eval_every": 10, "eval_episodes": 64},
    arms={"independent": {"rollout": "independent", "estimator": "grpo"},
          "tree": {"rollout": "tree", "estimator": "tree_grpo"}},
    tests=[Test("tree - independent, final fresh-episode success", "final_eval_success", "tree", "independent"),
           Test("tree - independent, fresh-episode success AUC", "auc_eval_success", "tree", "independent")],
    metrics=_metrics, steps=40, quick_steps=10, curve="eval_success_rate", curve_label="fresh-episode success (eval)")

tree_budget_tokens = Claim(
    name="tree_budget_tokens", **about("tree_budget_tokens"),
    base={**SNAKE_BASE, **TASKS["s7"], "eval_every": 10, "eval_episodes": 64},
    arms={"independent": {"rollout": "independent", "estimator": "grpo"},
          "tree": {"rollout": "tree", "estimator": "tree_grpo", "tree_kwargs": {"fill": "tokens"}}},
    tests=[Test("tree - independent, final fresh-episode success", "final_eval_success", "tree", "independent"),
           Test("tree - independent, fresh-episode success AUC", "auc_eval_success", "tree", "independent")],
    metrics=_metrics, steps=40, quick_steps=10, curve="eval_success_rate", curve_label="fresh-episode success (eval)")
"""tree_budget again with the budget filled in generated tokens (``tree_rollout(fill="tokens")``): both arms
generate the same tokens per step in expectation, where tree_budget's tree spent 16% more"""

LAKES6 = dict(env="gridworld", env_kwargs={"size": 6, "max_turns": 30}, policy="small", prompts_per_step=8,
              group_size=8, bc_steps=40, bc_optimizer="continue", lr=1e-3)
"""random 6x6 lakes from a per-seed 40-step clone: about half the groups always or never solved (pilot: 0.45-0.49)"""

rwnorm_mix = Claim(
    name="rwnorm_mix", **about("rwnorm_mix"),
    base=LAKES6,
    arms={"mean_only": {"estimator": "dr_grpo"}, "std_norm": {"estimator": "grpo"}},
    tests=[Test("mean-only - std-normalized, final success", "final_success", "mean_only", "std_norm")],
    metrics=_metrics, steps=40, quick_steps=10)

HORIZON_CLAIMS = [gigpo_horizon, turn_critic, dense_farmable, tree_budget, rwnorm_mix, turn_critic_warm, turn_ppo_ratio,
                  tree_budget_tokens, gigpo_horizon_growth]
