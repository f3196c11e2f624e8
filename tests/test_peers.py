"""The peers' estimators (toyrl.credit.peers): hand-computed cases, plain loops vs vectorized, verl 0.9.1 parity."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from toyrl.batch import TurnBatch
from toyrl.credit import ESTIMATORS
from toyrl.credit.peers import energy_baseline, gdpo, optimal_token_baseline, tir_optimal_token_baseline
from toyrl.credit.peers import turn_end_rewards
from toyrl.port.verl_loader import load_core_algos

ca = load_core_algos()
needs_verl = pytest.mark.skipif(ca is None, reason="verl 0.9.1 (or one of its imports) is not installed")
ONE_GROUP = torch.zeros(3, dtype=torch.long)


def inputs(seed, B=10, L=14, groups=3, multi_turn=True):
    """verl-shaped inputs: masks with tool-output gaps (multi_turn) or right padding, outcome rewards."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.zeros(B, L)
    for b in range(B):
        if multi_turn:
            t = 0
            for _ in range(int(torch.randint(1, 4, (1,), generator=g))):
                n = int(torch.randint(1, 4, (1,), generator=g))
                mask[b, t:t + n] = 1
                t += n + int(torch.randint(1, 3, (1,), generator=g))
        else:
            mask[b, :int(torch.randint(1, L + 1, (1,), generator=g))] = 1
    last = (mask * torch.arange(L)).argmax(1)
    R = torch.randint(0, 2, (B,), generator=g).float()
    rewards = torch.zeros(B, L).scatter_(1, last[:, None], R[:, None])
    old = -torch.rand(B, L, generator=g) * 2
    spi = torch.exp(2 * old) + torch.rand(B, L, generator=g) * (1 - torch.exp(old)) ** 2   # a valid sum pi^2
    index = np.array([f"p{i % groups}" for i in range(B)], dtype=object)
    group = torch.tensor([i % groups for i in range(B)])
    return rewards, mask, index, group, old, spi


# ---- hand-computed ---------------------------------------------------------------------------
def test_gdpo_hand_computed():
    comps = torch.tensor([[1.0, 0.0], [0.0, 0.0], [0.0, 10.0]])
    A = gdpo(comps, ONE_GROUP, torch.ones(3, 1, dtype=torch.bool))
    assert torch.allclose(A[:, 0], torch.tensor([0.5774, -1.1547, 0.5774]), atol=1e-4)
    # the large component does not drown the small one: swapping scales gives the same advantages
    assert torch.allclose(A, gdpo(comps * torch.tensor([100.0, 0.1]), ONE_GROUP, torch.ones(3, 1, dtype=torch.bool)),
                          atol=1e-5)
    with pytest.raises(ValueError, match="at least 2"):
        gdpo(comps, ONE_GROUP, torch.tensor([[True], [False], [False]]))


def test_otb_and_tir_otb_hand_computed():
    r, m = torch.tensor([[0.0, 1.0], [0.0, 0.0]]), torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    half = torch.full((2, 2), 0.5)
    A, G = optimal_token_baseline(r, m, ONE_GROUP[:2], half.log(), half, is_weights=torch.full((2, 2), 2 ** 0.5))
    assert torch.allclose(A, torch.tensor([[0.5, 1.0], [-0.5, 0.0]])) and torch.equal(G, torch.tensor([[1., 1], [0, 0]]))
    m3, r3 = torch.tensor([[1.0, 0, 1], [1, 1, 0]]), torch.tensor([[0.0, 0, 1], [0, 0, 0]])
    half3 = torch.full((2, 3), 0.5)
    A, _ = tir_optimal_token_baseline(r3, m3, ONE_GROUP[:2], half3.log(), half3, is_weights=torch.full((2, 3), 2 ** 0.5))
    assert torch.allclose(A, torch.tensor([[0.5, 0.0, 0.5], [-0.5, -0.5, 0.0]]))
    # singleton group: no baseline, A = G
    A1, G1 = optimal_token_baseline(r, m, torch.tensor([0, 1]), half.log(), half)
    assert torch.equal(A1, G1 * m)


