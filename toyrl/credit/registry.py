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

import warnings
from typing import Callable, Optional, Sequence

import torch

from ..batch import NonFiniteError, all_finite, check_finite
from .needs import NEEDS, check_needs

__all__ = ["Estimator", "ESTIMATORS", "register_estimator", "token_advantages", "need", "warn_group_size",
           "warn_zero_variance", "ZERO_VAR_STEPS", "NEEDS"]

LEVELS = ("turn", "token")
ZERO_VAR_STEPS = 10
"""steps of zero within-group reward variance, from the start of a run, before ``warn_zero_variance`` speaks"""


class Estimator:
    """A registered estimator: ``est(batch, **kw) -> Tensor`` with ``.name``, ``.level``, ``.doc``, ``.grouped``
    (its baseline is the group: a group of one rollout gets advantage 0) and ``.needs`` (its inputs besides
    rewards and group ids, words of ``needs.NEEDS``)."""

    def __init__(self, name: str, fn: Callable, level: str, doc: str, grouped: bool = False, needs: tuple = ()):
        self.name, self.fn, self.level, self.doc, self.grouped = name, fn, level, doc, grouped
        self.needs = check_needs(needs, f"estimator {name!r}")
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __call__(self, batch, **kw) -> torch.Tensor:
        """``fn(batch, **kw)``. NaN / inf never pass: a batch field made non-finite in place after construction
        is named (the construction checks run again), else the input or the output that holds it."""
        try:
            adv = self.fn(batch, **kw)
        except NonFiniteError:
            batch.replace()                                                # re-validates every field
            raise
        if isinstance(adv, torch.Tensor) and not all_finite(adv):
            batch.replace()
            check_finite(f"estimator {self.name!r} returned an advantage that", adv)
        return adv

    def __repr__(self) -> str:
        needs = f", needs={self.needs}" if self.needs else ""
        return f"Estimator({self.name!r}, level={self.level!r}{', grouped' if self.grouped else ''}{needs}: {self.doc})"


ESTIMATORS: dict[str, Estimator] = {}


def register_estimator(name: str, level: str = "turn", doc: Optional[str] = None, grouped: bool = False,
                       needs: Sequence[str] = ()) -> Callable:
    """Decorator: register ``fn(batch, **kw) -> (B, H) or (B, T)`` under ``name``.

    ``level`` is "turn" (returns (B, H)) or "token" (returns (B, T)); ``doc`` defaults to the first
    line of the function's docstring; ``grouped`` says the baseline is the group, so that with one
    rollout per group every advantage is 0 (the trainer warns on ``group_size=1``); ``needs`` names
    the inputs it reads besides rewards and group ids, words of ``NEEDS`` (e.g. ("values",)), which
    the trainer provides. Registering a name again replaces the entry.
    """
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
    needs = check_needs(needs, f"estimator {name!r}")

    def deco(fn: Callable) -> Estimator:
        line = doc or ((fn.__doc__ or name).strip().splitlines() or [name])[0]
        est = Estimator(name, fn, level, line, grouped, needs)
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


def warn_group_size(estimator: str, group_size: int) -> None:
    """Warn when ``group_size == 1`` and ``estimator`` is grouped: its advantages are all 0, nothing trains."""
    est = ESTIMATORS.get(estimator)
    if group_size == 1 and est is not None and est.grouped:
        warnings.warn(f"group_size=1: every group has one rollout, so {estimator}'s advantages are all 0 and "
                      f"nothing trains; use group_size >= 2", stacklevel=3)


def warn_zero_variance(rows: Sequence[dict], steps: int, n: int = ZERO_VAR_STEPS) -> None:
    """Warn once, when the run log reaches min(n, steps) rows, if every row so far has zero_var_frac == 1.

    zero_var_frac == 1: every group's rewards were equal, so group-relative advantages are all 0.
    Called after each step; it speaks only at that one row count, so once per run.
    Example: rows [{"zero_var_frac": 1.0}] * 2, steps 2 -> warns; any row below 1 -> silent.
    """
    k = min(n, steps)
    if k and len(rows) == k and all(r.get("zero_var_frac", 0.0) == 1.0 for r in rows):
        span = "the first step" if k == 1 else f"each of the first {k} steps"
        warnings.warn(f"zero reward variance: in {span} every group's rollouts got equal rewards "
                      f"(zero_var_frac = 1), so group-relative advantages are 0 and the policy gets no signal; "
                      f"try a larger group_size, an easier task or a denser reward", stacklevel=3)
