"""Benchmark: training steps with reasoning turns, split into generation, recompute and update.

    toyrl bench train [--think 2 8 32 64] [--steps 10] [--threads 1]

Setting (the channels and speed issues): GridWorld 4x4, 16-turn limit, 8 tasks x 8 rollouts per
step, the default toy policy, GRPO, n_think = think_max = L reasoning tokens per turn. For each L
it runs ``--steps`` training steps and reports, per step: tokens generated and per turn; the
rollout (generation) time; a teacher-forced forward over the same batch without gradient; the
recompute (forward with gradient) and update (backward + AdamW) times; and two ratios measured in
this run:

    gen / fwd     = rollout time / teacher-forced forward time on the same tokens
    model / fwd   = time inside the transformer while generating (its ``_direct`` calls, or ``_trunk``
                    where a subclass overrides it: the prefill, then one length-1 forward per decode step) / the
                    teacher-forced forward: the floor of gen / fwd for this eager model, whatever
                    sampling, the grammar and the env cost
    sample / fwd  = time drawing tokens (``sample_step``: masking, softmax, the draw, the grammar) / the
                    teacher-forced forward; gen / fwd - model / fwd - sample / fwd is the rest: the
                    decode loop's own bookkeeping, the env, the turn records and the flat batch
    step / (f+b)  = whole step time / (recompute + update time)

and the projected time of 200 such steps. Threads are pinned (``--threads``, default 1) and
torch's default allocator is used.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch

import toyrl.policies.toy as toy_policy
from toyrl.rollout.flatten import recompute_logp
from toyrl.train.trainer import TrainConfig, Trainer

SETTING = dict(env="gridworld", env_kwargs={"map_name": "4x4", "max_turns": 16}, group_size=8, prompts_per_step=8)


class CallTimer:
    """Seconds spent in the named callables of ``owner`` (a policy's methods, or a module's functions such
    as ``toyrl.policies.toy.sample_step``) while the context is open; calls counted, originals restored."""

    def __init__(self, owner, names):
        self.owner, self.seconds, self.calls = owner, 0.0, 0
        self.names = [n for n in names if hasattr(owner, n)]
        self.saved = {}

    def _timed(self, fn):
        def timed(*args, **kw):
            t0 = time.perf_counter()
            out = fn(*args, **kw)
            self.seconds += time.perf_counter() - t0
            self.calls += 1
            return out
        return timed

    def __enter__(self):
        for n in self.names:                           # an instance attribute shadows the method
            self.saved[n] = vars(self.owner).get(n)
            setattr(self.owner, n, self._timed(getattr(self.owner, n)))
        return self

    def __exit__(self, *exc):
        for n in self.names:
            if self.saved[n] is None:
                delattr(self.owner, n)                 # the class's method shows through again
            else:
                setattr(self.owner, n, self.saved[n])


class TrunkTimer(CallTimer):
    """Seconds spent in ``policy._trunk`` and ``policy._direct`` (the transformer)."""

    NAMES = ("_trunk", "_direct")

    def __init__(self, policy):
        super().__init__(policy, self.NAMES)


def measure(L: int, steps: int, seed: int = 0) -> dict:
    """Per-step medians of one run with L reasoning tokens per turn."""
    tr = Trainer(TrainConfig(**SETTING, n_think=max(L, 1), think_max=L, steps=steps, seed=seed, progress=False))
    rows, fwd = [], []
    for _ in range(steps):
        t0 = time.perf_counter()
        with TrunkTimer(tr.policy) as model, CallTimer(toy_policy, ("sample_step",)) as draw:
            ro = tr.collect()
        t1 = time.perf_counter()
        with torch.no_grad():
            recompute_logp(tr.policy, ro, "matched", env_tokens=False)
        fwd.append(time.perf_counter() - t1)
        t2 = time.perf_counter()
        prep = tr.prepare(ro)
        upd = tr.update(ro, prep)
        tr.step_idx += 1
        rows.append({"gen": t1 - t0, "model": model.seconds, "sample": draw.seconds, "calls": model.calls,
                     "step": (t1 - t0) + (time.perf_counter() - t2), "rec": upd["t_fwd"],
                     "upd": upd["t_bwd"], "tokens": ro.stats["tokens_generated"],
                     "per_turn": ro.stats["policy_tokens"] / max(ro.stats["turns"], 1)})
    med = {k: float(np.median([r[k] for r in rows])) for k in rows[0]}
    med["fwd"] = float(np.median(fwd))
    med["gen_over_fwd"] = med["gen"] / med["fwd"]
    med["model_over_fwd"] = med["model"] / med["fwd"]
    med["sample_over_fwd"] = med["sample"] / med["fwd"]
    med["step_over_fb"] = med["step"] / (med["rec"] + med["upd"])
    med["projected_200"] = 200 * med["step"]
    return med


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(prog="toyrl bench train", description=__doc__.split("\n")[0])
    p.add_argument("--think", type=int, nargs="+", default=[2, 8, 32, 64], help="reasoning tokens per turn (L)")
    p.add_argument("--steps", type=int, default=10, help="training steps per L (medians are reported)")
    p.add_argument("--threads", type=int, default=1, help="torch threads, pinned")
    p.add_argument("--quick", action="store_true", help="3 steps per L (a smoke run)")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    steps = 3 if a.quick else a.steps
    print(f"GRPO on GridWorld 4x4 (16 turns), 8 x 8 rollouts, policy tiny, {steps} steps per L, "
          f"{torch.get_num_threads()} thread(s), default allocator; medians per step")
    print(f"{'L':>4} {'tok/turn':>8} {'tokens':>7} {'gen ms':>8} {'fwd ms':>7} {'gen/fwd':>7} {'model/fwd':>9} "
          f"{'sample/fwd':>10} {'calls':>5} {'rec ms':>7} {'upd ms':>7} {'step ms':>8} {'step/(f+b)':>10} "
          f"{'200 steps s':>11}")
    out = {}
    for L in a.think:
        m = out[L] = measure(L, steps)
        print(f"{L:>4} {m['per_turn']:>8.1f} {m['tokens']:>7.0f} {1e3 * m['gen']:>8.1f} {1e3 * m['fwd']:>7.1f} "
              f"{m['gen_over_fwd']:>7.2f} {m['model_over_fwd']:>9.2f} {m['sample_over_fwd']:>10.2f} {m['calls']:>5.0f} "
              f"{1e3 * m['rec']:>7.1f} {1e3 * m['upd']:>7.1f} {1e3 * m['step']:>8.1f} "
              f"{m['step_over_fb']:>10.2f} {m['projected_200']:>11.1f}")
    return out


if __name__ == "__main__":
    main()
