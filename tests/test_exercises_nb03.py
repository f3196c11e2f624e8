"""Checkers of notebook 03 (ratio blowups): every correct form accepted, the plausible near-misses rejected."""
import math

import numpy as np

from toyrl.exercises import nb03


def test_turn_ratio_accepts_the_geometric_mean_in_every_form():
    want = math.exp(0.15)
    for answer in (want, np.float64(want), np.exp(np.mean([0.2, -0.1, 0.5, 0.0])), round(want, 5)):
        assert nb03.turn_ratio(answer)[0], answer


def test_turn_ratio_rejects_near_misses():
    arith = np.mean(np.exp([0.2, -0.1, 0.5, 0.0]))        # the arithmetic mean of the ratios
    for answer in (0.15, arith, math.exp(0.6), 1.0):        # the mean log, the mean ratio, the sum, on-policy
        assert not nb03.turn_ratio(answer)[0], answer


def test_cispo_weight():
    assert nb03.cispo_weight(1.28)[0] and nb03.cispo_weight(np.float32(1.28))[0]
    for answer in (3.0, 1.2, 0.72, 1.0, 1.3):                # unclipped, PPO's 1 + 0.2, the lower side, ...
        assert not nb03.cispo_weight(answer)[0], answer


def test_env_share_is_the_staleness_4_share_not_the_printed_one():
    from toyrl.viz.ratios import compare_masking
    want = compare_masking(nb03.ENV_SHARE_STALENESS)["unmasked"]["env_grad_share"]
    printed = compare_masking(2)["unmasked"]["env_grad_share"]
    assert nb03.env_share(want)[0] and nb03.env_share(float(np.round(want, 4)))[0]
    assert abs(printed - want) > 1e-3, "the exercise would be answered by the lesson's own printout"
    for answer in (printed, 1.0, 0.0, compare_masking(4)["masked"]["env_grad_share"]):
        assert not nb03.env_share(answer)[0], answer
