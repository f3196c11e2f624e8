"""Checkers of notebook 12 (the rollout engine is not the trainer)."""
from __future__ import annotations

import math

from . import exercise

LOG_RHOS = (-2.0, -0.5, 0.0, 0.3, 1.5)
"""log rho = old_logp - rollout_logp values the k3 answer is tried on"""


@exercise("12.k3_term")
def k3_term(fn):
    """``fn(d)``: the per-token k3 term of KL(engine || trainer) for log rho = d (trainer over engine)."""
    for d in LOG_RHOS:
        got, want = float(fn(d)), math.exp(d) - 1 - d
        if abs(got - want) > 1e-6:
            if abs(got - (math.exp(-d) - 1 + d)) < 1e-6:
                return False, ("that is the k3 term of KL(trainer || engine). The tokens were drawn by the engine: "
                               "which ratio has expectation 1 under the engine's distribution?")
            return False, f"at d = {d} the term should be >= 0 and 0 only at d = 0; k3 is r - 1 - log r with r = ..."
    return True, "exp(d) - 1 - d: r = p_trainer / p_engine has mean 1 under the engine, so its k3 term is unbiased."


@exercise("12.topk_ratio")
def topk_ratio(answer):
    """rho of any token a top-k engine samples in a context where its k kept tokens hold trainer mass 0.8."""
    if abs(float(answer) - 0.8) < 1e-6:
        return True, ("0.8 for every sampled token: p_engine = p_trainer / 0.8 on the kept tokens, so every "
                      "rho < 1 and KL(engine || trainer) = -log 0.8 = 0.223 nat in that context.")
    return False, "top-k renormalizes the kept tokens: p_engine = p_trainer / (mass kept). Now divide."


@exercise("12.tis_weights")
def tis_weights(fn):
    """``fn(old_logp, rollout_logp, cap)``: token TIS weights min(exp(old - rollout), cap) for lists of floats."""
    old, rollout = [-1.0, -0.2, -3.0, -0.7], [-1.0, -1.5, -0.5, -0.6]
    for cap in (2.0, 3.0):
        want = [min(math.exp(o - r), cap) for o, r in zip(old, rollout)]
        got = [float(x) for x in fn(old, rollout, cap)]
        if len(got) != len(want) or any(abs(g - w) > 1e-6 for g, w in zip(got, want)):
            return False, ("the weight is the ratio trainer over engine, exp(old_logp - rollout_logp), truncated "
                           "from above at cap (small ratios are kept as they are).")
    return True, "min(rho, C): rare tokens the engine over-sampled are down-weighted, none weighs more than C."
