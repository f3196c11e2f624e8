"""Exercises of notebook 7 (trees)."""
from __future__ import annotations

import torch

from . import exercise


@exercise("07.n_nodes")
def _n_nodes(fn):
    from ..viz.trees import tree_edges
    cases = [torch.tensor([[0, 1, 2], [0, 1, 3], [4, 5, 6]]), torch.tensor([[0, 1], [0, 2]]),
             torch.tensor([[0, 1, 2, 3], [0, 1, 2, 4], [0, 5, 6, 7], [0, 5, 8, 9]])]
    for node in cases:
        mask = torch.ones_like(node, dtype=torch.bool)
        want = len(tree_edges(node, mask)[0])
        if int(fn(node, mask)) != want:
            return False, "count the distinct node ids over the valid turns (a shared prefix counts once)."
    return True, "distinct node ids = turns actually generated; the rows hold more turns than that."


@exercise("07.saving")
def _saving(fn):
    node = torch.tensor([[0, 1, 2, 3], [0, 1, 2, 4], [0, 5, 6, 7], [0, 5, 8, 9]])
    mask = torch.ones_like(node, dtype=torch.bool)
    want = 1 - 10 / 16
    if abs(float(fn(node, mask)) - want) < 1e-6:
        return True, "a tree re-uses its shared prefixes: 16 row-turns cost only 10 generated turns here."
    return False, "1 - (distinct nodes) / (valid row-turns)."