# ---- plain loops vs vectorized ---------------------------------------------------------------
def energy_baseline_loop(G, W, valid, group, member, zero_tail=True, eps=1e-8):
    B, T = G.shape
    out = torch.zeros_like(G)
    for gid in set(group.tolist()):
        rows = [i for i in range(B) if group[i] == gid and member[i]]
        if len(rows) < 2:
            continue
        for t in range(T):
            num = sum(float(G[i, t] * W[i, t]) for i in rows if valid[i, t])
            den = sum(float(W[i, t]) for i in rows if valid[i, t])
            for i in rows:
                out[i, t] = num / (den + eps)
        lengths = sorted(int(valid[i].sum()) for i in rows)
        longest = [i for i in rows if int(valid[i].sum()) == lengths[-1]]
        if zero_tail and len(longest) == 1 and lengths[-1] > lengths[-2]:
            out[longest[0], lengths[-2]:] = 0.0
    return out


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.booleans())
def test_energy_baseline_loop_vs_vectorized(seed, zero_tail):
    g = torch.Generator().manual_seed(seed)
    B, T = 7, 6
    lengths = torch.randint(0, T + 1, (B,), generator=g)
    valid = torch.arange(T)[None, :] < lengths[:, None]
    G, W = torch.randn(B, T, generator=g, dtype=torch.float64), torch.rand(B, T, generator=g, dtype=torch.float64)
    group, member = torch.randint(0, 3, (B,), generator=g), lengths > 0
    got = energy_baseline(G, W, valid, group, member, zero_tail=zero_tail)
    assert torch.allclose(got, energy_baseline_loop(G, W, valid, group, member, zero_tail), atol=1e-10)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000))
def test_properties(seed):
    rewards, mask, _, group, old, spi = inputs(seed)
    A = gdpo(torch.rand(10, 3, dtype=torch.float64), group, mask.bool())
    valid = mask.bool()
    assert abs(float(A[valid].mean())) < 1e-9 and abs(float(A[valid].std()) - 1) < 1e-6   # whitened
    for fn in (optimal_token_baseline, tir_optimal_token_baseline):
        A, G = fn(rewards, mask, group, old, spi)
        assert torch.all(A[~valid] == 0)
        flat = fn(rewards, mask, torch.zeros_like(group), old, 2 * torch.exp(old) - 1)   # w = 0: no energy
        assert torch.allclose(flat[0], G * mask)                   # W = 0 -> B = 0 -> A = G


# ---- registry --------------------------------------------------------------------------------
def test_registered_on_a_turn_batch():
    turn_id = torch.tensor([[0, 0, 0, 1, 1], [0, 0, 1, 1, -1]])
    pm = torch.tensor([[0, 1, 0, 1, 1], [0, 1, 0, 1, 0]], dtype=torch.bool)
    b = TurnBatch(tokens=torch.zeros(2, 5, dtype=torch.long), policy_mask=pm, turn_id=turn_id,
                  old_logp=torch.full((2, 5), -0.5), turn_mask=torch.ones(2, 2, dtype=torch.bool),
                  turn_reward=torch.tensor([[0.5, 1.0], [0.0, 0.0]]), group=torch.zeros(2, dtype=torch.long),
                  state_key=torch.zeros(2, 2, dtype=torch.long))
    assert turn_end_rewards(b).tolist() == [[0, 0.5, 0, 0, 1.0], [0, 0, 0, 0, 0]]
    for name in ("gdpo", "optimal_token_baseline", "tir_optimal_token_baseline"):
        est = ESTIMATORS[name]
        A = est(b)
        assert est.level == "token" and A.shape == (2, 5) and torch.all(A[~pm] == 0), name
        assert float(A[0][pm[0]].min()) > 0 > float(A[1][pm[1]].max()), name     # the success is credited


# ---- verl 0.9.1 parity -----------------------------------------------------------------------
@needs_verl
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gdpo_matches_verl(seed):
    rewards, mask, index, group, _, _ = inputs(seed, multi_turn=False)
    ref, _ = ca.compute_gdpo_outcome_advantage(rewards, mask, index)
    assert torch.allclose(gdpo(rewards.sum(1, keepdim=True), group, mask.bool()), ref, atol=1e-5)
    single = np.array([f"s{i}" for i in range(len(index))], dtype=object)        # singleton groups
    ref, _ = ca.compute_gdpo_outcome_advantage(rewards, mask, single)
    assert torch.allclose(gdpo(rewards.sum(1, keepdim=True), torch.arange(10), mask.bool()), ref, atol=1e-5)


@needs_verl
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("zero_tail", [True, False])
def test_otb_and_tir_otb_match_verl(seed, zero_tail):
    for multi in (False, True):
        rewards, mask, index, group, old, spi = inputs(seed, multi_turn=multi)
        w = torch.rand(mask.shape, generator=torch.Generator().manual_seed(seed)) + 0.5
        for is_w in (None, w):
            kw = dict(old_log_probs=old, sum_pi_squared=spi, rollout_is_weights=is_w, handle_zero_tail=zero_tail)
            for ours, theirs in ((optimal_token_baseline, ca.compute_optimal_token_baseline_advantage),
                                 (tir_optimal_token_baseline, ca.compute_multi_turn_optimal_token_baseline_advantage)):
                A_ref, G_ref = theirs(rewards, mask, index, **kw)
                A, G = ours(rewards, mask, group, old, spi, is_weights=is_w, zero_tail=zero_tail)
                assert torch.allclose(A, A_ref, atol=1e-5) and torch.allclose(G, G_ref), (ours.__name__, multi)
