"""Exercises of notebook 8 (aggregation, normalization, granularity)."""
from __future__ import annotations

from . import exercise, matches


@exercise("08.seq_mean_weight")
def _weights(fn):
    from ..viz.aggregation import token_weights
    for lengths in ([3, 5, 9], [1, 1, 2, 8], [4]):
        if not matches(fn(lengths), token_weights(lengths, "seq-mean-token-mean"), atol=1e-8):
            return False, "under seq-mean-token-mean a token of rollout i weighs 1 / (B |o_i|)."
    return True, "short rollouts' tokens weigh more: 1 / (B |o_i|)."


@exercise("08.mean_only_mass")
def _mass(fn):
    from ..viz.aggregation import advantage_mass
    for G in (4, 8, 16):
        want = advantage_mass(G, norms=("dr_grpo",))["dr_grpo"]
        if not matches([float(fn(k, G)) for k in range(G + 1)], want):
            return False, ("with k ones among G rewards the mean is k/G; k rows get 1 - k/G and G - k rows get "
                           "-k/G: add their absolute values.")
    return True, "sum |A| = 2 k (G - k) / G: zero at k = 0 and G, largest at k = G / 2."
