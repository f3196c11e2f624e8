"""Learned turn-level critics and their losses: Turn-PPO values, ArCHer double Q/V, SWEET-RL, SPA progress.

Dimension legend: B rollouts, T tokens, H turns, D feature size.

Every model reads per-turn features (B, H, D) float (one-hot env states, policy hidden states; SWEET
concatenates privileged features) and returns (B, H). A trainer fits them with the losses below:

    critic = TurnCritic(D)                          # values for turn_gae, progress for spa
    loss = value_loss(critic(x), returns, mask)     # Turn-PPO regression on turn_gae's returns
    loss = progress_loss(critic(x), mask, R)        # SPA-RL: sum_k c_k ~= R
    loss = sweet_bt_loss(critic(cat(x, priv)), mask, R, group)   # SWEET-RL Bradley-Terry
    q_loss, v_loss = archer_losses(double, target, s, a, a_pi, r, mask); soft_update(target, double)

References: ArCHer arXiv 2402.19446; SWEET-RL arXiv 2503.15478; Turn-PPO 2512.17008; SPA-RL 2505.20732.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn
from torch.nn import functional as F

from ..batch import token_to_turn
from .base import check, last_turn, next_valid
from .registry import need, register_estimator

__all__ = ["TurnCritic", "DoubleCritic", "value_loss", "progress_loss", "sweet_bt_loss", "archer_losses",
           "soft_update", "archer", "sweet"]


class TurnCritic(nn.Module):
    """A small MLP: per-turn features (B, H, D) -> one score per turn (B, H)."""

    def __init__(self, in_dim: int, hidden: int = 64, depth: int = 2):
        super().__init__()
        layers, d = [], in_dim
        for _ in range(depth):
            layers += [nn.Linear(d, hidden), nn.Tanh()]
            d = hidden
        self.net = nn.Sequential(*layers, nn.Linear(d, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).squeeze(-1)                                            # (B, H)


class DoubleCritic(nn.Module):
    """ArCHer's utterance-level double critic: Q1, Q2 on (state, action), V1, V2 on state -> (B, H, 2) each."""

    def __init__(self, state_dim: int, action_dim: int, hidden: int = 64):
        super().__init__()
        self.q_heads = nn.ModuleList([TurnCritic(state_dim + action_dim, hidden) for _ in range(2)])
        self.v_heads = nn.ModuleList([TurnCritic(state_dim, hidden) for _ in range(2)])

    def q(self, state: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        sa = torch.cat([state, action], -1)                                       # (B, H, Ds + Da)
        return torch.stack([h(sa) for h in self.q_heads], -1)                     # (B, H, 2)

    def v(self, state: torch.Tensor) -> torch.Tensor:
        return torch.stack([h(state) for h in self.v_heads], -1)                  # (B, H, 2)


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    m = mask.to(x.dtype)
    return (x * m).sum() / m.sum().clamp(min=1)


def value_loss(values: torch.Tensor, returns: torch.Tensor, turn_mask: torch.Tensor, *,
               old_values: Optional[torch.Tensor] = None, clip: Optional[float] = None) -> torch.Tensor:
    """Turn-value regression: 0.5 * mean_valid max((V - ret)^2, (V_clip - ret)^2) -> scalar.

    V_clip = old_V + clamp(V - old_V, -clip, clip) when ``clip`` is set (verl uses 0.5). ``returns``
    are turn_gae's A + V (detached). Example: V [[0., 1.]], ret [[1., 1.]] -> 0.25.
    """
    dims = check("values", values, "BH", {}, kind="float")
    check("returns", returns, "BH", dims, kind="float")
    check("turn_mask", turn_mask, "BH", dims)
    err = (values - returns.detach()) ** 2
    if clip is not None and old_values is not None:
        v_clip = old_values + (values - old_values).clamp(-clip, clip)
        err = torch.maximum(err, (v_clip - returns.detach()) ** 2)
    return 0.5 * _masked_mean(err, turn_mask)


def progress_loss(progress: torch.Tensor, turn_mask: torch.Tensor, R: torch.Tensor) -> torch.Tensor:
    """SPA-RL progress-estimator loss (arXiv 2505.20732): mean_i (sum_k c_{i,k} - R_i)^2 -> scalar.

    Example: c [[0.2, 0.3]], R [1.] -> 0.25.
    """
    dims = check("progress", progress, "BH", {}, kind="float")
    check("turn_mask", turn_mask, "BH", dims)
    check("R", R, "B", dims, kind="float")
    return (((progress * turn_mask.to(progress.dtype)).sum(1) - R) ** 2).mean()


def sweet_bt_loss(turn_adv: torch.Tensor, turn_mask: torch.Tensor, R: torch.Tensor, group: torch.Tensor, *,
                  beta: float = 0.1) -> torch.Tensor:
    """SWEET-RL critic loss (arXiv 2503.15478): Bradley-Terry over pairs of the same group -> scalar.

        L = mean_{(+,-): g+ = g-, R+ > R-} -log sigmoid(beta * sum_k A_k(+) - beta * sum_k A_k(-))

    ``turn_adv`` is the critic's per-turn advantage (it sees privileged features). All ordered pairs
    in a group (O(B^2) memory). No pair -> 0. Default beta=0.1. Example: A sums [2., 0.], R [1., 0.],
    one group, beta 1 -> -log sigmoid(2) = 0.127.
    """
    dims = check("turn_adv", turn_adv, "BH", {}, kind="float")
    check("turn_mask", turn_mask, "BH", dims)
    check("R", R, "B", dims, kind="float")
    check("group", group, "B", dims)
    S = (turn_adv * turn_mask.to(turn_adv.dtype)).sum(1)                          # (B,)
    pair = (group[:, None] == group[None, :]) & (R[:, None] > R[None, :])         # (B, B) chosen i, rejected j
    nll = -F.logsigmoid(beta * (S[:, None] - S[None, :]))                         # (B, B)
    return (nll * pair).sum() / pair.sum().clamp(min=1)


def archer_losses(critic: DoubleCritic, target: DoubleCritic, state: torch.Tensor, action: torch.Tensor,
                  action_pi: torch.Tensor, turn_reward: torch.Tensor, turn_mask: torch.Tensor, *,
                  gamma: float = 0.95) -> tuple[torch.Tensor, torch.Tensor]:
    """ArCHer double-critic TD losses (arXiv 2402.19446) -> (q_loss, v_loss), MSE over valid turns.

        Q_j(s_k, a_k) <- r_k + gamma (1 - done_k) Vbar_j(s_{k'})        k' = next valid turn
        V_j(s_k)      <- Qbar_j(s_k, a^pi_k)                             a^pi a fresh policy sample

    bar = target network (update with ``soft_update``, tau=0.1). Defaults gamma=0.95. Example: one
    turn, r 1, done -> Q target 1.
    """
    dims = check("state", state, "BHD", {}, kind="float")
    check("turn_reward", turn_reward, "BH", dims, kind="float")
    check("turn_mask", turn_mask, "BH", dims)
    m = turn_mask
    with torch.no_grad():
        v_bar = target.v(state)                                                   # (B, H, 2)
        done = last_turn(m).to(turn_reward.dtype)
        q_tgt = torch.stack([turn_reward + gamma * (1 - done) * next_valid(v_bar[..., j], m)[0]
                             for j in range(2)], -1)                              # (B, H, 2)
        v_tgt = target.q(state, action_pi)                                        # (B, H, 2)
    q_loss = _masked_mean(((critic.q(state, action) - q_tgt) ** 2).mean(-1), m)
    v_loss = _masked_mean(((critic.v(state) - v_tgt) ** 2).mean(-1), m)
    return q_loss, v_loss


@torch.no_grad()
def soft_update(target: nn.Module, online: nn.Module, tau: float = 0.1) -> None:
    """Polyak update theta_bar <- (1 - tau) theta_bar + tau theta (ArCHer tau=0.1)."""
    for tp, p in zip(target.parameters(), online.parameters()):
        tp.mul_(1 - tau).add_(p, alpha=tau)


def archer(q: torch.Tensor, v: torch.Tensor, turn_mask: torch.Tensor) -> torch.Tensor:
    """ArCHer utterance advantage (arXiv 2402.19446) -> (B, H), 0 on invalid turns.

        A_k = min(Q1, Q2)(s_k, a_k) - min(V1, V2)(s_k)       (heads on the last axis; (B, H) = one head)

    Example: Q [[[1., 2.]]], V [[[0.5, 0.25]]] -> [[0.75]].
    """
    q = q.amin(-1) if q.dim() == 3 else q
    v = v.amin(-1) if v.dim() == 3 else v
    dims = check("q", q, "BH", {}, kind="float")
    check("v", v, "BH", dims, kind="float")
    check("turn_mask", turn_mask, "BH", dims)
    return (q - v) * turn_mask.to(q.dtype)


def sweet(critic_logp: torch.Tensor, ref_logp: torch.Tensor, turn_id: torch.Tensor, policy_mask: torch.Tensor,
          H: int) -> torch.Tensor:
    """SWEET-RL turn advantage (arXiv 2503.15478): length-normalized log-ratio of the privileged critic -> (B, H).

        A(o_k, a_k, c) = 1/|a_k| sum_{j in a_k} [log pi_phi(a_k^j | o_k, a_k^{<j}, c) - log pi_ref(a_k^j | ...)]

    Example: critic_logp [[-1., -1., -2.]], ref_logp [[-2., -2., -2.]], turn_id [[0, 0, 1]] -> [[1., 0.]].
    """
    dims = check("critic_logp", critic_logp, "BT", {}, kind="float")
    check("ref_logp", ref_logp, "BT", dims, kind="float")
    check("turn_id", turn_id, "BT", dims)
    check("policy_mask", policy_mask, "BT", dims)
    return token_to_turn(critic_logp - ref_logp, turn_id, H, "mean", policy_mask)


@register_estimator("archer", level="turn", needs=("double_critic",))
def _archer(batch, *, q=None, v=None):
    """ArCHer: min double-Q minus min double-V of an utterance-level critic (keywords q, v: (B, H[, 2]))."""
    if q is None or v is None:
        raise ValueError("estimator 'archer' needs the keywords q and v: (B, H) or (B, H, 2) critic outputs "
                         "(critics.DoubleCritic.q(state, action), .v(state))")
    return archer(q, v, batch.turn_mask)


@register_estimator("sweet", level="turn", needs=("privileged_critic",))
def _sweet(batch, *, critic_adv=None, critic_logp=None):
    """SWEET-RL: turn advantages from a privileged critic (keyword critic_adv (B, H) or critic_logp (B, T))."""
    if critic_adv is not None:
        check("critic_adv", critic_adv, "BH", {"B": batch.B, "H": batch.H}, kind="float")
        return critic_adv * batch.turn_mask.to(critic_adv.dtype)
    if critic_logp is None:
        raise ValueError("estimator 'sweet' needs the keyword critic_adv (B, H) (a TurnCritic on features "
                         "concatenated with privileged features) or critic_logp (B, T) with TurnBatch.ref_logp")
    ref = need(batch, "ref_logp", "sweet", " (needed with critic_logp)")
    return sweet(critic_logp, ref, batch.turn_id, batch.policy_mask, batch.H)
