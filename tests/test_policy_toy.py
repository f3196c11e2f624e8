"""Tests of the TokenPolicy contract on the toy transformer (toyrl/policies).

Layers: worked examples of the helpers; parity of KV-cache generation with step-by-step
recomputation; parity of teacher-forced ``logprobs`` with ``Generation.logp``; padding invariance
(hypothesis); masks, seeds, gradients.
"""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from toyrl.policies import (PRESETS, Generation, TokenPolicy, ToyTransformer, ToyTransformerConfig, make_policy,
                            masked_log_softmax, positions_from_mask, prev_valid_index)

V, STOP, PAD = 24, 2, 0
ATOL = 1e-5


def peaky(policy: ToyTransformer, std: float = 0.3) -> ToyTransformer:
    """Re-draw the weights with a large std so distributions are far from uniform (a stronger test)."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in policy.parameters():
            if p.dim() > 1:
                p.copy_(torch.randn(p.shape, generator=g) * std)
    return policy


@pytest.fixture(scope="module")
def policy():
    cfg = ToyTransformerConfig(vocab_size=V, d_model=32, n_layer=2, n_head=4, max_len=64)
    return peaky(make_policy(cfg, V, "cpu", seed=0))


def left_padded(B, L, lengths, seed=0):
    """Random contexts (B, L) with row b holding lengths[b] real tokens at the right end."""
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(3, V, (B, L), generator=g)                      # (B, L)
    mask = torch.arange(L)[None, :] >= (L - torch.tensor(lengths))[:, None]   # (B, L)
    return tokens.masked_fill(~mask, 7), mask      # padding id 7: arbitrary, must not matter


def gen(seed):
    return torch.Generator().manual_seed(seed)


# ---- helpers: worked examples ---------------------------------------------------------------------
def test_positions_and_prev_index_examples():
    m = torch.tensor([[False, False, True, True, True], [False, True, False, True, True]])
    assert positions_from_mask(m).tolist() == [[0, 0, 0, 1, 2], [0, 0, 0, 1, 2]]
    assert prev_valid_index(m).tolist() == [[-1, -1, -1, 2, 3], [-1, -1, 1, 1, 3]]


def test_masked_log_softmax_example():
    logp, ent = masked_log_softmax(torch.zeros(3), torch.tensor([True, True, False]))
    assert torch.allclose(logp[:2], torch.full((2,), -math.log(2)))
    assert logp[2] == float("-inf") and abs(ent.item() - math.log(2)) < 1e-6
    # a position that allows nothing is unrestricted (padding may carry an all-False mask)
    logp, ent = masked_log_softmax(torch.zeros(4), torch.zeros(4, dtype=torch.bool))
    assert torch.allclose(logp, torch.full((4,), -math.log(4))) and abs(ent.item() - math.log(4)) < 1e-6


# ---- construction ---------------------------------------------------------------------------------
def test_protocol_presets_and_config_errors():
    for name in PRESETS:
        p = make_policy(name, 11, "cpu")
        assert isinstance(p, TokenPolicy) and p.vocab_size == 11 and p.device == torch.device("cpu")
        assert p.lm_head.weight is p.wte.weight                            # weight tying
    a, b = make_policy("tiny", 11, seed=3), make_policy("tiny", 11, seed=3)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))
    with pytest.raises(ValueError, match="preset"):
        make_policy("huge", 11)
    with pytest.raises(ValueError, match="divisible"):
        ToyTransformerConfig(vocab_size=11, d_model=30, n_head=4)
    tok, m = left_padded(1, 200, [200])
    with pytest.raises(ValueError, match="max_len"):
        make_policy("tiny", V).logprobs(tok, m)


# ---- KV cache vs recomputation --------------------------------------------------------------------
def test_kv_cache_generation_equals_stepwise_recompute(policy):
    ctx, m = left_padded(4, 9, [9, 5, 1, 3])
    out = policy.generate(ctx, m, 6, greedy=True)
    assert out.mask.all()
    seq, seq_m = ctx, m
    for t in range(6):                                                     # no cache: full forward each token
        with torch.no_grad():
            logits = policy(seq, seq_m)[:, -1]                             # (B, V)
        logp_all = torch.log_softmax(logits, -1)
        tok = logp_all.argmax(-1)
        assert torch.equal(tok, out.tokens[:, t])
        assert torch.allclose(logp_all.gather(1, tok[:, None]).squeeze(1), out.logp[:, t], atol=ATOL)
        seq, seq_m = torch.cat([seq, tok[:, None]], 1), torch.cat([seq_m, torch.ones(4, 1, dtype=torch.bool)], 1)


# ---- logprobs reproduce generation ----------------------------------------------------------------
@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("allowed_kind", [None, "V", "BV", "BNV"])
def test_logprobs_reproduce_generation(policy, temperature, allowed_kind):
    B, L, N = 6, 10, 7
    ctx, m = left_padded(B, L, [10, 7, 1, 4, 10, 2], seed=1)
    g = gen(0)
    allowed = {None: None,
               "V": torch.arange(V) % 3 != 1,
               "BV": torch.rand(B, V, generator=g) < 0.5,
               "BNV": torch.rand(B, N, V, generator=g) < 0.4}[allowed_kind]
    if allowed is not None:
        allowed[..., STOP] = True                                          # let rows stop
    out = policy.generate(ctx, m, N, temperature, stop_token=STOP, allowed=allowed, generator=g)
    tokens, mask = torch.cat([ctx, out.tokens], 1), torch.cat([m, out.mask], 1)    # (B, L + N)
    if allowed is None:
        allowed_T = None
    else:                                                                  # (B, L + N, V) per position
        allowed_T = torch.zeros(B, L + N, V, dtype=torch.bool)
        allowed_T[:, L:] = allowed if allowed.dim() == 3 else allowed.expand(B, V)[:, None]
    logp, ent = policy.logprobs(tokens, mask, allowed=allowed_T, temperature=temperature)
    assert torch.allclose(logp[:, L:], out.logp, atol=ATOL)
    assert torch.allclose(ent[:, L:], out.entropy, atol=ATOL)
    # stopped rows emit pad with mask False and zero logp / entropy
    assert (out.tokens[~out.mask] == PAD).all() and (out.logp[~out.mask] == 0).all()
    assert (out.entropy[~out.mask] == 0).all()
    # a row stops right after its first stop token
    for b in range(B):
        n = int(out.lengths[b])
        assert STOP not in out.tokens[b, :n - 1].tolist() and out.mask[b, :n].all()
        assert n == N or out.tokens[b, n - 1] == STOP
    assert (logp[~mask] == 0).all() and torch.isfinite(logp).all()


def test_multi_turn_past_equals_full_recompute(policy):
    B, L = 5, 8
    ctx, m = left_padded(B, L, [8, 3, 1, 6, 2], seed=2)
    g = gen(5)
    tokens, mask, logps, slots, past, new, new_m = ctx, m, [], [], None, ctx, m
    for turn in range(3):
        out = policy.generate(new, new_m, 5, stop_token=STOP, generator=g, past=past)
        slots.append(torch.arange(tokens.size(1), tokens.size(1) + 5))
        logps.append(out.logp)
        obs = torch.randint(3, V, (B, 3), generator=g)
        obs_m = torch.rand(B, 3, generator=g) < 0.7                         # ragged observations, holes
        tokens, mask = torch.cat([tokens, out.tokens, obs], 1), torch.cat([mask, out.mask, obs_m], 1)
        past, new, new_m = out.past, obs, obs_m
        # the same turn without past (re-reading everything) gives the same greedy continuation
        full = policy.generate(tokens, mask, 3, greedy=True)
        inc = policy.generate(new, new_m, 3, greedy=True, past=past)
        assert torch.equal(full.tokens, inc.tokens) and torch.allclose(full.logp, inc.logp, atol=ATOL)
    logp, _ = policy.logprobs(tokens, mask)
    for s, lp in zip(slots, logps):
        assert torch.allclose(logp[:, s], lp, atol=ATOL)


def test_past_for_a_row_that_stopped_and_got_no_new_tokens(policy):
    """A finished row with an empty new context continues from the logits after its last real token."""
    B, N = 3, 4
    ctx, m = left_padded(B, 6, [6, 2, 4], seed=3)
    allowed = torch.ones(B, N, V, dtype=torch.bool)
    allowed[0, 0] = False
    allowed[0, 0, STOP] = True                                             # row 0 must stop at once
    out = policy.generate(ctx, m, N, greedy=True, stop_token=STOP, allowed=allowed)
    assert out.mask[0].tolist() == [True, False, False, False] and out.mask[1:].all()
    obs, obs_m = torch.randint(3, V, (B, 2), generator=gen(0)), torch.ones(B, 2, dtype=torch.bool)
    obs_m[0] = False
    inc = policy.generate(obs, obs_m, 3, greedy=True, past=out.past)
    full = policy.generate(torch.cat([ctx, out.tokens, obs], 1), torch.cat([m, out.mask, obs_m], 1), 3, greedy=True)
    assert torch.equal(full.tokens, inc.tokens) and torch.allclose(full.logp, inc.logp, atol=ATOL)
    rows = torch.tensor([2, 0])                                            # a subset of rows, reordered
    sub = policy.generate(obs[rows], obs_m[rows], 3, greedy=True, past=out.past.select(rows))
    assert torch.equal(sub.tokens, full.tokens[rows]) and torch.allclose(sub.logp, full.logp[rows], atol=ATOL)


# ---- sampling ---------------------------------------------------------------------------------------
def test_seeded_generator_reproducible(policy):
    ctx, m = left_padded(8, 6, [6, 2, 4, 1, 6, 5, 3, 2])
    a = policy.generate(ctx, m, 5, 1.5, generator=gen(42))
    b = policy.generate(ctx, m, 5, 1.5, generator=gen(42))
    c = policy.generate(ctx, m, 5, 1.5, generator=gen(43))
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.logp, b.logp)
    assert not torch.equal(a.tokens, c.tokens)


def test_allowed_mask_respected(policy):
    B, N = 32, 6
    ctx, m = left_padded(B, 5, [5, 3] * 16)
    g = gen(0)
    for allowed in [torch.arange(V) >= V - 3, torch.rand(B, V, generator=g) < 0.2,
                    torch.rand(B, N, V, generator=g) < 0.2]:
        allowed[..., 5] = True                                             # at least one allowed token
        for greedy in (False, True):
            out = policy.generate(ctx, m, N, 3.0, allowed=allowed, greedy=greedy, generator=g)
            a = allowed if allowed.dim() == 3 else allowed.expand(B, V)[:, None].expand(B, N, V)
            assert a.gather(2, out.tokens[..., None]).all()


def test_entropy_matches_direct_computation(policy):
    ctx, m = left_padded(3, 7, [7, 4, 2])
    allowed = torch.arange(V) % 2 == 0
    out = policy.generate(ctx, m, 1, 0.8, allowed=allowed, generator=gen(0))
    with torch.no_grad():
        logits = policy(ctx, m)[:, -1].double() / 0.8                      # (B, V)
    p = torch.softmax(logits.masked_fill(~allowed, float("-inf")), -1)
    H = -sum(p[:, v] * torch.log(p[:, v]) for v in range(V) if allowed[v])   # the textbook sum
    assert torch.allclose(out.entropy[:, 0].double(), H, atol=ATOL)
    _, ent = policy.logprobs(ctx, m)
    with torch.no_grad():
        q = torch.softmax(policy(ctx, m).double(), -1)[:, :-1]             # predicts positions 1..
    assert torch.allclose(ent[:, 1:][m[:, 1:] & m[:, :-1]].double(),
                          -(q * q.log()).sum(-1)[m[:, 1:] & m[:, :-1]], atol=ATOL)


# ---- padding --------------------------------------------------------------------------------------
def test_no_nan_with_full_left_padding_rows(policy):
    ctx, m = left_padded(3, 12, [12, 1, 2])
    h = policy.hidden(ctx, m)
    assert h.shape == (3, 12, 32) and torch.isfinite(h).all()


@settings(max_examples=25, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=12), st.integers(0, 6), st.integers(0, 2 ** 16))
def test_padding_invariance(holes, n_left, seed):
    """A row means the same with extra left padding and with padding holes anywhere in it."""
    policy = _POLICY
    g = gen(seed)
    real = torch.randint(3, V, (6,), generator=g)                          # 6 real tokens
    compact, cm = real[None], torch.ones(1, 6, dtype=torch.bool)
    # interleave padding: `holes[i]` True inserts a pad slot before real token i % 6
    toks, msk = [7] * n_left, [False] * n_left
    for i, r in enumerate(real.tolist()):
        if i < len(holes) and holes[i]:
            toks.append(9), msk.append(False)
        toks.append(r), msk.append(True)
    padded, pm = torch.tensor([toks]), torch.tensor([msk])
    lp_c, ent_c = _POLICY.logprobs(compact, cm)
    lp_p, ent_p = _POLICY.logprobs(padded, pm)
    assert torch.allclose(lp_p[pm], lp_c[0], atol=ATOL) and torch.allclose(ent_p[pm], ent_c[0], atol=ATOL)
    a = policy.generate(compact, cm, 3, greedy=True)
    b = policy.generate(padded, pm, 3, greedy=True)
    assert torch.equal(a.tokens, b.tokens) and torch.allclose(a.logp, b.logp, atol=ATOL)


_POLICY = peaky(make_policy(ToyTransformerConfig(vocab_size=V, d_model=32, n_layer=2, n_head=4), V, seed=0))


# ---- gradients ------------------------------------------------------------------------------------
def test_gradients_flow_and_are_finite(policy):
    ctx, m = left_padded(4, 10, [10, 3, 1, 6])
    out = policy.generate(ctx, m, 4, stop_token=STOP, generator=gen(0))
    tokens, mask = torch.cat([ctx, out.tokens], 1), torch.cat([m, out.mask], 1)
    allowed = torch.rand(4, 14, V, generator=gen(1)) < 0.5
    allowed[~mask] = False                                                 # all-False rows at padding
    allowed.scatter_(2, tokens[..., None], True)                           # real tokens are allowed
    policy.zero_grad()
    logp, ent = policy.logprobs(tokens, mask, allowed=allowed)
    assert logp.requires_grad and torch.isfinite(logp).all() and torch.isfinite(ent).all()
    (-(logp.sum() + 0.1 * ent.sum())).backward()
    grads = [p.grad for p in policy.parameters()]
    assert all(gr is not None and torch.isfinite(gr).all() for gr in grads)
    assert sum(gr.abs().sum() for gr in grads) > 0
    assert isinstance(out, Generation)
