"""Tests of the rollout engines (toyrl/rollout/inference_engine.py) and the logit-warp hook of ``sample_step``.

Layers: hand-computed examples of every transform; properties of the truncating warps (never empty,
the grammar's -inf respected); the hook (warp=None bit-identical to the plain draw, the buffer holds
the warped logp / entropy); every mode generating on a tiny toy transformer; the size of the gap.
"""
import math

import pytest
import torch

from toyrl.policies import ToyTransformerConfig, make_policy, masked_log_softmax
from toyrl.policies.decode import Decode, sample_step
from toyrl.rollout import ENGINES, make_engine, sync_engine
from toyrl.rollout.inference_engine import (check_engine, make_warp, noise_warp, quantize_weights, round_logp, round_weights,
                                   topk_warp, topp_warp, weight_transform)

V, L, N, PAD = 12, 5, 3, 0
NEG = float("-inf")
LP4 = torch.log_softmax(torch.tensor([2.0, 1.0, 0.0, 0.0]), -1)          # probs [0.610, 0.225, 0.083, 0.083]


def tiny(seed=0, std=None):
    """A 1-layer toy transformer; ``std`` re-draws the matrices so distributions are far from uniform."""
    pol = make_policy(ToyTransformerConfig(vocab_size=V, d_model=16, n_layer=1, n_head=2, max_len=16), V, seed=seed)
    if std is not None:
        g = torch.Generator().manual_seed(seed + 1)
        with torch.no_grad():
            for p in pol.parameters():
                if p.dim() > 1:
                    p.copy_(torch.randn(p.shape, generator=g) * std)
    return pol


def contexts(B=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, V, (B, L), generator=g), torch.ones(B, L, dtype=torch.bool)


ALLOWED = torch.ones(V, dtype=torch.bool)
ALLOWED[[0, 3, 7]] = False                                                  # a grammar that forbids 3 ids


# ---- transforms: worked examples ------------------------------------------------------------------
def test_round_weights_example():
    w = torch.tensor([0.1234567])
    assert round_weights(w, torch.bfloat16).item() == 0.12353515625
    assert round_weights(w, torch.float16).item() == 0.12347412109375
    assert round_weights(w, torch.bfloat16).dtype == torch.float32


def test_quantize_weights_example():
    w = torch.tensor([[0.5, -1.0, 0.26], [0.1, 0.02, -0.04]])
    q8 = [[64 / 127, -1.0, 33 / 127], [0.1, 0.1 * 25 / 127, -0.1 * 51 / 127]]
    q4 = [[3 / 7, -1.0, 2 / 7], [0.1, 0.1 / 7, -0.3 / 7]]
    assert torch.allclose(quantize_weights(w, 8), torch.tensor(q8), atol=1e-7)
    assert torch.allclose(quantize_weights(w, 4), torch.tensor(q4), atol=1e-7)
    b = torch.tensor([0.123, -4.5])
    assert quantize_weights(b, 4) is b                                       # 1-D: left unchanged
    assert quantize_weights(torch.zeros(2, 3), 4).eq(0).all()                # a zero row stays zero (no NaN)
    for bad in (1, 17, 8.0, True):
        with pytest.raises(ValueError, match="bits"):
            quantize_weights(w, bad)


def test_round_logp_example_low_prob_tokens_move_most():
    logp = torch.log_softmax(torch.tensor([0.0, -3.1, -11.3]), -1)        # [-0.0441, -3.1441, -11.3441]
    err = (round_logp(logp, torch.bfloat16) - logp).abs()
    assert torch.allclose(err, torch.tensor([0.00015, 0.0034, 0.0310]), atol=5e-5)
    assert err[0] < err[1] < err[2]
    assert (round_logp(logp, torch.float16) - logp).abs().max() < 5e-4      # fp16: ~10x finer
    out = round_logp(torch.tensor([-0.5, NEG]), torch.bfloat16)
    assert out[1] == NEG and abs(out[0].item()) < 1e-6


