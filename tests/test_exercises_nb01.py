"""Lesson 01's checkers: each correct form accepted, the plausible near-misses rejected."""
from __future__ import annotations

import numpy as np
import torch

from toyrl.exercises import CHECKS, nb01  # noqa: F401  (registers the checkers)
from toyrl.viz.credit import anchor_map, credit_spread, wasted_vs_progress
from toyrl.viz.credit_batch import all_advantages, make_credit_batch


def ok(name, answer):
    return CHECKS[name](answer)[0]


def test_gigpo_spread_omega0():
    cb = make_credit_batch()
    assert ok("01.gigpo_spread_omega0", 0.0) and ok("01.gigpo_spread_omega0", np.float32(0))
    at1 = float(credit_spread(all_advantages(cb, ["gigpo"], omega=1.0)["gigpo"], cb.mask).max())
    assert at1 > 1 and not ok("01.gigpo_spread_omega0", at1)         # the default omega
    assert not ok("01.gigpo_spread_omega0", at1 / 2)


def test_gigpo_gap_gamma08():
    cb = make_credit_batch()
    gap = lambda g: (lambda w: w["progress_mean"] - w["wasted_mean"])(          # noqa: E731
        wasted_vs_progress(cb, all_advantages(cb, ["gigpo"], gamma=g)["gigpo"]))
    assert ok("01.gigpo_gap_gamma08", gap(0.8)) and ok("01.gigpo_gap_gamma08", round(gap(0.8), 4))
    for miss in (gap(0.95), gap(1.0), gap(0.9), -gap(0.8)):
        assert not ok("01.gigpo_gap_gamma08", miss)


def test_start_anchor():
    cb = make_credit_batch()
    count, _ = anchor_map(cb, 0)
    want = int(count[0, 0])
    assert ok("01.start_anchor", want) and ok("01.start_anchor", torch.tensor(want))
    assert not ok("01.start_anchor", 8)                               # the rollouts only, not the returns to it
    assert not ok("01.start_anchor", int(anchor_map(cb, 1)[0][0, 0])) or int(anchor_map(cb, 1)[0][0, 0]) == want
    assert not ok("01.start_anchor", want + 1) and not ok("01.start_anchor", True)
