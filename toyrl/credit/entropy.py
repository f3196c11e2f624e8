"""EMPG: entropy-modulated policy gradients (Wang et al., arXiv 2509.09265).

Dimension legend: B rollouts, T tokens, H turns.

Confident turns (low entropy) get their advantage amplified, uncertain ones attenuated, and a turn
earns a bonus when the *next* turn is confident (it led somewhere clear). Entropies are min-max
normalized over the batch; the result is re-centred to batch mean zero.
"""
from __future__ import annotations

import torch

from .base import check, next_valid
from .outcome import grpo
from .registry import need, register_estimator

__all__ = ["empg"]


def empg(adv: torch.Tensor, turn_entropy: torch.Tensor, turn_mask: torch.Tensor, *, kappa: float = 1.0,
         kappa_f: float = 1.0, zeta: float = 0.1, eps: float = 1e-8) -> torch.Tensor:
    """EMPG advantage (arXiv 2509.09265, Eq. 8, 10-12) -> (B, H), 0 on invalid turns.

        Hn = (H - min H) / (max H - min H + eps)                      (over valid turns of the batch)
        g = exp(-kappa Hn) / mean(exp(-kappa Hn)),  f = exp(-kappa_f Hn)
        A'_{i,k} = g_{i,k} A_{i,k} + zeta f_{i,k+1}  (no bonus on the last turn);  A' -= mean(A')

    ``adv`` is the base advantage (B,) or (B, H) (e.g. GRPO); ``turn_entropy`` the mean token
    entropy of each turn. Defaults kappa=1, kappa_f=1, zeta=0.1 (authors' pseudocode; ARLArena
    uses zeta=0.05). Constant entropy -> Hn = 0, g = 1. Example: A [[1., 1., 1.]], H [[0., 1., 0.]],
    zeta 0 -> g [[1.27, 0.47, 1.27]] -> centred [[0.27, -0.53, 0.27]].
    """
    dims = check("turn_entropy", turn_entropy, "BH", {}, kind="float")
    check("turn_mask", turn_mask, "BH", dims, kind="bool")
    if adv.dim() == 1:
        check("adv", adv, "B", dims, kind="float")
        adv = adv[:, None].expand_as(turn_entropy)
    else:
        check("adv", adv, "BH", dims, kind="float")
    m = turn_mask.to(turn_entropy.dtype)
    n = m.sum().clamp(min=1)
    big = torch.finfo(turn_entropy.dtype).max
    lo = torch.where(turn_mask, turn_entropy, torch.full_like(turn_entropy, big)).min()
    hi = torch.where(turn_mask, turn_entropy, torch.full_like(turn_entropy, -big)).max()
    any_valid = turn_mask.any()
    lo, hi = torch.where(any_valid, lo, 0.0), torch.where(any_valid, hi, 0.0)     # no valid turn: no range
    Hn = ((turn_entropy - lo) / (hi - lo + eps)).clamp(0, 1) * m                  # (B, H) in [0, 1]
    w = torch.exp(-kappa * Hn)
    g = w / torch.where(any_valid, (w * m).sum() / n, 1.0)                        # batch mean 1
    f_next, has_next = next_valid(torch.exp(-kappa_f * Hn), turn_mask)
    A = g * adv + zeta * f_next * has_next.to(m.dtype)                            # Eq. 12
    A = A - (A * m).sum() / n
    return A * m


@register_estimator("empg", level="turn", needs=("entropy",))
def _empg(batch, *, kappa: float = 1.0, kappa_f: float = 1.0, zeta: float = 0.1, base_adv=None):
    """EMPG: entropy-modulated GRPO (or base_adv) with a next-turn confidence bonus (batch.entropy)."""
    ent = need(batch, "entropy", "empg", " (per-token entropies (B, T))")
    turn_entropy = batch.token_to_turn(ent, "mean")                               # (B, H)
    if base_adv is None:
        base_adv = grpo(batch.outcome(), batch.group)
    return empg(base_adv, turn_entropy, batch.turn_mask, kappa=kappa, kappa_f=kappa_f, zeta=zeta)
