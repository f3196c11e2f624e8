"""Checking a dict of keyword arguments against the function it goes to: names, types and ranges.

Every ``*_kwargs`` field of ``TrainConfig`` (estimators, clip schemes, corrections, envs, filters, trees) is checked
here before any work starts, so a typo or an out-of-range number fails with one line naming the field:

    check_kwargs("estimator_kwargs", "gigpo", {"gamma": 2.0}, {"gamma": 0.95})
    # ValueError: estimator_kwargs: gamma of gigpo must be a number in [0, 1], got 2.0
"""
from __future__ import annotations

import inspect

__all__ = ["KWARG_RANGES", "in_interval", "keywords", "check_kwargs"]

KWARG_RANGES = {**dict.fromkeys(("gamma", "lam", "gamma_turn", "lam_turn", "gamma_token", "lam_token"), "[0, 1]"),
                **dict.fromkeys(("eps", "eps_low", "eps_high", "delta_low", "delta_high", "ddof", "omega",
                                 "kl_coef", "eta"), "[0, inf)"),
                **dict.fromkeys(("clip_cov_ratio", "kl_cov_ratio", "slip", "p_frozen"), "[0, 1]"),
                **dict.fromkeys(("cap", "tau_pos", "tau_neg"), "(0, inf)"),
                **dict.fromkeys(("max_turns", "n_init", "branch", "max_rounds"), "[1, inf)"),
                "c": "(1, inf)", "p": "(0, 1]"}
"""keyword name -> its valid interval, applied to every ``*_kwargs`` dict (estimators, clip schemes, envs,
filters, trees): discounts and trace decays in [0, 1], clip widths >= 0, dual-clip c > 1 (1912.09729)"""


def in_interval(v, interval: str) -> bool:
    """True if the number ``v`` lies in ``interval`` ("(" / ")" exclude the bound):
    in_interval(1, "(0, 1]") -> True, in_interval(0, "(0, 1]") -> False."""
    lo, hi = (float(x) for x in interval[1:-1].split(","))
    return (lo < v if interval[0] == "(" else lo <= v) and (v < hi if interval[-1] == ")" else v <= hi)


def _is_number(v, kind=float) -> bool:
    """An int, or (``kind`` float) an int or a float; a bool is neither."""
    return not isinstance(v, bool) and isinstance(v, (int,) if kind is int else (int, float))


def _fits(v, default) -> bool:
    """``v`` has the type of ``default``: None / REQUIRED accept anything, an int is a float, a list a tuple."""
    if default is None:
        return True
    if isinstance(default, bool):
        return isinstance(v, bool)
    if isinstance(default, (int, float)):
        return _is_number(v, type(default))
    return isinstance(v, (list, tuple)) if isinstance(default, (list, tuple)) else isinstance(v, type(default))


def _kind(default) -> str:
    """How a message names the type of ``default``: 0.5 -> "a number", 3 -> "an integer", "x" -> "a string"."""
    if isinstance(default, bool) or not isinstance(default, (int, float)):
        return {bool: "true or false", str: "a string", tuple: "a list", list: "a list"}.get(
            type(default), f"a {type(default).__name__}")
    return "an integer" if isinstance(default, int) else "a number"


def keywords(fn, drop=(), closed: bool = False):
    """The arguments ``fn`` takes by keyword -> their defaults (None for a required keyword-only one),
    less ``drop``; None if ``fn`` takes ``**kwargs`` (anything goes) unless ``closed``.

    Example: keywords(lambda batch, *, gamma=0.95, norm="std": 0) -> {"gamma": 0.95, "norm": "std"}."""
    out, params = {}, inspect.signature(fn).parameters.values()
    for p in params:
        if p.kind is p.VAR_KEYWORD and not closed:
            return None
        if p.name not in drop and (p.kind is p.KEYWORD_ONLY or (p.kind is p.POSITIONAL_OR_KEYWORD
                                                                  and p.default is not p.empty)):
            out[p.name] = None if p.default is p.empty else p.default
    return out


def check_kwargs(field: str, owner: str, kwargs, params) -> None:
    """ValueError naming ``field`` if ``kwargs`` is not a dict, has a key not in ``params`` (None: any key),
    a value whose type is not its default's, or a number outside ``KWARG_RANGES``.

    Example: check_kwargs("estimator_kwargs", "gigpo", {"gamma": 2.0}, {"gamma": 0.95}) raises
    "estimator_kwargs: gamma of gigpo must be a number in [0, 1], got 2.0"."""
    if not isinstance(kwargs, dict):
        raise ValueError(f"{field}: {owner} takes a dict of keyword arguments, got {kwargs!r}")
    for k, v in kwargs.items():
        if params is not None and k not in params:
            takes = f"it takes: {', '.join(params)}" if params else "it takes no arguments"
            raise ValueError(f"{field}: {owner} takes no argument {k!r}; {takes}")
        default = None if params is None else params[k]
        if not _fits(v, default):
            raise ValueError(f"{field}: {k} of {owner} must be {_kind(default)} (default {default!r}), got {v!r}")
        if k in KWARG_RANGES and not (_is_number(v) and in_interval(v, KWARG_RANGES[k])):
            raise ValueError(f"{field}: {k} of {owner} must be a number in {KWARG_RANGES[k]}, got {v!r}")
