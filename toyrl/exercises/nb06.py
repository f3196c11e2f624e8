"""Exercises of notebook 6 (critics)."""
from __future__ import annotations

import torch

from . import exercise, matches


@exercise("06.turn_gae")
def _turn_gae(fn):
    from ..credit.gae import turn_gae
    g = torch.Generator().manual_seed(0)
    for s in range(5):
        H = 2 + s
        r = torch.randint(0, 2, (1, H), generator=g).float()
        V = torch.rand(1, H, generator=g)
        gamma, lam = 0.9, 0.8
        want = turn_gae(r, V, torch.ones(1, H, dtype=torch.bool), gamma=gamma, lam=lam)[0][0]
        if not matches(fn(r[0].tolist(), V[0].tolist(), gamma, lam), want, atol=1e-5):
            return False, ("delta_k = r_k + gamma V_{k+1} - V_k with V = 0 after the last turn, then "
                           "A_k = delta_k + gamma lam A_{k+1}, computed backwards.")
    return True, "your turn-level GAE matches toyrl.credit.turn_gae on 5 trajectories."


@exercise("06.archer")
def _archer(fn):
    from ..credit.critics import archer
    g = torch.Generator().manual_seed(1)
    q, v = torch.randn(3, 4, 2, generator=g), torch.randn(3, 4, 2, generator=g)
    if matches(fn(q, v), archer(q, v, torch.ones(3, 4, dtype=torch.bool))):
        return True, "A = min(Q1, Q2) - min(V1, V2): both minima are pessimistic, as in clipped double Q."
    return False, "take the minimum over the last axis (the two heads) of Q and of V, then subtract."
