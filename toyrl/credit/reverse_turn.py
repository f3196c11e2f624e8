"""Reverse-turn credit (RTPO, Li et al., arXiv 2608.18682): score each turn against its siblings.

Dimension legend: B rollouts, H turns.

RTPO trains turns last-to-first over sparse reverse trees with on-policy continuations; only its
abstract is public ([S]). The toy formulation here (an interpretation): from each state reached at
turn k, n sibling actions were sampled and continued to the end; the siblings of (i, k) are the rows
that share the node of turn k-1 (the same prefix), and a turn's advantage is its continuation return
minus the siblings' mean (optionally / std). The trainer applies updates for k = K..1 in reverse.
"""
from __future__ import annotations

import torch

from ..batch import discounted_returns
from ..segments import pair_index
from .base import check, group_ids, group_norm
from .registry import need, register_estimator

__all__ = ["rtpo"]


def rtpo(turn_reward: torch.Tensor, turn_mask: torch.Tensor, group: torch.Tensor, node: torch.Tensor, *,
         gamma: float = 1.0, norm: str = "mean", ddof: int = 1, eps: float = 1e-6) -> torch.Tensor:
    """Reverse-turn sibling advantage (arXiv 2608.18682, [S] interpretation) -> (B, H), 0 on invalid turns.

        A_{i,k} = R_{i,k} - mean_{j in sib(i,k)} R_{j,k}        (norm="mean"; "std" divides by std + eps)
        R_{i,k} = sum_{k' >= k} gamma^{k'-k} r_{i,k'},  sib(i,k) = {j : group_j = group_i, node_{j,k-1} = node_{i,k-1}}

    Turn 0's siblings are the whole group. Rows sharing node[:, k] (the same turn-k action) count
    once each, weighting an action by its number of continuations. A turn without siblings gets 0.
    Defaults gamma=1, norm="mean". Example: one group, node [[0, 1, 3], [0, 1, 4], [0, 2, 5]], reward 1 at
    row 0's last turn -> R_k rows [1, 1, 1], [0, 0, 0], [0, 0, 0]; turns 0 and 1 compare all three rows,
    turn 2 compares rows 0 and 1 (node 1) -> [[0.667, 0.667, 0.5], [-0.333, -0.333, -0.5], [-0.333, -0.333, 0.]].
    """
    dims = check("turn_reward", turn_reward, "BH", {}, kind="float")
    check("turn_mask", turn_mask, "BH", dims, kind="bool")
    check("group", group, "B", dims)
    check("node", node, "BH", dims)
    B, H = turn_reward.shape
    gi, _ = group_ids(group)
    parent = torch.cat([torch.full_like(node[:, :1], -1), node[:, :-1]], 1).long()   # (B, H) node of turn k-1
    depth = gi[:, None] * H + torch.arange(H, device=node.device)                     # (B, H) (group, k)
    sib_v, S = pair_index(depth[turn_mask], parent[turn_mask])                        # (V,)
    sib = torch.full((B, H), S, dtype=torch.long, device=node.device)
    sib[turn_mask] = sib_v
    Rk = discounted_returns(turn_reward, turn_mask, gamma)                            # (B, H)
    A = group_norm(Rk.reshape(-1), sib.reshape(-1), S + 1, norm=norm, ddof=ddof, eps=eps)
    return A.view(B, H) * turn_mask.to(turn_reward.dtype)


@register_estimator("rtpo", level="turn", grouped=True, needs=("node",))
def _rtpo(batch, *, gamma: float = 1.0, norm: str = "mean", ddof: int = 1, eps: float = 1e-6):
    """RTPO: continuation return minus the mean over siblings sharing the turn k-1 node (batch.node)."""
    node = need(batch, "node", "rtpo", " (tree node ids (B, H); siblings at turn k share node[:, k-1])")
    return rtpo(batch.turn_reward, batch.turn_mask, batch.group, node, gamma=gamma, norm=norm, ddof=ddof, eps=eps)
