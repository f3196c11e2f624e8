"""A prompt shared by a group runs once: ``shared_prefix`` finds it, ``HFPolicy.logprobs(share=...)`` and the
first-turn prefill use it, and every number (log-probs, entropies, gradients, sampled tokens) equals running
each row whole, at float rounding.
"""
import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from toyrl.rollout.flatten import logprobs_by_length, shared_prefix

from conftest import make_local_model

transformers = pytest.importorskip("transformers")

TOL = dict(atol=1e-5, rtol=1e-5)


def test_shared_prefix_by_hand():
    tokens = torch.tensor([[5, 6, 7], [5, 6, 8], [9, 9, 9]])
    rep, inv, k = shared_prefix(tokens, torch.ones(3, 3, dtype=torch.bool), torch.tensor([4, 4, 2]))
    assert rep.tolist() == [2, 0] and inv.tolist() == [1, 1, 0] and k == 2   # row 2 alone: capped at 3 - 1
    mask = torch.tensor([[True, True, True], [True, True, False], [True, True, True]])
    assert shared_prefix(tokens, mask, torch.tensor([0, 0, 1]))[2] == 1        # row 1 has 2 real tokens
    assert shared_prefix(tokens, torch.ones(3, 3, dtype=torch.bool), torch.arange(3)) is None   # no group of 2
    other = torch.tensor([[5, 6, 7], [4, 6, 7]])                                 # differ at the first token
    assert shared_prefix(other, torch.ones(2, 3, dtype=torch.bool), torch.zeros(2, dtype=torch.long)) is None


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.integers(0, 6), st.integers(0, 10_000))
def test_shared_prefix_is_the_longest_shared_run(n_groups, G, prompt, seed):
    """Every row equals its group's first row on the k positions, all real; k + 1 would break one of the rules."""
    g = torch.Generator().manual_seed(seed)
    B, T = n_groups * G, prompt + 5
    heads = torch.randint(0, 3, (n_groups, T), generator=g)
    tails = torch.randint(0, 3, (B, T - prompt), generator=g)
    tokens = torch.cat([heads.repeat_interleave(G, 0)[:, :prompt], tails], 1)
    lens = torch.randint(1, T + 1, (B,), generator=g)
    mask = torch.arange(T)[None] < lens[:, None]                                  # right padding
    group = torch.arange(n_groups).repeat_interleave(G)[torch.randperm(B, generator=g)]
    tokens = tokens[torch.argsort(torch.argsort(group))]                          # rows of a group share a head
    out = shared_prefix(tokens, mask, group)
    if out is None:
        return
    rep, inv, k = out
    assert torch.equal(group[rep][inv], group) and 1 <= k <= int(lens.min()) - 1
    assert (tokens[:, :k] == tokens[rep[inv], :k]).all() and mask[:, :k].all()
    if k + 1 <= int(lens.min()) - 1:
        assert not (tokens[:, :k + 1] == tokens[rep[inv], :k + 1]).all()


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def hf_policy(request, tmp_path_factory):
    from toyrl.policies import HFPolicy
    return HFPolicy.from_pretrained(make_local_model(tmp_path_factory.mktemp(request.param), request.param))


def grouped_batch(V, n=2, G=3, k=6, T=11, seed=0):
    """n prompts of k tokens, G rows each, then different tails of right-padded length; an allowed mask."""
    g = torch.Generator().manual_seed(seed)
    tokens = torch.cat([torch.randint(0, V, (n, k), generator=g).repeat_interleave(G, 0),
                        torch.randint(0, V, (n * G, T - k), generator=g)], 1)
    mask = torch.arange(T)[None] < torch.randint(k + 1, T + 1, (n * G,), generator=g)[:, None]
    allowed = torch.rand(n * G, T, V, generator=g) < 0.6
    allowed.scatter_(2, tokens[..., None], True)
    return tokens, mask, allowed, torch.arange(n).repeat_interleave(G)


def run(policy, fn, w):
    policy.zero_grad(set_to_none=True)
    lp, en = fn()
    ((lp * w[0]).sum() + (en * w[1]).sum()).backward()
    grads = [p.grad.clone() for p in policy.parameters() if p.grad is not None]
    return lp.detach(), en.detach(), grads


@pytest.mark.parametrize("temperature, use_allowed, score", [(1.0, False, False), (0.7, True, True)])
def test_shared_logprobs_equal_whole_rows(hf_policy, temperature, use_allowed, score):
    """logp, entropy and every parameter gradient with the prefix run once per group equal the plain pass."""
    tokens, mask, allowed, group = grouped_batch(hf_policy.vocab_size)
    share = shared_prefix(tokens, mask, group)
    assert share is not None and share[2] == 6
    kw = dict(temperature=temperature, allowed=allowed if use_allowed else None,
              score=(torch.arange(tokens.shape[1]) >= 4)[None].expand_as(mask) if score else None)
    w = torch.randn(2, *tokens.shape, generator=torch.Generator().manual_seed(1))
    hf_policy.eval()                                                              # GPT-2's dropout off
    a = run(hf_policy, lambda: hf_policy.logprobs(tokens, mask, share=share, **kw), w)
    b = run(hf_policy, lambda: hf_policy.logprobs(tokens, mask, **kw), w)
    torch.testing.assert_close(a[0], b[0], **TOL)
    torch.testing.assert_close(a[1], b[1], **TOL)
    assert len(a[2]) == len(b[2]) > 0
    for ga, gb in zip(a[2], b[2]):
        torch.testing.assert_close(ga, gb, **TOL)


