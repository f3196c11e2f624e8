"""score_tokens: log-probs from hidden states through the head in chunks equal the full-logits computation.

The reference (``full_logits_reference``) is the straightforward path: every position's (B, T, V) logits,
shifted to the next real token, log-softmaxed whole. Each policy's ``logprobs`` (toy transformer, TinyLM, a
random GPT-2, SmolLM2 when fetched) must give the same logp, entropy and parameter gradients to 1e-5, with a
temperature != 1 and an ``allowed`` mask; the chunk size must not matter; backward must keep no N x V tensor.
"""
import pytest
import torch
from hypothesis import given, settings, strategies as st

from toyrl.policies.base import masked_log_softmax, prev_valid_index, score_tokens
from toyrl.policies.toy import PRESETS, ToyTransformer, ToyTransformerConfig

TOL = dict(atol=1e-5, rtol=1e-5)


def full_logits_reference(logits, tokens, attn_mask, allowed=None, temperature=1.0):
    """(logp, entropy) (B, T) from the whole (B, T, V) logits: shift the logits to each token, then score."""
    B, T, V = logits.shape
    prev = prev_valid_index(attn_mask)                                          # (B, T)
    scored = attn_mask & (prev >= 0)
    shifted = logits.gather(1, prev.clamp(min=0)[..., None].expand(B, T, V))    # (B, T, V)
    logp_all, ent = masked_log_softmax(shifted, allowed, temperature)
    logp = logp_all.gather(-1, tokens.masked_fill(~attn_mask, 0)[..., None]).squeeze(-1)
    return logp.masked_fill(~scored, 0.0), ent.masked_fill(~scored, 0.0)


def batch(V, B=3, T=9, seed=0, device="cpu"):
    """Random tokens with left, middle and right padding, and a (B, T, V) allowed mask (some positions empty)."""
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, V, (B, T), generator=g)
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[0, :3] = False                                       # left padding
    mask[1, 4:6] = False                                      # padding in the middle
    mask[2, -2:] = False                                      # right padding
    allowed = torch.rand(B, T, V, generator=g) < 0.6
    allowed[0, 5] = False                                     # an empty set: no restriction
    allowed.scatter_(2, tokens[..., None], True)              # each token was allowed where it was drawn
    return tokens.to(device), mask.to(device), allowed.to(device)


def check_policy(policy, logits_fn, V, temperature=0.7, use_allowed=True):
    """policy.logprobs == reference on logits_fn(tokens, mask) (B, T, V): values and parameter gradients."""
    tokens, mask, allowed = batch(V)
    allowed = allowed if use_allowed else None
    params = [p for p in policy.parameters() if p.requires_grad]
    w = torch.randn(2, *tokens.shape, generator=torch.Generator().manual_seed(1))

    def run(fn):
        policy.zero_grad(set_to_none=True)
        lp, en = fn()
        ((lp * w[0]).sum() + (en * w[1]).sum()).backward()
        return lp.detach(), en.detach(), [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in params]

    new = run(lambda: policy.logprobs(tokens, mask, allowed=allowed, temperature=temperature))
    ref = run(lambda: full_logits_reference(logits_fn(tokens, mask), tokens, mask, allowed, temperature))
    torch.testing.assert_close(new[0], ref[0], **TOL)
    torch.testing.assert_close(new[1], ref[1], **TOL)
    assert (new[0][~mask] == 0).all() and (new[1][~mask] == 0).all()
    for g_new, g_ref in zip(new[2], ref[2]):
        torch.testing.assert_close(g_new, g_ref, **TOL)
    assert any(g.abs().sum() > 0 for g in new[2])


def test_toy_transformer_matches_full_logits():
    torch.manual_seed(0)
    pol = ToyTransformer(ToyTransformerConfig(vocab_size=23, max_len=32, **PRESETS["small"]))
    check_policy(pol, lambda t, m: pol(t, m), 23)
    check_policy(pol, lambda t, m: pol(t, m), 23, temperature=1.0, use_allowed=False)


def test_tinylm_matches_full_logits():
    from toyrl.policies.tinylm import TinyLM
    pol = TinyLM.from_scratch(seed=0, n_layer=1)
    check_policy(pol, lambda t, m: pol(t, m), pol.vocab_size)


