"""The peers' policy losses (DPPO-TV / -KL, DRO, VESPO): hand-computed tensors and gradient properties."""
import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from toyrl.objectives import binary_kl, dppo_kl, dppo_tv, dro, policy_loss, vespo

ONE = torch.ones(1, 3)


def test_dppo_hand_computed():
    lo = torch.full((1, 3), 0.5).log()
    lp = torch.tensor([[0.6, 0.8, 0.2]]).log()
    out = dppo_tv((lp - lo).exp(), ONE, logp=lp, old_logp=lo)
    assert torch.allclose(out.loss, torch.tensor([[0.6130, 0.0, 0.6438]]), atol=1e-4)
    assert out.high.tolist() == [[False, True, False]] and not out.low.any()
    lp = torch.tensor([[0.55, 0.8, 0.2]]).log()
    assert torch.allclose(binary_kl(lp, lo), torch.tensor([[0.0050, 0.2231, 0.2231]]), atol=1e-4)
    out = dppo_kl((lp - lo).exp(), ONE, logp=lp, old_logp=lo)
    assert torch.allclose(out.loss, torch.tensor([[0.6576, 0.0, 0.6438]]), atol=1e-4)
    capped = dppo_tv(torch.full((1, 3), 30.0), ONE, logp=lo, old_logp=lo)
    assert capped.extra.all()                                            # weight capped at C = 20


def test_dro_and_vespo_hand_computed():
    d = torch.tensor([[0.0, 1.0, 2.0]])
    out = dro(ONE, torch.tensor([[1.0, -1.0, 0.0]]), logp=-ONE, token_log_ratio=d, beta=0.5)
    assert torch.allclose(out.loss, torch.tensor([[1.0, -0.75, 1.0]]))
    lw = torch.tensor([[0.0, math.log(2.0), -50.0]])
    out = vespo(ONE, ONE, logp=-ONE, token_log_ratio=lw, pool=lambda x, how: x)
    assert torch.allclose(out.loss, torch.tensor([[1.0, 4 * math.exp(-3), 0.0]]), atol=1e-6)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.floats(0.01, 2.0))
def test_gradients(seed, beta):
    g = torch.Generator().manual_seed(seed)
    B, T = 3, 5
    old = -torch.rand(B, T, generator=g, dtype=torch.float64) * 2
    logp = (old + 0.3 * torch.randn(B, T, generator=g, dtype=torch.float64)).requires_grad_()
    adv = torch.randn(B, T, generator=g, dtype=torch.float64)
    mask = torch.rand(B, T, generator=g) > 0.3
    turn = torch.zeros(B, T, dtype=torch.long)
    z = torch.zeros(B, T, dtype=torch.float64)
    # DRO: grad = -(A - beta d) on the mask (token-sum)
    loss, _ = policy_loss(logp, old, adv, mask, turn, clip="dro", agg="token-sum", beta=beta)
    (gr,) = torch.autograd.grad(loss, logp)
    assert torch.allclose(gr, torch.where(mask, -(adv - beta * (logp - old).detach()), z))
    # DPPO: grad = -A min(r, C) on valid tokens, 0 on masked-out (invalid) ones
    loss, info = policy_loss(logp, old, adv, mask, turn, clip="dppo_tv", agg="token-sum", delta_low=0.1,
                             delta_high=0.1)
    (gr,) = torch.autograd.grad(loss, logp)
    valid = mask & ~info["clipped"]
    assert torch.allclose(gr, torch.where(valid, -adv * info["ratio"].clamp(max=20.0), z))
    # VESPO on-policy (W = 1 -> phi = 1): plain REINFORCE gradient -A
    loss, _ = policy_loss(logp, logp.detach(), adv, mask, turn, clip="vespo", agg="token-sum")
    (gr,) = torch.autograd.grad(loss, logp)
    assert torch.allclose(gr, torch.where(mask, -adv, z))
