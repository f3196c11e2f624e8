"""A2TGPO: information-gain turn credit with turn-group normalization (arXiv 2605.06200, [S]).

Dimension legend: B rollouts, H turns.

The information gain IG_{i,k} of a turn is the change in the policy's probability of the ground-truth
answer after that turn (IGPO); the final turn uses the outcome score. A2TGPO (i) z-scores IG among
the rollouts of the same prompt at the same turn index, (ii) accumulates the z-scores to go and
divides by the square root of the number of accumulated terms so that depth does not inflate the
magnitude, and (iii) widens the clip range of informative turns (the clip scheme ``objectives.clipping.a2tgpo``,
which reads ``a2tgpo_z``).
Only the abstract is public: the forms below are the most defensible reading and say so.
"""
from __future__ import annotations

from typing import Optional

import torch

from ..batch import discounted_returns
from .base import check, last_turn, turn_group_norm, turns_to_go
from .registry import need, register_estimator

__all__ = ["a2tgpo", "a2tgpo_z"]


def a2tgpo_z(info_gain: torch.Tensor, turn_mask: torch.Tensor, prompt: torch.Tensor, *,
             outcome: Optional[torch.Tensor] = None, ddof: int = 1, eps: float = 1e-6) -> torch.Tensor:
    """Turn-group z-score of the information gain, per (prompt, turn index) cell -> (B, H).

    If ``outcome`` (B,) is given it replaces IG on each rollout's last valid turn. Singleton cell -> 0.
    Example: IG [[0.2, 0.], [0.4, 0.]], one prompt, outcome [1., 0.], eps~0 -> [[-0.707, 0.707], [0.707, -0.707]].
    """
    dims = check("info_gain", info_gain, "BH", {}, kind="float")
    check("turn_mask", turn_mask, "BH", dims, kind="bool")
    check("prompt", prompt, "B", dims)
    s = info_gain
    if outcome is not None:
        check("outcome", outcome, "B", dims, kind="float")
        s = torch.where(last_turn(turn_mask), outcome[:, None].to(s.dtype), s)
    return turn_group_norm(s, turn_mask, prompt, ddof=ddof, eps=eps)


def a2tgpo(info_gain: torch.Tensor, turn_mask: torch.Tensor, prompt: torch.Tensor, *,
           outcome: Optional[torch.Tensor] = None, gamma: float = 1.0, ddof: int = 1,
           eps: float = 1e-6) -> torch.Tensor:
    """A2TGPO turn advantage (arXiv 2605.06200, [S]) -> (B, H), 0 on invalid turns.

        z_{i,k} = (IG_{i,k} - mean_{(x,k)} IG) / (std_{(x,k)} IG + eps)       (prompt x, turn index k)
        A_{i,k} = sum_{k' >= k} gamma^{k'-k} z_{i,k'} / sqrt(n_{i,k}),  n = number of valid turns k..K

    Defaults gamma=1 ([S]: not given; with gamma=1 the sqrt(n) rescale keeps unit variance for
    independent z), ddof=1, eps=1e-6. Example: z rows [[-0.707, 0.707], [0.707, -0.707]] (see
    ``a2tgpo_z``) -> A [[0., 0.707], [0., -0.707]].
    """
    z = a2tgpo_z(info_gain, turn_mask, prompt, outcome=outcome, ddof=ddof, eps=eps)
    acc = discounted_returns(z, turn_mask, gamma)                                 # (B, H)
    n = turns_to_go(turn_mask).clamp(min=1).to(z.dtype)
    return acc / n.sqrt()


@register_estimator("a2tgpo", level="turn", grouped=True, needs=("info_gain",))
def _a2tgpo(batch, *, gamma: float = 1.0, ddof: int = 1, eps: float = 1e-6, outcome_last: bool = True):
    """A2TGPO: info gain z-scored per (prompt, turn index), accumulated to go / sqrt(#terms)."""
    ig = need(batch, "info_gain", "a2tgpo")
    prompt = batch.task if batch.task is not None else batch.group
    return a2tgpo(ig, batch.turn_mask, prompt, outcome=batch.outcome() if outcome_last else None,
                  gamma=gamma, ddof=ddof, eps=eps)
