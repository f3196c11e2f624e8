"""Exercises of notebook 7 (trees)."""
from __future__ import annotations

import torch

from . import exercise

_T, _F = True, False
CASES = [
    # (node (B, H), valid-turn mask (B, H)): a full tree; a two-leaf fork; a deeper tree; rows of different lengths
    # whose invalid turns carry leftover ids (they count for nothing); independent episodes (nothing shared).
    (torch.tensor([[0, 1, 2], [0, 1, 3], [4, 5, 6]]), None),
    (torch.tensor([[0, 1], [0, 2]]), None),
    (torch.tensor([[0, 1, 2, 3], [0, 1, 2, 4], [0, 5, 6, 7], [0, 5, 8, 9]]), None),
    (torch.tensor([[0, 1, 2, 3], [0, 1, 7, 8], [0, 4, 5, 9]]),
     torch.tensor([[_T, _T, _T, _T], [_T, _T, _F, _F], [_T, _T, _T, _F]])),
    (torch.tensor([[0, 1, 2], [3, 4, 5]]), torch.tensor([[_T, _T, _F], [_T, _T, _T]])),
]


def _cases():
    for node, mask in CASES:
        yield node, (torch.ones_like(node, dtype=torch.bool) if mask is None else mask)


def _distinct(node, mask) -> int:
    from ..viz.trees import tree_edges
    return len(tree_edges(node, mask)[0])


@exercise("07.n_nodes")
def _n_nodes(fn):
    for node, mask in _cases():
        if int(fn(node.clone(), mask.clone())) != _distinct(node, mask):
            return False, ("count the distinct node ids over the valid turns only (node[mask]): a shared prefix "
                           "counts once, and an invalid turn's id counts not at all.")
    return True, "distinct node ids of valid turns = turns actually generated; the rows hold more turns than that."


@exercise("07.saving")
def _saving(fn):
    for node, mask in _cases():
        want = 1 - _distinct(node, mask) / int(mask.sum())
        if abs(float(fn(node.clone(), mask.clone())) - want) > 1e-6:
            return False, "1 - (distinct node ids of valid turns) / (number of valid row-turns), for any batch."
    return True, ("a tree re-uses its shared prefixes (16 row-turns cost 10 generated turns in the third case); "
                  "independent episodes save nothing.")
