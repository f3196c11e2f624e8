"""Shared pieces of the credit estimators: shape checks, group normalization, token placement.

Dimension legend: B rollouts, T tokens, H turns, N flattened rows, S segments.

Every estimator in ``toyrl.credit`` is built from the same three moves, said once here:

    check(name, x, "BH", dims)                         # ValueError naming the argument
    adv = group_norm(x, idx, S, norm="std")            # (x - mean_g) / (std_g + eps) per segment
    r_BT = place_at_turn_end(r_BH, turn_id, mask)      # turn reward on the turn's last policy token

Conventions: statistics of a segment with one row give a zero advantage (no baseline information);
``std`` uses ``ddof`` (1 = torch.std / verl, 0 = numpy / the seed snippet) and ``eps`` is added to
the std, never to the variance, except in ``masked_whiten`` (verl: rsqrt(var + 1e-8)).
"""
from __future__ import annotations

from typing import Optional

import torch

from ..segments import dense_index, segment_count, segment_sum

__all__ = ["check", "group_norm", "group_ids", "masked_whiten", "place_at_turn_end", "broadcast_turns",
           "next_valid", "segment_sizes", "segment_total", "turn_group_norm",
           "last_turn", "turns_to_go"]


def check(name: str, x, spec: str, dims: dict, *, kind: Optional[str] = None) -> dict:
    """Check that ``x`` is a tensor of shape ``spec`` (letters B, T, H, D) and fill unknown letters.

    Raises ``ValueError("adv: expected shape (B=4, H=3), got (4, 2)")``. Returns ``dims`` updated.
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
    if kind == "bool" and x.dtype != torch.bool:
        raise ValueError(f"{name}: expected a bool tensor, got {x.dtype}")
    return dims


def group_norm(x: torch.Tensor, idx: torch.Tensor, S: int, *, norm: str = "std", ddof: int = 1,
               eps: float = 1e-6) -> torch.Tensor:
    """Segment-relative score: (x - mean_seg) / (std_seg + eps) ("std") or x - mean_seg ("mean").

    Rows are (N,), ``idx`` (N,) dense segment ids in [0, S). A singleton segment gives exactly 0.
    Example: x [1., 0., 0.], idx [0, 0, 0], norm "mean" -> [0.667, -0.333, -0.333].
    """
    if norm not in ("std", "mean"):
        raise ValueError(f"norm must be 'std' or 'mean', got {norm!r}")
    n = segment_count(idx, S, x.dtype)                                   # (S,)
    mean = segment_sum(x, idx, S) / n.clamp(min=1)                       # (S,)
    centered = x - mean[idx]                                             # (N,)
    centered = torch.where(n[idx] > 1, centered, torch.zeros_like(centered))   # singleton -> exactly 0
    if norm == "mean":
        return centered
    var = segment_sum(centered * centered, idx, S) / (n - ddof).clamp(min=1)
    std = torch.where(n > ddof, var, torch.zeros_like(var)).sqrt()       # (S,) two-pass, as segment_std
    den = std[idx] + eps
    return centered / den.masked_fill(den == 0, 1.0)                    # eps=0 and std 0: stays 0


def group_ids(group: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Dense group index (B,) and group count (thin alias of ``segments.dense_index``)."""
    return dense_index(group)


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, *, eps: float = 1e-8, zero_outside: bool = True) -> torch.Tensor:
    """Whiten with masked statistics: (x - mu) * rsqrt(var + eps), var unbiased; 0 outside the mask.

    verl's ``masked_whiten`` (which raises for fewer than 2 masked entries, and keeps the whitened
    values outside the mask: ``zero_outside=False``); here a count < 2 uses var 0, so a lone entry
    maps to 0. Example: x [1., 2., 3.], all masked -> [-1., 0., 1.].
    """
    m = mask.to(x.dtype)
    n = m.sum()
    mu = (x * m).sum() / n.clamp(min=1)
    var = (((x - mu) * m) ** 2).sum() / (n - 1).clamp(min=1)
    out = (x - mu) * torch.rsqrt(var + eps)
    return out * m if zero_outside else out


