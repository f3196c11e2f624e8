"""Lesson 06's checkers: every correct form accepted, the plausible near-misses rejected."""
import numpy as np
import torch

from toyrl.exercises import check


def gae_loop(r, V, gamma, lam):
    """Backwards recursion, V = 0 after the last turn: a list."""
    A, nxt, V = [0.0] * len(r), 0.0, list(V) + [0.0]
    for k in reversed(range(len(r))):
        nxt = r[k] + gamma * V[k + 1] - V[k] + gamma * lam * nxt
        A[k] = nxt
    return A


def gae_sum(r, V, gamma, lam):
    """The closed form sum_l (gamma lam)^l delta_{k+l}, as a numpy array."""
    r, V = np.asarray(r), np.append(np.asarray(V), 0.0)
    d = r + gamma * V[1:] - V[:-1]
    return np.array([sum((gamma * lam) ** l * d[k + l] for l in range(len(d) - k)) for k in range(len(d))])


def test_turn_gae_accepts_each_correct_form():
    assert check("06.turn_gae", gae_loop)
    assert check("06.turn_gae", gae_sum)
    assert check("06.turn_gae", lambda r, V, g, l: torch.tensor(gae_loop(r, V, g, l)))


def test_turn_gae_rejects_near_misses():
    no_lam = lambda r, V, g, l: gae_loop(r, V, g, 1.0)                                   # noqa: E731
    td_only = lambda r, V, g, l: gae_loop(r, V, g, 0.0)                                  # noqa: E731  lambda = 0
    no_bootstrap = lambda r, V, g, l: list(np.asarray(gae_loop(r, [0.0] * len(V), g, l)) - np.asarray(V))  # noqa: E731
    forwards = lambda r, V, g, l: gae_loop(r[::-1], V[::-1], g, l)[::-1]                 # noqa: E731
    returns = lambda r, V, g, l: gae_loop(r, [0.0] * len(V), g, 1.0)                     # noqa: E731  no baseline
    for wrong in (no_lam, td_only, no_bootstrap, forwards, returns, lambda r, V, g, l: r):
        assert check("06.turn_gae", wrong) is False


def test_archer_accepts_and_rejects():
    assert check("06.archer", lambda q, v: q.min(-1).values - v.min(-1).values)
    assert check("06.archer", lambda q, v: torch.amin(q, dim=2) - torch.amin(v, dim=2))
    assert check("06.archer", lambda q, v: np.minimum(q[..., 0].numpy(), q[..., 1].numpy()) - np.minimum(v[..., 0].numpy(), v[..., 1].numpy()))
    for wrong in (lambda q, v: q.amax(-1) - v.amax(-1), lambda q, v: q.mean(-1) - v.mean(-1),
                  lambda q, v: q.amin(-1) - v.amax(-1), lambda q, v: q[..., 0] - v[..., 0],
                  lambda q, v: (q - v).amin(-1)):
        assert check("06.archer", wrong) is False
