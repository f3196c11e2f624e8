"""Benchmark every registered estimator against a plain Python loop reference, measured in the same run.

    toyrl bench credit            # B = 8192 rollouts x H = 16 turns; token case ~1M tokens
    toyrl bench credit --quick    # B = 1024 x H = 8; token case ~130k tokens
    toyrl bench credit --trainer  # the trainer's size: B = 64 x H = 16; token case 64 x 16 turns x 4 tokens
    toyrl bench credit --reps 20 --only gigpo gigpo:dense gae   # on a busy machine: more reps

One thread by default (``torch.set_num_threads``; the loop references are single-threaded,
``--threads 2`` to compare), torch's default allocator, every ratio from timings of the same run
(best of ``--rounds`` rounds, each the best of ``--reps`` calls). GiGPO runs twice: ``gigpo`` on
63-bit state hashes (what toyrl's environments emit) and ``gigpo:dense`` on the same states as
small ids (FrozenLake-style cell indices); both batches have ``--states`` distinct states per group.
A full run (no ``--only``) then prints three more blocks: the token scans against a memory-bound
floor (one ``torch.cumsum`` over a float32 tensor of the token batch's size), GiGPO against the seed
article's loop, and, when verl is importable, ``toyrl.port.verl`` GRPO / RLOO against verl's own
vectorized versions on 8192 responses x 256 tokens in groups of 8 (conversions included), once with
uid strings (verl's default ``index``) and once with a numpy array of integer group ids.

Loop references (the styles the vectorized code replaces):
  outcome  per-sample dict loop computing group mean / std (verl's GRPO style)
  cells    the seed article's GiGPO snippet style: per group, dict buckets of (state -> turns)
  turns    per-sample Python recursion over turns (GAE / return-to-go)
  tokens   per-sample Python recursion over tokens (verl's token GAE done sample by sample)
"""
from __future__ import annotations

import argparse
import gc
import math
import statistics
import time
from collections import defaultdict

import numpy as np
import torch

from ...batch import TurnBatch
from ...credit import ESTIMATORS
from ...credit.reference import gae_row
from ...envs.core import mix64

REF = {  # estimator -> loop reference family
    "grpo": "outcome", "dr_grpo": "outcome", "rloo": "outcome", "opo": "outcome", "gpg": "outcome",
    "grpo_passk": "outcome", "remax": "outcome", "tree_grpo": "outcome",
    "gigpo": "cells", "mt_grpo": "cells", "rtpo": "cells", "a2tgpo": "cells",
    "turn_gae": "turns", "spa": "turns", "empg": "turns", "archer": "turns", "sweet": "turns",
    "gae": "tokens", "bilevel_gae": "tokens", "reinforce_pp": "tokens", "reinforce_pp_baseline": "tokens",
}


