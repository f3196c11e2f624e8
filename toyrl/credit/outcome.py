"""Outcome-level (trajectory) advantages: one scalar per rollout from group statistics.

Dimension legend: B rollouts, T tokens, H turns, G group size.

Every function takes the rollout return R (B,) and the group id (B,) (rollouts of the same task);
``reinforce_pp`` works on token rewards (the registry puts each turn's reward on its last policy
token). Group statistics are segment sums over ``torch.unique`` ids (``segments``). A singleton group has no baseline
information, so its advantage is 0 here (verl instead leaves A = R for GRPO / RLOO / OPO;
``toyrl.port.verl`` matches verl). References: GRPO arXiv 2402.03300, Dr. GRPO 2503.20783, RLOO
2402.14740 / LOOP 2502.01600, REINFORCE++ 2501.03262, ReMax 2310.10505, OPO 2505.23585, GPG
2504.02546, Pass@k 2503.19595.
"""
from __future__ import annotations

from typing import Optional

import torch

from ..batch import check_finite
from ..segments import segment_count, segment_max, segment_std, segment_sum
from .base import broadcast_turns, check, group_ids, group_norm, masked_whiten, place_at_turn_end
from .registry import need, register_estimator
from .scan import discounted_cumsum, pack, unpack

__all__ = ["grpo", "dr_grpo", "rloo", "reinforce_pp", "reinforce_pp_baseline", "remax", "opo",
           "gpg", "grpo_passk", "token_returns"]


def _check_outcome(R: torch.Tensor, group: torch.Tensor) -> None:
    dims = check("R", R, "B", {}, kind="float")
    check("group", group, "B", dims)


def grpo(R: torch.Tensor, group: torch.Tensor, *, norm: str = "std", ddof: int = 1,
         eps: float = 1e-6) -> torch.Tensor:
    """GRPO group-relative advantage (DeepSeekMath, arXiv 2402.03300) -> (B,).

        A_i = (R_i - mean_{j in g(i)} R_j) / (std_{j in g(i)} R_j + eps)       norm="std"
        A_i =  R_i - mean_{j in g(i)} R_j                                       norm="mean"

    Defaults ddof=1 (torch.std, as verl), eps=1e-6 (verl). Singleton group -> 0; all-equal group -> 0.
    Example: R [1., 0., 0.], one group -> [1.155, -0.577, -0.577] (std 0.577).
    """
    _check_outcome(R, group)
    idx, S = group_ids(group)
    return group_norm(R, idx, S, norm=norm, ddof=ddof, eps=eps)


