"""Outcome-level estimators: hand cases, loop references, properties, edge cases."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

from toyrl import TurnBatch
from toyrl.credit import (ESTIMATORS, REFERENCE, dr_grpo, gpg, grpo, grpo_passk, opo, reinforce_pp,
                         reinforce_pp_baseline, remax, rloo)
from toyrl.credit.base import masked_whiten, place_at_turn_end
from toyrl.credit.outcome import token_returns

ONE = torch.tensor([0, 0, 0])
R3 = torch.tensor([1.0, 0.0, 0.0])


def assert_near(a, b, tol=1e-3):
    torch.testing.assert_close(a, torch.as_tensor(b, dtype=a.dtype), atol=tol, rtol=0)


def test_hand_cases():
    assert_near(grpo(R3, ONE), [1.155, -0.577, -0.577])
    assert_near(dr_grpo(R3, ONE), [0.667, -0.333, -0.333])
    assert_near(rloo(R3, ONE), [1.0, -0.5, -0.5])
    assert_near(rloo(R3, ONE, scale_by_std=True), torch.tensor([1.0, -0.5, -0.5]) / 0.4714)
    assert_near(opo(R3, ONE, torch.tensor([2, 1, 1])), [0.5, -0.5, -0.5])
    assert_near(gpg(R3, ONE), [2.0, -1.0, -1.0])
    assert_near(grpo_passk(R3, ONE), [1.732, 0.0, 0.0])
    assert_near(grpo_passk(R3, ONE, norm=False), [1.0, 0.0, 0.0])
    assert_near(remax(torch.tensor([[0.0, 0.0, 1.0]]), torch.ones(1, 3, dtype=torch.bool), torch.tensor([0.25])),
          [[0.75, 0.75, 0.75]])
    assert_near(reinforce_pp(torch.tensor([[1.0], [0.0]]), torch.ones(2, 1, dtype=torch.bool)), [[0.707], [-0.707]])
    assert_near(reinforce_pp_baseline(torch.tensor([1.0, 0.0]), torch.tensor([0, 0]), torch.ones(2, 1, dtype=torch.bool)),
          [[0.707], [-0.707]])
    assert_near(token_returns(torch.tensor([[0.0, 5.0, 1.0]]), torch.tensor([[True, False, True]]), 0.5), [[0.5, 0.0, 1.0]])


def test_passk_ties_and_singletons_give_zero():
    assert_near(grpo_passk(torch.tensor([1.0, 1.0, 0.0, 3.0]), torch.tensor([0, 0, 0, 1])), [0.0, 0.0, 0.0, 0.0])


def outcome_batch(R: torch.Tensor, group: torch.Tensor) -> TurnBatch:
    """One-turn, one-token rollouts with returns R (B,) and group ids (B,)."""
    B = R.shape[0]
    return TurnBatch(tokens=torch.zeros(B, 1, dtype=torch.long), policy_mask=torch.ones(B, 1, dtype=torch.bool),
                     turn_id=torch.zeros(B, 1, dtype=torch.long), old_logp=torch.zeros(B, 1, dtype=R.dtype),
                     turn_mask=torch.ones(B, 1, dtype=torch.bool), turn_reward=R[:, None], group=group,
                     state_key=torch.zeros(B, 1, dtype=torch.long))


def loop(name, R, group, **kw):
    """REFERENCE[name] on one-turn rollouts with returns R -> (B,)."""
    return REFERENCE[name](outcome_batch(R, group), **kw)[:, 0]


outcomes = st.lists(st.tuples(st.integers(0, 4), st.sampled_from([0.0, 0.5, 1.0, 2.0, -1.0])), min_size=1, max_size=30)


@settings(deadline=None, max_examples=40)
@given(rows=outcomes, ddof=st.sampled_from([0, 1]))
def test_vectorized_equals_loop(rows, ddof):
    group = torch.tensor([g for g, _ in rows])
    R = torch.tensor([r for _, r in rows], dtype=torch.float64)
    torch.testing.assert_close(grpo(R, group, ddof=ddof), loop("grpo", R, group, ddof=ddof))
    torch.testing.assert_close(rloo(R, group), loop("rloo", R, group))
    torch.testing.assert_close(grpo_passk(R, group), loop("grpo_passk", R, group))
    torch.testing.assert_close(opo(R, group, torch.ones_like(group)), loop("opo", R, group))


@settings(deadline=None, max_examples=40)
@given(rows=outcomes, scale=st.floats(0.5, 4.0), shift=st.floats(-3, 3))
def test_group_sums_zero_and_affine_invariance(rows, scale, shift):
    group = torch.tensor([g for g, _ in rows])
    R = torch.tensor([r for _, r in rows], dtype=torch.float64)
    for f in (grpo, dr_grpo, rloo):
        A = f(R, group)
        sums = torch.zeros(5, dtype=A.dtype).index_add_(0, group, A)
        assert torch.allclose(sums, torch.zeros_like(sums), atol=1e-9)
        assert torch.isfinite(A).all()
    A1, A2 = grpo(R, group), grpo(scale * R + shift, group)
    torch.testing.assert_close(A1, A2, atol=1e-4, rtol=1e-4)      # up to eps
    assert torch.isfinite(grpo(R, group, eps=0.0)).all()
    torch.testing.assert_close(dr_grpo(R + shift, group), dr_grpo(R, group))
    perm = torch.randperm(len(R))
    torch.testing.assert_close(grpo(R[perm], group[perm]), grpo(R, group)[perm])


def test_edge_cases_finite():
    R = torch.tensor([2.0, 3.0, 3.0, 0.0])
    group = torch.tensor([0, 1, 1, 2])                     # singletons and a zero-std group
    for A in (grpo(R, group), rloo(R, group), opo(R, group, torch.tensor([0, 0, 0, 0])), gpg(R, group),
              grpo_passk(R, group), dr_grpo(R, group)):
        assert torch.equal(A, torch.zeros(4)), A
    empty = torch.zeros(3, 4, dtype=torch.bool)
    assert torch.isfinite(reinforce_pp(torch.zeros(3, 4), empty)).all()
    assert torch.isfinite(reinforce_pp_baseline(torch.zeros(3), torch.zeros(3, dtype=torch.long), empty)).all()


def test_shape_errors_name_the_argument():
    for call, word in ((lambda: grpo(torch.zeros(3), torch.zeros(2, dtype=torch.long)), "group"),
                       (lambda: grpo(torch.zeros(3, 1), ONE), "R"),
                       (lambda: remax(torch.zeros(2, 3), torch.ones(2, 3, dtype=torch.bool), torch.zeros(3)),
                        "baseline_reward")):
        try:
            call()
        except ValueError as e:
            assert word in str(e)
        else:
            raise AssertionError(word)


@settings(deadline=None, max_examples=60)
@given(v=st.floats(-1e6, 1e6, width=32), n=st.integers(2, 40), ddof=st.sampled_from([0, 1]))
def test_groups_of_equal_float32_returns_get_exactly_zero(v, n, ddof):
    """Float32 sums of equal values miss the value by an ulp (e.g. 0.95**3 eight times, divided by 8);
    the statistics accumulate in float64, so a group without variance gets exactly 0, not ~0.05."""
    R = torch.full((n,), v, dtype=torch.float32)
    group = torch.zeros(n, dtype=torch.long)
    for A in (grpo(R, group, ddof=ddof), rloo(R, group), rloo(R, group, scale_by_std=True), dr_grpo(R, group),
              grpo_passk(R, group)):
        assert A.dtype == torch.float32 and torch.equal(A, torch.zeros(n)), A


def test_group_norm_ddof_above_one_gives_zero_std_on_small_groups():
    from toyrl.credit.base import group_norm
    x = torch.tensor([1.0, 3.0, 0.0, 2.0, 4.0])
    idx = torch.tensor([0, 0, 1, 1, 1])
    z = group_norm(x, idx, 2, ddof=2, eps=1.0)
    assert z[:2].tolist() == [-1.0, 1.0]                        # count 2 <= ddof: std 0, den = eps
    torch.testing.assert_close(z[2:], torch.tensor([-2.0, 0.0, 2.0]) / (8 ** 0.5 + 1.0))


def test_reinforce_pp_drops_the_reward_of_a_turn_without_policy_tokens():
    r, tid, pm = torch.tensor([[1.0, 5.0, 0.0]]), torch.tensor([[0, 1, 2, 2]]), torch.tensor([[True, False, True, False]])
    G = token_returns(place_at_turn_end(r, tid, pm), pm)                     # turn 1's 5 has no token to sit on
    assert_near(G, [[1.0, 0.0, 0.0, 0.0]])
    assert_near(reinforce_pp(place_at_turn_end(r, tid, pm), pm), [[0.707, 0.0, -0.707, 0.0]])


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), B=st.integers(1, 9), H=st.integers(1, 5), drop=st.floats(0.0, 0.5),
       dtype=st.sampled_from([torch.float32, torch.float64]))
def test_reinforce_pp_registry_is_the_token_scan_and_the_reference(seed, B, H, drop, dtype):
    """The registry entry runs reinforce_pp over rewards placed at turn ends, and equals the loop reference.

    Random layouts with left / right padding, observation tokens, and valid turns whose policy tokens
    were all dropped (their reward has no token to sit on)."""
    g = torch.Generator().manual_seed(seed)
    n = torch.randint(0, H + 1, (B,), generator=g)
    lens = torch.randint(1, 5, (B, H), generator=g)                          # tokens per turn
    left = torch.randint(0, 3, (B,), generator=g)                           # left padding
    T = int((lens.sum(1) + left).max()) + 2
    tid = torch.full((B, T), -1, dtype=torch.long)
    for b in range(B):                                                      # test fixture: a loop is fine here
        t = int(left[b])
        for k in range(int(n[b])):
            tid[b, t:t + int(lens[b, k])] = k
            t += int(lens[b, k])
    pm = (torch.rand(B, T, generator=g) > drop) & (tid >= 0)
    reward = torch.randn(B, H, generator=g, dtype=dtype)
    b = TurnBatch(tokens=torch.zeros(B, T, dtype=torch.long), policy_mask=pm, turn_id=tid,
                  old_logp=torch.zeros(B, T, dtype=dtype), turn_mask=torch.arange(H)[None] < n[:, None],
                  turn_reward=reward, group=torch.zeros(B, dtype=torch.long), state_key=torch.zeros(B, H, dtype=torch.long))
    ref = reinforce_pp(place_at_turn_end(reward, tid, pm), pm)
    out = ESTIMATORS["reinforce_pp"](b)
    assert out.dtype == dtype and torch.isfinite(out).all()
    assert torch.allclose(out, ref, atol=1e-5 if dtype == torch.float32 else 1e-10)
    assert (out[~pm] == 0).all()
    assert torch.allclose(ESTIMATORS["reinforce_pp"](b, gamma=0.9),
                          reinforce_pp(place_at_turn_end(reward, tid, pm), pm, gamma=0.9), atol=1e-5)
    assert torch.allclose(out, REFERENCE["reinforce_pp"](b), atol=1e-5 if dtype == torch.float32 else 1e-10)


def test_masked_whiten_values_and_autograd():
    x = torch.tensor([1.0, 2.0, 3.0, 9.0])
    m = torch.tensor([True, True, True, False])
    assert_near(masked_whiten(x, m), [-1.0, 0.0, 1.0, 0.0])
    assert masked_whiten(x, m, zero_outside=False)[3] > 1                 # verl keeps the whitened value off the mask
    w = x.clone().requires_grad_()
    masked_whiten(w, m)[0].backward()
    assert torch.isfinite(w.grad).all() and w.grad[3] == 0


@settings(deadline=None, max_examples=30)
@given(seed=st.integers(0, 10_000), L=st.integers(0, 300), p=st.sampled_from([0.2, 0.7, 1.0]))
def test_gamma_one_fast_path_equals_the_packed_scan(seed, L, p):
    """token_returns at gamma = 1 (a reverse cumsum) == the general pack / scan / unpack path."""
    from toyrl.credit.scan import discounted_cumsum, pack, unpack
    g = torch.Generator().manual_seed(seed)
    r = torch.randn(5, L, generator=g, dtype=torch.float64)
    m = torch.rand(5, L, generator=g) < p
    packed = unpack(discounted_cumsum(pack(r, m), 1.0), m) * m
    torch.testing.assert_close(token_returns(r, m, 1.0), packed, atol=1e-10, rtol=1e-10)
