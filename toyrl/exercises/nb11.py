"""Checkers of notebook 11 (the stability scorecard)."""
from __future__ import annotations

import math

from . import exercise

SCORES = [[math.log(0.9), math.log(0.1)], [math.log(0.1), math.log(0.9)]]
"""l_j(Z_i) of two one-token reasoning segments under two prompts: each segment is likely after its own prompt"""


@exercise("11.mi")
def mi_ex(answer):
    """I(X;Z) in nats of SCORES with columns [0, 1] (sample i came from prompt i)."""
    import torch
    from ..lab.scorecard.mi import cross_score_mi
    want = cross_score_mi(torch.tensor(SCORES), torch.tensor([0, 1]), torch.ones(2))["mi_seq"]
    if abs(float(answer) - want) < 1e-3:
        return True, f"{want:.3f} nats = log(0.9 / 0.5): close to the bound log 2 = 0.693, the reasoning names its prompt."
    return False, "matched = log 0.9; marginal = log of the mean over the two prompts, log((0.9 + 0.1) / 2)."


@exercise("11.regime")
def regime_ex(answer):
    """The RAGEN-2 regime of a cell with per-token H(Z|X) = 1.3 nats and I(X;Z) = 0.0 (n_think 4, N = 8)."""
    from ..lab.scorecard.mi import regime
    want = regime(1.3, 0.0, h_ref=math.log(4), mi_ref=math.log(8))
    if str(answer).strip().lower() == want:
        return True, "diverse reasoning that ignores the input: a template, which the entropy alone would call healthy."
    return False, "H(Z|X) = 1.3 is above half of log 4; I(X;Z) = 0 is below a tenth of log 8. Which corner is that?"
