"""GiGPO: hand cases, properties, anchor numbering; the loop reference is toyrl.credit.REFERENCE["gigpo"]."""
from __future__ import annotations

from collections import defaultdict

import torch
from hypothesis import given, settings, strategies as st

from toyrl.testing import random_batch
from toyrl.credit import ESTIMATORS, REFERENCE, anchor_index, gigpo, similarity_keys
from toyrl.segments import dense_index


def gigpo_loop(reward, mask, group, keys, gamma=0.95, omega=1.0, eps=1e-6, norm="std"):
    """The reference loop on bare tensors (wrapped in a one-token-per-turn TurnBatch)."""
    from toyrl import TurnBatch
    B, H = reward.shape
    tid = torch.arange(H).expand(B, H).contiguous()
    b = TurnBatch(tokens=torch.zeros(B, H, dtype=torch.long), policy_mask=mask.clone(), turn_id=tid,
                  old_logp=torch.zeros(B, H, dtype=reward.dtype), turn_mask=mask, turn_reward=reward, group=group,
                  state_key=keys)
    return REFERENCE["gigpo"](b, gamma=gamma, omega=omega, eps=eps, norm=norm)


def test_gigpo_hand_case():
    r = torch.tensor([[0.0, 1.0], [0.0, 0.0]])
    adv = gigpo(r, torch.ones(2, 2, dtype=torch.bool), torch.tensor([0, 0]), torch.tensor([[1, 2], [1, 3]]),
                gamma=1.0, norm="mean")
    torch.testing.assert_close(adv, torch.tensor([[1.0, 0.5], [-1.0, -0.5]]))


def test_gigpo_groups_never_mix_and_singletons_are_zero():
    r = torch.tensor([[1.0], [0.0]])
    adv = gigpo(r, torch.ones(2, 1, dtype=torch.bool), torch.tensor([0, 1]), torch.tensor([[7], [7]]))
    assert torch.equal(adv, torch.zeros(2, 1))           # two singleton groups, same key: nothing to compare


@settings(deadline=None, max_examples=20)
@given(seed=st.integers(0, 10_000), B=st.integers(2, 16), H=st.integers(1, 5))
def test_gigpo_reduces_to_episode_term_without_repeats(seed, B, H):
    b = random_batch(B, H, seed=seed, optional=False)
    unique = torch.arange(B * H).view(B, H)
    adv = gigpo(b.turn_reward, b.turn_mask, b.group, unique)
    ep = ESTIMATORS["grpo"](b, ddof=0)
    torch.testing.assert_close(adv, ep, atol=1e-9, rtol=0)


def test_anchor_index_hand_case_and_renaming_keys_keeps_the_partition():
    group, keys = torch.tensor([0, 1]), torch.tensor([[5, 7], [5, 5]])
    idx, S = anchor_index(group, keys, torch.tensor([[True, True], [True, False]]))
    assert idx.tolist() == [[0, 1], [2, 3]] and S == 3                      # invalid turn: id S
    b = random_batch(64, 6, n_keys=5, seed=1, optional=False)
    i1, S1 = anchor_index(b.group, b.state_key, b.turn_mask)
    i2, S2 = anchor_index(b.group, b.state_key * 0x1F3A5C7E9B2D4F61 - 3, b.turn_mask)
    m = b.turn_mask
    assert S1 == S2 and len(set(zip(i1[m].tolist(), i2[m].tolist()))) == S1      # the same partition
    assert (i1[~m] == S1).all()


def test_anchor_index_equals_torch_unique_over_pairs():
    """DESIGN.md's definition: anchors are torch.unique over the (group, state_key) rows of the valid turns."""
    g = torch.Generator().manual_seed(0)
    B, H = 200, 7
    group = torch.randint(0, 30, (B,), generator=g) * 1000
    keys = torch.randint(-2**62, 2**62, (8,), generator=g)[torch.randint(0, 8, (B, H), generator=g)]
    mask = torch.rand(B, H, generator=g) < 0.8
    pairs = torch.stack([group[:, None].expand(B, H)[mask], keys[mask]], 1)
    _, want = torch.unique(pairs, dim=0, return_inverse=True)
    idx, S = anchor_index(group, keys, mask)
    assert torch.equal(idx[mask], want) and S == int(want.max()) + 1


def test_similarity_keys_greedy_clusters():
    f = torch.tensor([[[1.0, 0.0], [0.99, 0.1], [0.0, 1.0]]])
    keys = similarity_keys(f, torch.ones(1, 3, dtype=torch.bool), torch.tensor([0]), threshold=0.9)
    assert keys.tolist() == [[0, 0, 2]]
    same = similarity_keys(f.repeat(2, 1, 1), torch.ones(2, 3, dtype=torch.bool), torch.tensor([0, 1]))
    assert not set(same[0].tolist()) & set(same[1].tolist())     # groups never share a cluster


def test_similarity_variant_equals_exact_keys_on_one_hot_states():
    b = random_batch(16, 4, n_keys=3, seed=5, optional=False)
    onehot = torch.nn.functional.one_hot(b.state_key, 3).double()
    a = ESTIMATORS["gigpo"](b, similarity_features=onehot)
    torch.testing.assert_close(a, ESTIMATORS["gigpo"](b))


def test_gigpo_step_pooling_and_shape_errors():
    b = random_batch(8, 3, seed=2, optional=False)
    a = gigpo(b.turn_reward, b.turn_mask, b.group, b.state_key, episode="step")
    assert a.shape == (8, 3) and torch.isfinite(a).all()
    try:
        gigpo(b.turn_reward, b.turn_mask, b.group[:3], b.state_key)
    except ValueError as e:
        assert "group" in str(e) and "B=8" in str(e)
    else:
        raise AssertionError("expected ValueError")