def test_logprobs_by_length_takes_the_cheaper_way(hf_policy, monkeypatch):
    """With groups the shared pass runs (its cost is lower here) and gives the bucketed numbers."""
    tokens, mask, allowed, group = grouped_batch(hf_policy.vocab_size, n=2, G=4, k=20, T=24)
    calls = []
    inner = hf_policy.logprobs
    monkeypatch.setattr(hf_policy, "logprobs", lambda *a, **kw: calls.append(kw.get("share")) or inner(*a, **kw))
    with torch.no_grad():
        a = logprobs_by_length(hf_policy, tokens, mask, allowed, 0.8, group=group)
        b = logprobs_by_length(hf_policy, tokens, mask, allowed, 0.8)
    assert calls[0] is not None and all(c is None for c in calls[1:]) and len(calls) == 5   # 1 shared, 4 buckets
    torch.testing.assert_close(a[0], b[0], **TOL)
    torch.testing.assert_close(a[1], b[1], **TOL)


def test_toy_policy_ignores_groups():
    """A policy without ``shares_prefix`` (the toy transformer) takes the bucketed path with or without groups."""
    from toyrl.policies.toy import PRESETS, ToyTransformer, ToyTransformerConfig
    torch.manual_seed(0)
    pol = ToyTransformer(ToyTransformerConfig(vocab_size=23, max_len=32, **PRESETS["small"]))
    tokens, mask, allowed, group = grouped_batch(23, n=2, G=4, k=8, T=12)
    with torch.no_grad():
        a = logprobs_by_length(pol, tokens, mask, allowed, group=group)
        b = logprobs_by_length(pol, tokens, mask, allowed)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_cache_rows_reorders_objects_and_legacy_tuples():
    """Both cache layouts a model may return (a Cache object, or per-layer (key, value) tuples) give row copies."""
    from transformers import DynamicCache
    from toyrl.policies.hf import cache_rows
    k, v = torch.arange(2.0)[:, None, None, None].expand(2, 1, 3, 2), torch.ones(2, 1, 3, 2)
    rows = torch.tensor([0, 0, 1])
    legacy = cache_rows(((k, v),), rows)
    assert legacy[0][0][:, 0, 0, 0].tolist() == [0.0, 0.0, 1.0] and legacy[0][1].shape == (3, 1, 3, 2)
    cache = DynamicCache()
    cache.update(k.clone(), v.clone(), 0)
    out = cache_rows(cache, rows)
    assert out is cache and out.layers[0].keys[:, 0, 0, 0].tolist() == [0.0, 0.0, 1.0]


def test_share_needs_the_cache(tmp_path):
    """A model checkpointing its blocks in training mode keeps no cache: share is refused by name."""
    from toyrl.policies import HFPolicy
    pol = HFPolicy.from_pretrained(make_local_model(tmp_path, "llama"), grad_ckpt=True)
    tokens, mask, _, group = grouped_batch(pol.vocab_size)
    pol.train()
    assert not pol.shares_prefix()
    with pytest.raises(ValueError, match="share"):
        pol.logprobs(tokens, mask, share=shared_prefix(tokens, mask, group))
    pol.eval()
    assert pol.shares_prefix()


def test_prefill_runs_each_prompt_once(hf_policy, monkeypatch):
    """Rows repeating a prompt (left-padded) are prefilled once; the greedy tokens and log-probs equal those of
    each row generated alone."""
    tokens = torch.randint(0, hf_policy.vocab_size, (2, 9), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(2, 9, dtype=torch.bool)
    mask[0, :3] = False                                                           # left padding
    mask = torch.cat([mask, mask])                                                # rows 2, 3 repeat rows 0, 1
    tokens = torch.cat([tokens, tokens])
    seen = []
    inner = hf_policy._decoder
    monkeypatch.setattr(hf_policy, "_decoder", lambda t, *a, **kw: seen.append(t.shape[0]) or inner(t, *a, **kw))
    hf_policy.eval()
    out = hf_policy.generate(tokens, mask, 5, greedy=True)
    assert seen[0] == 2 and all(s == 4 for s in seen[1:])                       # prefill on 2 rows, decode on 4
    assert torch.equal(out.tokens[:2], out.tokens[2:])                           # greedy: repeats agree
    for r in range(4):
        alone = hf_policy.generate(tokens[r:r + 1], mask[r:r + 1], 5, greedy=True)
        assert torch.equal(alone.tokens[0], out.tokens[r])
        torch.testing.assert_close(alone.logp[0], out.logp[r], **TOL)


def test_trainer_step_frees_its_gradients(tmp_path):
    """After a step no parameter holds a gradient: the rollout and the next forward run without them. An hf
    policy's optimizer is the fused AdamW."""
    from toyrl.train import TrainConfig, Trainer
    tr = Trainer(TrainConfig(env="bandit_chain", policy="hf:" + make_local_model(tmp_path, "llama", chat=True),
                             group_size=2, prompts_per_step=2, steps=1, entropy_coef=0.01, progress=False))
    assert tr.opt.defaults["fused"]                                               # hf: AdamW's one-kernel step
    tr.step()
    assert all(p.grad is None for p in tr.policy.parameters())
    assert np.isfinite(tr.log.rows[-1]["grad_norm"]) and tr.log.rows[-1]["grad_norm"] > 0
