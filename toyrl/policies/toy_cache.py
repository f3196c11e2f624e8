"""What a toy transformer's ``generate`` keeps: the keys and values of every token it fed, within a call
(``KVCache``, one per layer) and from one turn to the next (``ToyPast``, ``Generation.past``).

Dimension legend: B rows, nh heads, hs head size, S cache slots, n slots filled, V vocabulary size.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

from torch import Tensor

__all__ = ["KVCache", "ToyPast"]


class KVCache:
    """Preallocated keys and values of one attention layer, (B, nh, S, hs) each, filled up to ``n``;
    optionally starting from a prefix (k, v) (B, nh, n0, hs) of an earlier call, copied, never mutated."""

    def __init__(self, size: int, k: Optional[Tensor] = None, v: Optional[Tensor] = None):
        self.size, self.n = size, 0
        self.prefix = (k, v) if k is not None else None
        self.k: Optional[Tensor] = None
        self.v: Optional[Tensor] = None

    def append(self, k: Tensor, v: Tensor) -> Tuple[Tensor, Tensor]:
        """Write k, v (B, nh, T, hs) at slots [n, n + T) and return all filled slots."""
        if self.k is None:
            B, nh, _, hs = k.shape
            self.k = k.new_empty(B, nh, self.size, hs)   # (B, nh, S, hs)
            self.v = v.new_empty(B, nh, self.size, hs)
            if self.prefix is not None:
                self.n = self.prefix[0].size(2)
                self.k[:, :, :self.n], self.v[:, :, :self.n] = self.prefix
                self.prefix = None
        T = k.size(2)
        self.k.narrow(2, self.n, T).copy_(k)
        self.v.narrow(2, self.n, T).copy_(v)
        self.n += T
        return self.k.narrow(2, 0, self.n), self.v.narrow(2, 0, self.n)


@dataclass
class ToyPast:
    """Where a ``generate`` call left off (``Generation.past``), so the next turn reads only new tokens."""
    k: List[Tensor]
    """per layer, keys (B, nh, n, hs) of every token fed so far"""
    v: List[Tensor]
    """per layer, values (B, nh, n, hs)"""
    key_valid: Tensor
    """(B, n) bool: which of those n slots are real tokens"""
    n_real: Tensor
    """(B,) long: real tokens fed so far (the next real token's position)"""
    logits: Tensor
    """(B, V): next-token logits after each row's last real fed token"""
    pending: Tensor
    """(B, 1) long: the last generated token, sampled but not yet fed"""
    pending_mask: Tensor
    """(B, 1) bool: whether ``pending`` is real"""

    def select(self, rows: Tensor) -> "ToyPast":
        """The state of a subset (or reordering) of rows, e.g. of the episodes still running."""
        return ToyPast(k=[k[rows] for k in self.k], v=[v[rows] for v in self.v], key_valid=self.key_valid[rows],
                       n_real=self.n_real[rows], logits=self.logits[rows], pending=self.pending[rows],
                       pending_mask=self.pending_mask[rows])