def _dict_partition(group, keys, mask):
    """Anchor cells by a Python dict: the set of frozensets of (b, k) positions sharing (group, key)."""
    cells = defaultdict(set)
    for b in range(keys.shape[0]):
        for k in range(keys.shape[1]):
            if mask[b, k]:
                cells[(int(group[b]), int(keys[b, k]))].add((b, k))
    return {frozenset(c) for c in cells.values()}


def _index_partition(idx, S, mask):
    cells = defaultdict(set)
    for b, k in mask.nonzero().tolist():
        cells[int(idx[b, k])].add((b, k))
    assert (idx[~mask] == S).all() and len(cells) == S
    return {frozenset(c) for c in cells.values()}


@settings(deadline=None, max_examples=15)
@given(seed=st.integers(0, 10_000), kind=st.sampled_from(["distinct", "high_bits", "low_bits", "shared"]))
def test_anchor_index_matches_dict_on_colliding_keys(seed, kind):
    """Many distinct 64-bit keys, keys differing in their top or low bits only, keys shared across groups."""
    g = torch.Generator().manual_seed(seed)
    B, H = 512, 8
    group = torch.randint(0, 40, (B,), generator=g)
    base = torch.randint(-2**62, 2**62, (B, H), generator=g)
    keys = {"distinct": base,                                               # all distinct (collisions certain)
            "high_bits": torch.randint(0, 64, (B, H), generator=g) << 57,   # differ in the top bits only
            "low_bits": torch.randint(0, 64, (B, H), generator=g) + (1 << 60),
            "shared": torch.randint(0, 3, (B, H), generator=g) * -7046029254386353131}[kind]   # same keys in every group
    mask = torch.rand(B, H, generator=g) < 0.8
    idx, S = anchor_index(group, keys, mask)
    want = _dict_partition(group, keys, mask)
    assert _index_partition(idx, S, mask) == want


def test_gigpo_is_its_equation_over_anchor_index_cells():
    """gigpo equals A^E + A^S written out with group_norm over segments.anchor_index's cells, bit for bit."""
    from toyrl.credit.base import group_norm
    from toyrl.lab.bench.credit import make_batch
    from toyrl.batch import discounted_returns
    from toyrl.segments import dense_index
    for dense in (False, True):
        b = make_batch(2048, 16, T_turn=1, seed=6, dense_keys=dense, states=4)
        m = b.turn_mask
        s, S = anchor_index(b.group, b.state_key, m)
        Rk = discounted_returns(b.turn_reward, m, 0.95)
        g, nG = dense_index(b.group)
        A_E = group_norm((b.turn_reward * m).sum(1), g, nG, norm="std", ddof=0)[:, None]
        A_S = group_norm(Rk.reshape(-1), s.reshape(-1), S + 1, norm="std", ddof=0).view(m.shape)
        assert torch.equal(gigpo(b.turn_reward, m, b.group, b.state_key), (A_E + A_S) * m)


def test_gigpo_benchmark_batch_matches_seed_loop():
    """The benchmark's batch shape (63-bit keys, ragged lengths), smaller B, float64 -> the seed snippet's loop."""
    from toyrl.lab.bench.credit import make_batch
    b = make_batch(256, 16, T_turn=1, seed=3)
    r = b.turn_reward.double()
    for norm, gamma in (("std", 0.95), ("mean", 0.9)):
        got = gigpo(r, b.turn_mask, b.group, b.state_key, gamma=gamma, norm=norm)
        torch.testing.assert_close(got, gigpo_loop(r, b.turn_mask, b.group, b.state_key, gamma=gamma, norm=norm),
                                   atol=1e-8, rtol=1e-8)


def test_anchors_of_equal_float32_returns_get_exactly_zero():
    """Eight rollouts reach the same anchor with the same reward suffix: A^S is exactly 0 (float32)."""
    r = torch.tensor([[0.0, 0.0, 0.0, 1.0]] * 8)
    keys = torch.arange(4).expand(8, 4).clone()
    adv = gigpo(r, torch.ones(8, 4, dtype=torch.bool), torch.zeros(8, dtype=torch.long), keys)
    assert adv.dtype == torch.float32 and torch.equal(adv, torch.zeros(8, 4))


def test_gigpo_float32_benchmark_batch_matches_seed_loop_both_key_kinds():
    """float32 rewards, 63-bit hashes and dense ids: within float32 rounding of the float64 snippet loop."""
    from toyrl.lab.bench.credit import make_batch
    for dense in (False, True):
        b = make_batch(512, 16, T_turn=1, seed=4, dense_keys=dense)
        got = gigpo(b.turn_reward, b.turn_mask, b.group, b.state_key)
        want = gigpo_loop(b.turn_reward.double(), b.turn_mask, b.group, b.state_key)
        torch.testing.assert_close(got, want.float(), atol=2e-5, rtol=2e-5)


def test_bench_seed_loop_computes_gigpo():
    """The benchmark's seed-article loop (what GiGPO is timed against) gives GiGPO's numbers."""
    from toyrl.lab.bench.credit import loop_cells, make_batch
    b = make_batch(64, 8, T_turn=1, seed=5)
    b = b.replace(turn_reward=b.turn_reward.double())
    got, want = gigpo(b.turn_reward, b.turn_mask, b.group, b.state_key), loop_cells(b)
    assert len(want) == int(b.turn_mask.sum())
    for (i, k), v in want.items():
        assert abs(float(got[i, k]) - v) < 1e-9
