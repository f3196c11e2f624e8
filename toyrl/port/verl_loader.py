"""Import verl 0.9.1's ``core_algos`` where verl is installed, with stand-ins for ray when it is not.

verl imports ray at module level for its distributed workers; the functions a port compares with
or registers into (``verl.trainer.ppo.core_algos``) never call it. ``load_core_algos()`` returns the
module, or None when verl (or one of its needs) is absent.
"""
from __future__ import annotations

import sys
import types

__all__ = ["load_core_algos"]

_RAY_MODULES = ("ray", "ray.util", "ray.util.scheduling_strategies", "ray.experimental",
                "ray.experimental.state", "ray.experimental.state.api", "ray.actor", "ray._private")


class _Anything(types.ModuleType):
    """A module whose every attribute is a callable, subscriptable placeholder (also as decorator)."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder()


class _Placeholder:
    def __call__(self, *args, **kwargs):
        return args[0] if len(args) == 1 and callable(args[0]) and not kwargs else _Placeholder()

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder()

    def __getitem__(self, item):
        return self

    def __mro_entries__(self, bases):
        return (object,)


def load_core_algos():
    """verl's ``verl.trainer.ppo.core_algos`` module, or None if it cannot be imported."""
    try:
        import ray  # noqa: F401
    except ImportError:
        for name in _RAY_MODULES:
            sys.modules.setdefault(name, _Anything(name))
    try:
        from verl.trainer.ppo import core_algos
    except Exception:
        return None
    return core_algos
