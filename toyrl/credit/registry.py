"""The estimator registry: a name -> callable taking a ``TurnBatch`` and keyword hyperparameters.

    adv = ESTIMATORS["gigpo"](batch, gamma=0.95)      # (B, H): ESTIMATORS["gigpo"].level == "turn"
    adv_BT = token_advantages(batch, adv)              # (B, T) whatever the level

Register your own in a notebook cell:

    @register_estimator("my_baseline", level="turn")
    def my_baseline(batch, *, scale=1.0):
        \"\"\"Outcome minus the batch mean, on every valid turn.\"\"\"
        R = batch.outcome()
        return scale * (R - R.mean())[:, None] * batch.turn_mask
"""
from __future__ import annotations

from typing import Callable, Optional

import torch

__all__ = ["Estimator", "ESTIMATORS", "register_estimator", "token_advantages", "need"]

LEVELS = ("turn", "token")


class Estimator:
    """A registered estimator: ``est(batch, **kw) -> Tensor`` with ``.name``, ``.level`` and ``.doc``."""

    def __init__(self, name: str, fn: Callable, level: str, doc: str):
        self.name, self.fn, self.level, self.doc = name, fn, level, doc
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __call__(self, batch, **kw) -> torch.Tensor:
        return self.fn(batch, **kw)

    def __repr__(self) -> str:
        return f"Estimator({self.name!r}, level={self.level!r}: {self.doc})"


ESTIMATORS: dict[str, Estimator] = {}


def register_estimator(name: str, level: str = "turn", doc: Optional[str] = None) -> Callable:
    """Decorator: register ``fn(batch, **kw) -> (B, H) or (B, T)`` under ``name``.

    ``level`` is "turn" (returns (B, H)) or "token" (returns (B, T)); ``doc`` defaults to the first
    line of the function's docstring. Registering a name again replaces the entry.
    """
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, got {level!r}")

    def deco(fn: Callable) -> Estimator:
        line = doc or ((fn.__doc__ or name).strip().splitlines() or [name])[0]
        est = Estimator(name, fn, level, line)
        ESTIMATORS[name] = est
        return est

    return deco


def need(batch, field: str, estimator: str, hint: str = "") -> torch.Tensor:
    """The batch field ``field`` or a ValueError saying which estimator needs it."""
    x = getattr(batch, field, None)
    if x is None:
        raise ValueError(f"estimator {estimator!r} needs TurnBatch.{field}, which is None{hint}")
    return x


def token_advantages(batch, adv: torch.Tensor, level: Optional[str] = None) -> torch.Tensor:
    """Advantages at token level (B, T), zero off the policy tokens, from a (B, H) or (B, T) tensor.

    A (B, H) tensor is broadcast with ``batch.turn_to_token``. ``level`` resolves the case H == T.
    Example: adv [[1., 2.]], turn_id [[0, 0, 1]], policy_mask [[1, 0, 1]] -> [[1., 0., 2.]].
    """
    B, T, H = batch.B, batch.T, batch.H
    if level is None:
        if tuple(adv.shape) == (B, T) and T != H:
            level = "token"
        elif tuple(adv.shape) == (B, H) and T != H:
            level = "turn"
        elif tuple(adv.shape) == (B, T):
            raise ValueError("adv is (B, T) and H == T: pass level='turn' or level='token'")
        else:
            raise ValueError(f"adv: expected shape (B={B}, H={H}) or (B={B}, T={T}), got {tuple(adv.shape)}")
    if level == "turn":
        if tuple(adv.shape) != (B, H):
            raise ValueError(f"adv: expected shape (B={B}, H={H}) for level 'turn', got {tuple(adv.shape)}")
        adv = batch.turn_to_token(adv)                                     # (B, T)
    elif tuple(adv.shape) != (B, T):
        raise ValueError(f"adv: expected shape (B={B}, T={T}) for level 'token', got {tuple(adv.shape)}")
    return adv * batch.policy_mask.to(adv.dtype)                           # (B, T)
