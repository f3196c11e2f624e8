"""Critic-based advantages: GAE over tokens (PPO / verl), over turns (Turn-PPO), and bi-level (RAGEN).

Dimension legend: B rollouts, T tokens, H turns.

All three run one recursion, ``gae_scan``, over the last axis (tokens or turns):

    delta_t = r_t + gamma * V_{t'} - V_t          t' = next masked step (skip unmasked ones)
    A_t     = delta_t + gamma * lam * A_{t'}       returns_t = A_t + V_t

Unmasked steps (observation tokens, invalid turns) carry the running value and advantage unchanged,
verl's multi-turn rule, so the TD chain jumps from one policy token to the next across observations.
No loop over tokens: V_{t'} is a gather (``next_masked``) and the A recursion a blocked scan
(``discounted_cumsum``, factor gamma * lam), both from ``base``, in float64.
References: GAE arXiv 1506.02438; Turn-PPO arXiv 2512.17008; RAGEN arXiv 2504.20073.
"""
from __future__ import annotations

from typing import Optional

import torch

from ..batch import mask_to
from .base import check, discounted_cumsum_, masked_whiten, next_masked, place_at, place_at_turn_end, turn_end_pos
from .registry import need, register_estimator

__all__ = ["gae_scan", "gae", "turn_gae", "bilevel_gae"]


