"""Loop references of the outcome baselines (GRPO, Dr. GRPO, RLOO, OPO, GPG, Pass@k, ReMax, REINFORCE++) and
of GAE (token, turn and bi-level); filed in ``REFERENCE`` on import. Same inputs and outputs as the registry."""
from __future__ import annotations

import math

from .base import group_z, members, on_turns, outcome, reference, tensor, to_go, token_rewards, turn_ends, whitened

__all__ = ["gae_row"]


@reference("grpo")
def grpo(b, *, ddof: int = 1, eps: float = 1e-6, norm: str = "std"):
    """A_i = (R_i - mean_g R) / (std_g R + eps) on every valid turn; a singleton group gets 0."""
    return on_turns(b, group_z(outcome(b), b.group.tolist(), norm=norm, ddof=ddof, eps=eps))


@reference("dr_grpo")
def dr_grpo(b):
    """A_i = R_i - mean_g R."""
    return on_turns(b, group_z(outcome(b), b.group.tolist(), norm="mean"))


@reference("rloo")
def rloo(b, *, scale_by_std: bool = False):
    """A_i = R_i - mean of the other rollouts of the group (optionally / max(std_pop, 1e-7))."""
    R, out = outcome(b), [0.0] * b.B
    for rows in members(b.group.tolist()).values():
        if len(rows) < 2:
            continue
        mu = sum(R[i] for i in rows) / len(rows)
        std = math.sqrt(sum((R[i] - mu) ** 2 for i in rows) / len(rows))
        for i in rows:
            others = [R[j] for j in rows if j != i]
            out[i] = R[i] - sum(others) / len(others)
            out[i] /= max(std, 1e-7) if scale_by_std else 1.0
    return on_turns(b, out)


@reference("opo")
def opo(b):
    """A_i = R_i - sum_j L_j R_j / sum_j L_j (L = policy tokens; plain mean if all L are 0); singleton 0."""
    R, L, out = outcome(b), b.policy_mask.sum(1).tolist(), [0.0] * b.B
    for rows in members(b.group.tolist()).values():
        if len(rows) < 2:
            continue
        total = sum(L[i] for i in rows)
        base = sum(L[i] * R[i] for i in rows) / total if total > 0 else sum(R[i] for i in rows) / len(rows)
        for i in rows:
            out[i] = R[i] - base
    return on_turns(b, out)


@reference("gpg")
def gpg(b, *, f_norm: float = 1.0):
    """A_i = alpha (R_i - mean_g R) / F_norm, alpha = B / #{j : R_j != 0}."""
    R = outcome(b)
    alpha = b.B / max(sum(r != 0 for r in R), 1)
    return on_turns(b, [alpha * a / f_norm for a in group_z(R, b.group.tolist(), norm="mean")])


@reference("grpo_passk")
def grpo_passk(b, *, norm: bool = True, ddof: int = 1, eps: float = 1e-6):
    """Only a group's unique best gets z_max - z_second (R_max - R_second without ``norm``)."""
    R = outcome(b)
    z = group_z(R, b.group.tolist(), ddof=ddof, eps=eps) if norm else R
    out = [0.0] * b.B
    for rows in members(b.group.tolist()).values():
        ranked = sorted(rows, key=lambda i: -z[i])
        if len(rows) > 1 and z[ranked[0]] > z[ranked[1]]:
            out[ranked[0]] = z[ranked[0]] - z[ranked[1]]
    return on_turns(b, out)


@reference("remax")
def remax(b, *, baseline_reward=None):
    """A_{i,k} = sum_{k' >= k} r_{i,k'} - b_i (b: a greedy rollout's return)."""
    if baseline_reward is None:
        raise ValueError("remax needs baseline_reward")
    rows = zip(b.turn_reward.tolist(), b.turn_mask.tolist(), baseline_reward.tolist())
    return tensor(b, [[g - base if v else 0.0 for g, v in zip(to_go(r, m, 1.0), m)] for r, m, base in rows])


