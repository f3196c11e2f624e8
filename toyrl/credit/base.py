"""Shared pieces of the credit estimators: shape checks, group normalization, token placement.

Dimension legend: B rollouts, T tokens, H turns, N flattened rows, S segments.

Every estimator in ``toyrl.credit`` is built from the same few moves, said once here:

    check(name, x, "BH", dims)                         # ValueError naming the argument
    adv = group_norm(x, idx, S, norm="std")            # (x - mean_g) / (std_g + eps) per segment
    r_BT = place_at_turn_end(r_BH, turn_id, mask)      # turn reward on the turn's last policy token
    y = discounted_cumsum(x, mask, gamma * lam)        # y_t = x_t + gamma lam y_{t'}: GAE, return-to-go

Conventions: statistics of a segment with one row give a zero advantage (no baseline information);
``std`` uses ``ddof`` (1 = torch.std / verl, 0 = numpy / the seed snippet) and ``eps`` is added to
the std, never to the variance, except in ``masked_whiten`` (verl: rsqrt(var + 1e-8)).
"""
from __future__ import annotations

import math
from typing import Optional

import torch

from ..batch import mask_to
from ..segments import dense_index, segment_sum

__all__ = ["check", "group_norm", "group_ids", "masked_whiten", "place_at_turn_end", "turn_end_pos", "place_at",
           "turn_ends", "broadcast_turns", "next_valid", "next_masked", "discounted_cumsum", "discounted_cumsum_",
           "segment_sizes", "segment_total", "turn_group_norm", "last_turn", "turns_to_go"]


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

    Rows are (N,), ``idx`` (N,) dense segment ids in [0, S). Statistics are accumulated in float64
    (two-pass std), the result is in x.dtype. A segment of equal values (singletons included) gives
    exactly 0: the float64 sum of float32 values is exact, so its mean is the value itself (in float32
    a sum of 0.95**3 eight times, divided by 8, misses it by an ulp, and (x - mean) / (std + 1e-6)
    then reads ~0.05 instead of 0).
    Example: x [1., 0., 0.], idx [0, 0, 0], norm "mean" -> [0.667, -0.333, -0.333].
    """
    if norm not in ("std", "mean"):
        raise ValueError(f"norm must be 'std' or 'mean', got {norm!r}")
    x64 = x.to(torch.float64)                                             # (N,)
    n = torch.bincount(idx, minlength=S).to(torch.float64)               # (S,)
    mean = segment_sum(x64, idx, S).div_(n)                              # (S,) NaN on empty (unread) ids
    centered = mean.index_select(0, idx)
    torch.sub(x64, centered, out=centered)                               # (N,) singleton: exactly 0
    if norm == "std":
        work = x64 if x64 is not x else torch.empty_like(x64)            # (N,) scratch: x64 is no longer needed
        sq = torch.mul(centered, centered, out=work)
        few = n <= ddof if ddof > 1 else None                             # (count <= 1: sq is 0 already)
        var = segment_sum(sq, idx, S).div_(n.sub_(ddof).clamp_(min=1))   # (S,) two-pass variance
        if few is not None:
            var.masked_fill_(few, 0.0)                                    # count <= ddof: std 0, as segment_std
        den = var.sqrt_().add_(eps)
        if eps <= 0:
            den.masked_fill_(den == 0, 1.0)                               # eps=0 and std 0: stays 0
        centered.div_(torch.index_select(den, 0, idx, out=work))
    return centered.to(x.dtype)


def group_ids(group: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Dense group index (B,) and group count (thin alias of ``segments.dense_index``)."""
    return dense_index(group)


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, *, eps: float = 1e-8, zero_outside: bool = True,
                  inplace: bool = False) -> torch.Tensor:
    """Whiten with masked statistics: (x - mu) * rsqrt(var + eps), var unbiased; 0 outside the mask.

    verl's ``masked_whiten`` (which raises for fewer than 2 masked entries, and keeps the whitened
    values outside the mask: ``zero_outside=False``); here a count < 2 uses var 0, so a lone entry
    maps to 0. ``inplace`` overwrites x (a buffer of your own). Example: x [1., 2., 3.], all masked -> [-1., 0., 1.].
    """
    if inplace and not zero_outside:
        raise ValueError("masked_whiten: inplace=True needs zero_outside=True")
    m = mask_to(mask, x.dtype)
    n = m.sum()
    d = x.mul_(m) if inplace and not x.requires_grad else x * m           # x on the mask, 0 off it
    mu = d.sum() / n.clamp(min=1)
    if not zero_outside:                                                   # whitened values off the mask too
        d = x - mu
        return d * torch.rsqrt((d * m).square().sum() / (n - 1).clamp(min=1) + eps)
    d.sub_(mu).mul_(m)                                                     # (x - mu) on the mask
    rs = torch.rsqrt(d.square().sum() / (n - 1).clamp(min=1) + eps)       # 1 / sqrt(unbiased var + eps)
    return d * rs if d.requires_grad else d.mul_(rs)                       # autograd keeps d for square()


