"""Scans over tokens or turns: discounted reverse sums, and running them over the masked steps only.

Dimension legend: B rows, L steps (tokens or turns), P packed steps (the most masked steps of a row).

GAE, the return-to-go and REINFORCE++ all run the textbook recursion y_t = x_t + f * y_{t+1}
over the *policy* tokens (or the valid turns): observation tokens in between are skipped, so the TD
chain jumps from one policy token to the next (verl's multi-turn rule). Said in three moves:

    xp = pack(x, mask)                        # (B, P + 1): each row's masked steps moved left, in order
    yp = discounted_cumsum(xp, f)             # (B, P + 1): the plain recursion, every step counts
    y = unpack(yp, mask)                      # (B, L): a masked step reads its own y, any other step
                                              #         the y of the next masked step (verl's carry)

``discounted_cumsum`` has no Python loop over L: a chunk of C steps is one matmul with the C x C
triangular matrix of discount powers, and the chunk heads obey the same recursion with factor f^C
(one more call, on L / C heads). The loop forms (``gae.gae_loop``, ``reference.to_go``) give the same numbers.
"""
from __future__ import annotations

from typing import Optional

import torch

__all__ = ["discounted_cumsum", "discount_matrix", "pack", "unpack", "pack_turns", "unpack_turns", "next_masked",
           "CHUNK"]

CHUNK = 32
"""Steps per chunk of ``discounted_cumsum``: a (32, 32) matrix of powers (64 flops per step)."""


def discount_matrix(factor: float, C: int, dtype=torch.float64, device=None) -> torch.Tensor:
    """(C, C) matrix M with M[s, t] = factor^(s - t) for s >= t, else 0, so (x @ M)_t = sum_{s>=t} factor^(s-t) x_s.

    Example: factor 0.5, C 3 -> [[1, 0, 0], [0.5, 1, 0], [0.25, 0.5, 1]].
    """
    k = torch.arange(C, device=device)
    lag = k[:, None] - k[None, :]                                          # (C, C) s - t
    return torch.where(lag >= 0, torch.tensor(factor, dtype=dtype, device=device) ** lag.clamp(min=0), 0.0)


