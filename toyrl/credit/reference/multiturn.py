"""Loop references of the multi-turn estimators (GiGPO, MT-GRPO, Tree-GRPO, RTPO, SPA, EMPG, A2TGPO,
ArCHer, SWEET); filed in ``REFERENCE`` (``base.py``) on import. Same inputs and outputs as the registry."""
from __future__ import annotations

import math
from collections import defaultdict

from .base import group_z, members, on_turns, outcome, reference, tensor, to_go, whitened, zscores

__all__: list = []


def similarity_clusters(feats: list, valid: list, rows: list, threshold: float) -> dict:
    """Greedy clustering of one group's turns in (rollout, turn) order: (row, k) -> its leader (row, k)."""
    leaders, key = [], {}
    for i in rows:
        for k, ok in enumerate(valid[i]):
            if not ok:
                continue
            x = feats[i][k]
            for j, l in leaders:                                       # the first leader close enough
                y = feats[j][l]
                nx, ny = math.sqrt(sum(a * a for a in x)) or 1.0, math.sqrt(sum(a * a for a in y)) or 1.0
                if sum(a * c for a, c in zip(x, y)) / (nx * ny) >= threshold:
                    key[(i, k)] = (j, l)
                    break
            else:
                leaders.append((i, k))
                key[(i, k)] = (i, k)
    return key


@reference("gigpo")
def gigpo(b, *, gamma: float = 0.95, omega: float = 1.0, norm: str = "std", ddof: int = 0, eps: float = 1e-6,
          episode: str = "trajectory", similarity_features=None, threshold: float = 0.95):
    """A_{i,k} = A^E_i + omega A^S_{i,k}: the seed article's loop, one group at a time, dict buckets of anchors."""
    rew, valid, keys = b.turn_reward.tolist(), b.turn_mask.tolist(), b.state_key.tolist()
    R = outcome(b)
    rets = [to_go(r, v, gamma) for r, v in zip(rew, valid)]               # R_{i,k} = r_{i,k} + gamma R_{i,k+1}
    out = [[0.0] * b.H for _ in range(b.B)]
    feats = None if similarity_features is None else similarity_features.tolist()
    for rows in members(b.group.tolist()).values():
        if episode == "trajectory":                                      # A^E: one entry per rollout
            A_E = dict(zip(rows, zscores([R[i] for i in rows], norm=norm, ddof=ddof, eps=eps)))
        else:                                                            # one entry per valid turn
            owner = [i for i in rows for v in valid[i] if v]
            A_E = dict(zip(owner, zscores([R[i] for i in owner], norm=norm, ddof=ddof, eps=eps) if owner else []))
        sim = None if feats is None else similarity_clusters(feats, valid, rows, threshold)
        buckets = defaultdict(list)                                      # anchor state -> turns taken from it
        for i in rows:
            for k in range(b.H):
                if valid[i][k]:
                    buckets[keys[i][k] if sim is None else sim[(i, k)]].append((i, k))
        for cell in buckets.values():                                    # A^S inside each anchor
            for (i, k), a_s in zip(cell, zscores([rets[i][k] for i, k in cell], norm=norm, ddof=ddof, eps=eps)):
                out[i][k] = A_E[i] + omega * a_s
    return tensor(b, out)


def turn_index_z(b, signal: list, prompt: list, *, ddof: int, eps: float) -> list:
    """z-score of signal[i][k] among the valid turns with the same prompt and the same turn index k."""
    z, valid = [[0.0] * b.H for _ in range(b.B)], b.turn_mask.tolist()
    for rows in members(prompt).values():
        for k in range(b.H):
            cell = [i for i in rows if valid[i][k]]
            for i, v in zip(cell, zscores([signal[i][k] for i in cell], ddof=ddof, eps=eps) if cell else []):
                z[i][k] = v
    return z


@reference("mt_grpo")
def mt_grpo(b, *, lam: float = 1.0, ddof: int = 1, eps: float = 1e-4):
    """A_{i,k} = GRPO_g(R_i) + lam sum_{k' >= k} z_{i,k'}, z the (group, turn index) z-score of the turn signal."""
    signal = (b.turn_signal if b.turn_signal is not None else b.turn_reward).tolist()
    A_O = group_z(outcome(b), b.group.tolist(), ddof=ddof, eps=eps)
    z, valid = turn_index_z(b, signal, b.group.tolist(), ddof=ddof, eps=eps), b.turn_mask.tolist()
    return tensor(b, [[A_O[i] + lam * sum(z[i][k:]) if valid[i][k] else 0.0 for k in range(b.H)] for i in range(b.B)])


@reference("tree_grpo")
def tree_grpo(b, *, ddof: int = 1, eps: float = 1e-6):
    """A_i = z of R_i inside its tree (group, node[:, 0]) + z of R_i inside its group."""
    R, group, tree = outcome(b), b.group.tolist(), b.node[:, 0].tolist()
    intra = group_z(R, list(zip(group, tree)), ddof=ddof, eps=eps)
    inter = group_z(R, group, ddof=ddof, eps=eps)
    return on_turns(b, [a + c for a, c in zip(intra, inter)])


@reference("rtpo")
def rtpo(b, *, gamma: float = 1.0, norm: str = "mean", ddof: int = 1, eps: float = 1e-6):
    """A_{i,k} = R_{i,k} - mean over the siblings: same group, valid at k, same node at turn k-1."""
    valid, node = b.turn_mask.tolist(), b.node.tolist()
    rets = [to_go(r, v, gamma) for r, v in zip(b.turn_reward.tolist(), valid)]
    out = [[0.0] * b.H for _ in range(b.B)]
    for rows in members(b.group.tolist()).values():
        for k in range(b.H):
            sibs = defaultdict(list)                                     # parent node -> rows valid at k
            for i in rows:
                if valid[i][k]:
                    sibs[node[i][k - 1] if k else None].append(i)
            for cell in sibs.values():
                for i, a in zip(cell, zscores([rets[i][k] for i in cell], norm=norm, ddof=ddof, eps=eps)):
                    out[i][k] = a
    return tensor(b, out)


