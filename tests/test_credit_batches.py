"""Random multi-turn TurnBatches for the credit tests (imported by the other test_credit_* files)."""
from __future__ import annotations

import torch

from toyrl import TurnBatch


def random_batch(B: int = 12, H: int = 4, *, n_groups: int = 3, n_keys: int = 3, seed: int = 0,
                 dtype=torch.float64, hash_keys: bool = False, optional: bool = True) -> TurnBatch:
    """B rollouts with 0..H turns each; turn k = 1-3 policy tokens then 0-2 observation tokens."""
    g = torch.Generator().manual_seed(seed)
    n_turns = torch.randint(0, H + 1, (B,), generator=g)
    n_turns[0] = H
    lens_a = torch.randint(1, 4, (B, H), generator=g)
    lens_o = torch.randint(0, 3, (B, H), generator=g)
    T = int(((lens_a + lens_o) * (torch.arange(H)[None] < n_turns[:, None])).sum(1).max()) + 2
    turn_id = torch.full((B, T), -1, dtype=torch.long)
    pmask = torch.zeros(B, T, dtype=torch.bool)
    for b in range(B):
        t = 1                                           # one prompt token (turn 0, not policy)
        turn_id[b, 0] = 0
        for k in range(int(n_turns[b])):
            turn_id[b, t:t + lens_a[b, k] + lens_o[b, k]] = k
            pmask[b, t:t + lens_a[b, k]] = True
            t += int(lens_a[b, k] + lens_o[b, k])
    turn_mask = torch.arange(H)[None] < n_turns[:, None]
    reward = torch.randint(0, 3, (B, H), generator=g).to(dtype) * turn_mask
    keys = torch.randint(0, n_keys, (B, H), generator=g)
    if hash_keys:
        keys = keys * 0x1F3A5C7E9B2D4F61 + 12345          # 63-bit-ish hashes (wrapping)
    kw = {}
    if optional:
        node = torch.randint(0, 2, (B, H), generator=g).cumsum(1) + 10 * torch.arange(B // 3 + 1).repeat_interleave(3)[:B, None]
        kw = dict(entropy=torch.rand(B, T, generator=g, dtype=dtype), values=torch.rand(B, H, generator=g, dtype=dtype),
                  node=node, info_gain=torch.randn(B, H, generator=g, dtype=dtype),
                  turn_signal=torch.randint(0, 2, (B, H), generator=g).to(dtype),
                  void_turn=torch.rand(B, H, generator=g) < 0.2, ref_logp=-torch.rand(B, T, generator=g, dtype=dtype),
                  task=torch.arange(B) % max(n_groups // 2, 1))
    return TurnBatch(tokens=torch.zeros(B, T, dtype=torch.long), policy_mask=pmask, turn_id=turn_id,
                     old_logp=-torch.rand(B, T, generator=g, dtype=dtype), turn_mask=turn_mask, turn_reward=reward,
                     group=torch.arange(B) % n_groups, state_key=keys, **kw)


def outcome_batch(R: torch.Tensor, group: torch.Tensor) -> TurnBatch:
    """One-turn, one-token rollouts with returns R (B,) and group ids (B,)."""
    B = R.shape[0]
    return TurnBatch(tokens=torch.zeros(B, 1, dtype=torch.long), policy_mask=torch.ones(B, 1, dtype=torch.bool),
                     turn_id=torch.zeros(B, 1, dtype=torch.long), old_logp=torch.zeros(B, 1, dtype=R.dtype),
                     turn_mask=torch.ones(B, 1, dtype=torch.bool), turn_reward=R[:, None], group=group,
                     state_key=torch.zeros(B, 1, dtype=torch.long))


def test_random_batch_is_valid():
    b = random_batch(seed=3)
    assert b.turn_mask[0].all() and (b.policy_mask.sum(1) >= b.turn_mask.sum(1)).all()
