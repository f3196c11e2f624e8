"""Checkers of notebook 02 (the Echo Trap)."""
from __future__ import annotations

import numpy as np

from . import exercise, matches

SERIES = [0.1, 0.3, 0.5, 0.5, 0.45, 0.3, 0.2, 0.2, 0.1, 0.05]
MIXED = [1.0, 1.0, 1.0, 0.0]
"""the rewards of exercise 2's group of 4 rollouts"""


@exercise("02.drop_step")
def drop_step_ex(answer):
    """``drop_step(SERIES, window=1, frac=0.5, min_peak=0.3)`` for the SERIES of this module."""
    from ..viz.echo import drop_step
    want = drop_step(SERIES, window=1, frac=0.5, min_peak=0.3)
    if not isinstance(answer, (bool, np.bool_)) and np.ndim(answer) == 0 and float(answer) == want:
        return True, f"step {want}: the first value below half of the running maximum 0.5."
    return False, "find the running maximum, then the first index whose value is below half of it."


@exercise("02.mixed_group")
def mixed_group(answer):
    """GRPO advantages (4 numbers) of one group whose rollouts earned ``MIXED`` = [1, 1, 1, 0]."""
    import torch
    from ..credit.outcome import grpo
    want = grpo(torch.tensor(MIXED), torch.zeros(4, dtype=torch.long)).numpy()
    got = np.ravel(np.asarray(answer.detach() if hasattr(answer, "detach") else answer, dtype=float))
    if matches(got, want, atol=1e-3):
        return True, (f"{np.round(want, 3).tolist()}: the one failure is pushed down three times as hard as each "
                      "success is pushed up; the advantages sum to 0.")
    if matches(got, np.asarray(MIXED) - np.mean(MIXED), atol=1e-3):
        return False, "that is R - mean(R): GRPO also divides by the group's std."
    return False, "compute (R - mean(R)) / std(R) over the group, with the std grpo uses (see its docstring)."
