"""Lesson 13's checkers: each correct form accepted, the plausible near-misses rejected."""
from __future__ import annotations

import numpy as np

from toyrl.exercises import CHECKS, nb13  # noqa: F401  (registers the checkers)


def ok(name, answer):
    return CHECKS[name](answer)[0]


def test_half_noise():
    want = (1 - 0.5 ** (1 / 48)) / 0.75
    assert abs(want - 0.0191) < 1e-4
    assert ok("13.half_noise", want) and ok("13.half_noise", round(want, 4)) and ok("13.half_noise", 100 * want)
    assert ok("13.half_noise", np.float32(want))
    for miss in (1 - 0.5 ** (1 / 48),                  # the noise counted as fatal in full
                 0.5 / 48, (1 - 0.5 ** (1 / 16)) / 0.75, 0.05):
        assert not ok("13.half_noise", miss)


def test_rloo_contrast():
    right = nb13.lesson_contrast("rloo")
    assert right["episodes"] >= 10 and ok("13.rloo_contrast", right)
    for typed in (0, 0.0, np.float64(1e-9)):           # a typed number is not the computation
        assert not ok("13.rloo_contrast", typed)
    gigpo = nb13.lesson_contrast("gigpo")             # a per-turn estimator's contrast is not 0
    assert gigpo["contrast"] < 0 and not ok("13.rloo_contrast", gigpo)
    other = {**right, "episodes": right["episodes"] + 1, "per_episode": right["per_episode"] + [0.0]}
    assert not ok("13.rloo_contrast", other)          # another batch


def test_farm():
    assert ok("13.farm", lambda K, T, lure_first: T if lure_first else min(K, T))
    for miss in (lambda K, T, lure_first: min(K, T),                  # the lure ends the episode
                 lambda K, T, lure_first: T,                          # the solver keeps pulling
                 lambda K, T, lure_first: K if lure_first else T):
        assert not ok("13.farm", miss)
