"""Import verl 0.9.1 for parity tests, with a stand-in ``ray`` module when ray is not installed.

verl imports ray at module level for its distributed workers; the functions we compare against
(``verl.trainer.ppo.core_algos``) never call it. ``load_core_algos()`` returns the module or None.
"""
from __future__ import annotations

import sys
import types


class _Anything(types.ModuleType):
    """A module whose every attribute is a callable, subscriptable placeholder (also as decorator)."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder(f"{self.__name__}.{name}")


class _Placeholder:
    def __init__(self, name):
        self._name = name

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]                      # used as a bare decorator
        return _Placeholder(self._name + "()")

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder(f"{self._name}.{name}")

    def __getitem__(self, item):
        return self

    def __mro_entries__(self, bases):
        return (object,)


def load_core_algos():
    try:
        import ray  # noqa: F401
    except ImportError:
        for name in ("ray", "ray.util", "ray.util.scheduling_strategies", "ray.experimental",
                     "ray.experimental.state", "ray.experimental.state.api", "ray.actor", "ray._private"):
            sys.modules.setdefault(name, _Anything(name))
    try:
        from verl.trainer.ppo import core_algos
    except Exception:  # verl or one of its needs is absent: parity tests skip
        return None
    return core_algos
