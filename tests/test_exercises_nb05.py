"""Checkers of notebook 05 (context mismatch): every correct form accepted, the plausible near-misses rejected."""
import numpy as np

from toyrl.exercises import nb05


def test_last_clean_turn():
    assert nb05._last_clean(lambda K: K)[0] and nb05._last_clean(lambda K: np.int64(K))[0]
    for wrong in (lambda K: K + 1, lambda K: K - 1, lambda K: 1):
        assert not nb05._last_clean(wrong)[0]


def test_biased_turns_accepts_every_form():
    assert nb05._biased_turns(lambda K, n: max(n - K - 1, 0))[0]
    assert nb05._biased_turns(lambda K, n: np.clip(n - K - 1, 0, None))[0]
    assert nb05._biased_turns(lambda K, n: float(len(range(K + 1, n))))[0]


def test_biased_turns_rejects_near_misses():
    for wrong in (lambda K, n: n - K - 1,            # negative for a short episode
                  lambda K, n: max(n - K, 0),        # counts turn K as cut
                  lambda K, n: max(n - K - 2, 0),    # off by one the other way
                  lambda K, n: K,                    # the clean turns' last index
                  lambda K, n: "n - K - 1"):         # not a number
        assert not nb05._biased_turns(wrong)[0]