def test_noise_warp_example():
    logp = torch.tensor([-math.log(2), -math.log(2), NEG])
    eps = torch.randn(3, generator=torch.Generator().manual_seed(5))
    out = noise_warp(logp, 1.0, torch.Generator().manual_seed(5))
    assert torch.allclose(out, torch.log_softmax(logp + eps, -1)) and out[2] == NEG
    # the docstring's numbers: eps = [1, -1, 0.3] -> [-0.127, -2.127, -inf]
    by_hand = torch.log_softmax(logp + torch.tensor([1.0, -1.0, 0.3]), -1)
    assert torch.allclose(by_hand[:2], torch.tensor([-0.1269, -2.1269]), atol=1e-4)
    assert torch.equal(noise_warp(logp, 0.0, None), torch.log_softmax(logp, -1))


def test_topk_example():
    assert torch.allclose(topk_warp(LP4, 2), torch.tensor([-0.3133, -1.3133, NEG, NEG]), atol=1e-4)
    assert torch.allclose(topk_warp(LP4, 3), LP4)                            # tie at the 3rd value: all kept
    assert torch.allclose(topk_warp(LP4, 1), torch.tensor([0.0, NEG, NEG, NEG]))
    assert torch.allclose(topk_warp(LP4, 99), LP4)                           # k > V: nothing dropped


def test_topp_example():
    assert torch.allclose(topp_warp(LP4, 0.8), torch.tensor([-0.3133, -1.3133, NEG, NEG]), atol=1e-4)
    assert torch.allclose(topp_warp(LP4, 0.5), torch.tensor([0.0, NEG, NEG, NEG]))
    assert torch.allclose(topp_warp(LP4, 0.9), LP4)                          # 0.835 < 0.9: the tie comes too
    assert topp_warp(LP4, 1.0) is LP4


# ---- truncating warps: properties -----------------------------------------------------------------
@pytest.mark.parametrize("warp", [lambda x: topk_warp(x, 1), lambda x: topk_warp(x, 3), lambda x: topp_warp(x, 1e-6),
                                  lambda x: topp_warp(x, 0.7), lambda x: round_logp(x, torch.bfloat16),
                                  lambda x: noise_warp(x, 2.0, torch.Generator().manual_seed(0))])
def test_warps_keep_the_grammar_and_a_token(warp):
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(64, V, generator=g) * 4                             # (B, V)
    allowed = torch.rand(64, V, generator=g) < 0.3                           # (B, V) some rows allow 1 or 0
    allowed[0] = False
    allowed[0, 5] = True                                                     # a row with exactly one token
    logp, _ = masked_log_softmax(logits, allowed)                            # (B, V)
    out = warp(logp)
    assert torch.isinf(out[torch.isinf(logp)]).all()                         # no forbidden token comes back
    assert (out > NEG).any(-1).all()                                         # never an empty row
    assert torch.allclose(out.exp().sum(-1), torch.ones(64), atol=1e-5)
    assert out[0, 5] == 0.0


# ---- the registry and its errors --------------------------------------------------------------------
def test_registry_defaults():
    assert list(ENGINES) == ["exact", "bf16", "fp16", "int8", "int4", "noise", "topk", "topp", "lag"]
    assert {m: check_engine(m) for m in ENGINES} == {"exact": None, "bf16": None, "fp16": None, "int8": None,
                                                      "int4": None, "noise": 0.5, "topk": 2, "topp": 0.9, "lag": 2}
    assert all(m.source and m.models for m in ENGINES.values())
    assert make_warp("exact") is None and make_warp("int4") is None and make_warp("lag") is None
    assert weight_transform("topk") is None and weight_transform("noise") is None


@pytest.mark.parametrize("mode, strength, match", [
    ("fp8", None, "mode='fp8'"), ("topk", 0, "strength=0"), ("topk", 2.5, "int >= 1"), ("topk", True, "strength"),
    ("topp", 0.0, "0 < p <= 1"), ("topp", 1.5, "strength"), ("noise", -0.1, "float >= 0"),
    ("noise", float("nan"), "strength"), ("lag", 0, "int >= 1"), ("bf16", 1.0, "takes no strength"),
    ("exact", 2, "takes no strength")])
def test_bad_mode_or_strength(mode, strength, match):
    pol = tiny()
    with pytest.raises(ValueError, match=match):
        make_engine(pol, mode, strength)


def test_pure_warps_check_their_argument():
    for call, match in [(lambda: topk_warp(LP4, 0), "strength=0"), (lambda: topp_warp(LP4, 1.2), "0 < p <= 1"),
                        (lambda: noise_warp(LP4, -1.0), "float >= 0")]:
        with pytest.raises(ValueError, match=match):
            call()


