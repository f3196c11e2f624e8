"""Checkers of notebook 03 (ratio blowups)."""
from __future__ import annotations

import math

from . import exercise

LOG_RATIOS = [0.2, -0.1, 0.5, 0.0]
ENV_SHARE_STALENESS = 4
"""the staleness of exercise 03.env_share (the lesson prints staleness 2)"""


@exercise("03.turn_ratio")
def turn_ratio(answer):
    """The turn-level ratio of a turn whose 4 tokens have the log-ratios LOG_RATIOS."""
    want = math.exp(sum(LOG_RATIOS) / len(LOG_RATIOS))
    if abs(float(answer) - want) < 1e-4:
        return True, f"{want:.4f}: the geometric mean of the token ratios, exp(mean log r)."
    return False, "average the log-ratios, then exponentiate (the geometric mean of the token ratios)."


@exercise("03.cispo_weight")
def cispo_weight(answer):
    """CISPO's (detached) weight of a token with ratio 3.0 under the default eps_high = 0.28."""
    if abs(float(answer) - 1.28) < 1e-6:
        return True, "1.28: the weight is capped, but the token keeps its gradient through log pi."
    return False, "CISPO clips the weight sg(r) to at most 1 + eps_high."


@exercise("03.env_share")
def env_share(answer):
    """env_grad_share of token-level PPO with env tokens unmasked, staleness 4 (``compare_masking(4)``)."""
    from ..viz.ratios import compare_masking
    want = compare_masking(ENV_SHARE_STALENESS)["unmasked"]["env_grad_share"]
    if abs(float(answer) - want) < 1e-3:
        return True, f"{want:.3f}: nearly all of dL/dlogp still sits on tokens the policy never wrote."
    return False, f"compute compare_masking({ENV_SHARE_STALENESS})['unmasked']['env_grad_share'] (a share in [0, 1])."
