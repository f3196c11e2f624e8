"""TurnBatch construction checks, turn <-> token helpers, grouping, and segment statistics."""
import pytest
import torch
from hypothesis import given, settings, strategies as st

from toyrl.batch import TurnBatch, _turns_in_order, discounted_returns, token_to_turn, turn_to_token
from toyrl.segments import dense_index, pair_index, segment_max, segment_mean, segment_min, segment_std, segment_sum


def tiny(**over):
    # two rollouts: [prompt, a1, a1, o1, a2] and [prompt, a1, o1, pad, pad]
    kw = dict(
        tokens=torch.tensor([[9, 1, 2, 7, 3], [9, 1, 7, 0, 0]]),
        policy_mask=torch.tensor([[0, 1, 1, 0, 1], [0, 1, 0, 0, 0]], dtype=torch.bool),
        turn_id=torch.tensor([[0, 0, 0, 0, 1], [0, 0, 0, -1, -1]]),
        old_logp=torch.zeros(2, 5),
        turn_mask=torch.tensor([[1, 1], [1, 0]], dtype=torch.bool),
        turn_reward=torch.tensor([[0.0, 1.0], [0.0, 0.0]]),
        group=torch.tensor([0, 0]),
        state_key=torch.tensor([[5, 6], [5, 0]]),
    )
    kw.update(over)
    return TurnBatch(**kw)


def test_valid_batch_and_sizes():
    b = tiny()
    assert (b.B, b.T, b.H) == (2, 5, 2)
    assert b.outcome().tolist() == [1.0, 0.0]
    assert b.num_turns().tolist() == [2, 1]


@pytest.mark.parametrize("field,value,msg", [
    ("policy_mask", torch.zeros(2, 6, dtype=torch.bool), r"policy_mask must have shape \(B=2, T=5\), got \(2, 6\)"),
    ("turn_reward", torch.zeros(2, 3), r"turn_reward must have shape \(B=2, H=2\)"),
    ("group", torch.zeros(3, dtype=torch.long), r"group must have shape \(B=2\)"),
    ("policy_mask", torch.zeros(2, 5), r"policy_mask must have a bool dtype"),
    ("old_logp", torch.zeros(2, 5, dtype=torch.long), r"old_logp must have a float dtype"),
    ("state_key", [[1, 2], [3, 4]], r"state_key must be a torch.Tensor of shape \(B=2, H=2\)"),
    ("entropy", torch.zeros(5, 2), r"entropy must have shape \(B=2, T=5\)"),
    ("turn_id", torch.full((2, 5), 3), r"turn_id values must lie in \[-1, H=2\)"),
    ("tokens", torch.zeros(2, 5, 1, dtype=torch.long), r"tokens must be a 2-D tensor"),
])
def test_validation_names_field_and_shape(field, value, msg):
    with pytest.raises(ValueError, match=msg):
        tiny(**{field: value})


def test_policy_token_on_padding_rejected():
    pm = torch.tensor([[0, 1, 1, 0, 1], [0, 1, 0, 1, 0]], dtype=torch.bool)
    with pytest.raises(ValueError, match="padding"):
        tiny(policy_mask=pm)


def test_turn_ids_must_not_decrease_outside_padding():
    with pytest.raises(ValueError, match="non-decreasing"):
        tiny(turn_id=torch.tensor([[0, 1, 1, 0, 1], [0, 0, 0, -1, -1]]))
    with pytest.raises(ValueError, match="non-decreasing"):            # a drop across padding still counts
        tiny(turn_id=torch.tensor([[0, 0, 1, -1, 0], [0, 0, 0, -1, -1]]), policy_mask=torch.zeros(2, 5, dtype=torch.bool))
    pm = torch.tensor([[0, 1, 0, 1, 0], [0, 1, 0, 0, 0]], dtype=torch.bool)
    b = tiny(turn_id=torch.tensor([[-1, 0, 0, 1, -1], [0, 0, -1, 1, 1]]), policy_mask=pm)   # padding anywhere
    assert b.T == 5
    rows = torch.tensor([[0, 1, 2]] * 7 + [[0, 2, 1]])                    # the drop is in the last row
    assert not _turns_in_order(rows) and _turns_in_order(rows[:7]) and _turns_in_order(torch.tensor([[0, -1, 0, 1]]))


