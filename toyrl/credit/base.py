"""Shared pieces of the credit estimators: shape checks, group normalization, token placement.

Dimension legend: B rollouts, T tokens, H turns, N flattened rows, S segments.

Every estimator in ``toyrl.credit`` is built from the same few moves, said once here (the scans
over tokens and turns live in ``scan``):

    check(name, x, "BH", dims, kind="float")           # ValueError naming the argument (shape, dtype, NaN / inf)
    adv = group_norm(x, idx, S, norm="std")            # (x - mean_g) / (std_g + eps) per segment
    r_BT = place_at_turn_end(r_BH, turn_id, mask)      # turn reward on the turn's last policy token

Conventions: statistics of a segment with one row give a zero advantage (no baseline information);
``std`` uses ``ddof`` (1 = torch.std / verl, 0 = numpy / the seed snippet) and ``eps`` is added to
the std, never to the variance, except in ``masked_whiten`` (verl: rsqrt(var + 1e-8)).
"""
from __future__ import annotations

import math
from typing import Optional

import torch

from ..batch import check_finite
from ..segments import dense_index, segment_count, segment_sum
from .scan import next_masked

__all__ = ["check", "group_norm", "group_ids", "masked_whiten", "place_at_turn_end", "turn_end_pos", "place_at",
           "turn_ends", "broadcast_turns", "next_valid", "turn_group_norm", "last_turn", "turns_to_go"]


def check(name: str, x, spec: str, dims: dict, *, kind: Optional[str] = None) -> dict:
    """Check that ``x`` is a tensor of shape ``spec`` (letters B, T, H, D) and fill unknown letters.

    Raises ``ValueError("adv: expected shape (B=4, H=3), got (4, 2)")``. Returns ``dims`` updated.
    ``kind="float"`` also requires every entry finite: ``ValueError("q has a non-finite value nan at (0, 2)")``.
    """
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name}: expected a torch.Tensor of shape ({', '.join(spec)}), got {type(x).__name__}")
    if x.dim() != len(spec):
        raise ValueError(f"{name}: expected a {len(spec)}-D tensor of shape ({', '.join(spec)}), "
                         f"got shape {tuple(x.shape)}")
    for letter, n in zip(spec, x.shape):
        if dims.setdefault(letter, n) != n:
            want = ", ".join(f"{c}={dims.get(c, '?')}" for c in spec)
            raise ValueError(f"{name}: expected shape ({want}), got {tuple(x.shape)}")
    if kind == "float" and not x.is_floating_point():
        raise ValueError(f"{name}: expected a floating-point tensor, got {x.dtype}")
    if kind == "float" and not math.isfinite(float(x.detach().sum(dtype=torch.float64))):   # one pass over x
        check_finite(name, x)              # not finite: a bad entry (named here) or a float64 overflow (passes)
    if kind == "bool" and x.dtype != torch.bool:
        raise ValueError(f"{name}: expected a bool tensor, got {x.dtype}")
    return dims


