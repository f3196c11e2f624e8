"""Lesson 07's checkers: every correct form accepted, the plausible near-misses rejected (a count that ignores the
valid-turn mask, a constant saving)."""
import numpy as np
import torch

from toyrl.exercises import check


def test_n_nodes_accepts_each_correct_form():
    assert check("07.n_nodes", lambda node, mask: len(torch.unique(node[mask])))
    assert check("07.n_nodes", lambda node, mask: torch.unique(node[mask]).numel())
    assert check("07.n_nodes", lambda node, mask: len(set(node[mask].tolist())))
    assert check("07.n_nodes", lambda node, mask: len(np.unique(node.numpy()[mask.numpy()])))


def test_n_nodes_rejects_near_misses():
    for wrong in (lambda node, mask: len(torch.unique(node)),                   # ignores the mask
                  lambda node, mask: int(mask.sum()),                            # every row-turn
                  lambda node, mask: node.numel(),
                  lambda node, mask: len(torch.unique(node[mask])) - 1):
        assert check("07.n_nodes", wrong) is False


def test_saving_accepts_each_correct_form():
    assert check("07.saving", lambda node, mask: 1 - len(torch.unique(node[mask])) / mask.sum().item())
    assert check("07.saving", lambda node, mask: float(1 - torch.unique(node[mask]).numel() / mask.sum()))
    assert check("07.saving", lambda node, mask: (mask.sum().item() - len(set(node[mask].tolist()))) / mask.sum().item())


def test_saving_rejects_near_misses():
    for wrong in (lambda node, mask: 0.375,                                      # the one case's answer
                  lambda node, mask: 1 - len(torch.unique(node)) / mask.sum().item(),    # ignores the mask
                  lambda node, mask: 1 - len(torch.unique(node[mask])) / node.numel(),   # counts invalid turns
                  lambda node, mask: len(torch.unique(node[mask])) / mask.sum().item(),  # the kept share
                  lambda node, mask: 0.0):
        assert check("07.saving", wrong) is False
