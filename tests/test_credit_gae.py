"""GAE family and the scans under it: hand cases, the one-turn property, the fast path against the loop.

Estimator-level loops live in toyrl.credit.REFERENCE (tests/test_credit_reference.py); here the plain
version ``gae_loop`` is checked against ``reference.gae_row`` (bit for bit), the fast path ``gae_scan``
(and ``fast=True`` of gae / turn_gae / bilevel_gae) against ``gae_loop``, and the scan primitives
(``discounted_cumsum``, ``pack`` / ``unpack``) against ``reference.to_go``."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

from toyrl.testing import random_batch
from toyrl.credit import ESTIMATORS, bilevel_gae, gae, turn_gae
from toyrl.credit.base import place_at_turn_end, turn_end_pos, turn_ends
from toyrl.credit.gae import gae_loop, gae_scan
from toyrl.credit.outcome import token_returns
from toyrl.credit.reference import gae_row, to_go
from toyrl.credit.scan import discount_matrix, discounted_cumsum, next_masked, pack, pack_turns, unpack, unpack_turns


def row_loop(r, v, m, gamma, lam, last=None):
    """``reference.gae_row`` on every row of (B, L) tensors -> (B, L), 0 off the mask."""
    last = [0.0] * r.shape[0] if last is None else last.tolist()
    rows = zip(r.tolist(), v.tolist(), m.tolist(), last)
    return torch.tensor([gae_row(*row, gamma, lam, lv) for *row, lv in rows], dtype=r.dtype).reshape(r.shape)


@settings(deadline=None, max_examples=25)
@given(seed=st.integers(0, 9999), gamma=st.sampled_from([1.0, 0.9]), lam=st.sampled_from([1.0, 0.95, 0.5]))
def test_token_gae_matches_loop(seed, gamma, lam):
    g = torch.Generator().manual_seed(seed)
    r, v = torch.randn(5, 9, generator=g, dtype=torch.float64), torch.randn(5, 9, generator=g, dtype=torch.float64)
    m = torch.rand(5, 9, generator=g) < 0.6
    adv, ret = gae(r, v, m, gamma=gamma, lam=lam, whiten=False)
    want = row_loop(r, v, m, gamma, lam)
    torch.testing.assert_close(adv, want)
    torch.testing.assert_close(ret, (want + v) * m)
    w, _ = gae(r, v, m, gamma=gamma, lam=lam)
    assert abs(float(w[m].mean())) < 1e-9 and torch.equal(w[~m], torch.zeros_like(w[~m]))


@settings(deadline=None, max_examples=25)
@given(seed=st.integers(0, 9999), gamma=st.sampled_from([1.0, 0.99]), lam=st.sampled_from([1.0, 0.9]))
def test_turn_gae_matches_loop_and_one_turn_is_outcome(seed, gamma, lam):
    b = random_batch(10, 4, seed=seed)
    adv, ret = turn_gae(b.turn_reward, b.values, b.turn_mask, gamma=gamma, lam=lam)
    torch.testing.assert_close(adv, row_loop(b.turn_reward, b.values, b.turn_mask, gamma, lam))
    one = b.turn_mask[:, :1]
    a1, r1 = turn_gae(b.turn_reward[:, :1], b.values[:, :1], one, gamma=gamma, lam=lam)
    torch.testing.assert_close(a1, (b.turn_reward[:, :1] - b.values[:, :1]) * one)    # A = R - V(s_1)
    torch.testing.assert_close(r1, b.turn_reward[:, :1] * one)


@pytest.mark.parametrize("fast", [True, False])
def test_hand_cases(fast):
    ones = torch.ones(1, 3, dtype=torch.bool)
    adv, ret = gae(torch.tensor([[0.0, 0.0, 1.0]]), torch.tensor([[0.2, 0.4, 0.6]]), ones, whiten=False, fast=fast)
    torch.testing.assert_close(adv, torch.tensor([[0.8, 0.6, 0.4]]))
    torch.testing.assert_close(ret, torch.ones(1, 3))
    adv, ret = gae(torch.tensor([[0.0, 0.0, 1.0]]), torch.tensor([[0.2, 9.0, 0.6]]), ones & torch.tensor([1, 0, 1]),
                   whiten=False, fast=fast)                                   # the observation token is skipped
    torch.testing.assert_close(adv, torch.tensor([[0.8, 0.0, 0.4]]))
    torch.testing.assert_close(ret, torch.tensor([[1.0, 0.0, 1.0]]))
    adv, ret = turn_gae(torch.tensor([[0.0, 0.0, 1.0]]), torch.full((1, 3), 0.5), ones, gamma=1.0, lam=1.0, fast=fast)
    torch.testing.assert_close(adv, torch.full((1, 3), 0.5))
    boot, _ = turn_gae(torch.zeros(1, 1), torch.zeros(1, 1), ones[:, :1], gamma=0.5, last_value=torch.tensor([2.0]),
                       fast=fast)
    torch.testing.assert_close(boot, torch.tensor([[1.0]]))                   # truncated: bootstrap 0.5 * 2
    adv, _ = bilevel_gae(torch.tensor([[0.0, 1.0]]), torch.zeros(1, 3), torch.tensor([[0, 0, 1]]), ones,
                         torch.ones(1, 2, dtype=torch.bool), whiten=False, fast=fast)
    torch.testing.assert_close(adv, torch.tensor([[0.95, 0.95, 1.0]]))


@pytest.mark.parametrize("fast", [True, False])
def test_bilevel_restarts_at_turn_ends(fast):
    # turn 0 = tokens 0-1 (+ obs token 2), turn 1 = token 3; values nonzero
    turn_id = torch.tensor([[0, 0, 0, 1]])
    pm = torch.tensor([[True, True, False, True]])
    v = torch.tensor([[0.1, 0.2, 9.0, 0.5]])
    adv, _ = bilevel_gae(torch.tensor([[0.0, 1.0]]), v, turn_id, pm, torch.ones(1, 2, dtype=torch.bool),
                         gamma_turn=0.9, whiten=False, fast=fast)
    # turn values V0 = 0.2, V1 = 0.5; A1 = 1 - 0.5; A0 = 0.9 * 0.5 - 0.2 + 0.9 * 0.5 = 0.7; G = [0.9, 1.0]
    torch.testing.assert_close(adv, torch.tensor([[0.8, 0.7, 0.0, 0.5]]))


@settings(deadline=None, max_examples=30)
@given(seed=st.integers(0, 9999), gamma=st.sampled_from([1.0, 0.9]), lam=st.sampled_from([1.0, 0.95, 0.5]),
       whiten=st.booleans())
def test_fast_path_equals_the_loop_in_every_estimator(seed, gamma, lam, whiten):
    """gae / turn_gae / bilevel_gae: fast=True (the scans) == fast=False (gae_loop) on random multi-turn batches."""
    b = random_batch(10, 4, seed=seed)
    v_tok = b.turn_to_token(b.values) + torch.rand(b.B, b.T, generator=torch.Generator().manual_seed(seed),
                                                   dtype=b.values.dtype)
    r_tok = place_at_turn_end(b.turn_reward * b.turn_mask, b.turn_id, b.policy_mask)
    lv = torch.rand(b.B, generator=torch.Generator().manual_seed(seed + 1), dtype=b.values.dtype)
    runs = [lambda fast: gae(r_tok, v_tok, b.policy_mask, gamma=gamma, lam=lam, whiten=whiten, fast=fast),
            lambda fast: turn_gae(b.turn_reward, b.values, b.turn_mask, gamma=gamma, lam=lam, last_value=lv,
                                  whiten=whiten, fast=fast),
            lambda fast: bilevel_gae(b.turn_reward, v_tok, b.turn_id, b.policy_mask, b.turn_mask, gamma_turn=gamma,
                                     lam_turn=lam, gamma_token=lam, lam_token=gamma, whiten=whiten, fast=fast)]
    for run in runs:
        (a1, r1), (a0, r0) = run(True), run(False)
        torch.testing.assert_close(a1, a0, atol=1e-9, rtol=1e-9)
        torch.testing.assert_close(r1, r0, atol=1e-9, rtol=1e-9)


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


# ---- the scans behind gae / bilevel_gae / reinforce_pp ------------------------------------------------
def test_scan_hand_cases():
    torch.testing.assert_close(discounted_cumsum(torch.tensor([[1.0, 2.0, 4.0]]), 0.5), torch.tensor([[3.0, 4.0, 4.0]]))
    torch.testing.assert_close(discount_matrix(0.5, 3), torch.tensor([[1, 0, 0], [0.5, 1, 0], [0.25, 0.5, 1]],
                                                                     dtype=torch.float64))
    m = torch.tensor([[1, 0, 1, 0]], dtype=torch.bool)
    xp = pack(torch.tensor([[1.0, 2.0, 3.0, 4.0]]), m)
    assert xp.tolist() == [[1.0, 3.0, 0.0]] and unpack(xp, m).tolist() == [[1.0, 3.0, 3.0, 0.0]]
    got = next_masked(torch.tensor([[1.0, 2.0, 3.0, 4.0]]), m, last=torch.tensor([9.0]))
    assert got.tolist() == [[3.0, 3.0, 9.0, 9.0]]
    xp, slot, n = pack_turns(torch.tensor([[1.0, 2.0, 3.0]]), torch.ones(1, 3, dtype=torch.bool),
                             torch.tensor([[0, 0, 1]]), 2)
    assert xp.tolist() == [[1.0, 2.0, 0.0], [3.0, 0.0, 0.0]] and n.tolist() == [2, 1]
    assert unpack_turns(xp, slot).tolist() == [[1.0, 2.0, 3.0]]


@settings(deadline=None, max_examples=60)
@given(seed=st.integers(0, 9999), L=st.integers(0, 700), chunk=st.sampled_from([2, 5, 32]),
       factor=st.sampled_from([1.0, 0.99, 0.9 * 0.95, 0.5, 0.1, 0.0, -0.7, 1.05]))
def test_discounted_cumsum_matches_loop(seed, L, chunk, factor):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, L, generator=g, dtype=torch.float64)
    want = torch.tensor([to_go(row, [1] * L, factor) for row in x.tolist()], dtype=torch.float64).reshape(3, L)
    torch.testing.assert_close(discounted_cumsum(x, factor, chunk=chunk), want, atol=1e-9, rtol=1e-9)
    got32 = discounted_cumsum(x.float(), factor, chunk=chunk)
    assert got32.dtype == torch.float32
    if abs(factor) <= 1:                                                  # float32: discounts, not growth
        torch.testing.assert_close(got32.double(), want, atol=1e-4, rtol=1e-5)


@settings(deadline=None, max_examples=50)
@given(seed=st.integers(0, 9999), L=st.integers(0, 300), gamma=st.sampled_from([1.0, 0.9, 0.99]),
       lam=st.sampled_from([1.0, 0.95, 0.5, 0.0]), p_mask=st.sampled_from([0.1, 0.6, 1.0]), boot=st.booleans())
def test_gae_loop_is_the_reference_loop_and_gae_scan_equals_it(seed, L, gamma, lam, p_mask, boot):
    """The plain version: reference.gae_row bit for bit on the masked steps, an unmasked step holds the next A;
    the fast path: equal to it on every step (float64)."""
    g = torch.Generator().manual_seed(seed)
    r, v = torch.randn(4, L, generator=g, dtype=torch.float64), torch.randn(4, L, generator=g, dtype=torch.float64)
    m = torch.rand(4, L, generator=g) < p_mask
    lv = torch.randn(4, generator=g, dtype=torch.float64) if boot else None
    got = gae_loop(r, v, m, gamma=gamma, lam=lam, last_value=lv)
    want = row_loop(r, v, m, gamma, lam, lv)
    assert torch.equal(got * m, want)
    for b in range(4):
        nxt = 0.0
        for t in reversed(range(L)):
            nxt = float(want[b, t]) if m[b, t] else nxt
            assert float(got[b, t]) == nxt
    torch.testing.assert_close(gae_scan(r, v, m, gamma=gamma, lam=lam, last_value=lv), got, atol=1e-9, rtol=1e-9)


def test_trainer_size_float32_fast_path_within_1e6_of_the_loop():
    """B=64 rollouts x T=300 tokens (and H=16 turns) in float32, as the trainer runs it: |scan - loop| < 1e-6."""
    g = torch.Generator().manual_seed(1)
    for L, p in ((300, 0.7), (16, 0.9)):
        r = torch.zeros(64, L)
        r[:, -1] = torch.rand(64, generator=g)
        v, m = torch.rand(64, L, generator=g), torch.rand(64, L, generator=g) < p
        for gamma, lam in ((1.0, 1.0), (0.99, 0.95)):
            fast, loop = gae_scan(r, v, m, gamma=gamma, lam=lam), gae_loop(r, v, m, gamma=gamma, lam=lam)
            assert float((fast - loop).abs().max()) < 1e-6


def test_token_scale_float32_matches_loop():
    """Long rows in float32 (the benchmark's token case, smaller B): within 1e-5 of the float64 loop."""
    g = torch.Generator().manual_seed(0)
    B, T = 8, 1024
    m = (torch.arange(T) % 64 < 48).expand(B, T) & (torch.rand(B, T, generator=g) < 0.95)
    r = torch.zeros(B, T)
    r[:, 63::64] = torch.randint(0, 2, (B, T // 64), generator=g).float()
    v = torch.rand(B, T, generator=g)
    for gamma, lam in ((1.0, 1.0), (0.99, 0.95), (0.9, 0.5)):
        want = row_loop(r.double(), v.double(), m, gamma, lam)
        torch.testing.assert_close(gae_scan(r, v, m, gamma=gamma, lam=lam).double() * m, want, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(gae_loop(r, v, m, gamma=gamma, lam=lam).double() * m, want, atol=1e-5, rtol=1e-5)
        want_ret = torch.tensor([to_go(x, mm, gamma) for x, mm in zip(r.double().tolist(), m.tolist())], dtype=torch.float64)
        torch.testing.assert_close(token_returns(r, m, gamma).double(), want_ret, atol=1e-5, rtol=1e-5)


def test_turn_ends_any_token_order():
    turn_id = torch.tensor([[0, 1, 0, 1, -1, 2], [2, 2, -1, 0, 0, 1]])
    pm = torch.tensor([[1, 1, 1, 0, 1, 0], [1, 1, 1, 1, 0, 0]], dtype=torch.bool)
    assert turn_end_pos(turn_id, pm, 3).tolist() == [[2, 1, -1], [3, -1, 1]]
    assert turn_ends(turn_id, pm).long().tolist() == [[0, 1, 1, 0, 0, 0], [0, 1, 0, 1, 0, 0]]
    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    assert place_at_turn_end(x, turn_id, pm).tolist() == [[0, 2, 1, 0, 0, 0], [0, 6, 0, 4, 0, 0]]