def turn_end_pos(turn_id: torch.Tensor, policy_mask: torch.Tensor, H: int) -> torch.Tensor:
    """Position of the last policy token of each turn -> (B, H) long, -1 for a turn without one.

    One float ``scatter_reduce`` (max) of position + 1 over the tokens (exact: positions < 2**24);
    any token order, padding (-1) ignored. Example: turn_id [[0, 0, 0, 1, 1]], policy_mask
    [[1, 1, 0, 1, 0]], H=3 -> [[1, 3, -1]].
    """
    B, T = turn_id.shape
    pos = torch.arange(1, T + 1, dtype=torch.float32 if T < 2**24 else torch.float64, device=turn_id.device)
    src = pos * mask_to(policy_mask.to(torch.bool), pos.dtype)                        # (B, T) position + 1, or 0
    last = src.new_zeros(B, H + 1).scatter_reduce_(1, turn_id + 1, src, reduce="amax")  # (B, H + 1) col 0: padding
    return last[:, 1:].long().sub_(1)                                                 # (B, H)


def place_at(x_BH: torch.Tensor, pos: torch.Tensor, T: int) -> torch.Tensor:
    """out[b, pos[b, k]] = x[b, k] -> (B, T), 0 elsewhere; pos -1 drops the value. Example: [[1., 2.]], [[1, -1]], 3 -> [[0, 1, 0]]."""
    has = pos >= 0                                                                    # (B, H)
    out = x_BH.new_zeros(x_BH.shape[0], T)
    out[has.nonzero(as_tuple=True)[0], pos[has]] = x_BH[has]                          # (B, T)
    return out


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
    return a_B[:, None] * mask_to(turn_mask, a_B.dtype)                     # (B, H)


