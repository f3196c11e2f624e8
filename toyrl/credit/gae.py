"""Critic-based advantages: GAE over tokens (PPO / verl), over turns (Turn-PPO), and bi-level (RAGEN).

Dimension legend: B rollouts, T tokens, H turns, P packed steps (the most policy tokens / valid turns of a row).

All three run one recursion, ``gae_scan``, over the masked steps of the last axis (policy tokens or
valid turns), in the three moves of ``scan``:

    r, V = pack(reward, mask), pack(values, mask)       # (B, P + 1) masked steps moved left
    delta_t = r_t + gamma * V_{t+1} - V_t                # Eq. 11 of arXiv 1506.02438, t+1 = next masked step
    A_t = delta_t + gamma * lam * A_{t+1}                # discounted_cumsum(delta, gamma * lam)
    A = unpack(A, mask)                                  # (B, L); unmasked steps carry A of the next one

so the TD chain jumps from one policy token to the next across observation tokens (verl's
multi-turn rule). returns_t = A_t + V_t. The per-token loop (``reference.py``) gives the same numbers.
References: GAE arXiv 1506.02438; Turn-PPO arXiv 2512.17008; RAGEN arXiv 2504.20073.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch.nn.functional import pad

from .base import check, masked_whiten, place_at_turn_end, turn_end_pos
from .registry import need, register_estimator
from .scan import discounted_cumsum, pack, pack_turns, unpack, unpack_turns

__all__ = ["td_errors", "gae_scan", "gae", "turn_gae", "bilevel_gae", "turn_token_gae"]


def td_errors(reward: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, *, gamma: float,
              last_value: Optional[torch.Tensor] = None) -> torch.Tensor:
    """delta_t = r_t + gamma V_{t+1} - V_t over the masked steps, packed -> (B, P + 1), 0 after a row's last one.

    t+1 is the next masked step; after the last one V is ``last_value`` (B,) or 0.
    Example: r [[0, 1]], V [[0.5, 0.5]], all masked, gamma 1 -> [[0., 0.5, 0.]].
    """
    V = pack(values.to(reward.dtype), mask, last=last_value)             # (B, P + 1) V of the masked steps, then V_last
    delta = pack(reward, mask)                                            # (B, P + 1) r of the masked steps
    delta += gamma * pad(V[:, 1:], (0, 1)) - V                            # delta_t = r_t + gamma V_{t+1} - V_t
    delta *= torch.arange(delta.shape[1], device=delta.device) < mask.sum(1, keepdim=True)   # 0 past the row
    return delta


def gae_scan(reward: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, *, gamma: float, lam: float,
             last_value: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Raw GAE along the last axis over the masked steps -> (B, L) (not whitened, not masked).

    ``last_value`` (B,) bootstraps V after the final masked step (truncated episodes), default 0.
    Unmasked steps hold the advantage of the next masked step (as verl).
    Example: r [[0, 0, 1]], V [[0.5, 0.5, 0.5]], all masked, gamma=lam=1 -> [[0.5, 0.5, 0.5]].
    """
    delta = td_errors(reward, values, mask, gamma=gamma, last_value=last_value)   # (B, P + 1)
    return unpack(discounted_cumsum(delta, gamma * lam), mask)           # A_t = delta_t + gamma lam A_{t+1}


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
    raw = gae_scan(token_reward, values, policy_mask, gamma=gamma, lam=lam)    # (B, T)
    ret = raw + values                                                           # returns_t = A_t + V_t
    ret *= policy_mask
    adv = masked_whiten(raw, policy_mask) if whiten else raw * policy_mask
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
        check("last_value", last_value, "B", dims, kind="float")
    raw = gae_scan(turn_reward, values, turn_mask, gamma=gamma, lam=lam, last_value=last_value)
    ret = raw + values                                                           # the critic's target
    ret *= turn_mask
    adv = masked_whiten(raw, turn_mask) if whiten else raw * turn_mask
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
    pos = turn_end_pos(turn_id, policy_mask, H)                                  # (B, H), -1: no policy token
    ends = turn_mask & (pos >= 0)                                                # (B, H) turns with a last token
    V_turn = values.gather(1, pos.clamp(min=0)) * ends                           # (B, H) V at the turn's end
    A_turn = gae_scan(turn_reward, V_turn, ends, gamma=gamma_turn, lam=lam_turn)          # 1. turn-level GAE
    G = (A_turn + V_turn) * ends                                                 # 2. (B, H) G_k = A_k + V_k
    raw = turn_token_gae(G, values, turn_id, policy_mask, gamma=gamma_token, lam=lam_token)   # 3. (B, T)
    ret = raw + values
    ret *= policy_mask
    adv = masked_whiten(raw, policy_mask) if whiten else raw * policy_mask      # 4.
    return adv, ret


