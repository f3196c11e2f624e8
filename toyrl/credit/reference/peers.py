"""Loop references of the peers' estimators (``peers.py``: GDPO, Optimal Token Baseline, multi-turn OTB);
filed in ``REFERENCE`` (``base.py``) on import. Same inputs and outputs as the registered callables."""
from __future__ import annotations

import math

from .base import members, outcome, reference, tensor, token_rewards, whitened, zscores

__all__: list = []


@reference("gdpo")
def gdpo(b, *, components=None, weights=None, eps: float = 1e-6):
    """S_i = sum_d w_d z_{i,d} (z: each component's group z-score; singleton: r / (1 + eps)), whitened over tokens."""
    comps = [[r] for r in outcome(b)] if components is None else components.tolist()
    D = len(comps[0]) if comps else 0
    w = [1.0] * D if weights is None else [float(x) for x in weights]
    S = [0.0] * b.B
    for d in range(D):
        for rows in members(b.group.tolist()).values():
            col = [comps[i][d] for i in rows]
            z = zscores(col, ddof=1, eps=eps) if len(rows) > 1 else [col[0] / (1 + eps)]   # verl: mean 0, std 1
            for i, v in zip(rows, z):
                S[i] += w[d] * v
    mask = b.policy_mask.tolist()
    if sum(map(sum, mask)) < 2:
        raise ValueError("gdpo whitens over the mask tokens and needs at least 2")
    return tensor(b, whitened([[s] * b.T for s in S], mask))


def energy_baseline(G: list, W: list, valid: list, group: list, member: list, zero_tail: bool,
                    eps: float = 1e-8) -> list:
    """B_t = sum_i valid G W / (sum_i valid W + eps) over the members of each group (of 2 or more), per index t.

    Zero tail: a group's unique longest member gets 0 from the second-longest length on."""
    out = [[0.0] * len(G[0]) for _ in G] if G else []
    for rows in members(group).values():
        mem = [i for i in rows if member[i]]
        if len(mem) < 2:
            continue
        n = {i: sum(valid[i]) for i in mem}
        longest = [i for i in mem if n[i] == max(n.values())]
        second = max((n[i] for i in mem if i not in longest), default=-1)
        for t in range(len(G[0])):
            num = sum(G[i][t] * W[i][t] for i in mem if valid[i][t])
            den = sum(W[i][t] for i in mem if valid[i][t])
            for i in mem:
                cut = zero_tail and len(longest) == 1 and i == longest[0] and t >= second
                out[i][t] = 0.0 if cut else num / (den + eps)
    return out


def returns_and_energy(b, sum_pi_squared, is_weights) -> tuple[list, list, list]:
    """G_t = sum_{s >= t} m_s r_s and W_t = sum_{s <= t} m_s w_s, w = (1 - 2 pi(y) + sum_v pi_v^2) rho^2."""
    r = token_rewards(b.replace(turn_reward=b.turn_reward * b.turn_mask))
    mask, lp = b.policy_mask.tolist(), b.old_logp.tolist()
    spq = [[math.exp(2 * x) for x in row] for row in lp] if sum_pi_squared is None else sum_pi_squared.tolist()
    rho = [[1.0] * b.T] * b.B if is_weights is None else is_weights.tolist()
    G, W = [], []
    for i in range(b.B):
        g, acc = [0.0] * b.T, 0.0
        for t in reversed(range(b.T)):
            acc += r[i][t] * mask[i][t]
            g[t] = acc
        w, acc = [0.0] * b.T, 0.0
        for t in range(b.T):
            acc += (1 - 2 * math.exp(lp[i][t]) + spq[i][t]) * rho[i][t] ** 2 * mask[i][t]
            w[t] = acc
        G.append(g)
        W.append(w)
    return G, W, mask


@reference("optimal_token_baseline")
def optimal_token_baseline(b, *, sum_pi_squared=None, is_weights=None, zero_tail: bool = True):
    """A_t = (G_t - B_t) m_t with the energy-weighted group baseline B_t at padded position t."""
    G, W, mask = returns_and_energy(b, sum_pi_squared, is_weights)
    base = energy_baseline(G, W, mask, b.group.tolist(), [True] * b.B, zero_tail)
    return tensor(b, [[(g - c) * m for g, c, m in zip(*rows)] for rows in zip(G, base, mask)])


@reference("tir_optimal_token_baseline")
def tir_optimal_token_baseline(b, *, sum_pi_squared=None, is_weights=None, zero_tail: bool = True):
    """The same baseline indexed by the k-th policy token of each row instead of the padded position."""
    G, W, mask = returns_and_energy(b, sum_pi_squared, is_weights)
    pos = [[t for t in range(b.T) if mask[i][t]] for i in range(b.B)]             # row i's policy tokens
    P = max([len(p) for p in pos] + [1])
    Gc = [[G[i][t] for t in p] + [0.0] * (P - len(p)) for i, p in enumerate(pos)]
    Wc = [[W[i][t] for t in p] + [0.0] * (P - len(p)) for i, p in enumerate(pos)]
    valid = [[k < len(p) for k in range(P)] for p in pos]
    base = energy_baseline(Gc, Wc, valid, b.group.tolist(), [len(p) > 0 for p in pos], zero_tail)
    out = [[0.0] * b.T for _ in range(b.B)]
    for i, p in enumerate(pos):
        for k, t in enumerate(p):
            out[i][t] = Gc[i][k] - base[i][k]
    return tensor(b, out)