def discounted_cumsum(x: torch.Tensor, factor: float, *, chunk: int = CHUNK) -> torch.Tensor:
    """Discounted reverse cumsum along the last axis: y_t = x_t + factor * y_{t+1}, y_L = 0 -> (B, L).

        y_t = sum_{s >= t} factor^(s - t) x_s

    Chunked: split L into chunks of C steps. Inside a chunk, y restricted to the chunk is
    x_chunk @ M (``discount_matrix``); the chunk's first step y_head then obeys
    y_head_j = local_head_j + factor^C * y_head_{j+1}, the same recursion with factor^C over the
    L / C heads (solved by calling this function on them), and every step t of chunk j adds
    factor^(C - t) * y_head_{j+1}. No powers are divided, so nothing overflows for |factor| <= 1.
    Example: x [[1., 2., 4.]], factor 0.5 -> [[3., 4., 4.]].
    """
    B, L = x.shape
    C = min(max(chunk, 2), max(L, 1))                                      # >= 2 steps: the heads are fewer
    n = -(-L // C)                                                         # chunks
    xc = torch.nn.functional.pad(x, (0, n * C - L)).view(B, n, C)          # (B, n, C) zero-padded
    y = xc @ discount_matrix(factor, C, x.dtype, x.device)                 # (B, n, C) sums inside each chunk
    if n > 1:
        head = discounted_cumsum(y[:, :, 0], factor ** C, chunk=chunk)     # (B, n) y at each chunk's first step
        after = torch.nn.functional.pad(head[:, 1:], (0, 1))               # (B, n) y at the next chunk's first step
        tail = torch.tensor(factor, dtype=x.dtype, device=x.device) ** torch.arange(C, 0, -1, device=x.device)
        y += after[:, :, None] * tail                                      # + factor^(C - t) * y_next_head
    return y.reshape(B, n * C)[:, :L]


def pack(x: torch.Tensor, mask: torch.Tensor, *, last: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Move each row's masked steps to the left, in order -> (B, P + 1), P = the most masked steps of a row.

    Step t adds mask_t * x_t into slot cumsum(mask)_t: a masked step lands in its own slot (rank + 1),
    an unmasked one adds 0; slot 0 (the unmasked steps before the first masked one) is dropped.
    Entries after a row's masked steps are 0, except the first, which is ``last`` (B,) if given (a
    bootstrap value after the final step). Entries off the mask must be finite.
    Example: x [[1., 2., 3.]], mask [[1, 0, 1]] -> [[1., 3., 0.]] (P = 2).
    """
    B, L = x.shape
    rank1 = mask.cumsum(1, dtype=torch.long)                               # (B, L) masked steps up to t
    count = rank1[:, -1] if L else rank1.new_zeros(B)                      # (B,) masked steps per row
    P = int(count.max()) if B else 0
    out = x.new_zeros(B, P + 2).scatter_add_(1, rank1, x * mask.to(x.dtype))[:, 1:]   # (B, P + 1)
    if last is not None:
        out.scatter_(1, count[:, None], last.to(x.dtype)[:, None])         # right after the row's last step
    return out


def unpack(xp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Inverse of ``pack`` with verl's carry: step t reads xp at the rank of the next masked step >= t -> (B, L).

    A masked step reads its own value; an unmasked step the value of the next masked step (0, or
    the bootstrap slot, after the last). Example: xp [[1., 3., 0.]], mask [[1, 0, 1, 0]] -> [[1., 3., 3., 0.]].
    """
    ahead = mask.cumsum(1, dtype=torch.long).sub_(mask.long())             # (B, L) masked steps before t
    return xp.gather(1, ahead)


def pack_turns(x: torch.Tensor, mask: torch.Tensor, turn_id: torch.Tensor, H: int):
    """``pack`` with every turn its own row: the masked steps of turn k of row b go to row b * H + k.

    -> (packed (B * H, P + 1), slot (B, L), count (B * H,)): P = the most masked steps of a turn,
    ``slot`` the flat index of each masked step in the (B * H, P + 2) table behind ``packed``
    (unmasked steps: 0, a slot that only ever holds 0), ``count`` the masked steps of each turn.
    Turn ids must be non-decreasing along a row (``TurnBatch`` checks).
    Example: x [[1., 2., 3.]], mask [[1, 1, 1]], turn_id [[0, 0, 1]], H 2 -> [[1., 2., 0.], [3., 0., 0.]].
    """
    B, L = x.shape
    m = mask.long()
    k = turn_id.clamp(min=0)                                               # (B, L) turn (padding: 0, unmasked)
    n = m.new_zeros(B, H).scatter_add_(1, k, m)                            # (B, H) masked steps per turn
    before = n.cumsum(1) - n                                               # (B, H) masked steps of earlier turns
    rank1 = mask.cumsum(1, dtype=torch.long) - before.gather(1, k)         # (B, L) rank inside the turn, + 1
    P = int(n.max()) if n.numel() else 0
    row = torch.arange(B, device=x.device)[:, None] * H + k                # (B, L) output row b * H + k
    slot = (row * (P + 2) + rank1) * m                                     # (B, L) unmasked steps: slot 0
    table = x.new_zeros(B * H * (P + 2)).scatter_add_(0, slot.reshape(-1), (x * mask.to(x.dtype)).reshape(-1))
    return table.view(B * H, P + 2)[:, 1:], slot, n.view(-1)


def unpack_turns(xp: torch.Tensor, slot: torch.Tensor) -> torch.Tensor:
    """Inverse of ``pack_turns``: every masked step reads its value back, the others 0 -> (B, L)."""
    table = torch.nn.functional.pad(xp, (1, 0))                            # (B * H, P + 2) slot 0 of each row: 0
    return table.reshape(-1).gather(0, slot.reshape(-1)).view(slot.shape)


def next_masked(x: torch.Tensor, mask: torch.Tensor, *, last: Optional[torch.Tensor] = None) -> torch.Tensor:
    """x at the next masked step after t -> (B, L): ``last`` (B,) (default 0) past the final one.

    Example: x [[1., 2., 3., 4.]], mask [[1, 0, 1, 0]], last [9.] -> [[3., 3., 9., 9.]].
    """
    xp = pack(x, mask, last=last)                                          # (B, P + 1)
    return xp.gather(1, mask.cumsum(1, dtype=torch.long))                  # rank of the next masked step after t
