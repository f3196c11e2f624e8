"""Exercises of notebook 4 (void turns and the SimpleTIR filter)."""
from __future__ import annotations

import numpy as np
import torch

from . import exercise, matches

__all__ = ["random_void"]


def random_void(seed: int, B: int = 6, H: int = 4, *, padded: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """A random void-turn matrix and turn mask (B, H) (rows have 1..H valid turns). ``padded``: ``void`` is also
    True on some turns a row never played (padding a rollout may leave set), so an answer must use the mask."""
    g = torch.Generator().manual_seed(seed)
    n = torch.randint(1, H + 1, (B,), generator=g)
    mask = torch.arange(H)[None, :] < n[:, None]
    void = torch.rand(B, H, generator=g) < 0.4
    if padded:
        void[0] = False
        void[0, H - 1] = True                                      # row 0: clean valid turns, a void padding turn
        mask[0] = torch.arange(H) < H - 1
    return (void if padded else void & mask), mask


@exercise("04.void_rate")
def _void_rate(fn):
    from ..viz.void import void_rate_by_turn
    for s in range(6):
        void, mask = random_void(s, padded=s >= 3)
        got, want = np.asarray(fn(void, mask), dtype=float), void_rate_by_turn(void, mask)
        if not matches(got, want):
            return False, (f"on seed {s} expected {np.round(want, 3)}, got {np.round(got, 3)}. Per turn index k: "
                           "count rows whose turn k is valid AND void, divide by rows whose turn k is valid.")
    return True, "the void-turn rate per turn index matches on 6 random batches (3 with void flags on padding)."


@exercise("04.keep")
def _keep(fn):
    from ..filters import void_turn
    for s in range(6):
        void, mask = random_void(s, padded=s >= 3)
        got = torch.as_tensor(np.asarray(fn(void, mask))).bool()
        want = void_turn(void, mask).keep
        if got.shape != want.shape or not torch.equal(got, want):
            return False, ("SimpleTIR keeps a trajectory only if none of its valid turns is void: "
                           "keep_i = not any_k (void_ik and valid_ik).")
    return True, "your keep mask is SimpleTIR's on 6 random batches (3 with void flags on padding)."


@exercise("04.masked_frac")
def _masked_frac(x):
    from ..viz.prototype import RUNS_DIR, load_sweep
    sweep, _ = load_sweep(RUNS_DIR / "void" / "filter.json")
    want = 1.0 - float(np.nanmean(np.asarray(sweep["GRPO + void filter"]["kept_frac"], float)[:, -10:]))
    if abs(float(x) - want) < 0.005:
        return True, f"{want:.3f} of the trajectories were masked by the filter over the last 10 steps."
    return False, "average 1 - kept_frac over the last 10 steps of every seed of the 'GRPO + void filter' arm."
