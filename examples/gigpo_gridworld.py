"""GiGPO on GridWorld: the GRPO loop of ``grpo_gridworld.py`` with GiGPO's advantage (arXiv 2505.10978).

    python examples/gigpo_gridworld.py --steps 30

    A_{i,k} = A^E_i + omega * A^S_{i,k}: the episode's group advantage plus the discounted return-to-go of turn k
    against the other turns taken from the same anchor state (same group, same state_key).
"""
from __future__ import annotations

from toyrl.credit import gigpo

from grpo_gridworld import parse_args, train


def gigpo_advantage(batch):
    """GiGPO: episode + anchor-state step advantage -> (B, H)."""
    return gigpo(batch.turn_reward, batch.turn_mask, batch.group, batch.state_key)


if __name__ == "__main__":
    train(parse_args(), advantage=gigpo_advantage)