def next_valid(x_BH: torch.Tensor, turn_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Value of the next valid turn after k (skipping invalid ones) and whether one exists -> (B, H) x2.

    Example: x [[1., 2., 3.]], mask [[1, 0, 1]] -> ([[3., 0., 0.]], [[True, True, False]]).
    """
    c = turn_mask.to(torch.bool).cumsum(1)                                      # (B, H) valid turns up to k
    return next_masked(x_BH, turn_mask), c < c[:, -1:]


def next_masked(x: torch.Tensor, mask: torch.Tensor, *, last: Optional[torch.Tensor] = None,
                reset: Optional[torch.Tensor] = None) -> torch.Tensor:
    """x at the next masked step after t -> (B, L): ``last`` (B,) (default 0) past the final one, 0 across a reset.

    ``reset`` (B, L) bool cuts the row after t (as in ``discounted_cumsum``): 0 if a reset lies in
    [t, next masked step). No loop: the masked steps are packed to the left of a (B, L + 2) table
    (``scatter``, column 0 catches the others) and the one after t is read at rank ``cumsum(mask)_t``.
    Example: x [[1., 2., 3., 4.]], mask [[1, 0, 1, 0]], last [9.] -> [[3., 3., 9., 9.]].
    """
    B, L = x.shape
    if L == 0:
        return x.clone()
    m = mask.to(torch.bool)
    c = m.cumsum(1)                                          # (B, L) rank of the next masked step after t
    slot = c * m                                             # rank + 1 of a masked step, 0 otherwise
    n = c[:, -1:] + 1                                        # (B, 1) slot past the final masked step
    packed = x.new_zeros(B, L + 2).scatter_(1, slot, x)      # (B, L + 2): packed[:, k + 1] = x of rank k
    if last is not None:
        packed.scatter_(1, n, last.to(x.dtype)[:, None])
    out = packed[:, 1:].gather(1, c)                         # (B, L)
    if reset is not None:
        r = reset.to(torch.bool)
        seg = r.cumsum(1).sub_(r.view(torch.uint8))          # (B, L) resets before t
        seg_packed = seg.new_zeros(B, L + 2).scatter_(1, slot, seg)
        seg_packed.scatter_(1, n, seg[:, -1:] + r[:, -1:])
        out.masked_fill_(seg_packed[:, 1:].gather(1, c) != seg, 0.0)   # a reset in between -> 0
    return out


def _chunk_len(factor: float, L: int) -> int:
    """Chunk length for ``discounted_cumsum``: a power of two with |factor|^+-C within 2^+-20 (all of L at 1)."""
    a = abs(factor)
    if a == 1.0 or L <= 1:
        return max(L, 1)
    C = int(20 * math.log(2) / abs(math.log(a))) if a > 0.0 else 1
    return min(L, 1 << max(0, C.bit_length() - 1))


def discounted_cumsum(x: torch.Tensor, mask: torch.Tensor, factor: float, *,
                      reset: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Discounted reverse cumsum over masked steps, carried over the others -> (B, L), in x.dtype.

        y_t = x_t + factor * y_{t+1}   (t masked)        y_t = y_{t+1}   (t not masked)        y_L = 0
            = sum_{s >= t, s masked} factor^{n(t, s)} x_s,      n(t, s) = # masked steps in [t, s)

    ``reset`` (B, L) bool cuts the chain after t (y_{t+1} read as 0 at t). GAE's A_t (factor
    gamma * lam, x = delta) and the return-to-go (factor gamma, x = r) with verl's multi-turn rule
    (observation tokens carry). Blocked scan in float64, no loop over L: in a chunk of C steps
    y_t = factor^-e_t * (sum of factor^e_s x_s over s >= t), e = masked steps before t in the chunk,
    which is one cumsum; C keeps factor^+-C within 2^+-20, so the rounding stays ~1e-10 of sum |x|
    (factor 1: the whole row is one chunk). One small loop over the L / C chunks carries y leftwards.
    Example: x [[1., 5., 2., 4.]], mask [[1, 0, 1, 1]], factor 0.5 -> [[3., 4., 4., 4.]].
    """
    w = x.to(torch.float64, copy=True)                                      # (B, L) work buffer
    return discounted_cumsum_(w, mask, factor, reset=reset).to(x.dtype)


def discounted_cumsum_(w: torch.Tensor, mask: torch.Tensor, factor: float, *,
                       reset: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``discounted_cumsum`` of a float64 (B, L) buffer ``w``, which it overwrites -> (B, L) float64.

    Entries off the mask are multiplied by 0 (so they must be finite). Differentiable.
    """
    B, L = w.shape
    f, m = float(factor), mask.to(torch.bool)
    reset = None if reset is None else reset.to(torch.bool)
    w.mul_(m)                                                               # unmasked x dropped
    C = _chunk_len(f, L)
    nC = -(-L // C)
    if nC * C > L:                                                          # pad the last chunk: nothing there
        pad = nC * C - L
        w = torch.cat([w, w.new_zeros(B, pad)], 1)
        m = torch.cat([m, m.new_zeros(B, pad)], 1)
        reset = None if reset is None else torch.cat([reset, reset.new_zeros(B, pad)], 1)
    w, m = w.view(B, nC, C), m.view(B, nC, C)                               # (B, nC, C)
    if f != 1.0:
        powers = f ** torch.arange(C + 1, dtype=torch.float64, device=w.device)   # factor^0 .. factor^C
        e = m.cumsum(-1).sub_(m.view(torch.uint8))                          # (B, nC, C) masked steps before t
        E = powers.index_select(0, e.view(-1)).view(B, nC, C)               # factor^e
        w.mul_(E)
    cum = w.cumsum(-1)                                                      # (B, nC, C) inclusive
    if reset is None:
        end = cum[..., -1:].clone()                                         # every chain reaches the chunk end
    else:
        r = reset.view(B, nC, C)
        seg = r.cumsum(-1).sub_(r.view(torch.uint8))                        # resets before t in the chunk
        n_r = seg[..., -1:] + r[..., -1:]                                   # resets in the chunk
        end = cum.new_zeros(B, nC, C + 1).scatter_(-1, seg.masked_fill(~r, C), cum)   # cum at each reset
        end = end.scatter_(-1, n_r, cum[..., -1:]).gather(-1, seg)          # cum at the end of t's segment
    y = cum.neg_().add_(end).add_(w)                                        # tail sum end - cum_t + w_t, in place
    if f != 1.0:
        y.div_(E)
    if nC > 1:                                                              # carry y across chunks, right to left
        f_n = powers.index_select(0, (e[..., -1] + m[..., -1]).view(-1)).view(B, nC, 1)   # factor^(# masked)
        f_chunk = f_n if reset is None else f_n * (n_r == 0)               # a reset in the chunk stops the carry
        carry = torch.zeros(B, nC, 1, dtype=y.dtype, device=y.device)     # y at the next chunk's first step
        for j in range(nC - 2, -1, -1):
            carry[:, j] = y[:, j + 1, :1] + f_chunk[:, j + 1] * carry[:, j + 1]
        carry *= f_n
        if reset is None:
            y.addcdiv_(carry, E)                                            # + factor^(# masked in [t, end]) * carry
        else:
            y.addcdiv_(carry * (seg == n_r), E)                             # ... if no reset in [t, end]
    return y.view(B, nC * C)[:, :L]


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
    return z.view(B, H) * mask_to(turn_mask, x_BH.dtype)


def last_turn(turn_mask: torch.Tensor) -> torch.Tensor:
    """One-hot (B, H) bool of each rollout's last valid turn. Example: [[1, 1, 0]] -> [[0, 1, 0]]."""
    k = torch.arange(turn_mask.shape[1], device=turn_mask.device).expand_as(turn_mask)
    kmax = torch.where(turn_mask, k, torch.full_like(k, -1)).amax(1, keepdim=True) if turn_mask.shape[1] \
        else torch.full_like(k[:, :1], -1)
    return turn_mask & (k == kmax)


def turns_to_go(turn_mask: torch.Tensor) -> torch.Tensor:
    """Number of valid turns from k to the end -> (B, H) long. Example: [[1, 0, 1]] -> [[2, 1, 1]]."""
    return turn_mask.long().flip(1).cumsum(1).flip(1)