@reference("reinforce_pp")
def reinforce_pp(b, *, gamma: float = 1.0, kl_coef: float = 0.0):
    """G_t = r_t + gamma G_{next policy token} over policy tokens, whitened over all policy tokens."""
    mask = b.policy_mask.tolist()
    G = [to_go(r, m, gamma) for r, m in zip(token_rewards(b, kl_coef), mask)]
    return tensor(b, whitened(G, mask))


@reference("reinforce_pp_baseline")
def reinforce_pp_baseline(b):
    """R_i - mean_g R on every token of rollout i, whitened over all policy tokens."""
    A = group_z(outcome(b), b.group.tolist(), norm="mean")
    return tensor(b, whitened([[a] * b.T for a in A], b.policy_mask.tolist()))


# ---- GAE ------------------------------------------------------------------------------------------
def gae_row(r: list, v: list, m: list, gamma: float, lam: float, last: float = 0.0) -> list:
    """delta_t = r_t + gamma V_{t'} - V_t, A_t = delta_t + gamma lam A_{t'} over the masked steps t (t' the next one)."""
    adv, next_v, run = [0.0] * len(r), last, 0.0
    for t in reversed(range(len(r))):
        if m[t]:
            run = r[t] + gamma * next_v - v[t] + gamma * lam * run
            next_v = v[t]
            adv[t] = run
    return adv


def values_of_tokens(b, given) -> list:
    """Token values: ``given`` (B, T), else each turn's value on its tokens."""
    return (given if given is not None else b.turn_to_token(b.values)).tolist()


@reference("gae")
def gae(b, *, gamma: float = 1.0, lam: float = 1.0, whiten: bool = True, token_values=None):
    """Token GAE over policy tokens (observation tokens skipped), whitened over policy tokens."""
    b2 = b.replace(turn_reward=b.turn_reward * b.turn_mask)
    mask, V = b.policy_mask.tolist(), values_of_tokens(b, token_values)
    A = [gae_row(r, v, m, gamma, lam) for r, v, m in zip(token_rewards(b2), V, mask)]
    return tensor(b, whitened(A, mask) if whiten else A)


@reference("turn_gae")
def turn_gae(b, *, gamma: float = 0.99, lam: float = 0.9, last_value=None, whiten: bool = False):
    """GAE over the valid turns with the per-turn critic values (last_value bootstraps after the end)."""
    last = [0.0] * b.B if last_value is None else last_value.tolist()
    rows = zip(b.turn_reward.tolist(), b.values.tolist(), b.turn_mask.tolist(), last)
    A = [gae_row(r, v, m, gamma, lam, lv) for r, v, m, lv in rows]
    return tensor(b, whitened(A, b.turn_mask.tolist()) if whiten else A)


@reference("bilevel_gae")
def bilevel_gae(b, *, gamma_turn: float = 0.95, lam_turn: float = 1.0, gamma_token: float = 1.0,
                lam_token: float = 1.0, whiten: bool = True, token_values=None):
    """Turn GAE on V at each turn's last policy token; G_k = A_k + V_k; token GAE inside each turn."""
    V, mask, out = values_of_tokens(b, token_values), b.policy_mask.tolist(), []
    for i, ends in enumerate(turn_ends(b)):
        ok = [bool(b.turn_mask[i, k]) and e is not None for k, e in enumerate(ends)]
        v_turn = [V[i][e] if o else 0.0 for e, o in zip(ends, ok)]
        A_turn = gae_row(b.turn_reward[i].tolist(), v_turn, ok, gamma_turn, lam_turn)
        adv = [0.0] * b.T
        for k in range(b.H):                                          # token GAE restarted in every turn
            toks = [t for t in range(b.T) if mask[i][t] and b.turn_id[i, t] == k]
            r = [A_turn[k] + v_turn[k] if ok[k] and t == toks[-1] else 0.0 for t in toks]
            for t, a in zip(toks, gae_row(r, [V[i][t] for t in toks], [1] * len(toks), gamma_token, lam_token)):
                adv[t] = a
        out.append(adv)
    return tensor(b, whitened(out, mask) if whiten else out)