def turn_token_gae(G: torch.Tensor, values: torch.Tensor, turn_id: torch.Tensor, policy_mask: torch.Tensor, *,
                   gamma: float, lam: float) -> torch.Tensor:
    """Token GAE inside every turn, G_k the reward of turn k's last policy token, V = 0 after it -> (B, T).

    Every turn is its own packed row (``pack_turns``), so the chain restarts at each turn end; 0 off
    the policy tokens. Example: G [[0.95, 1.]], V 0, turn_id [[0, 0, 1]], all policy, gamma=lam=1 ->
    [[0.95, 0.95, 1.]].
    """
    V, slot, n = pack_turns(values, policy_mask, turn_id, G.shape[1])           # (B*H, P + 1) every turn a row
    delta = torch.zeros_like(V).scatter_(1, (n - 1).clamp(min=0)[:, None], G.reshape(-1, 1))  # G_k on the turn's end
    delta += gamma * pad(V[:, 1:], (0, 1)) - V                                   # token TD errors, V = 0 after the end
    delta *= torch.arange(V.shape[1], device=V.device) < n[:, None]              # 0 past the turn
    return unpack_turns(discounted_cumsum(delta, gamma * lam), slot)            # (B, T)


# ---- registry wrappers ---------------------------------------------------------------------------
def _token_values(batch, token_values, name):
    if token_values is not None:
        return token_values
    return batch.turn_to_token(need(batch, "values", name, " (or pass token_values=(B, T))"))


@register_estimator("gae", level="token", needs=("values", "token_values"))
def _gae(batch, *, gamma: float = 1.0, lam: float = 1.0, whiten: bool = True, token_values=None):
    """PPO token GAE with verl's skip over observation tokens (values: token_values or batch.values per turn)."""
    r = place_at_turn_end(batch.turn_reward * batch.turn_mask, batch.turn_id, batch.policy_mask)
    return gae(r, _token_values(batch, token_values, "gae"), batch.policy_mask, gamma=gamma, lam=lam,
               whiten=whiten)[0]


@register_estimator("turn_gae", level="turn", needs=("values",))
def _turn_gae(batch, *, gamma: float = 0.99, lam: float = 0.9, last_value=None, whiten: bool = False):
    """Turn-PPO: GAE over turns with the per-turn critic values batch.values."""
    return turn_gae(batch.turn_reward, need(batch, "values", "turn_gae"), batch.turn_mask, gamma=gamma,
                    lam=lam, last_value=last_value, whiten=whiten)[0]


@register_estimator("bilevel_gae", level="token", needs=("values", "token_values"))
def _bilevel_gae(batch, *, gamma_turn: float = 0.95, lam_turn: float = 1.0, gamma_token: float = 1.0,
                 lam_token: float = 1.0, whiten: bool = True, token_values=None):
    """RAGEN bi-level GAE: turn-level GAE, then token-level GAE inside each turn."""
    return bilevel_gae(batch.turn_reward, _token_values(batch, token_values, "bilevel_gae"), batch.turn_id,
                       batch.policy_mask, batch.turn_mask, gamma_turn=gamma_turn, lam_turn=lam_turn,
                       gamma_token=gamma_token, lam_token=lam_token, whiten=whiten)[0]
