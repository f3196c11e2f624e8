"""Checkers of notebook 01 (per-turn credit)."""
from __future__ import annotations

from . import exercise


def _gap(gamma: float) -> float:
    from ..viz.credit import wasted_vs_progress
    from ..viz.credit_batch import all_advantages, make_credit_batch
    cb = make_credit_batch()
    w = wasted_vs_progress(cb, all_advantages(cb, ["gigpo"], gamma=gamma)["gigpo"])
    return float(w["progress_mean"] - w["wasted_mean"])


@exercise("01.gigpo_spread_omega0")
def gigpo_spread_omega0(answer):
    """The largest within-trajectory spread of GiGPO's credit on ``make_credit_batch()`` with omega = 0."""
    from ..viz.credit import credit_spread
    from ..viz.credit_batch import all_advantages, make_credit_batch
    cb = make_credit_batch()
    want = float(credit_spread(all_advantages(cb, ["gigpo"], omega=0.0)["gigpo"], cb.mask).max())
    if abs(float(answer) - want) < 1e-5:
        return True, (f"{want:g}: with omega = 0 the anchor-state term is gone and GiGPO is its episode term, "
                      "one GRPO number per trajectory.")
    return False, "call all_advantages(cb, ['gigpo'], omega=0.0) and credit_spread(..., cb.mask).max()."


@exercise("01.gigpo_gap_gamma08")
def gigpo_gap_gamma08(answer):
    """progress_mean - wasted_mean of GiGPO at gamma = 0.8 on ``make_credit_batch()``."""
    want = _gap(0.8)
    if abs(float(answer) - want) < 1e-3:
        return True, (f"{want:+.3f}, larger than at gamma 0.95: a wasted turn costs a factor gamma of the "
                      "return-to-go, so a smaller gamma separates it more from a turn that moved on.")
    return False, "call all_advantages(cb, ['gigpo'], gamma=0.8) and wasted_vs_progress on it."


@exercise("01.start_anchor")
def start_anchor(answer):
    """How many turns of group 0 of ``make_credit_batch()`` start in the start cell (row 0, column 0)?"""
    from ..viz.credit import anchor_map
    from ..viz.credit_batch import make_credit_batch
    count, _ = anchor_map(make_credit_batch(), 0)
    want = int(count[0, 0])
    x = answer.item() if hasattr(answer, "item") else answer
    if not isinstance(x, bool) and float(x) == want:
        return True, f"{want}: every rollout starts there, and wall bumps / void turns add more."
    return False, "anchor_map(cb, 0) returns (count, mean); read count[0, 0]."
