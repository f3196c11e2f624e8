"""Lesson 08's checkers: every correct form accepted, the plausible near-misses rejected."""
import numpy as np

from toyrl.exercises import check


def test_seq_mean_weight_accepts_each_correct_form():
    assert check("08.seq_mean_weight", lambda L: 1 / (len(L) * np.asarray(L, float)))
    assert check("08.seq_mean_weight", lambda L: [1 / (len(L) * n) for n in L])


def test_seq_mean_weight_rejects_near_misses():
    for wrong in (lambda L: np.full(len(L), 1 / sum(L)),                         # token-mean
                  lambda L: 1 / np.asarray(L, float),                             # forgets the 1 / B
                  lambda L: np.asarray(L, float) / sum(L),                        # longer rollouts weigh more
                  lambda L: np.ones(len(L)) / len(L)):                            # a whole rollout's weight
        assert check("08.seq_mean_weight", wrong) is False


def test_mean_only_mass_accepts_each_correct_form():
    assert check("08.mean_only_mass", lambda k, G: 2 * k * (G - k) / G)
    assert check("08.mean_only_mass", lambda k, G: k * (1 - k / G) + (G - k) * (k / G))
    assert check("08.mean_only_mass", lambda k, G: float(np.abs(np.r_[np.ones(k), np.zeros(G - k)] - k / G).sum()))


def test_mean_only_mass_rejects_near_misses():
    for wrong in (lambda k, G: k * (G - k) / G,                                  # half the mass
                  lambda k, G: 2 * k * (G - k) / G ** 2,                          # a mean, not a sum
                  lambda k, G: k,
                  lambda k, G: 0.0 if k in (0, G) else np.sqrt(G),               # GRPO-like: flat in k
                  lambda k, G: 2 * k * (G - k) / (G - 1)):                        # the leave-one-out (RLOO) scale
        assert check("08.mean_only_mass", wrong) is False