def hf_logits(pol):
    """The model's own logits (B, T, V): what HFPolicy computed before (model(...).logits)."""
    from toyrl.policies.base import positions_from_mask
    return lambda t, m: pol.model(input_ids=t.masked_fill(~m, pol.pad_id), attention_mask=m.long(),
                                  position_ids=positions_from_mask(m), use_cache=False).logits.float()


def test_random_gpt2_matches_full_logits(tmp_path):
    pytest.importorskip("transformers")
    from conftest import make_local_model
    from toyrl.policies import HFPolicy
    pol = HFPolicy.from_pretrained(make_local_model(tmp_path, "gpt2"))
    check_policy(pol, hf_logits(pol), pol.vocab_size)


@pytest.mark.parametrize("arch", ["gemma2", "cohere", "granite"])
def test_logit_transforms_match_the_model(tmp_path, arch):
    """Models that soft-cap or scale their logits: the head path applies the same transform (logit_transform)."""
    transformers = pytest.importorskip("transformers")
    from conftest import make_local_model
    from toyrl.policies import HFPolicy
    tok = transformers.AutoTokenizer.from_pretrained(make_local_model(tmp_path, "gpt2"))
    common = dict(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                  num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=64)
    cls, extra = {"gemma2": ("Gemma2", dict(final_logit_softcapping=0.5)),
                  "cohere": ("Cohere", dict(logit_scale=0.3)),
                  "granite": ("Granite", dict(logits_scaling=4.0))}[arch]
    torch.manual_seed(0)
    model = getattr(transformers, f"{cls}ForCausalLM")(getattr(transformers, f"{cls}Config")(**common, **extra))
    pol = HFPolicy(model, tok)
    check_policy(pol, hf_logits(pol), pol.vocab_size)


def test_smollm2_matches_full_logits():
    pytest.importorskip("transformers")
    from toyrl.policies.zoo import is_fetched, model_dir
    if not is_fetched("smollm2"):
        pytest.skip("SmolLM2 is not fetched (toyrl models fetch smollm2)")
    from toyrl.policies import HFPolicy
    pol = HFPolicy.from_pretrained(model_dir("smollm2"))
    for p in pol.model.parameters():                      # gradients of the last block and the (tied) head only
        p.requires_grad_(False)
    for p in list(pol.model.model.layers[-1].parameters()) + [pol.model.lm_head.weight]:
        p.requires_grad_(True)
    check_policy(pol, hf_logits(pol), pol.vocab_size)


def linear_head(d, V, seed=0):
    torch.manual_seed(seed)
    return torch.nn.Linear(d, V)


@settings(max_examples=25, deadline=None)
@given(chunk=st.integers(1, 40), temperature=st.sampled_from([0.5, 1.0, 1.7]), seed=st.integers(0, 10**6),
       allowed_dim=st.sampled_from([0, 1, 2, 3]))
def test_chunk_size_does_not_change_the_result(chunk, temperature, seed, allowed_dim):
    V, d = 11, 5
    head = linear_head(d, V)
    tokens, mask, allowed3 = batch(V, seed=seed)
    allowed = {0: None, 1: allowed3[0, 0], 2: allowed3[:, 0], 3: allowed3}[allowed_dim]
    if allowed_dim in (1, 2):                                 # tokens must be allowed where they were drawn
        full = (allowed if allowed_dim == 1 else allowed[:, None]).expand(*tokens.shape, V)   # (B, T, V)
        tokens = torch.where(full.gather(2, tokens[..., None]).squeeze(-1), tokens, full.float().argmax(-1))
    h = torch.randn(*tokens.shape, d, generator=torch.Generator().manual_seed(seed), requires_grad=True)
    outs = []
    for c in (None, chunk):
        lp, en = score_tokens(h, head, tokens, mask, allowed=allowed, temperature=temperature, chunk=c)
        g_h, g_w = torch.autograd.grad((lp * 1.3).sum() + (en * 0.7).sum(), (h, head.weight))
        outs.append((lp, en, g_h, g_w))
    ref = full_logits_reference(head(h), tokens, mask, allowed, temperature)
    for a, b in zip(outs[0], outs[1]):
        torch.testing.assert_close(a, b, **TOL)
    torch.testing.assert_close(outs[0][0], ref[0], **TOL)
    torch.testing.assert_close(outs[0][1], ref[1], **TOL)


