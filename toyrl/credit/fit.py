"""One fitting step of each learned credit model, and the features and measurements they read.

Dimension legend: B rollouts, T tokens, H turns, D feature size, A env actions.

A trainer calls one function per model per step on the batch it just collected. Each returns the
model's output on the batch *before* its update (what the estimator then reads: the model has not
yet seen the batch it scores) and the loss it stepped on:

    values, loss = value_fit(critic, opt, state, returns, turn_mask)                # Turn-PPO values
    losses = value_warmup(critic, opt, draw, steps)                                 # the same, before RL
    q, v, q_loss, v_loss = archer_fit(double, target, opt, state, action, r, mask)  # ArCHer, arXiv 2402.19446
    adv, loss = sweet_fit(critic, opt, x_priv, turn_mask, R, group)                 # SWEET-RL, arXiv 2503.15478
    c, loss = progress_fit(critic, opt, x, turn_mask, R)                            # SPA-RL, arXiv 2505.20732
    ig = info_gain(p_answer, turn_mask)                                             # IGPO / A2TGPO, arXiv 2605.06200

Features: ``turn_action_features`` (the mean hidden state over a turn's policy tokens),
``reference_features`` (a multi-hot of a privileged reference solution). The losses are those of
``critics.py``.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

import torch
from torch import nn

from ..segments import dense_index
from .base import check
from .critics import DoubleCritic, archer_losses, progress_loss, soft_update, sweet_bt_loss, value_loss

__all__ = ["turn_action_features", "reference_features", "value_fit", "value_warmup", "archer_fit", "sweet_fit",
           "progress_fit", "info_gain", "pair_accuracy", "group_center"]


def _step(opt: torch.optim.Optimizer, loss: torch.Tensor) -> None:
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


def turn_action_features(hid: torch.Tensor, policy_mask: torch.Tensor, turn_id: torch.Tensor, H: int) -> torch.Tensor:
    """The action of each turn as a feature: the mean of ``hid`` over the turn's policy tokens -> (B, H, D).

    A turn without policy tokens (or past the last turn) gets 0. Example: hid [[[1.], [3.], [5.]]],
    policy [[T, T, F]], turn_id [[0, 0, 1]], H 2 -> [[[2.], [0.]]].
    """
    dims = check("hid", hid, "BTD", {}, kind="float")
    check("policy_mask", policy_mask, "BT", dims, kind="bool")
    check("turn_id", turn_id, "BT", dims)
    B, T, D = hid.shape
    m = policy_mask & (turn_id >= 0)
    slot = torch.where(m, turn_id, H).long()                                     # (B, T); H = the bin of the rest
    out = hid.new_zeros(B, H + 1, D).scatter_add_(1, slot[..., None].expand(B, T, D), hid)   # (B, H + 1, D)
    n = torch.zeros(B, H + 1, device=hid.device, dtype=hid.dtype).scatter_add_(1, slot, m.to(hid.dtype))
    return (out / n.clamp(min=1)[..., None])[:, :H]                             # (B, H, D)


def reference_features(solutions: Sequence[Sequence[int]], n_actions: int, device=None) -> torch.Tensor:
    """Privileged reference information as features: the multi-hot of each rollout's reference actions -> (B, A).

    Example: solutions [[0, 2], [1]], n_actions 3 -> [[1., 0., 1.], [0., 1., 0.]].
    """
    if n_actions < 1:
        raise ValueError(f"n_actions must be >= 1, got {n_actions}")
    out = torch.zeros(len(solutions), n_actions, device=device)                  # (B, A)
    for i, sol in enumerate(solutions):
        for a in sol:
            if not 0 <= int(a) < n_actions:
                raise ValueError(f"solutions[{i}] holds action {a}, outside [0, {n_actions})")
            out[i, int(a)] = 1.0
    return out


def value_fit(critic: nn.Module, opt: torch.optim.Optimizer, state: torch.Tensor, returns: torch.Tensor,
              turn_mask: torch.Tensor) -> tuple[torch.Tensor, float]:
    """One regression step of a turn value critic on Monte Carlo returns (Turn-PPO) -> (values (B, H), loss).

        L = 0.5 * mean_valid (V(s_k) - R_k)^2          (``critics.value_loss``)

    Example: a critic that outputs 0 everywhere, returns [[1., 1.]] -> values [[0., 0.]], loss 0.5.
    """
    values = critic(state)                                                        # (B, H)
    loss = value_loss(values, returns, turn_mask)
    before = values.detach().clone()
    _step(opt, loss)
    return before, loss.item()


def value_warmup(critic: nn.Module, opt: torch.optim.Optimizer,
                 draw: Callable[[int], tuple[torch.Tensor, torch.Tensor, torch.Tensor]], steps: int) -> list[float]:
    """``steps`` regression steps of a turn value critic before RL, one ``value_fit`` step per drawn batch -> losses.

        for k in 0..steps-1:  (s, R, m) = draw(k);  L_k = 0.5 * mean_valid (V(s) - R)^2;  one optimizer step

    ``draw(k)`` returns the features (B, H, D), return targets (B, H) and turn mask (B, H) of batch k (fresh
    rollouts of a frozen policy: the critic's targets are the policy's own returns, so the fit is the policy
    evaluation RL's first steps would otherwise do with a zero critic). Each loss is measured before its step, on
    a batch the critic has not seen. Example: a critic outputting 0 and draws with returns [[1., 1.]] -> first
    loss 0.5, the later ones lower.
    """
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0:
        raise ValueError(f"steps must be an int >= 0, got {steps!r}")
    losses = []
    for k in range(steps):
        state, returns, turn_mask = draw(k)
        losses.append(value_fit(critic, opt, state, returns, turn_mask)[1])
    return losses


def archer_fit(critic: DoubleCritic, target: DoubleCritic, opt: torch.optim.Optimizer, state: torch.Tensor,
               action: torch.Tensor, turn_reward: torch.Tensor, turn_mask: torch.Tensor, *,
               action_pi: Optional[torch.Tensor] = None, gamma: float = 0.95,
               tau: float = 0.1) -> tuple[torch.Tensor, torch.Tensor, float, float]:
    """One TD step of ArCHer's utterance-level double critic, then the Polyak target update (arXiv 2402.19446).

        Q_j(s_k, a_k) <- r_k + gamma (1 - done_k) Vbar_j(s_{k'}),   V_j(s_k) <- Qbar_j(s_k, a^pi_k)
        theta_bar <- (1 - tau) theta_bar + tau theta                  (``critics.archer_losses``, ``soft_update``)

    ``action_pi`` None: the batch's own action stands for a^pi (on-policy, a_k was drawn from pi(.|s_k);
    ArCHer draws a fresh one, which costs a generation per turn). Returns q, v (B, H, 2) before the
    step, and the two losses. Defaults gamma 0.95, tau 0.1. Example: every weight 0, one turn, r 1
    -> q = v = 0, q_loss 1 (target r = 1), v_loss 0.
    """
    a_pi = action if action_pi is None else action_pi
    with torch.no_grad():
        q, v = critic.q(state, action), critic.v(state)                           # (B, H, 2) each
    q_loss, v_loss = archer_losses(critic, target, state, action, a_pi, turn_reward, turn_mask, gamma=gamma)
    _step(opt, q_loss + v_loss)
    soft_update(target, critic, tau)
    return q, v, q_loss.item(), v_loss.item()


def sweet_fit(critic: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, turn_mask: torch.Tensor,
              R: torch.Tensor, group: torch.Tensor, *, beta: float = 0.1) -> tuple[torch.Tensor, float]:
    """One Bradley-Terry step of SWEET-RL's privileged turn critic (arXiv 2503.15478) -> (adv (B, H), loss).

        L = mean_{(+,-) same group, R+ > R-} -log sigmoid(beta sum_k A(+)_k - beta sum_k A(-)_k)

    ``x`` (B, H, D) already holds the privileged features; the critic's per-turn output is the turn
    advantage. Example: a critic that outputs 0, R [1., 0.] in one group -> adv 0, loss log 2 = 0.693.
    """
    adv = critic(x)                                                               # (B, H)
    loss = sweet_bt_loss(adv, turn_mask, R, group, beta=beta)
    before = (adv * turn_mask.to(adv.dtype)).detach().clone()
    _step(opt, loss)
    return before, loss.item()


def progress_fit(critic: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, turn_mask: torch.Tensor,
                 R: torch.Tensor) -> tuple[torch.Tensor, float]:
    """One step of SPA-RL's progress estimator (arXiv 2505.20732) -> (progress c (B, H), loss).

        L = mean_i (sum_k c_{i,k} - R_i)^2              (``critics.progress_loss``)

    Example: a critic that outputs 0.25 on two valid turns, R [1.] -> c [[.25, .25]], loss 0.25.
    """
    c = critic(x)                                                                 # (B, H)
    loss = progress_loss(c, turn_mask, R)
    before = (c * turn_mask.to(c.dtype)).detach().clone()
    _step(opt, loss)
    return before, loss.item()


def info_gain(p_answer: torch.Tensor, turn_mask: torch.Tensor) -> torch.Tensor:
    """Information gain of each turn (IGPO; A2TGPO arXiv 2605.06200) -> (B, H), 0 on invalid turns.

        IG_{i,k} = p_{i,k+1} - p_{i,k}

    ``p_answer`` (B, H + 1): the policy's probability of the ground-truth answer before the first turn
    (column 0) and after each turn k (column k + 1). Example: p [[.1, .3, .2]], both turns valid ->
    [[.2, -.1]].
    """
    dims = check("turn_mask", turn_mask, "BH", {})
    if p_answer.dim() != 2 or tuple(p_answer.shape) != (dims["B"], dims["H"] + 1):
        raise ValueError(f"p_answer must have shape (B, H + 1) = ({dims['B']}, {dims['H'] + 1}), "
                         f"got {tuple(p_answer.shape)}")
    return (p_answer[:, 1:] - p_answer[:, :-1]) * turn_mask.to(p_answer.dtype)   # (B, H)


def group_center(x: torch.Tensor, turn_mask: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """x (B, H) minus the mean of x over the valid turns of the rollout's group -> (B, H), 0 on invalid turns.

    A Bradley-Terry critic compares trajectories of one group only, so its scores are fixed up to a
    shift per group; centering removes that arbitrary shift before the scores serve as advantages.
    Example: x [[1., 3.], [2., 9.]], mask [[T, T], [T, F]], one group -> mean 2 -> [[-1., 1.], [0., 0.]].
    """
    dims = check("x", x, "BH", {}, kind="float")
    check("turn_mask", turn_mask, "BH", dims, kind="bool")
    check("group", group, "B", dims)
    idx, S = dense_index(group)
    m = turn_mask.to(x.dtype)
    total = x.new_zeros(S).index_add_(0, idx, (x * m).sum(1))                    # (S,)
    n = x.new_zeros(S).index_add_(0, idx, m.sum(1))
    return (x - (total / n.clamp(min=1))[idx, None]) * m                         # (B, H)


def pair_accuracy(score: torch.Tensor, R: torch.Tensor, group: torch.Tensor) -> float:
    """Share of same-group pairs with R_i > R_j that ``score`` (B,) orders the same way (nan: no pair).

    How well a Bradley-Terry critic ranks trajectories. Example: score [2., 0., 1.], R [1., 0., 0.],
    one group -> pairs (0, 1), (0, 2), both ordered -> 1.0.
    """
    pair = (group[:, None] == group[None, :]) & (R[:, None] > R[None, :])       # (B, B)
    if not bool(pair.any()):
        return float("nan")
    return float(((score[:, None] > score[None, :]) & pair).sum() / pair.sum())
