"""Turn-level reward credit: MT-GRPO (Zeng et al., arXiv 2505.11821; Wei et al. v2).

Dimension legend: B rollouts, H turns.

A checkable intermediate signal per turn (the tool call ran, the retrieved text holds the answer)
is GRPO-normalized among the rollouts of the group *at the same turn index* and credited to that
turn and every earlier one, on top of the outcome advantage.
"""
from __future__ import annotations

import torch

from .base import check, group_ids, group_norm, turn_group_norm
from .registry import register_estimator

__all__ = ["mt_grpo"]


def mt_grpo(R: torch.Tensor, turn_signal: torch.Tensor, turn_mask: torch.Tensor, group: torch.Tensor, *,
            lam: float = 1.0, ddof: int = 1, eps: float = 1e-4) -> torch.Tensor:
    """MT-GRPO turn-level credit (arXiv 2505.11821) -> (B, H), 0 on invalid turns.

        A^O_i = GRPO_g(R_i),   z_{i,k} = GRPO_{(g, k)}(s_{i,k})
        A_{i,k} = A^O_i + lam * sum_{k' >= k} z_{i,k'}

    v1 (two turns, tool signal on turn 0) gives turn 0 A^O + lam A^T and turn 1 A^O exactly; the
    sum over later turns is the v2 generalisation with equal weights c_k = lam ([S]: v2's weights
    are not confirmed). Defaults lam=1, eps=1e-4 (authors' code), ddof=1. A (group, turn) cell with
    one member gives z = 0. Example: R [1., 0.], s [[1., 0.], [0., 0.]], one group, eps~0 ->
    A^O [0.707, -0.707], z [[0.707, 0], [-0.707, 0]] -> [[1.414, 0.707], [-1.414, -0.707]].
    """
    dims = check("R", R, "B", {}, kind="float")
    check("turn_signal", turn_signal, "BH", dims, kind="float")
    check("turn_mask", turn_mask, "BH", dims, kind="bool")
    check("group", group, "B", dims)
    gi, nG = group_ids(group)
    A_O = group_norm(R, gi, nG, ddof=ddof, eps=eps)                               # (B,)
    z = turn_group_norm(turn_signal, turn_mask, group, ddof=ddof, eps=eps)        # (B, H)
    to_go = z.flip(1).cumsum(1).flip(1)                                           # sum_{k' >= k} z
    return (A_O[:, None] + lam * to_go) * turn_mask.to(R.dtype)


@register_estimator("mt_grpo", level="turn", grouped=True)
def _mt_grpo(batch, *, lam: float = 1.0, ddof: int = 1, eps: float = 1e-4):
    """MT-GRPO: outcome GRPO + lam * turn-index-normalized turn signals to go (batch.turn_signal, else turn_reward)."""
    signal = batch.turn_signal if batch.turn_signal is not None else batch.turn_reward
    return mt_grpo(batch.outcome(), signal, batch.turn_mask, batch.group, lam=lam, ddof=ddof, eps=eps)
