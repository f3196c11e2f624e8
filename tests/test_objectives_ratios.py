"""Ratios at four levels, pooling, TIS weights, KL estimators and aggregation: hand-computed cases."""
import math

import pytest
import torch

from toyrl.objectives import (AGGREGATIONS, KL_ESTIMATORS, LEVELS, agg_weights, aggregate, clamp_log, kl_estimate,
                              log_ratio, pool, tis_weights, token_log_ratio)

# one row: prompt (turn 0), turn 0 = 2 policy tokens, obs, turn 1 = 1 policy token, padding
TURN = torch.tensor([[0, 0, 0, 0, 1, -1]])
MASK = torch.tensor([[False, True, True, False, True, False]])
OLD = torch.zeros(1, 6)
LOGP = torch.tensor([[9.0, 1.0, 3.0, 7.0, -1.0, 5.0]])


def test_token_log_ratio_is_zero_off_mask():
    d = token_log_ratio(LOGP, OLD, MASK)
    assert d.tolist() == [[0.0, 1.0, 3.0, 0.0, -1.0, 0.0]]


@pytest.mark.parametrize("level,expected", [
    ("token", [0.0, 1.0, 3.0, 0.0, -1.0, 0.0]),
    ("turn", [0.0, 2.0, 2.0, 0.0, -1.0, 0.0]),          # geometric mean per turn (SORL)
    ("sequence", [0.0, 1.0, 1.0, 0.0, 1.0, 0.0]),       # geometric mean per row (GSPO)
    ("trajectory", [0.0, 3.0, 3.0, 0.0, 3.0, 0.0]),     # product per row (LOOP bandit)
])
def test_levels_hand_computed(level, expected):
    lr = log_ratio(LOGP, OLD, MASK, TURN, level, H=2)
    assert torch.allclose(torch.where(MASK, lr, torch.zeros_like(lr)), torch.tensor([expected]))


def test_levels_agree_with_one_token_one_turn():
    turn = torch.tensor([[0, 0], [0, -1]])
    mask = torch.tensor([[False, True], [True, False]])
    logp, old = torch.tensor([[0.3, -0.2], [0.5, 0.0]]), torch.tensor([[0.0, 0.4], [-0.1, 0.0]])
    ref = log_ratio(logp, old, mask, turn, "token")
    for level in LEVELS:
        assert torch.allclose(log_ratio(logp, old, mask, turn, level, H=1)[mask], ref[mask])


def test_pool_loop_vs_vectorized():
    g = torch.Generator().manual_seed(0)
    B, T, H = 4, 9, 3
    turn = torch.randint(-1, H, (B, T), generator=g)
    mask = (torch.rand(B, T, generator=g) > 0.3) & (turn >= 0)
    x = torch.randn(B, T, generator=g)
    got = pool(x, mask, turn, "turn", "mean", H)
    for b in range(B):
        for t in range(T):
            if mask[b, t]:
                sel = [x[b, s] for s in range(T) if mask[b, s] and turn[b, s] == turn[b, t]]
                assert math.isclose(float(got[b, t]), float(sum(sel) / len(sel)), rel_tol=1e-5, abs_tol=1e-6)
    assert torch.allclose(pool(x, mask, turn, "trajectory", "sum")[:, 0], (x * mask).sum(1))


def test_straight_through_same_value_tokenwise_gradient():
    logp = torch.tensor([[0.5, -0.5, 0.2]], requires_grad=True)
    old, mask, turn = torch.zeros(1, 3), torch.ones(1, 3, dtype=torch.bool), torch.zeros(1, 3, dtype=torch.long)
    plain = log_ratio(logp, old, mask, turn, "sequence")
    st = log_ratio(logp, old, mask, turn, "sequence", straight_through=True)
    assert torch.allclose(plain, st)
    w = torch.tensor([[1.0, 2.0, 3.0]])
    (g_st,) = torch.autograd.grad((st * w).sum(), logp)
    (g_plain,) = torch.autograd.grad((plain * w).sum(), logp)
    assert torch.allclose(g_st, w) and torch.allclose(g_plain, torch.full((1, 3), 2.0))


def test_clamp_log_and_bad_level():
    assert clamp_log(torch.tensor([-50.0, 0.0, 50.0])).tolist() == [-20.0, 0.0, 20.0]
    assert clamp_log(torch.tensor([50.0]), (-math.inf, math.inf)).tolist() == [50.0]
    with pytest.raises(ValueError, match="ratio level"):
        log_ratio(LOGP, OLD, MASK, TURN, "episode")


