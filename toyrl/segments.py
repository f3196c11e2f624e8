"""Segment (group) statistics with scatter ops: the vectorized core of every group baseline.

A *segment* is a set of rows that share an id: the rollouts of one prompt (GRPO), the turns taken
from one anchor state (GiGPO), the leaves of one tree (Tree-GRPO). Every group statistic in toyrl is
computed here with ``scatter_add_`` / ``scatter_reduce`` on segment indices, never with a Python
loop over samples or groups.

Dimension legend: N rows (flattened samples), S segments.

    idx, S = dense_index(ids)              # ids of any int values -> idx in [0, S)
    mean = segment_mean(x, idx, S)[idx]    # (N,) each row's segment mean
    cell, S = anchor_cells(group, state_key, turn_mask)   # (group, key) cells: O(N), no sort
"""
from __future__ import annotations

from typing import Optional

import torch

__all__ = [
    "dense_index", "segment_sum", "segment_count", "segment_mean", "segment_std",
    "segment_max", "segment_min", "pair_index", "hash_cells", "anchor_cells", "anchor_index", "compact",
]


def dense_index(ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Map arbitrary integer ids (N,) to dense segment indices in [0, S).

    Example: ids [7, 3, 7] -> (idx [1, 0, 1], S=2).

    Small non-negative ids (max < 4 * N) take a fast path through a used-flag table (``compact``,
    no sort), and ids that are already dense come back as they are (the same tensor: do not modify
    it in place); anything else goes through ``torch.unique``.
    """
    if ids.dim() != 1:
        raise ValueError(f"ids must be 1-D (N,), got shape {tuple(ids.shape)}")
    n = ids.numel()
    if n == 0:
        return ids.new_zeros(0, dtype=torch.long), 0
    ids = ids.long()
    lo, hi = torch.stack(torch.aminmax(ids)).tolist()
    if lo >= 0 and hi < 4 * n + 64:                         # a used-flag table and its cumsum: no sort
        return compact(ids, hi + 1)
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


def _multiplier(salt: int) -> int:
    """An odd signed 64-bit multiplier for hashing round ``salt`` (splitmix64 of the salt)."""
    z = ((salt + 1) * 0x9E3779B97F4A7C15) & (2**64 - 1)
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & (2**64 - 1)
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & (2**64 - 1)
    z = (z ^ (z >> 31)) | 1
    return z - 2**64 if z >= 2**63 else z


def hash_cells(group: torch.Tensor, key: torch.Tensor, n_groups: int, *, load: float = 2.0,
               salt: int = 0) -> tuple[torch.Tensor, int]:
    """Cell of every row (b, k) over the pairs (group_b, key_{b,k}) -> ((B * H,) long ids < size, size).

    ``group`` (B,) holds dense ids in [0, n_groups), ``key`` (B, H) any int64 (e.g. 63-bit state
    hashes). Equal pairs get equal ids, different pairs different ids; ids are sparse, size ~ N / load.
    A hash table without a sort, O(N): group g owns a block of W_g ~ rows_g / load slots (a power of
    two; states repeat, so a group has far fewer distinct keys than rows), and a row goes to slot
    off_g + (top bits of key * c), multiply-shift hashing. Every row writes its key into its slot (any
    writer may win) and reads the winner back: equal pairs share a slot, so a pair wins or loses as a
    whole, and the losers (keys sharing a slot) retry with a new multiplier in fresh, sparser blocks
    (a last handful by ``torch.unique``). Pairs of different groups live in different blocks: never mixed.
    Example: group [0, 1], key [[5, 7], [5, 5]] -> ids with id[0] != id[1] != id[2] == id[3].
    """
    B, H = key.shape
    if B * H <= 32 and salt > 0:                                                       # a few stragglers
        pairs = torch.stack([group[:, None].expand(B, H).reshape(-1), key.reshape(-1)], 1)
        _, inv = torch.unique(pairs, dim=0, return_inverse=True)
        return inv, B * H
    rows = torch.bincount(group, minlength=n_groups) * H                               # (nG,) rows per group
    bits = torch.log2((rows / load).clamp_(min=2)).ceil_().long()                      # (nG,) W = 2**bits slots
    W = torch.ones_like(bits).bitwise_left_shift_(bits).mul_(rows > 0)                 # (nG,) block sizes
    off = W.cumsum(0) - W // 2                                                         # (nG,) block middles
    size = int(W.sum())
    h = (key * _multiplier(salt)).bitwise_right_shift_((64 - bits)[group, None])       # (B, H) in [-W/2, W/2)
    h = h.add_(off[group, None]).view(-1)                                              # (N,) slot
    k = key.reshape(-1)
    won = torch.empty(size, dtype=k.dtype, device=k.device).scatter_(0, h, k).index_select(0, h)  # slot's key
    lost = (won != k).nonzero().squeeze(1)
    if lost.numel():
        if salt >= 64:
            raise RuntimeError("hash_cells did not converge")  # pragma: no cover  (p ~ 0)
        sub, n_sub = hash_cells(group[lost // H], k[lost, None], n_groups, load=1.0, salt=salt + 1)
        h[lost] = sub.add_(size)
        size += n_sub
    return h, size


def compact(ids: torch.Tensor, size: int) -> tuple[torch.Tensor, int]:
    """Renumber sparse ids (N,) in [0, size) densely, keeping their order -> (idx in [0, S), S). No sort.

    Ids that use every value of [0, size) come back as they are. Example: ids [9, 2, 9], size 10 ->
    (idx [1, 0, 1], S=2).
    """
    used = torch.zeros(size, dtype=torch.long, device=ids.device).index_fill_(0, ids, 1)
    S = int(used.sum())
    if S == size:                                                                      # already dense
        return ids, S
    rank = used.cumsum_(0)                                                             # (size,) dense id + 1
    return rank.index_select(0, ids).sub_(1), S


def anchor_cells(group: torch.Tensor, state_key: torch.Tensor, turn_mask: torch.Tensor, *,
                 n_groups: Optional[int] = None) -> tuple[torch.Tensor, int]:
    """Anchor cell of every turn over (group, state_key) pairs of valid turns -> ((B * H,) long, S).

    Small dense keys (0 <= key < K with n_groups * K <= 4 N, e.g. FrozenLake's cell index) take a
    fast path, cell = group * K + key; any other int64 keys (e.g. 63-bit hashes) go through the hash
    table ``hash_cells``. Ids are sparse (``compact`` renumbers them densely); every invalid turn gets
    the last id S - 1, so segment statistics never mix it with a valid turn. ``n_groups`` says
    ``group`` is already dense in [0, n_groups).
    Example: group [0, 0], keys [[5, 7], [5, 0]], mask [[1, 1], [1, 0]] -> id[0] == id[2] != id[1],
    id[3] == S - 1.
    """
    gi, nG = dense_index(group) if n_groups is None else (group, n_groups)
    key = state_key.long()
    lo, hi = torch.aminmax(key) if key.numel() else (key.new_zeros(()), key.new_zeros(()))
    K = int(hi) + 1
    if int(lo) >= 0 and nG * K <= 4 * key.numel() + 64:                                # small dense ids
        cell, size = (gi[:, None] * K + key).view(-1), nG * K                          # (N,)
    else:
        cell, size = hash_cells(gi, key, nG)
    return torch.where(turn_mask.reshape(-1), cell, cell.new_tensor(size), out=cell), size + 1


def anchor_index(group: torch.Tensor, state_key: torch.Tensor, turn_mask: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Dense anchor id of every turn over (group, state_key) cells -> ((B, H) long, S); invalid turns get S.

    ``anchor_cells`` renumbered densely. Equal keys in different groups never share an anchor.
    Example: group [0, 1], keys [[5, 7], [5, 5]], all valid -> [[0, 1], [2, 2]], S=3 (up to renaming).
    """
    cell, S = compact(*anchor_cells(group, state_key, turn_mask))                 # invalid turns: S - 1
    return cell.view(state_key.shape), S - int(bool((~turn_mask).any()))


def segment_sum(x: torch.Tensor, idx: torch.Tensor, S: int) -> torch.Tensor:
    """Sum of x (N,) over each segment -> (S,). Example: x [1, 2, 4], idx [0, 1, 0] -> [5, 2]."""
    return torch.zeros(S, dtype=x.dtype, device=x.device).scatter_add_(0, idx, x)


def segment_count(idx: torch.Tensor, S: int, dtype=torch.float32) -> torch.Tensor:
    """Number of rows in each segment -> (S,). Example: idx [0, 1, 0] -> [2, 1]."""
    return torch.bincount(idx, minlength=S).to(dtype)


def segment_mean(x: torch.Tensor, idx: torch.Tensor, S: int) -> torch.Tensor:
    """Mean of x over each segment -> (S,); an empty segment has mean 0."""
    return segment_sum(x, idx, S) / segment_count(idx, S, x.dtype).clamp(min=1)


def segment_std(x: torch.Tensor, idx: torch.Tensor, S: int, *, ddof: int = 1) -> torch.Tensor:
    """Standard deviation of x over each segment -> (S,), two-pass in float64 (exactly 0 for equal values).

    ``ddof=1`` is torch.std (unbiased), ``ddof=0`` numpy's population std. A segment with
    count <= ddof has std 0 (never NaN). Example: x [1, 3, 5], idx [0, 0, 1], ddof=0 -> [1, 0].
    """
    x64 = x.to(torch.float64)
    n = segment_count(idx, S, torch.float64)
    d = x64 - (segment_sum(x64, idx, S) / n.clamp(min=1)).index_select(0, idx)    # (N,) x - segment mean
    var = segment_sum(d * d, idx, S) / (n - ddof).clamp(min=1)
    return var.masked_fill_(n <= ddof, 0.0).sqrt_().to(x.dtype)


def segment_max(x: torch.Tensor, idx: torch.Tensor, S: int) -> torch.Tensor:
    """Max of x over each segment -> (S,); an empty segment gives -inf."""
    out = torch.full((S,), float("-inf"), dtype=x.dtype, device=x.device)
    return out.scatter_reduce(0, idx, x, reduce="amax", include_self=True)


def segment_min(x: torch.Tensor, idx: torch.Tensor, S: int) -> torch.Tensor:
    """Min of x over each segment -> (S,); an empty segment gives +inf."""
    out = torch.full((S,), float("inf"), dtype=x.dtype, device=x.device)
    return out.scatter_reduce(0, idx, x, reduce="amin", include_self=True)
