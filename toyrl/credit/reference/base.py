"""The pieces every loop reference shares: the ``REFERENCE`` registry, its decorator, and small
helpers on Python lists (groups, z-scores, whitening, returns-to-go).

Dimension legend: B rollouts, T tokens, H turns (the helpers take and return nested lists).
"""
from __future__ import annotations

import math
from collections import defaultdict

import torch

__all__ = ["REFERENCE", "reference", "source", "members", "zscores", "group_z", "whitened", "to_go", "outcome",
           "turn_ends", "on_turns", "tensor", "token_rewards"]

REFERENCE: dict = {}


def reference(name: str):
    """Decorator: file ``fn`` under ``name`` in ``REFERENCE``."""
    def deco(fn):
        REFERENCE[name] = fn
        return fn
    return deco


def source(x) -> str:
    """The source text of ``REFERENCE[x]`` for a name, or of a function (to read a loop beside its vectorized form)."""
    import inspect
    return inspect.getsource(REFERENCE[x] if isinstance(x, str) else x)


# ---- small helpers on Python lists ----------------------------------------------------------------
def members(ids) -> dict:
    """{id: [row, ...]} in row order."""
    out = defaultdict(list)
    for i, g in enumerate(ids):
        out[g].append(i)
    return out


def zscores(xs: list, *, norm: str = "std", ddof: int = 1, eps: float = 1e-6) -> list:
    """(x - mean) / (std + eps) of one group (x - mean for "mean"); std is 0 with <= ddof members."""
    mu = sum(xs) / len(xs)
    d = [x - mu for x in xs]
    if norm == "mean":
        return d
    std = math.sqrt(sum(v * v for v in d) / (len(xs) - ddof)) if len(xs) > ddof else 0.0
    den = std + eps if eps > 0 else (std if std > 0 else 1.0)
    return [v / den for v in d]


def group_z(values: list, ids: list, **kw) -> list:
    """``zscores`` inside every group of ``ids``."""
    out = [0.0] * len(values)
    for rows in members(ids).values():
        for i, z in zip(rows, zscores([values[i] for i in rows], **kw)):
            out[i] = z
    return out


def whitened(x: list, mask: list, eps: float = 1e-8) -> list:
    """(x - mean) / sqrt(var + eps) over the masked entries of a (B, L) list (unbiased var), 0 elsewhere."""
    vals = [v for row, mrow in zip(x, mask) for v, m in zip(row, mrow) if m]
    n = len(vals)
    mu = sum(vals) / max(n, 1)
    var = sum((v - mu) ** 2 for v in vals) / max(n - 1, 1)
    return [[(v - mu) / math.sqrt(var + eps) if m else 0.0 for v, m in zip(row, mrow)] for row, mrow in zip(x, mask)]


def to_go(rewards: list, valid: list, gamma: float) -> list:
    """R_k = r_k + gamma R_{k+1} over the valid steps of one row (invalid steps: 0, skipped)."""
    out, acc = [0.0] * len(rewards), 0.0
    for k in reversed(range(len(rewards))):
        if valid[k]:
            acc = rewards[k] + gamma * acc
            out[k] = acc
    return out


def outcome(b) -> list:
    """R_i = sum of the rewards of the valid turns of rollout i."""
    return [sum(r for r, v in zip(rr, mm) if v) for rr, mm in zip(b.turn_reward.tolist(), b.turn_mask.tolist())]


def turn_ends(b) -> list:
    """[row][turn] -> position of the turn's last policy token, or None."""
    out = [[None] * b.H for _ in range(b.B)]
    for i, (tids, pm) in enumerate(zip(b.turn_id.tolist(), b.policy_mask.tolist())):
        for t, (k, p) in enumerate(zip(tids, pm)):
            if p:
                out[i][k] = t
    return out


def on_turns(b, a_B: list) -> torch.Tensor:
    """A per-rollout scalar on every valid turn -> (B, H)."""
    return tensor(b, [[a if v else 0.0 for v in mm] for a, mm in zip(a_B, b.turn_mask.tolist())])


def tensor(b, rows: list) -> torch.Tensor:
    return torch.tensor(rows, dtype=b.turn_reward.dtype).reshape(len(rows), -1)


# ---- outcome estimators -------------------------------------------------------------------------


def token_rewards(b, kl_coef: float = 0.0) -> list:
    """Each turn's reward on the turn's last policy token, minus kl_coef (old_logp - ref_logp) on policy tokens."""
    r = [[0.0] * b.T for _ in range(b.B)]
    for i, ends in enumerate(turn_ends(b)):
        for k, t in enumerate(ends):
            if t is not None:
                r[i][t] = float(b.turn_reward[i, k])
    if kl_coef:
        kl = (b.old_logp - b.ref_logp).tolist()
        r = [[x - kl_coef * d * p for x, d, p in zip(*rows)] for rows in zip(r, kl, b.policy_mask.tolist())]
    return r
