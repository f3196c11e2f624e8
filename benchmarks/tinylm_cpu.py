"""CPU figures of TinyLM: behaviour-cloning time of the shipped checkpoint and the time of one RL step.

    python benchmarks/tinylm_cpu.py                    # RL steps only (8 x 8 rollouts, <= 5 turns)
    python benchmarks/tinylm_cpu.py --bc-steps 1000    # also time the full BC of the shipped checkpoint
    taskset -c 0,1 python benchmarks/tinylm_cpu.py --threads 2

Targets (2 CPU cores): BC of the shipped checkpoint <= 10 minutes; one RL step with 8 tasks x 8
rollouts of up to 5 turns <= 3 s. Prints the median step (wall and CPU time: on a shared, busy
machine the CPU time of the 1-thread process is the better estimate of an idle core's wall time)
and its rollout / recompute / update parts.
"""
import argparse
import os
import statistics
import time

import torch

from toyrl.policies import TinyLM
from toyrl.train.pretrain import pretrain
from toyrl.train import TrainConfig, Trainer


def rl_step_times(env: str, env_kwargs: dict, steps: int, policy: str = "tinylm") -> dict:
    cfg = TrainConfig(env=env, env_kwargs=env_kwargs, policy=policy, max_turns=5, context="last_k", context_k=1,
                      group_size=8, prompts_per_step=8, lr=1e-3, steps=steps, progress=False)
    tr = Trainer(cfg)
    rows, walls, cpus = [], [], []
    for _ in range(steps + 1):
        t, c = time.perf_counter(), time.process_time()
        rows.append(tr.step())
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    rows, walls, cpus = rows[1:], walls[1:], cpus[1:]                   # the first step warms up
    med = lambda k: statistics.median(r[k] for r in rows)              # noqa: E731
    return {"step_s": statistics.median(walls), "step_cpu_s": statistics.median(cpus), "rollout_s": med("time_rollout"), "recompute_s": med("time_recompute"),
            "update_s": med("time_update"), "tokens_generated": med("tokens_generated"),
            "turns": med("turns_per_episode"), "success": med("success_rate")}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1, help="torch threads (1 avoids spin-waits on a busy machine)")
    p.add_argument("--steps", type=int, default=5, help="RL steps timed per env")
    p.add_argument("--bc-steps", type=int, default=0, help="also run BC for this many steps and time it")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"torch {torch.__version__}, {a.threads} thread(s), {os.cpu_count()} cores, load average {load:.1f}")
    if a.bc_steps:
        model = TinyLM.from_scratch(seed=0)
        t, c = time.perf_counter(), time.process_time()
        losses = pretrain(model, steps=a.bc_steps, verbose=False)
        print(f"BC: {a.bc_steps} steps in {(time.perf_counter() - t) / 60:.2f} min wall, "
              f"{(time.process_time() - c) / 60:.2f} min CPU (final loss {losses[-1]:.3f})")
    for env, kw in (("gridworld", {"map_name": "4x4"}), ("mock_search", {})):
        r = rl_step_times(env, kw, a.steps)
        print(f"RL step {env:11s}: {r['step_s']:.2f} s wall, {r['step_cpu_s']:.2f} s CPU (rollout {r['rollout_s']:.2f}, recompute {r['recompute_s']:.2f}, "
              f"update {r['update_s']:.2f}); {r['tokens_generated']:.0f} tokens generated, "
              f"{r['turns']:.1f} turns/episode, success {r['success']:.2f}")


if __name__ == "__main__":
    main()
