"""Learned critics: shapes, losses that fit, soft update, and the estimators fed by them."""
from __future__ import annotations

import torch

from toyrl.testing import random_batch
from toyrl.credit import (DoubleCritic, TurnCritic, archer, archer_losses, progress_loss, soft_update,
                          sweet_bt_loss, turn_gae, value_loss)


def _fit(params, loss_fn, steps=60, lr=0.03):
    opt = torch.optim.Adam(params, lr=lr)
    first = float(loss_fn())
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_fn()
        loss.backward()
        opt.step()
    return first, float(loss_fn())


def test_losses_hand_values():
    one = torch.ones(1, 2, dtype=torch.bool)
    assert abs(float(value_loss(torch.tensor([[0.0, 1.0]]), torch.ones(1, 2), one)) - 0.25) < 1e-6
    assert abs(float(progress_loss(torch.tensor([[0.2, 0.3]]), one, torch.tensor([1.0]))) - 0.25) < 1e-6
    bt = sweet_bt_loss(torch.tensor([[2.0], [0.0]]), one[:, :1].repeat(2, 1), torch.tensor([1.0, 0.0]),
                       torch.tensor([0, 0]), beta=1.0)
    assert abs(float(bt) - 0.1269) < 1e-3
    assert float(sweet_bt_loss(torch.zeros(2, 1), one[:, :1].repeat(2, 1), torch.ones(2), torch.tensor([0, 1]))) == 0


def test_turn_critic_value_and_progress_fit():
    torch.manual_seed(0)
    b = random_batch(32, 4, n_keys=4, seed=0, dtype=torch.float32)
    x = torch.nn.functional.one_hot(b.state_key, 4).float()                       # (B, H, D)
    critic = TurnCritic(4, hidden=16)
    _, ret = turn_gae(b.turn_reward, torch.zeros_like(b.turn_reward), b.turn_mask)
    first, last = _fit(critic.parameters(), lambda: value_loss(critic(x), ret, b.turn_mask))
    assert critic(x).shape == (32, 4) and last < first
    prog = TurnCritic(4, hidden=16)
    first, last = _fit(prog.parameters(), lambda: progress_loss(prog(x), b.turn_mask, b.outcome()))
    assert last < first
    priv = torch.randn(32, 4, 3)                                                  # SWEET: privileged features
    sw = TurnCritic(7, hidden=16)
    first, last = _fit(sw.parameters(), lambda: sweet_bt_loss(sw(torch.cat([x, priv], -1)), b.turn_mask,
                                                              b.outcome(), b.group, beta=1.0))
    assert last < first


def test_archer_double_critic():
    torch.manual_seed(0)
    b = random_batch(16, 3, seed=1, dtype=torch.float32)
    s, a, a_pi = torch.randn(16, 3, 5), torch.randn(16, 3, 2), torch.randn(16, 3, 2)
    critic, target = DoubleCritic(5, 2, hidden=16), DoubleCritic(5, 2, hidden=16)
    target.load_state_dict(critic.state_dict())
    q_first, _ = archer_losses(critic, target, s, a, a_pi, b.turn_reward, b.turn_mask)
    first, last = _fit(critic.parameters(), lambda: sum(archer_losses(critic, target, s, a, a_pi,
                                                                      b.turn_reward, b.turn_mask)))
    assert last < first
    before = [p.clone() for p in target.parameters()]
    soft_update(target, critic, tau=0.1)
    p0, t0, c0 = before[0], next(target.parameters()), next(critic.parameters())
    torch.testing.assert_close(t0, 0.9 * p0 + 0.1 * c0)
    adv = archer(critic.q(s, a), critic.v(s), b.turn_mask)
    assert adv.shape == (16, 3) and torch.isfinite(adv).all()
