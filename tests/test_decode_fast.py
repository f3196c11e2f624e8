"""The fast decode loop (``ToyTransformer.generate`` -> ``_direct``, ``sample_step``, ``GrammarRun``) against a
plain reference loop kept here: module forward passes with a boolean mask, ``torch.multinomial``, a
``torch.where`` per buffer write, ``torch.isin`` on the stops, the grammar's state recorded at every step.
For the same generator the two must agree bit for bit: tokens, logp, entropy, masks, grammar states."""
import pytest
import torch

from toyrl.codecs.toy import ToyCodec
from toyrl.policies import ToyTransformerConfig, make_policy, masked_log_softmax
from toyrl.policies.base import allowed_at
from toyrl.policies.decode import Decode, stop_table
from toyrl.policies.toy import KVCache

V, N = 30, 12


def policy(n_layer=2, d=48, n_head=2, seed=0):
    pol = make_policy(ToyTransformerConfig(vocab_size=V, d_model=d, n_layer=n_layer, n_head=n_head, max_len=96),
                      V, "cpu", seed=seed).eval()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in pol.parameters():
            if p.dim() > 1:
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)       # peaky distributions, early stops
    return pol


def contexts(B=9, L=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    ctx = torch.randint(3, V, (B, L), generator=g)
    mask = torch.arange(L)[None] >= torch.randint(0, L, (B,), generator=g)[:, None]   # left padding
    return ctx, mask


@torch.no_grad()
def reference(pol, ctx, m, n, seed, *, stop=None, allowed=None, grammar=None, temperature=1.0, greedy=False):
    """The decode loop written plainly (as it was before the fast path)."""
    g = torch.Generator().manual_seed(seed)
    B, L = ctx.shape
    caches = [KVCache(L + n) for _ in pol.h]
    h = pol._prefill(ctx, m, caches)
    last = torch.where(m, torch.arange(L), -1).amax(1)
    logits = pol.lm_head(h[torch.arange(B), last])
    key_valid = torch.cat([m, torch.zeros(B, n, dtype=torch.bool)], 1)
    tokens, mask = torch.full((B, n), pol.pad_id), torch.zeros(B, n, dtype=torch.bool)
    logp, ent, done = torch.zeros(B, n), torch.zeros(B, n), torch.zeros(B, dtype=torch.bool)
    state, states, forced = torch.zeros(B, dtype=torch.long), torch.full((B, n), -1), torch.zeros(B, n, dtype=torch.bool)
    for t in range(n):
        a = grammar.table[state] if grammar is not None else allowed_at(allowed, t)
        lp_all, en = masked_log_softmax(logits, a, temperature)
        tok = lp_all.argmax(-1) if greedy else torch.multinomial(lp_all.exp(), 1, generator=g).squeeze(1)
        live = ~done
        tokens[:, t] = torch.where(live, tok, pol.pad_id)
        logp[:, t] = torch.where(live, lp_all.gather(1, tok[:, None]).squeeze(1), 0.0)
        ent[:, t] = torch.where(live, en, 0.0)
        mask[:, t] = live
        if grammar is not None:
            states[:, t] = torch.where(live, state, -1)
            forced[:, t] = live & (grammar.table[state].sum(-1) == 1)
            state = torch.where(live, grammar.next[state, tok], state)
        if stop is not None:
            done = done | (live & torch.isin(tok, stop))
        if t == n - 1 or bool(done.all()):
            break
        key_valid[:, L + t] = live
        h = pol._trunk(tokens[:, t:t + 1], (m.sum(1) + t)[:, None], key_valid[:, None, None, :L + t + 1], caches)
        logits = torch.where(live[:, None], pol.lm_head(h[:, 0]), logits)
    return tokens, logp, ent, mask, states, forced, logits


def bit_equal(a, b):
    return a.dtype == b.dtype and torch.equal(a, b) and (not a.is_floating_point() or torch.equal(
        a.view(torch.int32), b.view(torch.int32)))                       # also -0.0 vs 0.0


ALLOWED = {"none": None, "1d": torch.rand(V, generator=torch.Generator().manual_seed(5)) > 0.3,
           "2d": torch.rand(9, V, generator=torch.Generator().manual_seed(6)) > 0.3,
           "3d": torch.rand(9, N, V, generator=torch.Generator().manual_seed(7)) > 0.6}


@pytest.mark.parametrize("n_layer", [1, 2])
@pytest.mark.parametrize("allowed", list(ALLOWED))
@pytest.mark.parametrize("kw", [dict(), dict(temperature=0.7), dict(greedy=True)], ids=["t1", "t07", "greedy"])
def test_generate_is_the_reference_loop_bit_for_bit(n_layer, allowed, kw):
    pol = policy(n_layer)
    ctx, m = contexts()
    stop = torch.tensor([2, 5, 11])
    for seed in range(3):
        out = pol.generate(ctx, m, N, stop_token=stop, allowed=ALLOWED[allowed],
                           generator=torch.Generator().manual_seed(seed), **kw)
        ref = reference(pol, ctx, m, N, seed, stop=stop, allowed=ALLOWED[allowed], **kw)
        for name, a, b in zip(("tokens", "logp", "entropy", "mask"), (out.tokens, out.logp, out.entropy, out.mask), ref):
            assert bit_equal(a, b), (name, seed)
        assert bit_equal(out.past.logits, ref[-1])                         # after each row's last real token
        assert out.mask.sum(1).min() < N                                  # some rows stopped early: the dead-row path ran


@pytest.mark.parametrize("constrain", [True, False])
def test_grammar_constrained_generation_is_the_reference_loop(constrain):
    pol = policy(2)
    codec = ToyCodec(n_think=4, n_actions=4, n_obs=V - 13, think_max=5, think_min=1)
    grammar = codec.grammar(constrain)
    ctx, m = contexts()
    for seed in range(4):
        run = grammar.start(len(ctx))
        out = pol.generate(ctx, m, codec.max_new, stop_token=codec.stop_tokens(), constraint=run,
                           generator=torch.Generator().manual_seed(seed))
        ref = reference(pol, ctx, m, codec.max_new, seed, stop=codec.stop_tokens(), grammar=grammar)
        got = (out.tokens, out.logp, out.entropy, out.mask) + run.record(codec.max_new) + (out.past.logits,)
        for name, a, b in zip(("tokens", "logp", "entropy", "mask", "states", "forced", "past logits"), got, ref):
            assert bit_equal(a, b), (name, seed)
        assert not bool(run.cut.any())                                    # no intervention, no cut


def test_train_mode_and_a_subclass_take_the_module_path_with_the_same_numbers():
    from toyrl.policies.toy import ToyTransformer

    class Sub(ToyTransformer):                                            # overrides the trunk (as TinyLM does)
        def _trunk(self, *args, **kw):
            self.trunk_calls = getattr(self, "trunk_calls", 0) + 1
            return super()._trunk(*args, **kw)

    pol = policy(2)
    ctx, m = contexts()
    runs = []
    for mode in ("eval", "train", "sub"):
        if mode == "train":
            pol.train()                                                   # dropout 0: the lean path still runs
        if mode == "sub":
            pol.eval()
            pol.__class__ = Sub
        runs.append(pol.generate(ctx, m, N, stop_token=[2, 5], generator=torch.Generator().manual_seed(1)))
    assert pol.trunk_calls > 1                                            # the prefill and the decode steps
    for r in runs[1:]:
        for x, y in zip((runs[0].tokens, runs[0].logp, runs[0].entropy, runs[0].mask), (r.tokens, r.logp, r.entropy, r.mask)):
            assert bit_equal(x, y)


def test_stop_table_example_and_decode_buffers_are_masked_once():
    assert stop_table(torch.tensor([2, 7, -1]), 4).tolist() == [False, False, True, False]
    buf = Decode.empty(2, 3, 9, "cpu")
    buf.tokens[:] = 5
    buf.logp[:] = -1.0
    buf.mask[0, :2] = True
    out = buf.generation()
    assert out.tokens.tolist() == [[5, 5, 9], [9, 9, 9]] and out.logp.tolist() == [[-1.0, -1.0, 0.0], [0.0] * 3]
