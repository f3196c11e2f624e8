"""Checkers of notebook 12 (the rollout engine is not the trainer): every correct form accepted, the plausible
near-misses rejected."""
import math

import numpy as np
import torch

from toyrl.exercises import nb12


def test_k3_term_accepts_every_form():
    assert nb12.k3_term(lambda d: math.exp(d) - 1 - d)[0]
    assert nb12.k3_term(lambda d: np.expm1(d) - d)[0]
    assert nb12.k3_term(lambda d: float(torch.tensor(d, dtype=torch.float64).exp() - 1 - d))[0]


def test_k3_term_rejects_the_other_direction_and_other_estimators():
    ok, msg = nb12.k3_term(lambda d: math.exp(-d) - 1 + d)            # KL(trainer || engine)
    assert not ok and "KL(trainer || engine)" in msg
    for wrong in (lambda d: -d, lambda d: d * d / 2, lambda d: math.exp(d) - 1, lambda d: abs(d)):   # k1, k2, ...
        assert not nb12.k3_term(wrong)[0]


def test_topk_ratio():
    assert nb12.topk_ratio(0.8)[0] and nb12.topk_ratio(np.float32(0.8))[0] and nb12.topk_ratio(4 / 5)[0]
    for wrong in (1.25, 1.0, 0.2, math.log(0.8)):                    # the inverse, no change, the dropped mass, log
        assert not nb12.topk_ratio(wrong)[0]


def test_tis_weights():
    assert nb12.tis_weights(lambda o, r, c: [min(math.exp(a - b), c) for a, b in zip(o, r)])[0]
    assert nb12.tis_weights(lambda o, r, c: torch.exp(torch.tensor(o) - torch.tensor(r)).clamp(max=c).tolist())[0]
    for wrong in (lambda o, r, c: [min(math.exp(b - a), c) for a, b in zip(o, r)],           # engine over trainer
                  lambda o, r, c: [min(max(math.exp(a - b), 1 / c), c) for a, b in zip(o, r)],   # also clipped below
                  lambda o, r, c: [math.exp(a - b) for a, b in zip(o, r)],                     # not truncated
                  lambda o, r, c: [min(a - b, c) for a, b in zip(o, r)]):                      # log space
        assert not nb12.tis_weights(wrong)[0]
