"""The shared random TurnBatch of the credit tests (tests/conftest.py) is valid and covers the layouts they need."""
from __future__ import annotations

import torch

from toyrl.testing import random_batch


def test_random_batch_is_valid():
    b = random_batch(seed=3)
    assert b.turn_mask[0].all() and (b.policy_mask.sum(1) >= b.turn_mask.sum(1)).all()


def test_random_batch_has_observation_gaps_empty_rollouts_and_hashes():
    b = random_batch(40, 4, seed=2, hash_keys=True)
    assert (~b.policy_mask & (b.turn_id >= 1)).any()                      # observation tokens between turns
    assert (~b.turn_mask.any(1)).any() and b.state_key.abs().max() > 2**40
