"""Checkers of notebook 01 (per-turn credit)."""
from __future__ import annotations

from . import exercise


@exercise("01.rloo_spread")
def rloo_spread(answer):
    """The largest within-trajectory spread of RLOO's credit on ``make_credit_batch()``."""
    from ..viz.credit import credit_spread
    from ..viz.credit_batch import all_advantages, make_credit_batch
    cb = make_credit_batch()
    want = float(credit_spread(all_advantages(cb, ["rloo"])["rloo"], cb.mask).max())
    if abs(float(answer) - want) < 1e-5:
        return True, "0: RLOO, like GRPO, is an outcome baseline: one number per trajectory, every turn alike."
    return False, "use credit_spread(adv['rloo'], cb.mask).max(); an outcome-level baseline cannot tell turns apart."


@exercise("01.gigpo_gap_gamma1")
def gigpo_gap_gamma1(answer):
    """progress_mean - wasted_mean of GiGPO at gamma = 1.0 on ``make_credit_batch()``."""
    from ..viz.credit import wasted_vs_progress
    from ..viz.credit_batch import all_advantages, make_credit_batch
    cb = make_credit_batch()
    w = wasted_vs_progress(cb, all_advantages(cb, ["gigpo"], gamma=1.0)["gigpo"])
    want = w["progress_mean"] - w["wasted_mean"]
    if abs(float(answer) - want) < 1e-3:
        return True, (f"{want:+.3f}: without discounting, a wasted turn in a successful episode has the same "
                      "return-to-go as a good one, so the anchor group cannot rank them.")
    return False, "call all_advantages(cb, ['gigpo'], gamma=1.0) and wasted_vs_progress on it."


@exercise("01.start_anchor")
def start_anchor(answer):
    """How many turns of group 0 of ``make_credit_batch()`` start in the start cell (row 0, column 0)?"""
    from ..viz.credit import anchor_map
    from ..viz.credit_batch import make_credit_batch
    count, _ = anchor_map(make_credit_batch(), 0)
    want = int(count[0, 0])
    if int(answer) == want:
        return True, f"{want}: every rollout starts there, and wall bumps / void turns add more."
    return False, "anchor_map(cb, 0) returns (count, mean); read count[0, 0]."