def place_at_turn_end(x_BH: torch.Tensor, turn_id: torch.Tensor, policy_mask: torch.Tensor) -> torch.Tensor:
    """Put each turn's value on the last policy token of that turn -> (B, T), 0 elsewhere.

    Example: x [[1., 2.]], turn_id [[0, 0, 0, 1, 1]], policy_mask [[1, 1, 0, 1, 0]] -> [[0, 1, 0, 2, 0]].
    A turn with no policy token drops its value.
    """
    B, T = turn_id.shape
    H = x_BH.shape[1]
    pos = torch.arange(T, device=turn_id.device).expand(B, T)           # (B, T)
    keep = policy_mask & (turn_id >= 0)
    flat = torch.arange(B, device=turn_id.device)[:, None] * H + turn_id.clamp(min=0)   # (B, T)
    last = torch.full((B * H,), -1, dtype=torch.long, device=turn_id.device)
    last = last.scatter_reduce(0, flat[keep], pos[keep], reduce="amax")   # (B*H,) last position
    is_end = keep & (last[flat] == pos)                                    # (B, T)
    out = x_BH.gather(1, turn_id.clamp(min=0))                             # (B, T)
    return torch.where(is_end, out, torch.zeros_like(out))


def broadcast_turns(a_B: torch.Tensor, turn_mask: torch.Tensor) -> torch.Tensor:
    """Copy a per-rollout scalar to every valid turn -> (B, H). Example: [2.], [[1, 1, 0]] -> [[2, 2, 0]]."""
    return a_B[:, None] * turn_mask.to(a_B.dtype)                          # (B, H)


def next_valid(x_BH: torch.Tensor, turn_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Value of the next valid turn after k (skipping invalid ones) and whether one exists -> (B, H) x2.

    Example: x [[1., 2., 3.]], mask [[1, 0, 1]] -> ([[3., 0., 0.]], [[True, True, False]]). Loop over H.
    """
    nxt = torch.zeros_like(x_BH)
    has = torch.zeros_like(turn_mask)
    run = torch.zeros_like(x_BH[:, 0]) if x_BH.shape[1] else None
    run_has = torch.zeros_like(turn_mask[:, 0]) if x_BH.shape[1] else None
    for k in range(x_BH.shape[1] - 1, -1, -1):
        nxt[:, k], has[:, k] = run, run_has
        run = torch.where(turn_mask[:, k], x_BH[:, k], run)
        run_has = run_has | turn_mask[:, k]
    return nxt, has


def segment_sizes(idx: torch.Tensor, S: int) -> torch.Tensor:
    """Rows per segment, gathered back per row -> (N,) long."""
    return torch.zeros(S, dtype=torch.long, device=idx.device).index_add_(
        0, idx, torch.ones_like(idx))[idx]


def segment_total(x: torch.Tensor, idx: torch.Tensor, S: int) -> torch.Tensor:
    """Segment sum gathered back per row -> (N,)."""
    return segment_sum(x, idx, S)[idx]


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
    return z.view(B, H) * turn_mask.to(x_BH.dtype)


def last_turn(turn_mask: torch.Tensor) -> torch.Tensor:
    """One-hot (B, H) bool of each rollout's last valid turn. Example: [[1, 1, 0]] -> [[0, 1, 0]]."""
    k = torch.arange(turn_mask.shape[1], device=turn_mask.device).expand_as(turn_mask)
    kmax = torch.where(turn_mask, k, torch.full_like(k, -1)).amax(1, keepdim=True) if turn_mask.shape[1] \
        else torch.full_like(k[:, :1], -1)
    return turn_mask & (k == kmax)


def turns_to_go(turn_mask: torch.Tensor) -> torch.Tensor:
    """Number of valid turns from k to the end -> (B, H) long. Example: [[1, 0, 1]] -> [[2, 1, 1]]."""
    return turn_mask.long().flip(1).cumsum(1).flip(1)
