"""Checkers of notebook 02 (the Echo Trap)."""
from __future__ import annotations

import numpy as np

from . import exercise, matches

SERIES = [0.1, 0.3, 0.5, 0.5, 0.45, 0.3, 0.2, 0.2, 0.1, 0.05]


@exercise("02.drop_step")
def drop_step_ex(answer):
    """``drop_step(SERIES, window=1, frac=0.5, min_peak=0.3)`` for the SERIES of this module."""
    from ..viz.echo import drop_step
    want = drop_step(SERIES, window=1, frac=0.5, min_peak=0.3)
    if answer == want:
        return True, f"step {want}: the first value below half of the running maximum 0.5."
    return False, "find the running maximum, then the first index whose value is below half of it."


@exercise("02.zero_group")
def zero_group(answer):
    """GRPO advantages (a list of 4 numbers) of one group whose 4 rollouts all got reward 1."""
    import torch
    from ..credit.outcome import grpo
    want = grpo(torch.ones(4), torch.zeros(4, dtype=torch.long)).tolist()
    if matches(np.ravel(answer), want):
        return True, "all zero: a uniform group has no signal, whatever its reward."
    return False, "R - mean(R) is 0 for every member when all rewards are equal."
