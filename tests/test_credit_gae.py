"""GAE family: per-sample loop references, hand cases, the one-turn property."""
from __future__ import annotations

import torch
from hypothesis import given, settings, strategies as st

from test_credit_batches import random_batch
from toyrl.credit import ESTIMATORS, bilevel_gae, gae, turn_gae


def gae_loop(r, v, m, gamma, lam):
    """Per-sample loop: TD chain over masked steps only (observation steps skipped)."""
    B, L = r.shape
    adv = torch.zeros_like(r)
    for b in range(B):
        nextv, run = 0.0, 0.0
        for t in reversed(range(L)):
            if m[b, t]:
                delta = float(r[b, t]) + gamma * nextv - float(v[b, t])
                run = delta + gamma * lam * run
                nextv = float(v[b, t])
                adv[b, t] = run
    return adv


@settings(deadline=None, max_examples=25)
@given(seed=st.integers(0, 9999), gamma=st.sampled_from([1.0, 0.9]), lam=st.sampled_from([1.0, 0.95, 0.5]))
def test_token_gae_matches_loop(seed, gamma, lam):
    g = torch.Generator().manual_seed(seed)
    r, v = torch.randn(5, 9, generator=g, dtype=torch.float64), torch.randn(5, 9, generator=g, dtype=torch.float64)
    m = torch.rand(5, 9, generator=g) < 0.6
    adv, ret = gae(r, v, m, gamma=gamma, lam=lam, whiten=False)
    want = gae_loop(r, v, m, gamma, lam)
    torch.testing.assert_close(adv, want)
    torch.testing.assert_close(ret, (want + v) * m)
    w, _ = gae(r, v, m, gamma=gamma, lam=lam)
    assert abs(float(w[m].mean())) < 1e-9 and torch.equal(w[~m], torch.zeros_like(w[~m]))


@settings(deadline=None, max_examples=25)
@given(seed=st.integers(0, 9999), gamma=st.sampled_from([1.0, 0.99]), lam=st.sampled_from([1.0, 0.9]))
def test_turn_gae_matches_loop_and_one_turn_is_outcome(seed, gamma, lam):
    b = random_batch(10, 4, seed=seed)
    adv, ret = turn_gae(b.turn_reward, b.values, b.turn_mask, gamma=gamma, lam=lam)
    torch.testing.assert_close(adv, gae_loop(b.turn_reward, b.values, b.turn_mask, gamma, lam))
    one = b.turn_mask[:, :1]
    a1, r1 = turn_gae(b.turn_reward[:, :1], b.values[:, :1], one, gamma=gamma, lam=lam)
    torch.testing.assert_close(a1, (b.turn_reward[:, :1] - b.values[:, :1]) * one)    # A = R - V(s_1)
    torch.testing.assert_close(r1, b.turn_reward[:, :1] * one)


def test_hand_cases():
    ones = torch.ones(1, 3, dtype=torch.bool)
    adv, ret = gae(torch.tensor([[0.0, 0.0, 1.0]]), torch.tensor([[0.2, 0.4, 0.6]]), ones, whiten=False)
    torch.testing.assert_close(adv, torch.tensor([[0.8, 0.6, 0.4]]))
    torch.testing.assert_close(ret, torch.ones(1, 3))
    adv, ret = turn_gae(torch.tensor([[0.0, 0.0, 1.0]]), torch.full((1, 3), 0.5), ones, gamma=1.0, lam=1.0)
    torch.testing.assert_close(adv, torch.full((1, 3), 0.5))
    boot, _ = turn_gae(torch.zeros(1, 1), torch.zeros(1, 1), ones[:, :1], gamma=0.5, last_value=torch.tensor([2.0]))
    torch.testing.assert_close(boot, torch.tensor([[1.0]]))                   # truncated: bootstrap 0.5 * 2
    adv, _ = bilevel_gae(torch.tensor([[0.0, 1.0]]), torch.zeros(1, 3), torch.tensor([[0, 0, 1]]), ones,
                         torch.ones(1, 2, dtype=torch.bool), whiten=False)
    torch.testing.assert_close(adv, torch.tensor([[0.95, 0.95, 1.0]]))


def test_bilevel_restarts_at_turn_ends():
    # turn 0 = tokens 0-1 (+ obs token 2), turn 1 = token 3; values nonzero
    turn_id = torch.tensor([[0, 0, 0, 1]])
    pm = torch.tensor([[True, True, False, True]])
    v = torch.tensor([[0.1, 0.2, 9.0, 0.5]])
    adv, _ = bilevel_gae(torch.tensor([[0.0, 1.0]]), v, turn_id, pm, torch.ones(1, 2, dtype=torch.bool),
                         gamma_turn=0.9, whiten=False)
    # turn values V0 = 0.2, V1 = 0.5; A1 = 1 - 0.5; A0 = 0.9 * 0.5 - 0.2 + 0.9 * 0.5 = 0.7; G = [0.9, 1.0]
    torch.testing.assert_close(adv, torch.tensor([[0.8, 0.7, 0.0, 0.5]]))


def test_registry_gae_fields():
    b = random_batch(8, 3, seed=4)
    for name in ("gae", "bilevel_gae"):
        a = ESTIMATORS[name](b)
        assert a.shape == (b.B, b.T) and torch.isfinite(a).all()
    a = ESTIMATORS["turn_gae"](b)
    assert a.shape == (b.B, b.H)
    try:
        ESTIMATORS["turn_gae"](b.replace(values=None))
    except ValueError as e:
        assert "values" in str(e)
    else:
        raise AssertionError
