"""Multi-turn credit: MT-GRPO, Tree-GRPO, RTPO, SPA, EMPG, A2TGPO, ArCHer, SWEET (hand cases + loop refs)."""
from __future__ import annotations

import torch
from hypothesis import given, settings, strategies as st

from test_credit_batches import random_batch
from toyrl.credit import (a2tgpo, a2tgpo_clip_eps, archer, empg, mt_grpo, rtpo, spa, sweet, tree_grpo)

T1 = torch.ones(1, 3, dtype=torch.bool)


def close(a, b, tol=1e-3):
    torch.testing.assert_close(a, torch.as_tensor(b, dtype=a.dtype), atol=tol, rtol=0)


def test_hand_cases():
    all2 = torch.ones(2, 2, dtype=torch.bool)
    close(mt_grpo(torch.tensor([1.0, 0.0]), torch.tensor([[1.0, 0.0], [0.0, 0.0]]), all2, torch.tensor([0, 0]),
                  eps=1e-9), [[1.414, 0.707], [-1.414, -0.707]])
    close(tree_grpo(torch.tensor([1.0, 0.0, 0.0]), torch.tensor([0, 0, 0]), torch.tensor([0, 0, 1])),
          [1.862, -1.284, -0.577])
    close(rtpo(torch.tensor([[0, 0, 1.0], [0, 0, 0], [0, 0, 0]]), torch.ones(3, 3, dtype=torch.bool),
               torch.tensor([0, 0, 0]), torch.tensor([[0, 1, 3], [0, 1, 4], [0, 2, 5]])),
          [[0.667, 0.667, 0.5], [-0.333, -0.333, -0.5], [-0.333, -0.333, 0.0]])
    close(spa(torch.tensor([[0.2, 0.1, 0.7]]), T1, grounding=torch.tensor([[1, 0, 1]])), [[2.0, 1.3, 1.2]])
    close(empg(torch.ones(1, 3), torch.tensor([[0.0, 1.0, 0.0]]), T1, zeta=0.0), [[0.267, -0.534, 0.267]])
    close(a2tgpo(torch.tensor([[0.2, 0.0], [0.4, 0.0]]), all2, torch.tensor([0, 0]), outcome=torch.tensor([1.0, 0.0]),
                 eps=1e-9), [[0.0, 0.707], [0.0, -0.707]])
    close(a2tgpo_clip_eps(torch.tensor([[0.0, 10.0, -10.0]]), T1), [[0.2, 0.4, 0.0]])
    close(archer(torch.tensor([[[1.0, 2.0]]]), torch.tensor([[[0.5, 0.25]]]), T1[:, :1]), [[0.75]])
    close(sweet(torch.tensor([[-1.0, -1.0, -2.0]]), torch.tensor([[-2.0, -2.0, -2.0]]), torch.tensor([[0, 0, 1]]),
                T1, 2), [[1.0, 0.0]])


def test_mt_grpo_v1_two_turn_case():
    """Two turns: turn 0 gets A^O + A^T, turn 1 gets A^O exactly."""
    R, sig = torch.tensor([1.0, 1.0, 0.0, 0.0]), torch.tensor([[1.0, 0], [0, 0], [1, 0], [0, 0]])
    mask, grp = torch.ones(4, 2, dtype=torch.bool), torch.zeros(4, dtype=torch.long)
    A = mt_grpo(R, sig, mask, grp)
    AO = (R - R.mean()) / (R.std() + 1e-4)
    AT = (sig[:, 0] - sig[:, 0].mean()) / (sig[:, 0].std() + 1e-4)
    close(A[:, 0], AO + AT, 1e-5)
    close(A[:, 1], AO, 1e-5)


def _z_loop(x, mask, prompt, eps):
    """(prompt, turn index) z-scores by explicit loops."""
    z = torch.zeros_like(x)
    B, H = x.shape
    for b in range(B):
        for k in range(H):
            if mask[b, k]:
                peers = torch.stack([x[j, k] for j in range(B) if prompt[j] == prompt[b] and mask[j, k]])
                if len(peers) > 1:
                    z[b, k] = (x[b, k] - peers.mean()) / (peers.std() + eps)
    return z


@settings(deadline=None, max_examples=15)
@given(seed=st.integers(0, 9999))
def test_turn_group_estimators_match_loops(seed):
    b = random_batch(12, 4, seed=seed)
    m, H = b.turn_mask, b.H
    z = _z_loop(b.turn_signal, m, b.group, 1e-4)
    R = b.outcome()
    AO = torch.stack([(R[i] - R[b.group == b.group[i]].mean()) / (R[b.group == b.group[i]].std() + 1e-4)
                      if (b.group == b.group[i]).sum() > 1 else R[i] * 0 for i in range(b.B)])
    want = torch.stack([torch.stack([(AO[i] + z[i, k:].sum()) * m[i, k] for k in range(H)]) for i in range(b.B)])
    torch.testing.assert_close(mt_grpo(R, b.turn_signal, m, b.group), want)
    # A2TGPO: z-scores of info gain (outcome on the last turn), summed to go / sqrt(#terms)
    ig = b.info_gain.clone()
    for i in range(b.B):
        if m[i].any():
            ig[i, int(m[i].nonzero().max())] = R[i]
    z = _z_loop(ig, m, b.task, 1e-6)
    want = torch.stack([torch.stack([z[i, k:].sum() / max(int(m[i, k:].sum()), 1) ** 0.5 * m[i, k]
                                     for k in range(H)]) for i in range(b.B)])
    torch.testing.assert_close(a2tgpo(b.info_gain, m, b.task, outcome=R), want)


@settings(deadline=None, max_examples=15)
@given(seed=st.integers(0, 9999))
def test_rtpo_and_tree_match_loops(seed):
    b = random_batch(12, 4, seed=seed)
    m, node = b.turn_mask, b.node
    Rk = b.returns(1.0)
    want = torch.zeros_like(Rk)
    for i in range(b.B):
        for k in range(b.H):
            if not m[i, k]:
                continue
            sib = [j for j in range(b.B) if b.group[j] == b.group[i] and m[j, k]
                   and (k == 0 or node[j, k - 1] == node[i, k - 1])]
            want[i, k] = Rk[i, k] - torch.stack([Rk[j, k] for j in sib]).mean()
    torch.testing.assert_close(rtpo(b.turn_reward, m, b.group, node), want)
    R, tree = b.outcome(), node[:, 0]

    def g(mask_rows, i):
        x = R[mask_rows]
        return (R[i] - x.mean()) / (x.std() + 1e-6) if len(x) > 1 else R[i] * 0
    want = torch.stack([g((tree == tree[i]) & (b.group == b.group[i]), i) + g(b.group == b.group[i], i)
                        for i in range(b.B)])
    torch.testing.assert_close(tree_grpo(R, b.group, tree), want)


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
    close(A[:, 0], [1.0, 1.0])
