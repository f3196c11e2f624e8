"""The checkers of notebook 11: each correct form accepted, the plausible near-misses rejected."""
import math

import numpy as np
import pytest
import torch

from toyrl.exercises import check


@pytest.mark.parametrize("answer", [math.log(0.9 / 0.5), math.log(0.9) - math.log(0.5), np.float64(0.5878),
                                    torch.tensor(0.5878), "0.5878"])
def test_mi_accepts_the_nats_value_in_any_numeric_form(answer):
    assert check("11.mi", answer)


@pytest.mark.parametrize("answer", [math.log(0.9),                  # matched score only
                                    -math.log(0.9),                 # H(Z|X), not I
                                    math.log(2),                    # the bound, not the estimate
                                    math.log2(0.9 / 0.5),           # bits
                                    0.0, "template", None])
def test_mi_rejects_near_misses(answer):
    assert not check("11.mi", answer)


@pytest.mark.parametrize("answer", ["low-entropy collapse", "Low entropy collapse", " low_entropy_collapse "])
def test_regime_accepts_low_entropy_collapse(answer):
    assert check("11.regime", answer)


@pytest.mark.parametrize("answer", ["template collapse",            # the label on the log 4 scale
                                    "diverse", "compressed", "collapse", "low entropy"])
def test_regime_rejects_the_other_corners_and_the_log4_reading(answer):
    assert not check("11.regime", answer)


def test_regime_answer_flips_between_the_two_scales():
    """The exercise's point holds: the log 4 scale gives the other label."""
    from toyrl.exercises.nb11 import REGIME_POINT as p
    from toyrl.lab.scorecard.mi import regime
    assert regime(p["cond_entropy"], p["mi"], h_ref=math.log(4), mi_ref=math.log(8)) == "template collapse"
    assert regime(p["cond_entropy"], p["mi"], h_ref=math.log(5), mi_ref=math.log(8)) == "low-entropy collapse"
