"""SPA-RL: stepwise progress attribution (Wang et al., arXiv 2505.20732).

Dimension legend: B rollouts, H turns.

A progress estimator (``critics.TurnCritic`` trained with ``critics.progress_loss`` so that
sum_k c_k ~= R) splits the final reward into per-turn contributions c_k. The step reward adds a
grounding bonus for actions that executed; the policy is then trained on these dense rewards.
"""
from __future__ import annotations

from typing import Optional

import torch

from ..batch import discounted_returns
from .base import check, last_turn, masked_whiten
from .registry import register_estimator

__all__ = ["spa_rewards", "spa"]


def spa_rewards(progress: torch.Tensor, turn_mask: torch.Tensor, *, grounding: Optional[torch.Tensor] = None,
                alpha: float = 1.0, beta: float = 0.5) -> torch.Tensor:
    """SPA step reward (arXiv 2505.20732) -> (B, H), 0 on invalid turns.

        rhat_{i,k} = alpha * c_{i,k} + beta * g_{i,k},   g = 1 if the action executed (last turn: always 1)

    Defaults alpha=1, beta=0.5 (authors' code: grounding value 0.5); ``grounding`` None = all executed.
    Example: c [[0.2, 0.1, 0.7]], g [[1, 0, 1]] -> [[0.7, 0.1, 1.2]].
    """
    dims = check("progress", progress, "BH", {}, kind="float")
    check("turn_mask", turn_mask, "BH", dims, kind="bool")
    g = torch.ones_like(progress) if grounding is None else grounding.to(progress.dtype)
    if grounding is not None:
        check("grounding", grounding, "BH", dims)
    g = torch.where(last_turn(turn_mask), torch.ones_like(g), g)
    return (alpha * progress + beta * g) * turn_mask.to(progress.dtype)


def spa(progress: torch.Tensor, turn_mask: torch.Tensor, *, grounding: Optional[torch.Tensor] = None,
        alpha: float = 1.0, beta: float = 0.5, gamma: float = 1.0, whiten: bool = False) -> torch.Tensor:
    """SPA turn advantage: return-to-go of the step rewards -> (B, H) (arXiv 2505.20732).

        A_{i,k} = sum_{k' >= k} gamma^{k'-k} rhat_{i,k'}        (optionally whitened over valid turns)

    The paper runs token PPO with a critic on rhat; this critic-free form is the Monte-Carlo target
    (for the critic form pass ``spa_rewards`` to ``gae.turn_gae``). Defaults gamma=1, no whitening.
    Example: c [[0.2, 0.1, 0.7]], g [[1, 0, 1]] -> rhat [[0.7, 0.1, 1.2]] -> [[2.0, 1.3, 1.2]].
    """
    rhat = spa_rewards(progress, turn_mask, grounding=grounding, alpha=alpha, beta=beta)
    A = discounted_returns(rhat, turn_mask, gamma)                               # (B, H)
    return masked_whiten(A, turn_mask) if whiten else A


@register_estimator("spa", level="turn", needs=("progress",))
def _spa(batch, *, progress=None, alpha: float = 1.0, beta: float = 0.5, gamma: float = 1.0, whiten: bool = False):
    """SPA-RL: return-to-go of alpha * progress + beta * grounding (keyword progress (B, H); grounding = not void)."""
    if progress is None:
        raise ValueError("estimator 'spa' needs the keyword progress: (B, H) per-turn progress c_k from a "
                         "progress estimator (critics.TurnCritic trained with critics.progress_loss)")
    grounding = None if batch.void_turn is None else ~batch.void_turn
    return spa(progress, batch.turn_mask, grounding=grounding, alpha=alpha, beta=beta, gamma=gamma, whiten=whiten)
