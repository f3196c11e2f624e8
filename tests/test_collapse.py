"""The collapse and freeze rules (toyrl.collapse) on hand-made series: each docstring example, the cases the
old argmax-peak rule got wrong (a dip under a frozen policy, a crash right after a BC start), bad input, and
properties (scaling the series together by a power of two, all-zero gradients)."""
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from toyrl.collapse import RULE, classify, collapse_step, freeze_span, smooth, std_drop_step

ONES = lambda n: [1.0] * n                                                     # noqa: E731  a run that learns


def test_docstring_examples():
    assert smooth([1, 3, float("nan"), 5], 2).tolist() == [1.0, 2.0, 3.0, 5.0]
    assert collapse_step([0, .4, .8, .3, .2, .2], [1, 1, 1, 1, 0, 0]) == 3
    assert collapse_step([0, .4, .8, .3, .2, .2], [0] * 6) is None
    assert collapse_step([.9, .9, .2, .1, .6, 1, 1], ONES(7), persist=2) == 2
    assert std_drop_step([.5, .5, .1, .1], 3) == 2 and std_drop_step([.5, .5, .1, .1], 1) is None
    g = [1, 0, 0, 0, 0, 0]
    assert freeze_span(g, [.2, .75, .5, .75, .5, .75], min_len=4) == (1, 6)
    assert freeze_span(g, [.2, 1, 1, 0, 0, 0], min_len=4) is None
    assert freeze_span(g, [0] * 6, min_len=4) is None
    out = classify([.8, .8, .8, .8, .1, .1], [.4, .4, .1, .1, 0, 0], ONES(6), min_len=3)
    assert out == {"collapsed": True, "t_collapse": 4, "t_std_drop": 2, "std_first": True, "frozen": False,
                   "t_freeze": None, "freeze_len": 0}


def test_dip_and_recover_is_neither():
    mean = [.1, .3, .6, .8, .8, .2, .1, .7, .8, .8, .9, .8]                   # a two-step dip, then back
    out = classify(mean, [.4] * 12, ONES(12))
    assert not out["collapsed"] and not out["frozen"] and out["t_collapse"] is None
    assert collapse_step(mean, ONES(12), persist=3) is None                    # 2 low steps < a 3-step window
    assert collapse_step(mean, ONES(12), persist=2) == 5                       # ... but a 2-step window holds


def test_frozen_noisy_mean_is_a_freeze_not_a_collapse():
    """Learn to ~.7 with gradients, then 20 steps of exactly zero gradient while a 4-map mean jumps by 0.25:
    the last steps happen to sit under half the peak (the old rule's false alarm); the rule sees no learning."""
    learn = [.1, .3, .5, .75]
    frozen = [.75, .5, 1.0, .75, .5, .75, .75, .5, 1.0, .5, .75, .5, .75, .75, .5, .75, .25, .25, .25, .25]
    mean, grad = learn + frozen, [2.0, 1.5, 1.0, .5] + [0.0] * 20
    out = classify(mean, [.3] * 24, grad, w=1)
    assert not out["collapsed"] and out["frozen"] and (out["t_freeze"], out["freeze_len"]) == (4, 20)
    moved = [2.0, 1.5, 1.0, .5] + [.3] * 20                                    # the same series with gradients
    assert collapse_step(mean, moved) == 20                                    # below 1.0 / 2 from 20 to the end
    from toyrl.lab.claims.spec import collapse_times                           # the old rule fires on the frozen run
    assert math.isfinite(collapse_times(mean, [.3] * 24, w=1)[1])


def test_crash_after_a_bc_start_counts():
    mean = [.9, .85, .9, .3, .1, .05, 0, 0, 0, 0]                             # BC start, then down and never back
    assert collapse_step(mean, ONES(10)) == 3
    assert classify(mean, [.3, .3, .3, .1, 0, 0, 0, 0, 0, 0], ONES(10))["collapsed"] is True


def test_bc_crash_with_a_higher_later_peak_counts_at_the_first_fall():
    """The old rule takes the argmax over the whole run (the later 1.0) and sees no fall after it."""
    mean = [.8, .8, .2, .1, .1, .1, .1, .4, .9, 1.0, 1.0, 1.0]
    assert collapse_step(mean, ONES(12), persist=5) == 2                       # .2 < .4 for steps 2-6
    assert collapse_step(mean, ONES(12), persist=6) is None                    # step 7 (.4) ends the fall
    assert collapse_step(mean, ONES(12)) is None                               # it did not last to the end
    from toyrl.lab.claims.spec import collapse_times
    assert math.isnan(collapse_times(mean, [.3] * 12, w=1)[1])


def test_collapse_to_the_end_with_gradients_at_the_right_step():
    mean = [0, .2, .4, .6, .6, .5, .35, .2, .1, 0, 0, 0]                      # peak .6 at 4; .35 > .3, .2 < .3 at 7
    grad = [1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0]
    assert collapse_step(mean, grad) == 7
    assert collapse_step(mean, grad, frac=0.6) == 6                            # .35 < .36
    assert collapse_step(mean, grad, w=3) == 8                      # 3-step means: peak .567 at 5, .217 at 8
    zero_after_peak = [1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0]                     # nothing moved from the peak (4) on
    assert collapse_step(mean, zero_after_peak) is None
    assert collapse_step(mean, [0, 0, 0, 0, 1e-6, 0, 0, 0, 0, 0, 0, 0]) == 7   # one tiny non-zero update counts
    assert collapse_step(mean, [1, 1, 1, 1] + [float("nan")] * 8) is None      # NaN: no update, not movement