def test_turn_token_helpers():
    b = tiny()
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert b.turn_to_token(x).tolist() == [[1, 1, 1, 1, 2], [3, 3, 3, 0, 0]]
    lp = torch.tensor([[0.0, -1.0, -2.0, -5.0, -3.0], [0.0, -4.0, -5.0, 0.0, 0.0]])
    assert b.token_to_turn(lp, "sum").tolist() == [[-3.0, -3.0], [-4.0, 0.0]]
    assert b.token_to_turn(lp, "mean").tolist() == [[-1.5, -3.0], [-4.0, 0.0]]
    assert b.token_to_turn(lp, "last").tolist() == [[-2.0, -3.0], [-4.0, 0.0]]
    assert b.token_to_turn(lp, "max").tolist() == [[-1.0, -3.0], [-4.0, 0.0]]
    assert b.token_to_turn(torch.ones(2, 5), "sum", mask=b.turn_id >= 0).tolist() == [[4.0, 1.0], [3.0, 0.0]]
    with pytest.raises(ValueError, match="reduce"):
        b.token_to_turn(lp, "median")


@settings(max_examples=40, deadline=None)
@given(B=st.integers(1, 4), T=st.integers(1, 9), H=st.integers(1, 4), seed=st.integers(0, 10**6))
def test_token_to_turn_matches_loop(B, T, H, seed):
    g = torch.Generator().manual_seed(seed)
    turn_id = torch.randint(-1, H, (B, T), generator=g)
    mask = torch.rand(B, T, generator=g) < 0.7
    x = torch.randn(B, T, generator=g)
    for reduce in ["sum", "mean", "max", "min", "last"]:
        got = token_to_turn(x, turn_id, H, reduce, mask)
        for b in range(B):
            for k in range(H):
                vals = [float(x[b, t]) for t in range(T) if turn_id[b, t] == k and mask[b, t]]
                want = 0.0 if not vals else {"sum": sum(vals), "mean": sum(vals) / len(vals), "max": max(vals),
                                             "min": min(vals), "last": vals[-1]}[reduce]
                assert abs(float(got[b, k]) - want) < 1e-5
    back = turn_to_token(torch.randn(B, H, generator=g), turn_id)
    assert back.shape == (B, T) and (back[turn_id < 0] == 0).all()


def test_discounted_returns():
    r = torch.tensor([[0.0, 0.0, 1.0], [1.0, 1.0, 0.0]])
    m = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.bool)
    assert torch.allclose(discounted_returns(r, m, 0.5), torch.tensor([[0.25, 0.5, 1.0], [1.5, 1.0, 0.0]]))


def test_anchor_index_never_mixes_groups():
    b = tiny(group=torch.tensor([0, 1]))
    idx, S = b.anchor_index()
    assert S == 3 and idx[0, 0] != idx[1, 0] and idx[1, 1] == S          # invalid turns: the extra id S
    assert torch.bincount(idx.flatten(), minlength=S + 1).tolist()[:S] == [1, 1, 1]
    b2 = tiny()
    idx2, S2 = b2.anchor_index()
    assert S2 == 2 and idx2[0, 0] == idx2[1, 0]


def test_to_select_replace():
    b = tiny()
    assert b.select(torch.tensor([1])).B == 1
    assert b.to("cpu").tokens.device.type == "cpu"
    with pytest.raises(ValueError):
        b.replace(group=torch.zeros(5, dtype=torch.long))


def test_dense_index_paths_agree():
    small = torch.tensor([7, 3, 7, 0])
    big = small * (1 << 40) + 12345
    for ids in (small, big):
        idx, S = dense_index(ids)
        assert S == 3 and idx.tolist() == [2, 1, 2, 0]
    idx, S = pair_index(torch.tensor([0, 0, 1]), torch.tensor([5, 5, 5]))
    assert S == 2 and idx.tolist() == [0, 0, 1]