def group_norm(x: torch.Tensor, idx: torch.Tensor, S: int, *, norm: str = "std", ddof: int = 1,
               eps: float = 1e-6, count: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Segment-relative score: (x - mean_seg) / (std_seg + eps) ("std") or x - mean_seg ("mean").

    Rows are (N,), ``idx`` (N,) dense segment ids in [0, S). Statistics are accumulated in float64
    (two-pass std), the result is in x.dtype. A segment of equal values (singletons included) gives
    exactly 0: the float64 sum of float32 values is exact, so its mean is the value itself (in float32
    a sum of 0.95**3 eight times, divided by 8, misses it by an ulp, and (x - mean) / (std + 1e-6)
    then reads ~0.05 instead of 0). A segment with count <= ddof has std 0. ``count`` (S,) long: the
    rows per segment when the caller has them already (``segment_count(idx, S, torch.long)``).
    Example: x [1., 0., 0.], idx [0, 0, 0], norm "mean" -> [0.667, -0.333, -0.333].
    """
    if norm not in ("std", "mean"):
        raise ValueError(f"norm must be 'std' or 'mean', got {norm!r}")
    x64 = x.to(torch.float64, copy=True)                                 # (N,) our own copy: updated in place
    n = segment_count(idx, S, torch.long) if count is None else count   # (S,) rows per segment (exact ints)
    idx = idx.long()                                                     # the scatters' index type, converted once
    mean = segment_sum(x64, idx, S) / n.clamp(min=1)                     # (S,)
    buf = mean.index_select(0, idx)                                      # (N,) scratch, reused twice below
    centered = x64.sub_(buf)                                             # (N,) singleton: exactly 0
    if norm == "mean":
        return centered.to(x.dtype)
    var = segment_sum(torch.mul(centered, centered, out=buf), idx, S) / (n - ddof).clamp(min=1)   # two-pass
    if ddof > 1:                                                         # count <= 1: var is exactly 0 already
        var = var.masked_fill(n <= ddof, 0.0)
    std = var.sqrt()
    den = std + eps if eps > 0 else torch.where(std > 0, std, 1.0)       # eps=0 and std 0: stays 0
    return torch.div(centered, torch.index_select(den, 0, idx, out=buf), out=torch.empty_like(x))   # in x.dtype


def group_ids(group: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Dense group index (B,) and group count (thin alias of ``segments.dense_index``)."""
    return dense_index(group)


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, *, eps: float = 1e-8,
                  zero_outside: bool = True) -> torch.Tensor:
    """Whiten with masked statistics: (x - mu) * rsqrt(var + eps), var unbiased; 0 outside the mask.

    verl's ``masked_whiten`` (which raises for fewer than 2 masked entries, and keeps the whitened
    values outside the mask: ``zero_outside=False``); here a count < 2 uses var 0, so a lone entry
    maps to 0. The sums run in float64, so equal values whiten to exactly 0 (in float32 their mean
    can miss the value by an ulp, which 1 / sqrt(0 + eps) then blows up to ~1e-4).
    Example: x [1., 2., 3.], all masked -> [-1., 0., 1.].
    """
    m = mask.to(x.dtype)
    n = m.sum(dtype=torch.float64)
    mu = (x * m).sum(dtype=torch.float64) / n.clamp(min=1)                # masked mean, summed in float64
    d = x - mu.to(x.dtype)                                                 # equal values: exactly 0
    var = (d * d * m).sum(dtype=torch.float64) / (n - 1).clamp(min=1)     # unbiased masked variance
    out = d * torch.rsqrt(var + eps).to(x.dtype)
    if zero_outside:
        out *= m
    return out


def turn_end_pos(turn_id: torch.Tensor, policy_mask: torch.Tensor, H: int) -> torch.Tensor:
    """Position of the last policy token of each turn -> (B, H) long, -1 for a turn without one.

    One ``scatter_reduce`` (max) of position + 1 over the policy tokens of each turn (column 0 takes
    the other tokens); any token order. Example: turn_id [[0, 0, 0, 1, 1]], policy_mask
    [[1, 1, 0, 1, 0]], H=3 -> [[1, 3, -1]].
    """
    B, T = turn_id.shape
    pos = torch.arange(1, T + 1, device=turn_id.device).expand(B, T)                  # (B, T) position + 1
    col = (turn_id + 1) * policy_mask                                                 # (B, T) turn + 1, or 0
    last = pos.new_zeros(B, H + 1).scatter_reduce_(1, col, pos, reduce="amax")       # (B, H + 1)
    return last[:, 1:] - 1                                                            # (B, H)


def place_at(x_BH: torch.Tensor, pos: torch.Tensor, T: int) -> torch.Tensor:
    """out[b, pos[b, k]] = x[b, k] -> (B, T), 0 elsewhere; pos -1 drops the value. Example: [[1., 2.]], [[1, -1]], 3 -> [[0, 1, 0]]."""
    out = x_BH.new_zeros(x_BH.shape[0], T + 1)                                        # (B, T + 1) column 0: dropped
    return out.scatter_(1, pos + 1, x_BH)[:, 1:]                                      # (B, T)


