"""Toy multi-turn environments: batched numpy cores wrapped as gymnasium envs.

Registered on ``import toyrl`` as ``toyrl/GridWorld-v0``, ``toyrl/BanditChain-v0`` and
``toyrl/MockSearch-v0`` and ``toyrl/Doors-v0``. ``ENVS`` maps the short names the CLI uses to (gym id, core class).
Your own env joins them with ``register_env("keydoor", KeyDoorCore)`` (its gym id is None: the trainer steps
cores, not gymnasium envs); what a core must define is ``BatchedCore``'s contract (``docs/your_env.md``).
"""
from __future__ import annotations

import gymnasium as gym

from .bandit_chain import BanditChainEnv, BanditCore
from .core import VOID, BatchedCore, CoreEnv, mix64
from .doors import DoorsCore, DoorsEnv
from .gridworld import GridCore, GridWorldEnv
from .mock_search import MockSearchEnv, SearchCore

ENVS = {
    "gridworld": ("toyrl/GridWorld-v0", GridCore),
    "bandit_chain": ("toyrl/BanditChain-v0", BanditCore),
    "mock_search": ("toyrl/MockSearch-v0", SearchCore),
    "doors": ("toyrl/Doors-v0", DoorsCore),
}
_ENTRY = {
    "toyrl/GridWorld-v0": "toyrl.envs.gridworld:GridWorldEnv",
    "toyrl/BanditChain-v0": "toyrl.envs.bandit_chain:BanditChainEnv",
    "toyrl/MockSearch-v0": "toyrl.envs.mock_search:MockSearchEnv",
    "toyrl/Doors-v0": "toyrl.envs.doors:DoorsEnv",
}


def register_envs() -> None:
    """Register the toyrl envs with gymnasium (idempotent)."""
    for env_id, entry in _ENTRY.items():
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=entry)


def register_env(name: str, core_cls: type, gym_id=None) -> None:
    """Add the env ``name`` with core class ``core_cls`` (a ``BatchedCore`` subclass) to ``ENVS``; registering a
    name again replaces the entry. ValueError for a name that is no identifier-like string or a class that is no
    BatchedCore. Example: register_env("keydoor", KeyDoorCore); make_core("keydoor", 8) -> 8 copies."""
    if not isinstance(name, str) or not name.replace("_", "").replace("-", "").isalnum():
        raise ValueError(f"env name must be letters, digits, _ or -, got {name!r}")
    if not (isinstance(core_cls, type) and issubclass(core_cls, BatchedCore)):
        raise ValueError(f"core_cls must be a BatchedCore subclass, got {core_cls!r}")
    ENVS[name] = (gym_id, core_cls)


def make_core(name: str, num_envs: int, seed=None, **kwargs) -> BatchedCore:
    """A batched core of ``num_envs`` copies of the env with CLI name ``name``."""
    if name not in ENVS:
        raise ValueError(f"unknown env {name!r}; valid names: {', '.join(ENVS)}; add one with "
                         "toyrl.envs.register_env(name, CoreClass) (docs/your_env.md)")
    return ENVS[name][1](num_envs, seed=seed, **kwargs)


__all__ = ["ENVS", "VOID", "BatchedCore", "CoreEnv", "mix64", "register_envs", "register_env", "make_core",
           "GridCore", "GridWorldEnv", "BanditCore", "BanditChainEnv",
           "SearchCore", "MockSearchEnv", "DoorsCore", "DoorsEnv"]