def test_never_learned_is_neither():
    mean = [0, .05, .15, .1, 0, 0, 0, 0, 0, 0, 0, 0]
    out = classify(mean, [.2] * 12, ONES(12))
    assert not out["collapsed"] and not out["frozen"]
    assert collapse_step(mean, ONES(12), min_peak=0.1) == 4                    # the same fall over a lower bar
    assert freeze_span([0] * 12, [0] * 12) is None                              # silent at zero: not frozen


def test_std_drop_leads_the_mean():
    mean = [.2, .5, .7, .7, .7, .7, .7, .2, .1, 0, 0, 0]
    std = [.4, .45, .45, .3, .2, .15, .1, .1, .05, 0, 0, 0]
    out = classify(mean, std, ONES(12))
    assert (out["t_collapse"], out["t_std_drop"], out["std_first"]) == (7, 4, True)    # .2 < .45 / 2 at 4
    late = classify(mean, [.4] * 7 + [0] * 5, ONES(12))                        # std falls with the mean
    assert (late["t_std_drop"], late["std_first"]) == (7, False)
    flat = classify(mean, [.4] * 12, ONES(12))                                 # std never falls
    assert flat["t_std_drop"] is None and flat["std_first"] is False
    assert classify([.5] * 12, std, ONES(12))["std_first"] is None            # no collapse: no lead to read


def test_ledger_rule_smooths_over_five_steps():
    mean, std = [.8] * 10 + [0.0] * 10, [.4] * 5 + [0.0] * 15
    out = classify(mean, std, ONES(20), **RULE)
    assert (out["t_collapse"], out["t_std_drop"]) == (12, 7)                   # 5-step means: .32 < .4, .16 < .2


@pytest.mark.parametrize("call, match", [
    (lambda: collapse_step([1, 2, 3], [1, 1]), "lengths differ"),
    (lambda: collapse_step([1, 2], [1, 1], frac=1.0), "frac"),
    (lambda: collapse_step([1, 2], [1, 1], frac=0.0), "frac"),
    (lambda: collapse_step([1, 2], [1, 1], w=0), "w "),
    (lambda: collapse_step([1, 2], [1, 1], persist=0), "persist"),
    (lambda: collapse_step([1, 2], [1, 1], min_peak=float("nan")), "min_peak"),
    (lambda: collapse_step([[1, 2]], [[1, 1]]), "mean must be a 1-D"),
    (lambda: std_drop_step([1, 2], 2), "before"),
    (lambda: std_drop_step([1, 2], -1), "before"),
    (lambda: std_drop_step([1, 2], 1, frac=2), "frac"),
    (lambda: freeze_span([0, 0], [1, 1], min_len=1), "min_len"),
    (lambda: freeze_span([0, 0], [1, 1], tol=-1), "tol"),
    (lambda: freeze_span([0, 0, 0], [1, 1]), "lengths differ"),
    (lambda: classify([1, 1], [1], [1, 1]), "std"),
    (lambda: smooth([1, 2], 0), "w "),
])
def test_bad_input_names_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


value = lambda hi: st.one_of(st.just(0.0), st.floats(1e-3, hi))              # noqa: E731  no subnormal underflow
series = st.lists(value(1.0), min_size=2, max_size=40)


@settings(max_examples=150, deadline=None)
@given(series, st.sampled_from([0.25, 0.5, 2.0, 8.0]), st.sampled_from([None, 1, 3]), st.sampled_from([1, 3]),
       st.data())
def test_scaling_mean_std_and_bars_together_changes_nothing(mean, c, persist, w, data):
    """Every comparison is a ratio (or against min_peak, scaled with the series). Powers of two scale floats
    exactly, so the two runs are the same bits, not merely close."""
    n = len(mean)
    std = data.draw(st.lists(value(.5), min_size=n, max_size=n))
    grad = data.draw(st.lists(st.sampled_from([0.0, 0.0, 0.1, 1.0, float("nan")]), min_size=n, max_size=n))
    rule = dict(persist=persist, w=w, min_len=2)
    a = classify(mean, std, grad, **rule, min_peak=0.2, std_min_peak=0.05, tol=0.3)
    m, s = np.array(mean) * c, np.array(std) * c
    b = classify(m, s, np.array(grad) * c, **rule, min_peak=0.2 * c, std_min_peak=0.05 * c, tol=0.3 * c)
    assert a == b


@settings(max_examples=150, deadline=None)
@given(series, st.sampled_from([None, 1, 4]), st.sampled_from([1, 5]), st.sampled_from([0.0, float("nan")]))
def test_all_zero_gradients_never_collapse(mean, persist, w, zero):
    assert collapse_step(mean, [zero] * len(mean), persist=persist, w=w, min_peak=0.0) is None


@settings(max_examples=100, deadline=None)
@given(series, st.integers(1, 6))
def test_smooth_equals_a_loop_over_windows(x, w):
    x = [v if i % 7 else float("nan") for i, v in enumerate(x)]                 # some missing values
    want = [np.nanmean(x[max(0, t - w + 1):t + 1]) if np.isfinite(x[max(0, t - w + 1):t + 1]).any() else np.nan
            for t in range(len(x))]
    np.testing.assert_allclose(smooth(x, w), want, rtol=1e-12, atol=1e-12)
