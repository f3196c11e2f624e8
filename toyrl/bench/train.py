"""Benchmark: a whole training run, split into rollout, recompute and update time.

    toyrl bench train [--steps 200] [--env gridworld] [--estimator grpo]

Default: 200 steps of GRPO on GridWorld (random 4x4 maps, the env's default 32-turn limit) with
the default toy policy, 8 tasks x 8 rollouts per step. The target on 2 CPU cores is <= 30 s.
"""
from __future__ import annotations

import argparse
import time

from toyrl.train import TrainConfig, Trainer


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(prog="toyrl bench train", description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--env", default="gridworld")
    p.add_argument("--estimator", default="grpo")
    p.add_argument("--policy", default="tiny")
    p.add_argument("--quick", action="store_true", help="20 steps (a smoke run)")
    p.add_argument("--budget", type=float, default=30.0, help="seconds the full run should fit in")
    p.add_argument("--threads", type=int, default=1, help="torch threads (the toy model is too small to gain from more)")
    a = p.parse_args(argv)
    import torch
    torch.set_num_threads(a.threads)
    steps = 20 if a.quick else a.steps
    trainer = Trainer(TrainConfig(env=a.env, estimator=a.estimator, policy=a.policy, steps=steps, progress=False))
    t0 = time.perf_counter()
    log = trainer.run()
    total = time.perf_counter() - t0
    parts = {k: float(log.column(k).sum()) for k in ("time_rollout", "time_prep", "time_recompute", "time_update")}
    other = total - sum(parts.values())
    print(f"{a.estimator} on {a.env}, policy {a.policy}, 8 x 8 rollouts per step, {steps} steps, {a.threads} thread(s)")
    print(f"total {total:.2f} s ({1000 * total / steps:.1f} ms/step); budget {a.budget:.0f} s for 200 steps "
          f"-> projected {total * 200 / steps:.1f} s = {total * 200 / steps / a.budget:.2f} of budget")
    for k, v in {**parts, "other (diagnostics, logging)": other}.items():
        print(f"  {k:30s} {v:7.2f} s  {100 * v / total:5.1f}%")
    print(f"final success rate {log.rows[-1]['success_rate']:.2f}, mean turns {log.rows[-1]['turns_per_episode']:.1f}")
    return {"total_s": total, **parts}


if __name__ == "__main__":
    main()
