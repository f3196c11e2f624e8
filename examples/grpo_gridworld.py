"""GRPO on GridWorld in one file, from toyrl's public pieces and no Trainer.

    python examples/grpo_gridworld.py --steps 30

Each step: P tasks (4x4 maps), G episodes per task played by the toy transformer -> a TurnBatch; GRPO's
group-relative advantage of each episode's outcome (DeepSeekMath, arXiv 2402.03300),

    A_i = (R_i - mean_{j in g(i)} R_j) / (std_{j in g(i)} R_j + eps),

given to every turn of episode i; then PPO's clipped loss on the recomputed log-probs and one AdamW step.
``examples/gigpo_gridworld.py`` is this loop with GiGPO's advantage instead.
"""
from __future__ import annotations

import argparse

import numpy as np
import torch

from toyrl.credit import grpo
from toyrl.envs import make_core
from toyrl.objectives import loss_mask, policy_loss
from toyrl.rollout import Sampling, recompute_logp, rollout
from toyrl.train.build import build_policy


def grpo_advantage(batch) -> torch.Tensor:
    """GRPO: each episode's group-normalized outcome, the same for all its turns -> (B, H)."""
    return grpo(batch.outcome(), batch.group)[:, None].expand(-1, batch.H)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=30, help="RL steps")
    p.add_argument("--tasks", type=int, default=8, help="P: tasks (maps) per step")
    p.add_argument("--group-size", type=int, default=8, help="G: episodes per task")
    p.add_argument("--lr", type=float, default=3e-3, help="AdamW learning rate")
    p.add_argument("--max-turns", type=int, default=8, help="turn limit of an episode")
    p.add_argument("--seed", type=int, default=0, help="seed of maps, sampling and initialization")
    return p.parse_args(argv)


def train(args: argparse.Namespace, advantage=grpo_advantage) -> list[float]:
    """Run the loop; print and return the success rate of every step (the learning curve)."""
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    B = args.tasks * args.group_size
    core = make_core("gridworld", B, seed=args.seed, map_name="4x4", max_turns=args.max_turns)
    policy, codec = build_policy("tiny", core, torch.device("cpu"))
    opt = torch.optim.AdamW(policy.parameters(), lr=args.lr)
    sampling = Sampling(temperature=1.0, generator=gen)
    curve = []
    for step in range(args.steps):
        # 1. collect: G episodes from each of P tasks; rollouts of one task share a group id
        tasks = np.repeat(core.sample_tasks(rng, args.tasks), args.group_size, 0)
        group = step * args.tasks + np.repeat(np.arange(args.tasks), args.group_size)
        policy.eval()
        ro = rollout(policy, core, tasks, group, codec=codec, sampling=sampling)
        b = ro.batch                                                  # TurnBatch: B rollouts, T tokens, H turns

        # 2. advantages, at turn level
        adv = advantage(b)                                            # (B, H)

        # 3. loss: PPO's clipped surrogate on the policy tokens, token-mean
        policy.train()
        logp, _ = recompute_logp(policy, ro, "matched")               # (B, T) under the contexts the rollout saw
        mask = loss_mask(b.policy_mask, b.turn_id)                    # (B, T) policy tokens only
        loss, info = policy_loss(logp, b.old_logp, adv, mask, b.turn_id, clip="ppo", agg="token-mean",
                                 H=b.H, adv_level="turn")

        # 4. optimizer step
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
        opt.step()

        success = ro.success.float().mean().item()
        curve.append(success)
        print(f"step {step:3d}  success {success:.3f}  reward {b.outcome().mean().item():.3f}  "
              f"loss {loss.item():+.4f}  clip_frac {info['clip_frac'].item():.3f}")
    return curve


if __name__ == "__main__":
    train(parse_args())