def test_engine_needs_a_warpable_torch_policy():
    with pytest.raises(ValueError, match="logit_warp"):
        make_engine(torch.nn.Linear(2, 2), "topk")
    lin = torch.nn.Linear(2, 2)
    assert make_engine(lin, "exact") is lin


# ---- the hook -----------------------------------------------------------------------------------
def test_warp_none_is_the_plain_draw():
    """sample_step(warp=None) equals the draw it made before the hook existed, bit for bit."""
    logits = torch.randn(8, V, generator=torch.Generator().manual_seed(1)) * 3
    buf = Decode.empty(8, 1, PAD, "cpu")
    sample_step(buf, 0, logits, 0.7, PAD, allowed=ALLOWED, generator=torch.Generator().manual_seed(9))
    logp_all, ent = masked_log_softmax(logits, ALLOWED, 0.7)
    tok = torch.multinomial(logp_all.exp(), 1, generator=torch.Generator().manual_seed(9)).squeeze(1)
    assert torch.equal(buf.tokens[:, 0], tok)
    assert torch.equal(buf.logp[:, 0], logp_all.gather(1, tok[:, None]).squeeze(1))
    assert torch.equal(buf.entropy[:, 0], ent)


def test_generate_twice_and_identity_warp_are_bit_identical():
    pol = tiny(std=0.5)
    ctx, m = contexts()
    a, b = (pol.generate(ctx, m, N, allowed=ALLOWED, generator=torch.Generator().manual_seed(4)) for _ in range(2))
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.logp, b.logp) and torch.equal(a.entropy, b.entropy)
    pol.logit_warp = lambda logp, generator: logp                            # a no-op warp
    c = pol.generate(ctx, m, N, allowed=ALLOWED, generator=torch.Generator().manual_seed(4))
    assert torch.equal(a.tokens, c.tokens) and torch.equal(a.logp, c.logp)
    assert torch.allclose(a.entropy, c.entropy, atol=1e-6)                   # recomputed from the warped logp


def test_exact_engine_is_the_policy_and_others_are_frozen_copies():
    pol = tiny(std=0.5)
    before = {k: v.clone() for k, v in pol.state_dict().items()}
    assert make_engine(pol, "exact") is pol
    for mode in ENGINES:
        if mode == "exact":
            continue
        eng = make_engine(pol, mode)
        assert eng is not pol and not eng.training and not any(p.requires_grad for p in eng.parameters())
        assert eng.lm_head.weight is eng.wte.weight                          # weight tying survives the copy
    assert all(torch.equal(before[k], v) for k, v in pol.state_dict().items())   # the trainer is untouched
    assert pol.logit_warp is None and all(p.requires_grad for p in pol.parameters())


class Recorder:
    """Wraps a warp and keeps every warped (B, V) it returned."""

    def __init__(self, warp):
        self.warp, self.seen = warp, []

    def __call__(self, logp, generator):
        out = self.warp(logp, generator) if self.warp is not None else logp
        self.seen.append(out)
        return out


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", list(ENGINES))
def test_every_mode_samples_valid_tokens_with_its_warped_logp(mode, device):
    pol = tiny(std=0.5).to(device)
    eng = make_engine(pol, mode, seed=1)
    if mode != "exact":
        eng.logit_warp = Recorder(eng.logit_warp)
    ctx, m = (x.to(device) for x in contexts(B=16))
    allowed = ALLOWED.to(device)
    out = eng.generate(ctx, m, N, allowed=allowed, generator=torch.Generator(device).manual_seed(2))
    assert out.tokens.shape == (16, N) and allowed[out.tokens].all()
    if mode == "exact":
        return
    warped = torch.stack(eng.logit_warp.seen, 1)                             # (B, N, V)
    assert torch.equal(out.logp, warped.gather(-1, out.tokens[..., None]).squeeze(-1))
    assert (out.logp > NEG).all()                                            # drawn from the warped support
    ent = -(warped.exp() * warped.masked_fill(torch.isinf(warped), 0)).sum(-1)
    assert torch.allclose(out.entropy, ent, atol=1e-6)


