"""Checkers of notebook 11 (the stability scorecard)."""
from __future__ import annotations

import math

from . import exercise

SCORES = [[math.log(0.9), math.log(0.1)], [math.log(0.1), math.log(0.9)]]
"""l_j(Z_i) of two one-token reasoning segments under two prompts: each segment is likely after its own prompt"""

REGIME_POINT = dict(cond_entropy=0.75, mi=0.0, n_think=4, n_prompts=8)
"""exercise 2's cell: per-token H(Z|X) in nats, I(X;Z) per sequence, reasoning tokens, probe prompts"""


@exercise("11.mi")
def mi_ex(answer):
    """I(X;Z) in nats of SCORES with columns [0, 1] (sample i came from prompt i)."""
    import torch
    from ..lab.scorecard.mi import cross_score_mi
    want = cross_score_mi(torch.tensor(SCORES), torch.tensor([0, 1]), torch.ones(2))["mi_seq"]
    try:
        got = float(answer)
    except (TypeError, ValueError):
        return False, "answer with one number: I(X;Z) in nats."
    if abs(got - want) < 1e-3:
        return True, f"{want:.3f} nats = log(0.9 / 0.5): close to the bound log 2 = 0.693, the reasoning names its prompt."
    if abs(got - want / math.log(2)) < 1e-3:
        return False, "that is in bits (log base 2); the scorecard reads nats (natural log)."
    return False, "matched = log 0.9; marginal = log of the mean over the two prompts, log((0.9 + 0.1) / 2)."


def _norm(text) -> str:
    return " ".join(str(text).strip().lower().replace("-", " ").replace("_", " ").split())


@exercise("11.regime")
def regime_ex(answer):
    """The RAGEN-2 regime of REGIME_POINT on the scorecard's one entropy scale, log(n_think + 1)."""
    from ..lab.scorecard.mi import REGIMES, entropy_ref, regime
    p = REGIME_POINT
    want = regime(p["cond_entropy"], p["mi"], h_ref=entropy_ref(p["n_think"]), mi_ref=math.log(p["n_prompts"]))
    if _norm(answer) == _norm(want):
        return True, (f"{p['cond_entropy']} < half of log 5 = {0.5 * entropy_ref(4):.3f}: low entropy, and I = 0: "
                      "a low-entropy collapse. Against half of log 4 (0.693) the same cell would read as a template "
                      "collapse: one cell, two labels, which is why the table and the heatmap share one scale.")
    if _norm(answer) not in {_norm(r) for r in REGIMES}:
        return False, f"answer with one of RAGEN-2's regimes: {', '.join(REGIMES)}."
    return False, ("compare H(Z|X) with half of entropy_ref(4) = log 5 (not log 4), and I(X;Z) with a tenth of log 8. "
                   "Which corner is that?")