def test_segment_stats():
    x = torch.tensor([1.0, 3.0, 5.0, 2.0])
    idx = torch.tensor([0, 0, 1, 2])
    assert segment_sum(x, idx, 3).tolist() == [4.0, 5.0, 2.0]
    assert segment_mean(x, idx, 4).tolist() == [2.0, 5.0, 2.0, 0.0]
    assert segment_std(x, idx, 3, ddof=0).tolist() == [1.0, 0.0, 0.0]
    assert torch.allclose(segment_std(x, idx, 3, ddof=1), torch.tensor([2**0.5, 0.0, 0.0]))
    assert segment_max(x, idx, 3).tolist() == [3.0, 5.0, 2.0]
    assert segment_min(x, idx, 3).tolist() == [1.0, 5.0, 2.0]


@settings(max_examples=40, deadline=None)
@given(vals=st.lists(st.floats(-1e3, 1e3), min_size=1, max_size=30), seed=st.integers(0, 1000))
def test_segment_std_matches_torch(vals, seed):
    x = torch.tensor(vals, dtype=torch.float64)
    idx = torch.randint(0, 3, (len(vals),), generator=torch.Generator().manual_seed(seed))
    for ddof in (0, 1):
        got = segment_std(x, idx, 3, ddof=ddof)
        for s in range(3):
            sel = x[idx == s]
            want = sel.std(correction=ddof) if sel.numel() > ddof else torch.tensor(0.0, dtype=torch.float64)
            assert abs(float(got[s]) - float(want)) < 1e-6 * (1 + abs(float(want)))


def _returns_loop(r, m, gamma):
    """Return-to-go by a Python loop over floats (the seed snippet's recursion), 0 on invalid turns."""
    out = []
    for row_r, row_m in zip(r.tolist(), m.tolist()):
        acc, back = 0.0, []
        for x, v in zip(reversed(row_r), reversed(row_m)):
            if v:
                acc = x + gamma * acc
            back.append(acc if v else 0.0)
        out.append(back[::-1])
    return torch.tensor(out, dtype=r.dtype)


@settings(deadline=None, max_examples=40)
@given(seed=st.integers(0, 10_000), B=st.integers(1, 9), H=st.integers(0, 7), gamma=st.sampled_from([0.5, 0.95, 1.0]))
def test_discounted_returns_is_the_python_recursion_bit_for_bit(seed, B, H, gamma):
    g = torch.Generator().manual_seed(seed)
    r = torch.randn(B, H, generator=g, dtype=torch.float64)
    m = torch.rand(B, H, generator=g) < 0.7                                   # gaps anywhere
    assert torch.equal(discounted_returns(r, m, gamma), _returns_loop(r, m, gamma))


def test_discounted_returns_blocked_layout_is_the_recursion_and_ignores_invalid_rewards():
    """Batches of 512+ rows take blocks of 512 (and odd B blocks of 1): still the loop, bit for bit; a
    non-finite reward on an invalid turn is ignored, on a valid one it propagates."""
    g = torch.Generator().manual_seed(1)
    for B in (1024, 1000, 513):
        r = torch.randn(B, 6, generator=g, dtype=torch.float64)      # the loop runs in Python floats
        m = torch.rand(B, 6, generator=g) < 0.7
        assert torch.equal(discounted_returns(r, m, 0.95), _returns_loop(r, m, 0.95))
    r, m = torch.ones(2, 3, dtype=torch.float64), torch.tensor([[1, 0, 1], [1, 1, 1]], dtype=torch.bool)
    r[0, 1] = float("nan")
    assert torch.equal(discounted_returns(r, m, 0.5), _returns_loop(r, m, 0.5))
    r[1, 2] = float("inf")
    assert discounted_returns(r, m, 0.5)[1].isinf().all()


def test_discounted_returns_equal_suffixes_give_equal_bits_in_float32():
    """The same reward suffix reached at different turns gives bit-equal returns (what anchor stats need)."""
    r = torch.tensor([[0.0, 0.3, 0.1, 0.7], [0.3, 0.1, 0.7, 0.0]])
    m = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]], dtype=torch.bool)
    R = discounted_returns(r, m, 0.95)
    assert R[0, 1].item() == R[1, 0].item() and R[1, 3] == 0


