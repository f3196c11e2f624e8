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


# ---- the blocked scan behind gae / bilevel_gae / reinforce_pp, against the per-step loops it replaced ----
from toyrl.credit.base import discounted_cumsum, next_masked, place_at_turn_end, turn_end_pos, turn_ends  # noqa: E402
from toyrl.credit.gae import gae_scan  # noqa: E402
from toyrl.credit.outcome import token_returns  # noqa: E402


def scan_loop(x, m, factor, reset=None):
    """y_t = x_t + factor * y_{t+1} on masked steps, carried elsewhere; reset[t] cuts the chain after t."""
    B, L = x.shape
    y = torch.zeros(B, L, dtype=torch.float64)
    for b in range(B):
        run = 0.0
        for t in reversed(range(L)):
            if reset is not None and reset[b, t]:
                run = 0.0
            if m[b, t]:
                run = float(x[b, t]) + factor * run
            y[b, t] = run
    return y


def gae_scan_loop(r, v, m, gamma, lam, reset=None, last_value=None):
    """The former vectorized-over-B loop over L (verl's recursion with reset and bootstrap)."""
    B, L = r.shape
    adv = torch.zeros_like(r)
    nextv = torch.zeros_like(r[:, 0]) if last_value is None else last_value.to(r.dtype).clone()
    run = torch.zeros_like(r[:, 0])
    for t in range(L - 1, -1, -1):
        if reset is not None:
            nextv = torch.where(reset[:, t], torch.zeros_like(nextv), nextv)
            run = torch.where(reset[:, t], torch.zeros_like(run), run)
        delta = r[:, t] + gamma * nextv - v[:, t]
        nextv = torch.where(m[:, t], v[:, t], nextv)
        run = torch.where(m[:, t], delta + gamma * lam * run, run)
        adv[:, t] = run
    return adv


def test_scan_hand_cases():
    x, m = torch.tensor([[1.0, 5.0, 2.0, 4.0]]), torch.tensor([[1, 0, 1, 1]], dtype=torch.bool)
    torch.testing.assert_close(discounted_cumsum(x, m, 0.5), torch.tensor([[3.0, 4.0, 4.0, 4.0]]))
    cut = torch.tensor([[False, False, True, False]])                      # chain cut after step 2
    torch.testing.assert_close(discounted_cumsum(x, m, 0.5, reset=cut), torch.tensor([[2.0, 2.0, 2.0, 4.0]]))
    got = next_masked(torch.tensor([[1.0, 2.0, 3.0, 4.0]]), m[:, [0, 1, 2, 1]], last=torch.tensor([9.0]))
    torch.testing.assert_close(got, torch.tensor([[3.0, 3.0, 9.0, 9.0]]))


@settings(deadline=None, max_examples=60)
@given(seed=st.integers(0, 9999), L=st.integers(0, 700), p_mask=st.sampled_from([0.1, 0.6, 1.0]),
       factor=st.sampled_from([1.0, 0.99, 0.9 * 0.95, 0.5, 0.1, 0.0, -0.7, 1.05]),
       p_reset=st.sampled_from([0.0, 0.02, 0.3]))
def test_scan_matches_loop(seed, L, p_mask, factor, p_reset):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, L, generator=g, dtype=torch.float64)
    m = torch.rand(3, L, generator=g) < p_mask
    reset = (torch.rand(3, L, generator=g) < p_reset) if p_reset else None
    want = scan_loop(x, m, factor, reset)
    torch.testing.assert_close(discounted_cumsum(x, m, factor, reset=reset), want, atol=1e-9, rtol=1e-9)
    x32 = x.float()                                                         # float32 in, float32 out, same values
    got32 = discounted_cumsum(x32, m, factor, reset=reset)
    assert got32.dtype == torch.float32
    torch.testing.assert_close(got32.double(), scan_loop(x32, m, factor, reset), atol=1e-5, rtol=1e-6)


@settings(deadline=None, max_examples=40)
@given(seed=st.integers(0, 9999), L=st.integers(1, 300), gamma=st.sampled_from([1.0, 0.9, 0.99]),
       lam=st.sampled_from([1.0, 0.95, 0.5, 0.0]), p_reset=st.sampled_from([0.0, 0.05, 0.4]),
       boot=st.booleans())
def test_gae_scan_matches_former_loop(seed, L, gamma, lam, p_reset, boot):
    g = torch.Generator().manual_seed(seed)
    r, v = torch.randn(4, L, generator=g, dtype=torch.float64), torch.randn(4, L, generator=g, dtype=torch.float64)
    m = torch.rand(4, L, generator=g) < 0.6
    reset = (torch.rand(4, L, generator=g) < p_reset) if p_reset else None
    lv = torch.randn(4, generator=g, dtype=torch.float64) if boot else None
    got = gae_scan(r, v, m, gamma=gamma, lam=lam, reset=reset, last_value=lv)
    torch.testing.assert_close(got, gae_scan_loop(r, v, m, gamma, lam, reset, lv), atol=1e-9, rtol=1e-9)
    # next_masked is the V_{t'} of that loop
    nv = next_masked(v, m, last=lv, reset=reset)
    want = torch.zeros_like(v)
    for b in range(4):
        run = 0.0 if lv is None else float(lv[b])
        for t in reversed(range(L)):
            if reset is not None and reset[b, t]:
                run = 0.0
            want[b, t] = run
            if m[b, t]:
                run = float(v[b, t])
    torch.testing.assert_close(nv, want, atol=0, rtol=0)


def test_token_scale_float32_matches_loop():
    """Long rows in float32 (the benchmark's token case, smaller B): within 1e-5 of the float64 loop."""
    g = torch.Generator().manual_seed(0)
    B, T = 8, 1024
    m = (torch.arange(T) % 64 < 48).expand(B, T) & (torch.rand(B, T, generator=g) < 0.95)
    r = torch.zeros(B, T)
    r[:, 63::64] = torch.randint(0, 2, (B, T // 64), generator=g).float()
    v = torch.rand(B, T, generator=g)
    for gamma, lam in ((1.0, 1.0), (0.99, 0.95), (0.9, 0.5)):
        want = gae_scan_loop(r.double(), v.double(), m, gamma, lam)
        torch.testing.assert_close(gae_scan(r, v, m, gamma=gamma, lam=lam).double(), want, atol=1e-5, rtol=1e-5)
        want_ret = scan_loop(r * m, m, gamma) * m
        torch.testing.assert_close(token_returns(r, m, gamma).double(), want_ret, atol=1e-5, rtol=1e-5)


def test_turn_ends_any_token_order():
    turn_id = torch.tensor([[0, 1, 0, 1, -1, 2], [2, 2, -1, 0, 0, 1]])
    pm = torch.tensor([[1, 1, 1, 0, 1, 0], [1, 1, 1, 1, 0, 0]], dtype=torch.bool)
    assert turn_end_pos(turn_id, pm, 3).tolist() == [[2, 1, -1], [3, -1, 1]]
    assert turn_ends(turn_id, pm).long().tolist() == [[0, 1, 1, 0, 0, 0], [0, 1, 0, 1, 0, 0]]
    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    assert place_at_turn_end(x, turn_id, pm).tolist() == [[0, 2, 1, 0, 0, 0], [0, 6, 0, 4, 0, 0]]