def place_at_turn_end(x_BH: torch.Tensor, turn_id: torch.Tensor, policy_mask: torch.Tensor) -> torch.Tensor:
    """Put each turn's value on the last policy token of that turn -> (B, T), 0 elsewhere.

    Example: x [[1., 2.]], turn_id [[0, 0, 0, 1, 1]], policy_mask [[1, 1, 0, 1, 0]] -> [[0, 1, 0, 2, 0]].
    A turn with no policy token drops its value.
    """
    return place_at(x_BH, turn_end_pos(turn_id, policy_mask, x_BH.shape[1]), turn_id.shape[1])


def turn_ends(turn_id: torch.Tensor, policy_mask: torch.Tensor, H: Optional[int] = None) -> torch.Tensor:
    """Bool (B, T): the last policy token of each turn. Example: turn_id [[0, 0, 0, 1, 1]], policy_mask
    [[1, 1, 0, 1, 0]] -> [[0, 1, 0, 1, 0]]."""
    H = (int(turn_id.max()) + 1 if turn_id.numel() else 0) if H is None else H
    pos = turn_end_pos(turn_id, policy_mask, H)
    return place_at(torch.ones_like(pos, dtype=torch.bool), pos, turn_id.shape[1])


def broadcast_turns(a_B: torch.Tensor, turn_mask: torch.Tensor) -> torch.Tensor:
    """Copy a per-rollout scalar to every valid turn -> (B, H). Example: [2.], [[1, 1, 0]] -> [[2, 2, 0]]."""
    return a_B[:, None] * turn_mask                                         # (B, H)


def next_valid(x_BH: torch.Tensor, turn_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Value of the next valid turn after k (skipping invalid ones) and whether one exists -> (B, H) x2.

    Example: x [[1., 2., 3.]], mask [[1, 0, 1]] -> ([[3., 3., 0.]], [[True, True, False]]).
    """
    c = turn_mask.cumsum(1)                                                 # (B, H) valid turns up to k
    return next_masked(x_BH, turn_mask), c < c[:, -1:]


def turn_group_norm(x_BH: torch.Tensor, turn_mask: torch.Tensor, group: torch.Tensor, *, norm: str = "std",
                    ddof: int = 1, eps: float = 1e-6) -> torch.Tensor:
    """Normalize per (group, turn index) cell over valid turns -> (B, H), 0 on invalid turns.

    A turn index present in only part of a group is normalized over those that have it; a
    singleton cell gives 0. Example: x [[1., 5.], [0., 7.]] one group, all valid, "mean" ->
    [[0.5, -1.], [-0.5, 1.]].
    """
    B, H = x_BH.shape
    gi, nG = dense_index(group)
    cell = gi[:, None] * H + torch.arange(H, device=x_BH.device)                # (B, H)
    cell = torch.where(turn_mask, cell, torch.full_like(cell, nG * H))          # invalid -> dummy cell
    z = group_norm(x_BH.reshape(-1), cell.reshape(-1), nG * H + 1, norm=norm, ddof=ddof, eps=eps)
    return z.view(B, H) * turn_mask


def last_turn(turn_mask: torch.Tensor) -> torch.Tensor:
    """One-hot (B, H) bool of each rollout's last valid turn. Example: [[1, 1, 0]] -> [[0, 1, 0]]."""
    k = torch.arange(turn_mask.shape[1], device=turn_mask.device).expand_as(turn_mask)
    kmax = torch.where(turn_mask, k, torch.full_like(k, -1)).amax(1, keepdim=True) if turn_mask.shape[1] \
        else torch.full_like(k[:, :1], -1)
    return turn_mask & (k == kmax)


def turns_to_go(turn_mask: torch.Tensor) -> torch.Tensor:
    """Number of valid turns from k to the end -> (B, H) long. Example: [[1, 0, 1]] -> [[2, 1, 1]]."""
    return turn_mask.long().flip(1).cumsum(1).flip(1)
