"""Micro-benchmark of the toy policy: multi-turn generation and logprobs + backward.

Simulates one training step's policy work: B episodes with a `ctx`-token prompt (variable left
padding), `turns` turns of `new` generated tokens (stop token allowed) each followed by `obs`
observation tokens, then a teacher-forced recompute of the whole trajectory and a backward pass.

    python benchmarks/policy_toy.py                  # B=64, context 100, 4 new tokens x 5 turns
    python benchmarks/policy_toy.py --preset base --reps 20
"""
import argparse
import statistics
import time

import torch

from toyrl.policies import make_policy


def rollout(policy, B, ctx, new, turns, obs, V, stop, g, use_past=True):
    lens = torch.randint(ctx // 2, ctx + 1, (B,), generator=g)                       # (B,)
    tokens = torch.randint(4, V, (B, ctx), generator=g)                              # (B, L)
    mask = torch.arange(ctx)[None, :] >= (ctx - lens)[:, None]                       # left padding
    n_gen, past, new_tok, new_mask = 0, None, tokens, mask
    for _ in range(turns):
        out = policy.generate(new_tok, new_mask, new, stop_token=stop, generator=g, past=past)
        n_gen += int(out.mask.sum())
        o = torch.randint(4, V, (B, obs), generator=g)                               # (B, obs)
        o_mask = torch.ones(B, obs, dtype=torch.bool)
        if use_past:                                      # next turn reads only the observation
            past, new_tok, new_mask = out.past, o, o_mask
        tokens = torch.cat([tokens, out.tokens, o], 1)
        mask = torch.cat([mask, out.mask, o_mask], 1)
        if not use_past:                                  # re-read the whole trajectory every turn
            new_tok, new_mask = tokens, mask
    return tokens, mask, n_gen


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="small")
    ap.add_argument("--B", type=int, default=64)
    ap.add_argument("--ctx", type=int, default=100)
    ap.add_argument("--new", type=int, default=4)
    ap.add_argument("--turns", type=int, default=5)
    ap.add_argument("--obs", type=int, default=4, help="observation tokens appended after each turn")
    ap.add_argument("--vocab", type=int, default=64)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--no-past", action="store_true", help="re-prefill the whole context every turn")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: leave the default)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    policy = make_policy(args.preset, args.vocab, seed=0)
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    stop = 3
    rollout(policy, args.B, args.ctx, args.new, args.turns, args.obs, args.vocab, stop, g, not args.no_past)  # warm-up
    t_gen, t_lp, n_tok = [], [], 0
    for _ in range(args.reps):
        t0 = time.perf_counter()
        tokens, mask, n_gen = rollout(policy, args.B, args.ctx, args.new, args.turns, args.obs, args.vocab, stop, g,
                                      not args.no_past)
        t1 = time.perf_counter()
        logp, ent = policy.logprobs(tokens, mask)
        loss = -(logp.sum() + 0.01 * ent.sum()) / mask.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        t2 = time.perf_counter()
        t_gen.append(t1 - t0), t_lp.append(t2 - t1)
        n_tok += n_gen
    med = statistics.median
    print(f"preset={args.preset} params={policy.num_params()} threads={torch.get_num_threads()} "
          f"B={args.B} context={args.ctx} new={args.new} x turns={args.turns} obs={args.obs} "
          f"final T={tokens.size(1)} past={not args.no_past}   (median / min of {args.reps} reps)")
    print(f"generate: {n_tok / args.reps / med(t_gen):,.0f} tokens/s (at the median); rollout {1e3 * med(t_gen):.1f} / "
          f"{1e3 * min(t_gen):.1f} ms per {args.turns}-turn rollout")
    print(f"logprobs + backward + AdamW: {1e3 * med(t_lp):.1f} / {1e3 * min(t_lp):.1f} ms")
    tot = [a + b for a, b in zip(t_gen, t_lp)]
    print(f"total per step: {1e3 * med(tot):.1f} / {1e3 * min(tot):.1f} ms")


if __name__ == "__main__":
    main()
