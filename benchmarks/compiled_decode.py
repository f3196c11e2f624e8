"""Would a compiled decode step make the toy's generation cheaper? Eager against ``torch.compile`` on one step.

One decode step of the toy policy at the average shapes of ``toyrl bench train`` at L = 32 (B 27 live rows, S 181
cache slots, the tiny preset): ``ToyTransformer._direct`` for one token per row plus the LM head, then the draw
``sample_step`` makes on CPU (mask, log-softmax, exp, argmin p / log1p(-u)) from uniforms drawn beforehand. The
same function runs eagerly and compiled by inductor, with static and with dynamic shapes; medians of ``--reps``
timings of ``--calls`` steps each, threads pinned. Needs a C++ compiler (inductor's CPU backend).

    python benchmarks/compiled_decode.py                  # B 27, S 181, 1 thread
    python benchmarks/compiled_decode.py --rows 64 --slots 400
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from toyrl.policies import make_policy


class SlotCache:
    """A KV cache that writes every step at one fixed slot n of preallocated (B, nh, S, hs) keys and values, so
    one step can be timed again and again (``toyrl.policies.toy_cache.KVCache`` moves on after each append)."""

    def __init__(self, k, v, n: int):
        self.k, self.v, self.n = k, v, n

    def append(self, k, v):
        self.k[:, :, self.n:self.n + 1] = k
        self.v[:, :, self.n:self.n + 1] = v
        return self.k[:, :, :self.n + 1], self.v[:, :, :self.n + 1]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=27, help="rows decoding (B)")
    ap.add_argument("--slots", type=int, default=181, help="cache slots attended to (S)")
    ap.add_argument("--vocab", type=int, default=61, help="vocabulary size (V; 61 at L = 32)")
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--calls", type=int, default=500, help="steps per timing")
    ap.add_argument("--reps", type=int, default=5, help="timings (the median is reported)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    g = torch.Generator().manual_seed(0)
    pol = make_policy(a.preset, a.vocab, "cpu", seed=0).eval()
    B, S, V, C = a.rows, a.slots, a.vocab, pol.config.d_model
    nh = pol.config.n_head
    weights, W = pol._weights(), pol.lm_head.weight.detach()
    caches = [SlotCache(torch.randn(B, nh, S, C // nh, generator=g), torch.randn(B, nh, S, C // nh, generator=g), S - 1)
              for _ in pol.h]
    tok, pe = torch.randint(0, V, (B,), generator=g), torch.randn(B, C, generator=g)                  # (B,), (B, C)
    bias = torch.zeros(B, 1, 1, S).masked_fill_(torch.rand(B, 1, 1, S, generator=g) < 0.3, float("-inf"))
    bias[..., -1] = 0.0                                                     # (B, 1, 1, S) every row sees itself
    blocked = torch.rand(B, V, generator=g) < 0.3                           # (B, V) the grammar's step mask
    u = torch.rand(B, V, generator=g, dtype=torch.float64)                  # (B, V) the step's uniforms

    def step(tok, pe, bias, blocked, u):
        logits = F.linear(pol._direct(tok, pe, bias, caches, weights), W)                              # (B, V)
        logp = torch.log_softmax(logits.masked_fill(blocked, float("-inf")), dim=-1)
        q = torch.log1p(-u).to(logp.dtype)                                  # -Exp(1) draws
        return torch.div(logp.exp(), q).argmin(-1), logp                    # (B,) the token

    def timed(fn):
        with torch.no_grad():
            for _ in range(50):
                fn(tok, pe, bias, blocked, u)
            out = []
            for _ in range(a.reps):
                t0 = time.perf_counter()
                for _ in range(a.calls):
                    fn(tok, pe, bias, blocked, u)
                out.append((time.perf_counter() - t0) / a.calls * 1e6)
        return statistics.median(out)

    print(f"one decode step + draw, preset {a.preset}, B {B}, S {S}, V {V}, {torch.get_num_threads()} thread(s); "
          f"median of {a.reps} x {a.calls} steps")
    print(f"  eager               {timed(step):7.1f} us")
    for dynamic in (False, True):
        compiled = torch.compile(step, dynamic=dynamic)
        t0 = time.perf_counter()
        with torch.no_grad():
            tok_c, logp_c = compiled(tok, pe, bias, blocked, u)
            tok_e, logp_e = step(tok, pe, bias, blocked, u)
        first = time.perf_counter() - t0
        finite = torch.isfinite(logp_e)
        gap = float((logp_c - logp_e)[finite].abs().max())
        kind = "dynamic" if dynamic else "static "
        print(f"  compiled, {kind}   {timed(compiled):7.1f} us   (first call {first:.1f} s; "
              f"same tokens: {bool((tok_c == tok_e).all())}, largest logp gap {gap:.1e})")


if __name__ == "__main__":
    main()