def test_noise_has_its_own_stream():
    """The noise warp draws from its own generator: at sigma 0 the tokens equal the exact policy's."""
    pol = tiny(std=0.5)
    ctx, m = contexts(B=16)
    a = pol.generate(ctx, m, N, allowed=ALLOWED, generator=torch.Generator().manual_seed(2))
    b = make_engine(pol, "noise", 0.0).generate(ctx, m, N, allowed=ALLOWED, generator=torch.Generator().manual_seed(2))
    assert torch.equal(a.tokens, b.tokens) and torch.allclose(a.logp, b.logp, atol=1e-6)


def gap(pol, eng, seed=0, B=64):
    """Mean |logp_engine - logp_trainer| of the tokens the engine drew (trainer: teacher-forced fp32)."""
    ctx, m = contexts(B, seed)
    out = eng.generate(ctx, m, N, allowed=ALLOWED, generator=torch.Generator().manual_seed(seed))
    full = torch.cat([ctx, out.tokens], 1)                                   # (B, L + N)
    logp, _ = pol.logprobs(full, torch.ones_like(full, dtype=torch.bool), allowed=ALLOWED)
    return (out.logp - logp[:, L:]).abs().mean().item()


def test_gap_is_zero_for_exact_and_lag_and_positive_otherwise():
    pol = tiny(std=0.5)
    gaps = {mode: gap(pol, make_engine(pol, mode)) for mode in ENGINES}
    assert gaps["exact"] < 1e-5 and gaps["lag"] < 1e-5                      # lag's staleness is the trainer's
    assert all(gaps[m] > 1e-4 for m in ("bf16", "fp16", "int8", "int4", "noise", "topk", "topp"))
    assert gaps["int8"] < gaps["int4"] and gaps["fp16"] < gaps["bf16"]


def test_weight_error_shrinks_with_bits():
    w = tiny(std=0.5).h[0].mlp[0].weight.detach()
    err = {m: (weight_transform(m)(w) - w).abs().mean().item() for m in ("fp16", "bf16", "int8", "int4")}
    assert err["fp16"] < err["bf16"] < err["int4"] and err["int8"] < err["int4"]


def test_sync_engine_loads_new_or_stale_weights():
    pol = tiny(std=0.5)
    stale = {k: v.clone() for k, v in pol.state_dict().items()}
    eng = make_engine(pol, "int8")
    with torch.no_grad():
        pol.h[0].mlp[0].weight.add_(0.1)                                     # an "update" of the trainer
    w = pol.h[0].mlp[0].weight
    assert torch.equal(sync_engine(eng, pol.state_dict(), "int8").h[0].mlp[0].weight, quantize_weights(w, 8))
    lag = make_engine(pol, "lag")
    assert torch.equal(sync_engine(lag, stale, "lag").h[0].mlp[0].weight, stale["h.0.mlp.0.weight"])
    with pytest.raises(ValueError, match="mode"):
        sync_engine(eng, pol.state_dict(), "int3")


def test_hf_policy_engine_samples_with_its_warp():
    """The same hook in HFPolicy.generate: a tiny random GPT-2 over a 12-id word vocabulary."""
    pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    from tokenizers import Tokenizer, models
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast
    from toyrl.policies import HFPolicy
    tk = Tokenizer(models.WordLevel({"<eos>": 0, **{f"w{i}": i for i in range(1, V)}}, unk_token="<eos>"))
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<eos>", pad_token="<eos>")
    torch.manual_seed(0)
    pol = HFPolicy(GPT2LMHeadModel(GPT2Config(n_positions=32, n_embd=16, n_layer=1, n_head=2, vocab_size=V,
                                              bos_token_id=0, eos_token_id=0)), tok).eval()
    ctx, m = contexts(B=8)
    assert gap(pol, make_engine(pol, "exact"), B=8) < 1e-5
    for mode in ("bf16", "int4", "topk"):
        eng = make_engine(pol, mode)
        eng.logit_warp = Recorder(eng.logit_warp)
        out = eng.generate(ctx, m, N, allowed=ALLOWED, generator=torch.Generator().manual_seed(2))
        warped = torch.stack(eng.logit_warp.seen, 1)                         # (B, N, V)
        assert ALLOWED[out.tokens].all()
        assert torch.equal(out.logp, warped.gather(-1, out.tokens[..., None]).squeeze(-1))
        assert gap(pol, eng, B=8) > 1e-5