@reference("spa")
def spa(b, *, progress=None, alpha: float = 1.0, beta: float = 0.5, gamma: float = 1.0, whiten: bool = False):
    """rhat_k = alpha c_k + beta g_k (g: the action executed; 1 on the last turn), A_k = its return-to-go."""
    if progress is None:
        raise ValueError("spa needs progress")
    valid, c = b.turn_mask.tolist(), progress.tolist()
    ground = [[1.0] * b.H] * b.B if b.void_turn is None else (~b.void_turn).double().tolist()
    A = []
    for i in range(b.B):
        last = max((k for k in range(b.H) if valid[i][k]), default=None)
        rhat = [alpha * c[i][k] + beta * (1.0 if k == last else ground[i][k]) for k in range(b.H)]
        A.append(to_go(rhat, valid[i], gamma))
    return tensor(b, whitened(A, valid) if whiten else A)


@reference("empg")
def empg(b, *, kappa: float = 1.0, kappa_f: float = 1.0, zeta: float = 0.1, base_adv=None):
    """A'_k = g_k A_k + zeta f_{next valid turn}, then centred over valid turns (Hn: min-max normalized entropy)."""
    valid, ent, pm, tid = b.turn_mask.tolist(), b.entropy.tolist(), b.policy_mask.tolist(), b.turn_id.tolist()
    Ht = [[0.0] * b.H for _ in range(b.B)]                               # mean entropy of each turn's policy tokens
    for i in range(b.B):
        for k in range(b.H):
            xs = [e for e, p, t in zip(ent[i], pm[i], tid[i]) if p and t == k]
            Ht[i][k] = sum(xs) / len(xs) if xs else 0.0
    base = group_z(outcome(b), b.group.tolist()) if base_adv is None else base_adv.tolist()
    base = [row if isinstance(row, list) else [row] * b.H for row in base]
    cells = [(i, k) for i in range(b.B) for k in range(b.H) if valid[i][k]]
    lo, hi = min((Ht[i][k] for i, k in cells), default=0.0), max((Ht[i][k] for i, k in cells), default=0.0)
    Hn = {(i, k): min(max((Ht[i][k] - lo) / (hi - lo + 1e-8), 0.0), 1.0) for i, k in cells}
    w_mean = sum(math.exp(-kappa * h) for h in Hn.values()) / len(cells) if cells else 1.0
    A = {}
    for i, k in cells:
        nxt = next((l for l in range(k + 1, b.H) if valid[i][l]), None)
        bonus = zeta * math.exp(-kappa_f * Hn[(i, nxt)]) if nxt is not None else 0.0
        A[(i, k)] = math.exp(-kappa * Hn[(i, k)]) / w_mean * base[i][k] + bonus
    mu = sum(A.values()) / max(len(cells), 1)
    return tensor(b, [[A[(i, k)] - mu if valid[i][k] else 0.0 for k in range(b.H)] for i in range(b.B)])


@reference("a2tgpo")
def a2tgpo(b, *, gamma: float = 1.0, ddof: int = 1, eps: float = 1e-6, outcome_last: bool = True):
    """z-score of IG per (prompt, turn index) (outcome on the last turn), summed to go / sqrt(#turns to go)."""
    valid, ig = b.turn_mask.tolist(), b.info_gain.tolist()
    if outcome_last:
        for i, R in enumerate(outcome(b)):
            last = max((k for k in range(b.H) if valid[i][k]), default=None)
            if last is not None:
                ig[i][last] = R
    prompt = (b.task if b.task is not None else b.group).tolist()
    z = turn_index_z(b, ig, prompt, ddof=ddof, eps=eps)
    out = []
    for i in range(b.B):
        acc = to_go(z[i], valid[i], gamma)
        out.append([acc[k] / math.sqrt(max(sum(valid[i][k:]), 1)) for k in range(b.H)])
    return tensor(b, out)


@reference("archer")
def archer(b, *, q=None, v=None):
    """A_k = min over heads Q(s_k, a_k) - min over heads V(s_k) on valid turns."""
    if q is None or v is None:
        raise ValueError("archer needs q and v")
    q, v = (x.amin(-1) if x.dim() == 3 else x for x in (q, v))
    return tensor(b, [[qq - vv if m else 0.0 for qq, vv, m in zip(*r)] for r in zip(q.tolist(), v.tolist(),
                                                                                   b.turn_mask.tolist())])


@reference("sweet")
def sweet(b, *, critic_adv=None, critic_logp=None):
    """critic_adv on valid turns, or the turn's mean (critic_logp - ref_logp) over its policy tokens."""
    if critic_adv is not None:
        return tensor(b, [[a if m else 0.0 for a, m in zip(*r)] for r in zip(critic_adv.tolist(), b.turn_mask.tolist())])
    d, pm, tid = (critic_logp - b.ref_logp).tolist(), b.policy_mask.tolist(), b.turn_id.tolist()
    out = []
    for i in range(b.B):
        per = [[x for x, p, t in zip(d[i], pm[i], tid[i]) if p and t == k] for k in range(b.H)]
        out.append([sum(xs) / len(xs) if xs else 0.0 for xs in per])
    return tensor(b, out)