def make_batch(B: int, H: int, T_turn: int, G: int = 8, seed: int = 0, device="cpu", states: int = 16,
               dense_keys: bool = False) -> TurnBatch:
    """B rollouts of H turns (variable lengths), T_turn tokens per turn (3/4 policy, 1/4 observation),
    groups of G, each turn in one of ``states`` states of its group (so anchors repeat), keyed by the
    environments' 63-bit state hash of (group, state) or, with ``dense_keys``, by the state id itself."""
    g = torch.Generator().manual_seed(seed)
    n = torch.randint(H // 2, H + 1, (B,), generator=g)
    turn_mask = torch.arange(H)[None] < n[:, None]                                # (B, H)
    T = H * T_turn
    turn_id = (torch.arange(T) // T_turn).expand(B, T).clone()                    # (B, T)
    turn_id[turn_id >= n[:, None]] = -1
    policy_mask = (torch.arange(T) % T_turn < max(1, 3 * T_turn // 4))[None] & (turn_id >= 0)
    reward = torch.zeros(B, H)
    reward[torch.arange(B), n - 1] = torch.randint(0, 2, (B,), generator=g).float()
    group = torch.arange(B) // G
    state = torch.randint(0, states, (B, H), generator=g)                        # (B, H) state id in the group
    keys = state if dense_keys else torch.from_numpy(mix64(group[:, None].numpy(), state.numpy()))
    kw = dict(entropy=torch.rand(B, T, generator=g), values=torch.rand(B, H, generator=g),
              node=torch.randint(0, 2, (B, H), generator=g).cumsum(1) + 100 * (torch.arange(B) // 4)[:, None],
              info_gain=torch.randn(B, H, generator=g), ref_logp=-torch.rand(B, T, generator=g))
    b = TurnBatch(tokens=torch.zeros(B, T, dtype=torch.long), policy_mask=policy_mask, turn_id=turn_id,
                  old_logp=-torch.rand(B, T, generator=g), turn_mask=turn_mask, turn_reward=reward, group=group,
                  state_key=keys, **kw)
    return b.to(device)


def extra_kwargs(name: str, b: TurnBatch) -> dict:
    B = b.B
    return {"remax": {"baseline_reward": torch.zeros(B, device=b.device)},
            "sweet": {"critic_adv": b.values}, "spa": {"progress": b.values},
            "archer": {"q": b.values, "v": b.values * 0.5}}.get(name, {})


# ---- loop references ---------------------------------------------------------------------------
def loop_outcome(b: TurnBatch) -> list:
    R = b.outcome().tolist()
    ids = b.group.tolist()
    by = defaultdict(list)
    for i, gid in enumerate(ids):
        by[gid].append(R[i])
    stats = {k: (statistics.fmean(v), statistics.stdev(v) if len(v) > 1 else 1.0) for k, v in by.items()}
    return [(R[i] - stats[ids[i]][0]) / (stats[ids[i]][1] + 1e-6) for i in range(len(R))]


def loop_cells(b: TurnBatch, gamma: float = 0.95, eps: float = 1e-6) -> list:
    """The seed snippet's style: per group, numpy episode stats, dict buckets of states, per-turn loop."""
    mask, rew, keys, grp = b.turn_mask.tolist(), b.turn_reward.tolist(), b.state_key.tolist(), b.group.tolist()
    members = defaultdict(list)
    for i, gid in enumerate(grp):
        members[gid].append(i)
    out = {}
    for rows in members.values():
        trajs = [[(keys[i][k], rew[i][k]) for k in range(len(mask[i])) if mask[i][k]] for i in rows]
        R = np.array([sum(r for _, r in tr) for tr in trajs])
        A_ep = (R - R.mean()) / (R.std() + eps)
        rets = []
        for tr in trajs:
            acc, back = 0.0, []
            for _, r in reversed(tr):
                acc = r + gamma * acc
                back.append(acc)
            rets.append(back[::-1])
        buckets = defaultdict(list)
        for i, tr in enumerate(trajs):
            for t, (key, _) in enumerate(tr):
                buckets[key].append((i, t))
        for cell in buckets.values():
            vals = np.array([rets[i][t] for i, t in cell])
            mu, sd = vals.mean(), vals.std()
            for (i, t), v in zip(cell, vals):
                out[(rows[i], t)] = A_ep[i] + (0.0 if len(cell) == 1 else (v - mu) / (sd + eps))
    return out


def _scan(rows_r, rows_v, rows_m, gamma, lam):
    """The GAE recursion row by row in plain Python (the reference loop ``gae_row``)."""
    return [gae_row(r, v, m, gamma, lam) for r, v, m in zip(rows_r, rows_v, rows_m)]


def loop_turns(b: TurnBatch) -> list:
    return _scan(b.turn_reward.tolist(), b.values.tolist(), b.turn_mask.tolist(), 0.99, 0.9)


def loop_tokens(b: TurnBatch) -> list:
    r = torch.zeros(b.B, b.T)
    r[:, -1] = b.outcome()
    return _scan(r.tolist(), b.entropy.tolist(), b.policy_mask.tolist(), 1.0, 1.0)


LOOPS = {"outcome": loop_outcome, "cells": loop_cells, "turns": loop_turns, "tokens": loop_tokens}


def timeit(fn, reps: int) -> float:
    """Best (minimum) seconds of ``reps`` calls after one warm-up, synchronizing CUDA (robust to load).

    Python's garbage collector is off while timing (as in the ``timeit`` module): the loop references
    allocate ~10^6 small objects, and a full collection landing in one of them made it 20-40% slower.
    """
    fn()
    times = []
    gc.collect()
    gc.disable()
    try:
        for _ in range(reps):
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
    finally:
        gc.enable()
    return min(times)


def race_inputs(B: int = 8192, L: int = 256, G: int = 8, seed: int = 0):
    """verl-shaped inputs: responses of L/4..L tokens, a 0/1 reward on the last one, uid strings per group of G."""
    g = torch.Generator().manual_seed(seed)
    length = torch.randint(L // 4, L + 1, (B,), generator=g)
    mask = (torch.arange(L)[None] < length[:, None]).float()                       # (B, L) response mask
    reward = torch.zeros(B, L)
    reward[torch.arange(B), length - 1] = torch.randint(0, 2, (B,), generator=g).float()
    return reward, mask, np.array([f"uid-{i // G}" for i in range(B)], dtype=object)


def best_of(fns: dict, reps: int, rounds: int) -> dict:
    """Best seconds of each callable, the callables interleaved round by round (same load for all)."""
    best = dict.fromkeys(fns, math.inf)
    for _ in range(rounds):
        for k, fn in fns.items():
            best[k] = min(best[k], timeit(fn, reps))
    return best


def extras(rows: list, tok_b: TurnBatch, a) -> None:
    """The floor, seed-loop and verl blocks of a full run."""
    x = torch.rand(tok_b.B, tok_b.T, device=tok_b.device)                          # (B, T) float32
    fns = {"floor": lambda: torch.cumsum(x, 1)}
    fns.update({n: (lambda n=n: ESTIMATORS[n](tok_b)) for n in ("gae", "bilevel_gae", "reinforce_pp")})
    t = best_of(fns, a.reps, a.rounds)
    print(f"memory-bound floor: one torch.cumsum over the token batch's ({tok_b.B}, {tok_b.T}) float32 = "
          f"{1e3 * t['floor']:.2f} ms")
    for n in ("gae", "bilevel_gae", "reinforce_pp"):
        print(f"  {n:<14}{1e3 * t[n]:8.2f} ms = {t[n] / t['floor']:4.1f}x the floor")
    for r in rows:
        if r["name"] in ("gigpo", "gigpo:dense"):
            print(f"{r['name']} vs the seed article's loop: {r['ms']:.2f} ms vs {r['loop_ms']:.0f} ms = "
                  f"{r['speedup']:.0f}x")
    from ...port import verl_credit as port
    from ...port.verl_loader import load_core_algos
    core = load_core_algos()
    if core is None:
        print("verl race: verl is not importable, skipped")
        return
    r, m, uids = race_inputs(*((1024, 64) if a.quick else (8192, 256)))
    pairs = {"grpo": (port.compute_grpo_outcome_advantage, core.compute_grpo_vectorized_outcome_advantage),
             "rloo": (port.compute_rloo_outcome_advantage, core.compute_rloo_vectorized_outcome_advantage)}
    print(f"verl race: {r.shape[0]} responses x {r.shape[1]} tokens, groups of 8, conversions included, "
          f"torch threads {torch.get_num_threads()}")
    for ids, index in (("uid str", uids), ("int ids", np.arange(r.shape[0]) // 8)):   # verl: a numpy array
        for name, (ours, theirs) in pairs.items():
            torch.testing.assert_close(ours(r, m, index)[0], theirs(r, m, index)[0], atol=1e-5, rtol=1e-5)
            t = best_of({"toyrl": lambda: ours(r, m, index), "verl": lambda: theirs(r, m, index)}, a.reps, a.rounds)
            print(f"  {name:<5}{ids:<8} toyrl.port.verl {1e3 * t['toyrl']:.2f} ms   verl 0.9.1 vectorized "
                  f"{1e3 * t['verl']:.2f} ms   toyrl / verl = {t['toyrl'] / t['verl']:.2f}")


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(prog="toyrl bench credit", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smaller sizes (B=1024, H=8)")
    p.add_argument("--trainer", action="store_true", help="the trainer's batch size (B=64, H=16, 4 tokens a turn)")
    p.add_argument("--device", default="cpu", help="torch device for the vectorized estimators")
    p.add_argument("--reps", type=int, default=10, help="timed repetitions of each vectorized call per round")
    p.add_argument("--rounds", type=int, default=5,
                   help="passes over all estimators; the best time of each over all rounds is kept")
    p.add_argument("--only", nargs="*", default=None,
                   help="estimator names to run (default: all registered, plus gigpo:dense)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1, as the loop references)")
    p.add_argument("--states", type=int, default=16, help="distinct states per group of 8 rollouts (default 16)")
    p.add_argument("--race", action=argparse.BooleanOptionalAction, default=None,
                   help="print the floor / seed / verl blocks (default: only in a full run, no --only)")
    a = p.parse_args(argv)
    unknown = [n for n in a.only or [] if n not in ESTIMATORS and n != "gigpo:dense"]
    if unknown:
        p.error(f"unknown estimator {unknown[0]!r}; valid: {', '.join(sorted(ESTIMATORS))}, gigpo:dense")
    torch.set_num_threads(a.threads)
    B, H = (64, 16) if a.trainer else (1024, 8) if a.quick else (8192, 16)
    Bt, Tt = (64, 4) if a.trainer else (256, 16) if a.quick else (1024, 64)        # token case: Bt x 16*Tt tokens
    turn_b = make_batch(B, H, T_turn=2, states=a.states, device=a.device)
    dense_b = make_batch(B, H, T_turn=2, states=a.states, dense_keys=True, device=a.device)
    tok_b = make_batch(Bt, 16, T_turn=Tt, device=a.device)
    print(f"turn case: B={B} x H={H} ({B // 8} groups of 8, {a.states} states each); token case: B={Bt} x "
          f"T={tok_b.T} = {Bt * tok_b.T:,} tokens; device {a.device}, torch threads {torch.get_num_threads()}, "
          f"malloc default (torch's allocator)")
    names = a.only or sorted(ESTIMATORS, key=lambda n: (ESTIMATORS[n].level == "token", n)) + ["gigpo:dense"]
    best, loop_best = {}, {}                     # name -> best vectorized seconds; loop key -> best loop seconds
    for _ in range(a.rounds):                    # rounds spread each measurement over time: robust to bursts
        timed = set()                            # loop references timed in this round
        for name in names:                       # default: turn level first, token level last
            base, _, variant = name.partition(":")
            est = ESTIMATORS[base]
            b = tok_b if est.level == "token" else dense_b if variant == "dense" else turn_b
            kw = extra_kwargs(base, b)
            best[name] = min(best.get(name, math.inf), timeit(lambda: est(b, **kw), a.reps))
            key = (REF.get(base), est.level, variant)
            if key[0] is not None and key not in timed:
                timed.add(key)
                loop_best[key] = min(loop_best.get(key, math.inf), timeit(lambda: LOOPS[key[0]](b.to("cpu")), 1))
    rows = []
    print(f"{'estimator':<28}{'level':<7}{'vectorized ms':>14}{'loop ref':>10}{'loop ms':>10}{'speed-up':>10}")
    for name in names:
        base, _, variant = name.partition(":")
        level, ref = ESTIMATORS[base].level, REF.get(base)
        t, lt = best[name], loop_best.get((ref, level, variant), math.nan)
        rows.append(dict(name=name, level=level, ms=1e3 * t, ref=ref or "-", loop_ms=1e3 * lt, speedup=lt / t))
        loop = f"{1e3 * lt:>10.1f}{lt / t:>9.0f}x" if ref else f"{'-':>10}{'-':>10}"
        print(f"{name:<28}{level:<7}{1e3 * t:>14.2f}{ref or '-':>10}{loop}")
    if a.race if a.race is not None else a.only is None:
        extras(rows, tok_b, a)
    return rows


if __name__ == "__main__":
    main()