def test_tis_weights_token_and_sequence():
    old, mask, turn = torch.zeros(1, 3), torch.ones(1, 3, dtype=torch.bool), torch.zeros(1, 3, dtype=torch.long)
    roll = torch.tensor([[0.0, -1.0, 1.0]])
    assert torch.allclose(tis_weights(old, roll, mask, turn), torch.tensor([[1.0, 2.0, math.exp(-1)]]), atol=1e-6)
    # sequence: prod = exp(0 + 1 - 1) = 1 for every token
    assert torch.allclose(tis_weights(old, roll, mask, turn, level="sequence"), torch.ones(1, 3))
    huge = tis_weights(old, torch.full((1, 3), -1e4), mask, turn, level="sequence")
    assert torch.equal(huge, torch.full((1, 3), 2.0))


# ---- KL estimators --------------------------------------------------------------------------
def test_kl_values():
    logp, ref = torch.tensor([0.0, -1.0, -2.0]), torch.tensor([-1.0, -1.0, 0.0])
    assert kl_estimate(logp, ref, "k1").tolist() == [1.0, 0.0, -2.0]
    assert kl_estimate(logp, ref, "abs").tolist() == [1.0, 0.0, 2.0]
    assert kl_estimate(logp, ref, "k2").tolist() == [0.5, 0.0, 2.0]
    assert torch.allclose(kl_estimate(logp, ref, "k3"), torch.tensor([math.exp(-1), 0.0, math.exp(2) - 3]))
    assert set(KL_ESTIMATORS) == {"k1", "abs", "k2", "k3", "k1+", "abs+", "k3+"}


@pytest.mark.parametrize("base", ["k1", "abs", "k3"])
def test_kl_straight_through_value_of_base_gradient_of_k2(base):
    logp = torch.tensor([0.3, -1.2, 0.7], requires_grad=True)
    ref = torch.tensor([0.0, -1.0, 1.5])
    st = kl_estimate(logp, ref, base + "+")
    assert torch.allclose(st, kl_estimate(logp, ref, base))
    (g,) = torch.autograd.grad(st.sum(), logp)
    assert torch.allclose(g, (logp - ref).detach())


def test_kl_bad_name_and_shape():
    with pytest.raises(ValueError, match="kl must be one of"):
        kl_estimate(torch.zeros(2), torch.zeros(2), "k4")
    with pytest.raises(ValueError, match="ref_logp"):
        kl_estimate(torch.zeros(1, 2), torch.zeros(1, 3), "k1")


# ---- aggregation ----------------------------------------------------------------------------
LOSS = torch.tensor([[1.0, 1.0, 1.0, 0.0], [2.0, 2.0, 0.0, 0.0], [5.0, 5.0, 5.0, 5.0]])
AMASK = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [0, 0, 0, 0]], dtype=torch.bool)   # row 2 fully masked


@pytest.mark.parametrize("mode,expected", [
    ("token-mean", 7 / 5),
    ("token-sum", 7.0),
    ("seq-mean-token-sum", (3 + 4) / 2),
    ("seq-mean-token-mean", (1 + 2) / 2),
    ("seq-mean-token-sum-norm", 0.875),        # verl 0.9.1: (3/4 + 4/4) / 2
])
def test_aggregations_hand_computed(mode, expected):
    assert math.isclose(float(aggregate(LOSS, AMASK, mode)), expected, rel_tol=1e-6)
    assert mode in AGGREGATIONS


def test_aggregation_overrides_and_weights():
    # Dr. GRPO's normalizer: all B rows and a fixed L_max
    assert math.isclose(float(aggregate(LOSS, AMASK, "seq-mean-token-sum-norm", n_seqs=3, norm_len=8)), 7 / 3 / 8, rel_tol=1e-6)
    w = agg_weights(torch.tensor([[1, 1, 0], [1, 0, 0]]).bool(), "seq-mean-token-mean")
    assert torch.allclose(w, torch.tensor([[0.25, 0.25, 0.0], [0.5, 0.0, 0.0]]))


def test_aggregation_all_masked_and_nonfinite_padding():
    empty = torch.zeros(2, 3, dtype=torch.bool)
    for mode in AGGREGATIONS:
        assert float(aggregate(torch.ones(2, 3), empty, mode)) == 0.0
    loss = torch.tensor([[1.0, float("nan"), float("inf")]])
    assert float(aggregate(loss, torch.tensor([[True, False, False]]), "token-mean")) == 1.0
    with pytest.raises(ValueError, match="agg must be one of"):
        aggregate(LOSS, AMASK, "mean")
    with pytest.raises(ValueError, match="loss must have the shape"):
        aggregate(LOSS[:, :2], AMASK)
