"""Multi-turn credit: MT-GRPO, Tree-GRPO, RTPO, SPA, EMPG, A2TGPO, ArCHer, SWEET (hand cases, properties;
the loop references are toyrl.credit.REFERENCE, compared in test_credit_reference.py and below on the bare functions)."""
from __future__ import annotations

import torch
from hypothesis import given, settings, strategies as st

from toyrl.testing import random_batch
from toyrl.credit import REFERENCE, a2tgpo, archer, empg, mt_grpo, rtpo, spa, sweet, tree_grpo

T1 = torch.ones(1, 3, dtype=torch.bool)


def assert_near(a, b, tol=1e-3):
    torch.testing.assert_close(a, torch.as_tensor(b, dtype=a.dtype), atol=tol, rtol=0)


def test_hand_cases():
    all2 = torch.ones(2, 2, dtype=torch.bool)
    assert_near(mt_grpo(torch.tensor([1.0, 0.0]), torch.tensor([[1.0, 0.0], [0.0, 0.0]]), all2, torch.tensor([0, 0]),
                  eps=1e-9), [[1.414, 0.707], [-1.414, -0.707]])
    assert_near(tree_grpo(torch.tensor([1.0, 0.0, 0.0]), torch.tensor([0, 0, 0]), torch.tensor([0, 0, 1])),
          [1.862, -1.284, -0.577])
    assert_near(rtpo(torch.tensor([[0, 0, 1.0], [0, 0, 0], [0, 0, 0]]), torch.ones(3, 3, dtype=torch.bool),
               torch.tensor([0, 0, 0]), torch.tensor([[0, 1, 3], [0, 1, 4], [0, 2, 5]])),
          [[0.667, 0.667, 0.5], [-0.333, -0.333, -0.5], [-0.333, -0.333, 0.0]])
    assert_near(spa(torch.tensor([[0.2, 0.1, 0.7]]), T1, grounding=torch.tensor([[1, 0, 1]])), [[2.0, 1.3, 1.2]])
    assert_near(empg(torch.ones(1, 3), torch.tensor([[0.0, 1.0, 0.0]]), T1, zeta=0.0), [[0.267, -0.534, 0.267]])
    assert_near(a2tgpo(torch.tensor([[0.2, 0.0], [0.4, 0.0]]), all2, torch.tensor([0, 0]), outcome=torch.tensor([1.0, 0.0]),
                 eps=1e-9), [[0.0, 0.707], [0.0, -0.707]])
    assert_near(archer(torch.tensor([[[1.0, 2.0]]]), torch.tensor([[[0.5, 0.25]]]), T1[:, :1]), [[0.75]])
    assert_near(sweet(torch.tensor([[-1.0, -1.0, -2.0]]), torch.tensor([[-2.0, -2.0, -2.0]]), torch.tensor([[0, 0, 1]]),
                T1, 2), [[1.0, 0.0]])


def test_mt_grpo_v1_two_turn_case():
    """Two turns: turn 0 gets A^O + A^T, turn 1 gets A^O exactly."""
    R, sig = torch.tensor([1.0, 1.0, 0.0, 0.0]), torch.tensor([[1.0, 0], [0, 0], [1, 0], [0, 0]])
    mask, grp = torch.ones(4, 2, dtype=torch.bool), torch.zeros(4, dtype=torch.long)
    A = mt_grpo(R, sig, mask, grp)
    AO = (R - R.mean()) / (R.std() + 1e-4)
    AT = (sig[:, 0] - sig[:, 0].mean()) / (sig[:, 0].std() + 1e-4)
    assert_near(A[:, 0], AO + AT, 1e-5)
    assert_near(A[:, 1], AO, 1e-5)


@settings(deadline=None, max_examples=15)
@given(seed=st.integers(0, 9999))
def test_bare_functions_equal_the_references(seed):
    """The functions the registry wraps, called on the fields directly, equal the loops."""
    b = random_batch(12, 4, seed=seed)
    m, R = b.turn_mask, b.outcome()
    torch.testing.assert_close(mt_grpo(R, b.turn_signal, m, b.group), REFERENCE["mt_grpo"](b))
    torch.testing.assert_close(a2tgpo(b.info_gain, m, b.task, outcome=R), REFERENCE["a2tgpo"](b))
    torch.testing.assert_close(rtpo(b.turn_reward, m, b.group, b.node), REFERENCE["rtpo"](b))
    A = tree_grpo(R, b.group, b.node[:, 0])
    torch.testing.assert_close(A[:, None] * m, REFERENCE["tree_grpo"](b))


@settings(deadline=None, max_examples=20)
@given(seed=st.integers(0, 9999), zeta=st.floats(0, 0.5))
def test_empg_properties(seed, zeta):
    b = random_batch(10, 4, seed=seed)
    ent = b.token_to_turn(b.entropy, "mean")
    A = empg(torch.randn(10, dtype=torch.float64), ent, b.turn_mask, zeta=zeta)
    assert abs(float(A[b.turn_mask].sum())) < 1e-9 and torch.isfinite(A).all()
    same = empg(torch.ones(10, dtype=torch.float64), torch.ones_like(ent), b.turn_mask, zeta=0.0)
    assert torch.allclose(same, torch.zeros_like(same))     # constant entropy: g = 1, centred ones -> 0


def test_spa_sum_of_progress_is_first_turn_advantage():
    c = torch.tensor([[0.2, 0.3, 0.5], [1.0, 0.0, 0.0]])
    mask = torch.tensor([[True, True, True], [True, False, False]])
    A = spa(c, mask, beta=0.0)
    assert_near(A[:, 0], [1.0, 1.0])