def gae_scan(reward: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, *, gamma: float, lam: float,
             reset: Optional[torch.Tensor] = None, last_value: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Raw GAE along the last axis with carry over unmasked steps -> (B, L) (not whitened, not masked).

    ``reset`` (B, L) bool restarts the chain at a step (next value and advantage 0 beyond it);
    ``last_value`` (B,) bootstraps V after the final step (truncated episodes), default 0.
    Unmasked steps hold the carried advantage (as verl). Computed in float64, returned in reward's dtype.
    Example: r [[0, 0, 1]], V [[0.5, 0.5, 0.5]], all masked, gamma=lam=1 -> [[0.5, 0.5, 0.5]].
    """
    nextv = next_masked(values, mask, last=last_value, reset=reset)        # (B, L) V_{t'}
    delta = nextv.to(torch.float64).mul_(gamma).add_(reward).sub_(values)  # (B, L) delta_t, float64
    return discounted_cumsum_(delta, mask, gamma * lam, reset=reset).to(reward.dtype)


def gae(token_reward: torch.Tensor, values: torch.Tensor, policy_mask: torch.Tensor, *, gamma: float = 1.0,
        lam: float = 1.0, whiten: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-level GAE (arXiv 1506.02438; verl ``compute_gae_advantage_return``) -> (adv, returns), (B, T) each.

        delta_t = r_t + gamma V_{t'} - V_t,   A_t = delta_t + gamma lam A_{t'},   returns_t = A_t + V_t
        (t' = next policy token; observation tokens are skipped), then A whitened over policy tokens.

    Defaults gamma=1, lam=1 (verl). Both outputs are 0 off the policy mask.
    Example: r [[0, 0, 1]], V [[0.2, 0.4, 0.6]], all policy, no whitening -> A [[0.8, 0.6, 0.4]], returns [[1, 1, 1]].
    """
    dims = check("token_reward", token_reward, "BT", {}, kind="float")
    check("values", values, "BT", dims, kind="float")
    check("policy_mask", policy_mask, "BT", dims)
    raw = gae_scan(token_reward, values, policy_mask, gamma=gamma, lam=lam)
    m = mask_to(policy_mask, raw.dtype)
    ret = (raw + values).mul_(m)
    adv = masked_whiten(raw, m, inplace=True) if whiten else raw * m
    return adv, ret


def turn_gae(turn_reward: torch.Tensor, values: torch.Tensor, turn_mask: torch.Tensor, *, gamma: float = 0.99,
             lam: float = 0.9, last_value: Optional[torch.Tensor] = None,
             whiten: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Turn-PPO: GAE on the turn-level MDP (arXiv 2512.17008, [S] no public code) -> (adv, returns), (B, H).

        delta_k = r_k + gamma V(s_{k+1}) - V(s_k)   (V = last_value or 0 after the last turn)
        A_k = sum_l (gamma lam)^l delta_{k+l},       returns_k = A_k + V(s_k)  (the critic's target)

    Defaults gamma=0.99, lam=0.9 (reported guidance); invalid turns are skipped; no whitening by default.
    Example: r [[0, 0, 1]], V [[0.5, 0.5, 0.5]], gamma=lam=1 -> A [[0.5, 0.5, 0.5]], returns [[1, 1, 1]].
    """
    dims = check("turn_reward", turn_reward, "BH", {}, kind="float")
    check("values", values, "BH", dims, kind="float")
    check("turn_mask", turn_mask, "BH", dims)
    if last_value is not None:
        check("last_value", last_value, "B", dims)
    raw = gae_scan(turn_reward, values, turn_mask, gamma=gamma, lam=lam, last_value=last_value)
    m = turn_mask.to(raw.dtype)
    ret = (raw + values).mul_(m)
    adv = masked_whiten(raw, turn_mask) if whiten else raw * m
    return adv, ret


def bilevel_gae(turn_reward: torch.Tensor, values: torch.Tensor, turn_id: torch.Tensor, policy_mask: torch.Tensor,
                turn_mask: torch.Tensor, *, gamma_turn: float = 0.95, lam_turn: float = 1.0,
                gamma_token: float = 1.0, lam_token: float = 1.0,
                whiten: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """RAGEN bi-level GAE (arXiv 2504.20073): turn-level GAE, then token GAE inside each turn -> (B, T) x2.

        1. V_k = token value at the turn's last policy token;  A_k = GAE_{gamma_turn, lam_turn}(r_k, V_k)
        2. G_k = A_k + V_k is put as reward on the turn's last policy token
        3. token GAE_{gamma_token, lam_token} restarted at every turn end;  4. whiten over policy tokens

    Defaults gamma_turn=0.95, lam_turn=1, gamma_token=lam_token=1 (RAGEN). Turn ends come from
    ``turn_id`` (RAGEN infers them from non-zero rewards). Example: one row, turns [a a | b], r_turn
    [0, 1], V [0, 0, 0], no whitening -> G [0.95, 1] -> A [[0.95, 0.95, 1.]].
    """
    dims = check("values", values, "BT", {}, kind="float")
    check("turn_id", turn_id, "BT", dims)
    check("policy_mask", policy_mask, "BT", dims)
    check("turn_reward", turn_reward, "BH", dims, kind="float")
    check("turn_mask", turn_mask, "BH", dims)
    B, H = turn_reward.shape
    T = turn_id.shape[1]
    pos = turn_end_pos(turn_id, policy_mask, H)                                           # (B, H), -1: no token
    has = pos >= 0
    V_turn = values.gather(1, pos.clamp(min=0)) * has                                     # (B, H) V at turn end
    A_turn = gae_scan(turn_reward, V_turn, turn_mask & has, gamma=gamma_turn, lam=lam_turn)
    G = place_at(A_turn + V_turn, pos, T)                                                 # (B, T) G_k at turn end
    end = place_at(has, pos, T)                                                           # (B, T) turn ends
    raw = gae_scan(G, values, policy_mask, gamma=gamma_token, lam=lam_token, reset=end)
    m = mask_to(policy_mask, raw.dtype)
    ret = (raw + values).mul_(m)
    adv = masked_whiten(raw, m, inplace=True) if whiten else raw * m
    return adv, ret


# ---- registry wrappers ---------------------------------------------------------------------------
def _token_values(batch, token_values, name):
    if token_values is not None:
        return token_values
    return batch.turn_to_token(need(batch, "values", name, " (or pass token_values=(B, T))"))


@register_estimator("gae", level="token")
def _gae(batch, *, gamma: float = 1.0, lam: float = 1.0, whiten: bool = True, token_values=None):
    """PPO token GAE with verl's skip over observation tokens (values: token_values or batch.values per turn)."""
    r = place_at_turn_end(batch.turn_reward * batch.turn_mask, batch.turn_id, batch.policy_mask)
    return gae(r, _token_values(batch, token_values, "gae"), batch.policy_mask, gamma=gamma, lam=lam,
               whiten=whiten)[0]


@register_estimator("turn_gae", level="turn")
def _turn_gae(batch, *, gamma: float = 0.99, lam: float = 0.9, last_value=None, whiten: bool = False):
    """Turn-PPO: GAE over turns with the per-turn critic values batch.values."""
    return turn_gae(batch.turn_reward, need(batch, "values", "turn_gae"), batch.turn_mask, gamma=gamma,
                    lam=lam, last_value=last_value, whiten=whiten)[0]


@register_estimator("bilevel_gae", level="token")
def _bilevel_gae(batch, *, gamma_turn: float = 0.95, lam_turn: float = 1.0, gamma_token: float = 1.0,
                 lam_token: float = 1.0, whiten: bool = True, token_values=None):
    """RAGEN bi-level GAE: turn-level GAE, then token-level GAE inside each turn."""
    return bilevel_gae(batch.turn_reward, _token_values(batch, token_values, "bilevel_gae"), batch.turn_id,
                       batch.policy_mask, batch.turn_mask, gamma_turn=gamma_turn, lam_turn=lam_turn,
                       gamma_token=gamma_token, lam_token=lam_token, whiten=whiten)[0]
