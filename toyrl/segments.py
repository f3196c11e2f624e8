"""Segment (group) statistics with scatter ops: the vectorized core of every group baseline.

A *segment* is a set of rows that share an id: the rollouts of one prompt (GRPO), the turns taken
from one anchor state (GiGPO), the leaves of one tree (Tree-GRPO). Every group statistic in toyrl is
computed here with ``index_add_`` / ``scatter_reduce`` on dense segment indices, never with a
Python loop over samples or groups.

Dimension legend: N rows (flattened samples), S segments.

    idx, S = dense_index(ids)              # ids of any int values -> idx in [0, S)
    mean = segment_mean(x, idx, S)[idx]    # (N,) each row's segment mean
"""
from __future__ import annotations

import torch

__all__ = [
    "dense_index", "segment_sum", "segment_count", "segment_mean", "segment_std",
    "segment_max", "segment_min", "pair_index",
]


def dense_index(ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Map arbitrary integer ids (N,) to dense segment indices in [0, S).

    Example: ids [7, 3, 7] -> (idx [1, 0, 1], S=2).

    Small non-negative ids (max < 4 * N) take a fast path through a lookup table (no sort);
    anything else goes through ``torch.unique``.
    """
    if ids.dim() != 1:
        raise ValueError(f"ids must be 1-D (N,), got shape {tuple(ids.shape)}")
    n = ids.numel()
    if n == 0:
        return ids.new_zeros(0, dtype=torch.long), 0
    ids = ids.long()
    lo, hi = int(ids.min()), int(ids.max())
    if lo >= 0 and hi < 4 * n + 64:
        present = torch.zeros(hi + 1, dtype=torch.bool, device=ids.device)
        present[ids] = True
        lut = torch.cumsum(present.long(), 0) - 1          # (hi + 1,) dense rank of each present id
        return lut[ids], int(present.sum())
    _, idx = torch.unique(ids, return_inverse=True)
    return idx, int(idx.max()) + 1


def pair_index(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Dense index of the pairs (a_n, b_n), e.g. (group, state_key) anchor cells.

    Example: a [0, 0, 1], b [5, 5, 5] -> (idx [0, 0, 1], S=2): equal keys in different groups
    never share a segment.
    """
    if a.shape != b.shape or a.dim() != 1:
        raise ValueError(f"a and b must be 1-D of equal shape, got {tuple(a.shape)} and {tuple(b.shape)}")
    ia, na = dense_index(a)
    ib, nb = dense_index(b)
    if na * nb < 2**62:
        return dense_index(ia * nb + ib)
    _, idx = torch.unique(torch.stack([ia, ib], 1), dim=0, return_inverse=True)
    return idx, int(idx.max()) + 1


def segment_sum(x: torch.Tensor, idx: torch.Tensor, S: int) -> torch.Tensor:
    """Sum of x (N,) over each segment -> (S,). Example: x [1, 2, 4], idx [0, 1, 0] -> [5, 2]."""
    return torch.zeros(S, dtype=x.dtype, device=x.device).index_add_(0, idx, x)


def segment_count(idx: torch.Tensor, S: int, dtype=torch.float32) -> torch.Tensor:
    """Number of rows in each segment -> (S,). Example: idx [0, 1, 0] -> [2, 1]."""
    return torch.zeros(S, dtype=dtype, device=idx.device).index_add_(
        0, idx, torch.ones(idx.numel(), dtype=dtype, device=idx.device))


def segment_mean(x: torch.Tensor, idx: torch.Tensor, S: int) -> torch.Tensor:
    """Mean of x over each segment -> (S,); an empty segment has mean 0."""
    return segment_sum(x, idx, S) / segment_count(idx, S, x.dtype).clamp(min=1)


def segment_std(x: torch.Tensor, idx: torch.Tensor, S: int, *, ddof: int = 1) -> torch.Tensor:
    """Standard deviation of x over each segment -> (S,), two-pass (no catastrophic cancellation).

    ``ddof=1`` is torch.std (unbiased), ``ddof=0`` numpy's population std. A segment with
    count <= ddof has std 0 (never NaN). Example: x [1, 3, 5], idx [0, 0, 1], ddof=0 -> [1, 0].
    """
    n = segment_count(idx, S, x.dtype)
    mean = segment_sum(x, idx, S) / n.clamp(min=1)
    sq = segment_sum((x - mean[idx]) ** 2, idx, S)
    var = sq / (n - ddof).clamp(min=1)
    return torch.where(n > ddof, var, torch.zeros_like(var)).sqrt()


def segment_max(x: torch.Tensor, idx: torch.Tensor, S: int) -> torch.Tensor:
    """Max of x over each segment -> (S,); an empty segment gives -inf."""
    out = torch.full((S,), float("-inf"), dtype=x.dtype, device=x.device)
    return out.scatter_reduce(0, idx, x, reduce="amax", include_self=True)


def segment_min(x: torch.Tensor, idx: torch.Tensor, S: int) -> torch.Tensor:
    """Min of x over each segment -> (S,); an empty segment gives +inf."""
    out = torch.full((S,), float("inf"), dtype=x.dtype, device=x.device)
    return out.scatter_reduce(0, idx, x, reduce="amin", include_self=True)
