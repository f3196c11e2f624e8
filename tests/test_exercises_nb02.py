"""Lesson 02's checkers: each correct form accepted, the plausible near-misses rejected."""
from __future__ import annotations

import numpy as np
import torch

from toyrl.exercises import CHECKS, nb02  # noqa: F401  (registers the checkers)


def ok(name, answer):
    return CHECKS[name](answer)[0]


def test_drop_step():
    assert ok("02.drop_step", 6) and ok("02.drop_step", np.int64(6))   # 0.2 < 0.25, half the running max 0.5
    for miss in (5, 7, 2, True, [6]):                                   # 0.3 is not below 0.25; a list is no step
        assert not ok("02.drop_step", miss)


def test_mixed_group():
    want = [0.5, 0.5, 0.5, -1.5]                                       # std with Bessel's correction
    for form in (want, np.array(want), torch.tensor(want), [[0.5, 0.5, 0.5, -1.5]]):
        assert ok("02.mixed_group", form)
    r = np.array([1.0, 1.0, 1.0, 0.0])
    for miss in ((r - r.mean()).tolist(),                               # not divided by the std
                 ((r - r.mean()) / r.std()).tolist(),                   # the population std
                 [-0.5, -0.5, -0.5, 1.5],                               # signs flipped
                 [0.0, 0.0, 0.0, 0.0], want[:3]):
        assert not ok("02.mixed_group", miss)
