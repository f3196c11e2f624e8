"""The collapse rule measured against the task's floor (``toyrl.collapse.floor_collapse_step``), on hand-made series."""
import numpy as np
import pytest

from toyrl.collapse import RULE, collapse_step, floor_collapse_step, floor_normalized

ONES = [1.0] * 8


def test_forgetting_to_the_floor_is_a_collapse_the_plain_rule_misses():
    s = [0.95, 0.95, 0.9, 0.55, 0.5, 0.5, 0.5, 0.5]         # a T-maze run that forgot the cue: success ~ 1/2
    assert collapse_step(s, ONES) is None                    # 0.5 x peak = 0.475: never crossed
    assert floor_collapse_step(s, ONES, 0.5) == 3           # (0.55 - 0.5) / (0.95 - 0.5) = 0.11 < 0.5


def test_no_collapse_when_the_run_holds_or_recovers():
    held = [0.9, 0.92, 0.85, 0.9, 0.88, 0.9, 0.95, 0.93]
    assert floor_collapse_step(held, ONES, 0.5) is None
    dip = [0.95, 0.95, 0.5, 0.5, 0.9, 0.9, 0.9, 0.9]       # fell to the floor, came back: not a collapse
    assert floor_collapse_step(dip, ONES, 0.5) is None
    assert floor_collapse_step(dip, ONES, 0.5, persist=2) == 2   # ... unless only 2 steps must persist


def test_floor_equal_to_peak_and_below_min_gain():
    flat = [0.5] * 8
    assert floor_collapse_step(flat, ONES, 0.5) is None                    # nothing learned above the floor
    assert np.isnan(floor_normalized(flat, 0.5)).all()
    small = [0.6, 0.6, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]                       # gain 0.1 < min_gain 0.2
    assert floor_collapse_step(small, ONES, 0.5) is None
    assert floor_collapse_step(small, ONES, 0.5, min_gain=0.05) == 2


def test_nans():
    s = [0.95, np.nan, 0.95, 0.5, np.nan, 0.5, 0.5, 0.5]
    assert floor_collapse_step(s, ONES, 0.5) == 5          # a NaN step never counts as below: the fall from 5 on
    n = floor_normalized(s, 0.5)
    assert np.isnan(n[1]) and n[3] == pytest.approx(0.0) and n[0] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="floor"):
        floor_collapse_step(s, ONES, float("nan"))
    with pytest.raises(ValueError, match="floor"):
        floor_normalized(s, float("inf"))
    grads = [1.0, 1.0] + [np.nan] * 6                      # no finite gradient from the peak (step 2) on
    assert floor_collapse_step([0.95, 0.95, 0.95, 0.5, 0.5, 0.5, 0.5, 0.5], grads, 0.5) is None


def test_floor_zero_is_the_plain_rule():
    rng = np.random.default_rng(0)
    for _ in range(50):
        s = np.clip(np.cumsum(rng.normal(0, 0.15, 30)) + 0.6, 0, 1)
        g = (rng.random(30) > 0.3).astype(float)
        kw = {k: RULE[k] for k in ("frac", "persist", "w")}
        assert floor_collapse_step(s, g, 0.0, min_gain=RULE["min_peak"], **kw) == \
            collapse_step(s, g, min_peak=RULE["min_peak"], **kw)


def test_normalized_worked_example_and_bad_input():
    assert np.allclose(floor_normalized([0.5, 1.0, 0.75, 0.5], 0.5)[1:], [1.0, 0.5, 0.0])
    with pytest.raises(ValueError, match="lengths"):
        floor_collapse_step([0.9, 0.5], [1.0], 0.5)
    with pytest.raises(ValueError, match="frac"):
        floor_collapse_step([0.9, 0.5], [1.0, 1.0], 0.5, frac=1.5)
