"""Tree-GRPO: intra-tree + inter-tree group advantages for tree rollouts (Ji et al., arXiv 2509.21240).

Dimension legend: B leaves (one rollout per root-to-leaf path), H turns.

Rollouts forked from shared prefixes form trees; each row of the batch is one leaf. A leaf is scored
against the other leaves of its tree and against all leaves of the prompt. A shared prefix is trained
once per leaf that contains it, so it receives the sum of its descendants' advantages: an implicit
step-level preference at every branch point.
"""
from __future__ import annotations

import torch

from ..segments import pair_index
from .base import broadcast_turns, check, group_ids, group_norm
from .registry import need, register_estimator

__all__ = ["tree_grpo"]


def tree_grpo(R: torch.Tensor, group: torch.Tensor, tree: torch.Tensor, *, ddof: int = 1,
              eps: float = 1e-6) -> torch.Tensor:
    """Tree-GRPO leaf advantage (arXiv 2509.21240) -> (B,).

        A_leaf = (R - mean_tree R) / (std_tree R + eps) + (R - mean_group R) / (std_group R + eps)

    ``tree`` (B,) is the tree id (e.g. the root node id); trees of different groups never mix.
    Defaults ddof=1, eps=1e-6 (authors' code). A one-leaf tree gets A_intra = 0 (the code's A = R
    is not used). Example: R [1., 0., 0.], trees [0, 0, 1], one group -> intra [0.707, -0.707, 0],
    inter [1.155, -0.577, -0.577] -> [1.862, -1.284, -0.577].
    """
    dims = check("R", R, "B", {}, kind="float")
    check("group", group, "B", dims)
    check("tree", tree, "B", dims)
    gi, nG = group_ids(group)
    ti, nT = pair_index(gi, tree.long())
    return group_norm(R, ti, nT, ddof=ddof, eps=eps) + group_norm(R, gi, nG, ddof=ddof, eps=eps)


@register_estimator("tree_grpo", level="turn", grouped=True, needs=("node",))
def _tree_grpo(batch, *, ddof: int = 1, eps: float = 1e-6):
    """Tree-GRPO: intra-tree + inter-tree GRPO of the leaf return (tree id = batch.node[:, 0])."""
    node = need(batch, "node", "tree_grpo", " (tree node ids (B, H); the tree id is node[:, 0])")
    return broadcast_turns(tree_grpo(batch.outcome(), batch.group, node[:, 0], ddof=ddof, eps=eps),
                           batch.turn_mask)