def _partition(ids, rows):
    cells = {}
    for r, i in zip(rows, ids.tolist()):
        cells.setdefault(i, set()).add(r)
    return {frozenset(c) for c in cells.values()}


@settings(deadline=None, max_examples=30)
@given(seed=st.integers(0, 10_000), n_keys=st.sampled_from([1, 3, 40, 10_000]), high=st.booleans())
def test_pair_index_partition_matches_a_dict(seed, n_keys, high):
    """Keys of any int64 values (top bits only, wrapping products): equal pairs share an id, others never."""
    g = torch.Generator().manual_seed(seed)
    N = 300
    a = torch.randint(0, 5, (N,), generator=g)
    key = torch.randint(0, n_keys, (N,), generator=g)
    key = key << 57 if high else key * -7046029254386353131
    ids, S = pair_index(a, key)
    assert ids.shape == (N,) and int(ids.min()) >= 0 and int(ids.max()) == S - 1
    want = {}
    for n in range(N):
        want.setdefault((int(a[n]), int(key[n])), set()).add(n)
    assert _partition(ids, range(N)) == {frozenset(c) for c in want.values()}


def test_anchor_index_dense_and_hashed_keys_give_the_same_partition():
    from toyrl.envs.core import mix64
    from toyrl.segments import anchor_index
    g = torch.Generator().manual_seed(0)
    group = torch.arange(40) // 4 * 3                                   # sparse group ids
    small = torch.randint(0, 9, (40, 5), generator=g)
    mask = torch.rand(40, 5, generator=g) < 0.8
    dense, S1 = anchor_index(group, small, mask)
    hashed, S2 = anchor_index(group, torch.from_numpy(mix64(small.numpy())), mask)
    valid = mask.view(-1).nonzero().view(-1).tolist()
    assert _partition(dense.view(-1)[valid], valid) == _partition(hashed.view(-1)[valid], valid)
    assert S1 == S2 and (dense[~mask] == S1).all() and not (dense[mask] == S1).any()


def test_dense_index_renumbers_in_sorted_order():
    idx, S = dense_index(torch.tensor([9, 2, 9]))
    assert S == 2 and idx.tolist() == [1, 0, 1]
    idx, S = dense_index(torch.zeros(0, dtype=torch.long))
    assert S == 0 and idx.numel() == 0


@settings(deadline=None, max_examples=40)
@given(v=st.floats(-1e6, 1e6, width=32), n=st.integers(2, 40), ddof=st.sampled_from([0, 1]))
def test_segment_std_of_equal_values_is_exactly_zero(v, n, ddof):
    x = torch.full((n,), v, dtype=torch.float32)
    assert segment_std(x, torch.zeros(n, dtype=torch.long), 1, ddof=ddof).item() == 0.0


def test_all_finite_by_hand():
    from toyrl.batch import all_finite
    assert all_finite(torch.tensor([1.0, 3e38, 3e38]))                     # the sum overflows; every value is finite
    assert not all_finite(torch.tensor([1.0, float("nan")]))
    assert not all_finite(torch.tensor([float("inf"), float("-inf")]))    # inf - inf: the sum is NaN
    assert not all_finite(torch.tensor([[0.0], [-float("inf")]]))
    assert all_finite(torch.zeros(0)) and all_finite(torch.arange(5))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from([0.0, 1.5, -2.0, 3e38, -3e38, float("nan"), float("inf"), -float("inf")]),
                min_size=0, max_size=12), st.sampled_from([torch.float32, torch.float64, torch.float16]))
def test_all_finite_equals_isfinite_all(values, dtype):
    from toyrl.batch import all_finite
    x = torch.tensor(values, dtype=torch.float64).to(dtype)
    assert all_finite(x) == bool(torch.isfinite(x).all())


def test_first_index_by_hand():
    from toyrl.segments import first_index
    assert first_index(torch.tensor([1, 0, 1, 0]), 2).tolist() == [1, 0]
    assert first_index(torch.tensor([2, 2], dtype=torch.int32), 3).tolist() == [2, 2, 0]   # empty segments: N