def dr_grpo(R: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """Dr. GRPO (arXiv 2503.20783): GRPO without the std division -> (B,).

        A_i = R_i - mean_{j in g(i)} R_j

    (The constant-length loss normalization lives in ``objectives``.) Example: [1., 0., 0.] -> [0.667, -0.333, -0.333].
    """
    return grpo(R, group, norm="mean")


def rloo(R: torch.Tensor, group: torch.Tensor, *, scale_by_std: bool = False) -> torch.Tensor:
    """Leave-one-out baseline (RLOO arXiv 2402.14740; LOOP arXiv 2502.01600) -> (B,).

        A_i = R_i - 1/(G-1) sum_{j != i, j in g(i)} R_j = G/(G-1) (R_i - mean_g R)

    ``scale_by_std`` (LOOP RwNorm, off by default): A_i /= max(std_pop(R_g), 1e-7).
    Singleton group -> 0 (LOOP asserts G >= 2; verl's rloo_vectorized gives 0).
    Example: R [1., 0., 0.], one group -> [1., -0.5, -0.5].
    """
    _check_outcome(R, group)
    idx, S = group_ids(group)
    n = segment_count(idx, S, R.dtype)                                    # (S,)
    adv = group_norm(R, idx, S, norm="mean") * (n / (n - 1).clamp(min=1))[idx]    # G/(G-1) (R - mean_g R)
    if scale_by_std:
        adv = adv / segment_std(R, idx, S, ddof=0)[idx].clamp(min=1e-7)
    return adv


def reinforce_pp(token_reward: torch.Tensor, policy_mask: torch.Tensor, *, gamma: float = 1.0,
                 eps: float = 1e-8) -> torch.Tensor:
    """REINFORCE++ (arXiv 2501.03262): token return-to-go, then whitening over the batch -> (B, T).

        G_t = r_t + gamma * G_{t'}      (t' = next policy token; observation tokens carry G unchanged)
        A_t = (G_t - mu_batch) / sqrt(var_batch + eps)   over all policy tokens (unbiased var, as verl)

    Rewards on non-policy tokens are dropped (verl). Defaults gamma=1, eps=1e-8.
    Example: rewards [[0, 0, 1]] all policy, gamma 1 -> G [[1, 1, 1]] -> A [[0, 0, 0]];
    two rows [[1]], [[0]] -> G [1, 0] -> A [0.707, -0.707].
    """
    dims = check("token_reward", token_reward, "BT", {}, kind="float")
    check("policy_mask", policy_mask, "BT", dims)
    return masked_whiten(token_returns(token_reward, policy_mask, gamma), policy_mask, eps=eps)


def token_returns(token_reward: torch.Tensor, policy_mask: torch.Tensor, gamma: float = 1.0) -> torch.Tensor:
    """Return-to-go over policy tokens, G_t = r_t + gamma G_{t'} (t' next policy token), 0 off the mask -> (B, T).

    Observation tokens drop their reward (verl): the policy tokens are packed, scanned, unpacked
    (``scan``). At gamma = 1 there is no discount to skip, so G is a plain reverse cumsum of the
    policy tokens' rewards (``_undiscounted_returns``). Example: r [[0, 5, 1]], mask [[1, 0, 1]],
    gamma 0.5 -> [[0.5, 0, 1]].
    """
    if gamma == 1.0:
        return _undiscounted_returns(token_reward, policy_mask)
    G = unpack(discounted_cumsum(pack(token_reward, policy_mask), gamma), policy_mask)   # over policy tokens only
    G *= policy_mask
    return G                                                              # (B, T)


def _undiscounted_returns(token_reward: torch.Tensor, policy_mask: torch.Tensor) -> torch.Tensor:
    """``token_returns`` at gamma = 1: G_t = sum_{s >= t} m_s r_s, a reverse cumsum, no packing -> (B, T).

    With no discount the return-to-go is the reverse cumulative sum itself, so no packing is needed.
    """
    G = (token_reward * policy_mask).flip(1).cumsum(1).flip(1)            # (B, T) sum of the policy rewards ahead
    G *= policy_mask
    return G


def reinforce_pp_baseline(R: torch.Tensor, group: torch.Tensor, policy_mask: torch.Tensor, *,
                          eps: float = 1e-8) -> torch.Tensor:
    """REINFORCE++-baseline (arXiv 2501.03262, verl form): group-mean baseline, then token whitening -> (B, T).

        A_t = whiten_{policy tokens}( R_i - mean_{j in g(i)} R_j )

    The subtraction is per rollout; the whitening weighs each rollout by its policy-token count.
    Example: R [1., 0.] one group, one policy token each -> [0.5, -0.5] -> [0.707, -0.707].
    """
    _check_outcome(R, group)
    check("policy_mask", policy_mask, "BT", {"B": R.shape[0]})
    centered = dr_grpo(R, group)                                          # (B,)
    return masked_whiten(centered[:, None].expand_as(policy_mask), policy_mask, eps=eps)


def remax(turn_reward: torch.Tensor, turn_mask: torch.Tensor, baseline_reward: torch.Tensor) -> torch.Tensor:
    """ReMax (arXiv 2310.10505): reward-to-go minus the greedy rollout's reward -> (B, H).

        A_{i,k} = sum_{k' >= k} r_{i,k'} - R(x_i, y_greedy)

    ``baseline_reward`` (B,) is the return of a greedy episode of the same task. With a sparse
    outcome every turn gets R_i - b_i. Example: r [[0, 0, 1]], b [0.25] -> [[0.75, 0.75, 0.75]].
    """
    dims = check("turn_reward", turn_reward, "BH", {}, kind="float")
    check("turn_mask", turn_mask, "BH", dims)
    check("baseline_reward", baseline_reward, "B", dims, kind="float")
    r = (turn_reward * turn_mask).flip(1).cumsum(1).flip(1)              # (B, H) undiscounted to-go
    return (r - baseline_reward[:, None].to(r.dtype)) * turn_mask


def opo(R: torch.Tensor, group: torch.Tensor, length: torch.Tensor) -> torch.Tensor:
    """OPO (arXiv 2505.23585): optimal baseline, the length-weighted group mean -> (B,).

        A_i = R_i - sum_j L_j R_j / sum_j L_j       (j in g(i), L = number of policy tokens)

    A group with zero total length falls back to the plain mean; singleton -> 0.
    Example: R [1., 0., 0.], L [2, 1, 1] -> baseline 0.5 -> [0.5, -0.5, -0.5].
    """
    _check_outcome(R, group)
    check("length", length, "B", {"B": R.shape[0]})
    idx, S = group_ids(group)
    L = length.to(R.dtype)
    n = segment_count(idx, S, R.dtype)                                     # (S,)
    Lsum = segment_sum(L, idx, S)                                          # (S,)
    base = torch.where(Lsum > 0, segment_sum(L * R, idx, S) / Lsum.clamp(min=1e-12),
                       segment_sum(R, idx, S) / n.clamp(min=1))            # (S,)
    return (R - base[idx]) * (n > 1)[idx]


def gpg(R: torch.Tensor, group: torch.Tensor, *, f_norm: float = 1.0) -> torch.Tensor:
    """GPG (arXiv 2504.02546, verl form): mean-centred return rescaled by the non-zero fraction -> (B,).

        A_i = alpha (R_i - mean_{g(i)} R) / F_norm,   alpha = B / #{j : R_j != 0}

    Default F_norm=1. Singleton group -> 0. Example: R [1., 0., 0.] one group -> alpha 3 -> [2., -1., -1.].
    """
    _check_outcome(R, group)
    alpha = R.shape[0] / (R != 0).sum().clamp(min=1).to(R.dtype)
    return alpha * dr_grpo(R, group) / f_norm


def grpo_passk(R: torch.Tensor, group: torch.Tensor, *, norm: bool = True, ddof: int = 1,
               eps: float = 1e-6) -> torch.Tensor:
    """Pass@k GRPO (arXiv 2503.19595, verl form): only the group's best rollout gets credit -> (B,).

        A_i = (R_max - R_second) / (std_g R + eps)   if i is the argmax of its group, else 0

    A tie at the top gives 0 to all. Singleton group -> 0 (verl raises). ``norm=False`` drops the std.
    Example: R [1., 0., 0.] -> [1.732, 0., 0.] (1 / 0.577).
    """
    _check_outcome(R, group)
    idx, S = group_ids(group)
    z = group_norm(R, idx, S, ddof=ddof, eps=eps) if norm else R          # (B,) z-scores keep the order
    top = segment_max(z, idx, S)                                           # (S,) best score
    is_top = z == top.index_select(0, idx)                                 # (B,)
    n_top = segment_sum(is_top.to(z.dtype), idx, S)                        # (S,) ties at the top
    second = segment_max(z.masked_fill(is_top, float("-inf")), idx, S)     # (S,) best of the rest
    gap = torch.where((n_top == 1) & (second > float("-inf")), top - second, 0.0)   # 0: a tie or a singleton
    return gap[idx] * is_top                                               # (R_max - R_2nd) / (std + eps) = z_max - z_2nd


# ---- registry wrappers: pull fields from the TurnBatch --------------------------------------------
def _R(batch):
    return batch.outcome()


@register_estimator("grpo", level="turn", grouped=True)
def _grpo(batch, *, ddof: int = 1, eps: float = 1e-6, norm: str = "std"):
    """GRPO: (R - group mean) / (group std + eps) on every valid turn."""
    return broadcast_turns(grpo(_R(batch), batch.group, norm=norm, ddof=ddof, eps=eps), batch.turn_mask)


@register_estimator("dr_grpo", level="turn", grouped=True)
def _dr_grpo(batch):
    """Dr. GRPO: R - group mean on every valid turn."""
    return broadcast_turns(dr_grpo(_R(batch), batch.group), batch.turn_mask)


@register_estimator("rloo", level="turn", grouped=True)
def _rloo(batch, *, scale_by_std: bool = False):
    """RLOO / LOOP: R minus the mean of the other rollouts of the group."""
    return broadcast_turns(rloo(_R(batch), batch.group, scale_by_std=scale_by_std), batch.turn_mask)


@register_estimator("reinforce_pp", level="token")
def _reinforce_pp(batch, *, gamma: float = 1.0, kl_coef: float = 0.0):
    """REINFORCE++: token return-to-go (optional k1 KL reward) whitened over the batch."""
    r = place_at_turn_end(batch.turn_reward, batch.turn_id, batch.policy_mask)       # (B, T)
    if kl_coef:
        ref = need(batch, "ref_logp", "reinforce_pp", " (needed when kl_coef != 0)")
        kl = torch.where(batch.policy_mask, batch.old_logp - ref, 0.0)                   # (B, T) k1 per token
        check_finite("old_logp - ref_logp (the KL reward of reinforce_pp)", kl)
        r = r - kl_coef * kl
    return reinforce_pp(r, batch.policy_mask, gamma=gamma)


@register_estimator("reinforce_pp_baseline", level="token", grouped=True)
def _reinforce_pp_baseline(batch):
    """REINFORCE++-baseline: R - group mean, whitened over all policy tokens."""
    return reinforce_pp_baseline(_R(batch), batch.group, batch.policy_mask)


@register_estimator("remax", level="turn", needs=("greedy_baseline",))
def _remax(batch, *, baseline_reward: Optional[torch.Tensor] = None):
    """ReMax: reward-to-go minus a greedy rollout's reward (keyword baseline_reward (B,))."""
    if baseline_reward is None:
        raise ValueError("estimator 'remax' needs the keyword baseline_reward: (B,) return of a greedy rollout")
    return remax(batch.turn_reward, batch.turn_mask, baseline_reward)


@register_estimator("opo", level="turn", grouped=True)
def _opo(batch):
    """OPO: R minus the policy-token-length-weighted group mean."""
    return broadcast_turns(opo(_R(batch), batch.group, batch.policy_mask.sum(1)), batch.turn_mask)


@register_estimator("gpg", level="turn", grouped=True)
def _gpg(batch, *, f_norm: float = 1.0):
    """GPG: (R - group mean) scaled by B / #non-zero returns."""
    return broadcast_turns(gpg(_R(batch), batch.group, f_norm=f_norm), batch.turn_mask)


@register_estimator("grpo_passk", level="turn", grouped=True)
def _grpo_passk(batch, *, norm: bool = True, ddof: int = 1, eps: float = 1e-6):
    """Pass@k GRPO: the group's best rollout gets (R_max - R_second) / std, others 0."""
    return broadcast_turns(grpo_passk(_R(batch), batch.group, norm=norm, ddof=ddof, eps=eps), batch.turn_mask)