def test_padding_rows_and_extra_padding():
    """An all-padding row scores 0 (with a gradient of 0), extra padding columns change nothing, and a batch of
    padding only still backpropagates."""
    V, d = 7, 4
    head = linear_head(d, V)
    tokens, mask, _ = batch(V)
    mask[1] = False
    h = torch.randn(3, 9, d, requires_grad=True)
    lp, en = score_tokens(h, head, tokens, mask)
    assert (lp[1] == 0).all() and (en[1] == 0).all()
    (g,) = torch.autograd.grad(lp.sum() + en.sum(), h)
    assert (g[1] == 0).all() and g[0].abs().sum() > 0
    wide_h = torch.cat([torch.randn(3, 4, d), h.detach(), torch.randn(3, 2, d)], 1)    # 4 left, 2 right more
    wide_t = torch.cat([tokens.new_zeros(3, 4), tokens, tokens.new_zeros(3, 2)], 1)
    wide_m = torch.cat([mask.new_zeros(3, 4), mask, mask.new_zeros(3, 2)], 1)
    lp2, en2 = score_tokens(wide_h, head, wide_t, wide_m)
    torch.testing.assert_close(lp2[:, 4:-2], lp.detach(), **TOL)
    torch.testing.assert_close(en2[:, 4:-2], en.detach(), **TOL)
    lp0, en0 = score_tokens(h, head, tokens, torch.zeros_like(mask))
    assert (lp0 == 0).all() and (en0 == 0).all()
    (lp0.sum() + en0.sum()).backward()


def test_backward_keeps_no_vocabulary_sized_tensor():
    """With V much larger than the chunk, nothing saved for backward is as large as the (N, V) logits."""
    V, d, chunk = 4000, 8, 5
    head = linear_head(d, V)
    tokens, mask, _ = batch(V, B=4, T=20)
    h = torch.randn(4, 20, d, requires_grad=True)
    saved = []

    def pack(t):
        saved.append(t.numel())
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        lp, en = score_tokens(h, head, tokens, mask, chunk=chunk)
    n = int(mask.sum())
    assert max(saved) < n * V // 4, (max(saved), n * V)
    (lp.sum() + en.sum()).backward()
    assert h.grad.abs().sum() > 0


def test_bad_input():
    head = linear_head(4, 5)
    tokens, mask, _ = batch(5)
    with pytest.raises(ValueError, match="chunk"):
        score_tokens(torch.randn(3, 9, 4), head, tokens, mask, chunk=0)
    with pytest.raises(ValueError, match="share"):
        score_tokens(torch.randn(3, 8, 4), head, tokens, mask)


def test_score_mask_scores_only_the_wanted_tokens():
    """``score``: the wanted tokens equal the unmasked call (values and gradients), the rest are 0 and carry none."""
    torch.manual_seed(0)
    policy = ToyTransformer(ToyTransformerConfig(**PRESETS["tiny"], vocab_size=23, max_len=16))
    tokens, mask, allowed = batch(23)
    score = torch.zeros_like(mask)
    score[:, 5:] = True                                        # "the reply": the last positions of each row
    params = list(policy.parameters())

    def run(**kw):
        policy.zero_grad(set_to_none=True)
        lp, en = policy.logprobs(tokens, mask, allowed=allowed, temperature=0.7, **kw)
        ((lp + en) * score).sum().backward()
        return lp.detach(), en.detach(), [p.grad.clone() for p in params]
    part, whole = run(score=score), run()
    for a, b in zip(part[:2], whole[:2]):
        torch.testing.assert_close(a, b * score, **TOL)
        assert (a[~score] == 0).all()
    for ga, gb in zip(part[2], whole[2]):
        torch.testing.assert_close(ga, gb, **TOL)
    with pytest.raises(ValueError, match="score"):
        policy.logprobs(tokens, mask, score=score[:, :3])
