"""Toy multi-turn environments: batched numpy cores wrapped as gymnasium envs.

Registered on ``import toyrl`` as ``toyrl/GridWorld-v0``, ``toyrl/BanditChain-v0`` and
``toyrl/MockSearch-v0`` and ``toyrl/Doors-v0``. ``ENVS`` maps the short names the CLI uses to (gym id, core class).
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


def make_core(name: str, num_envs: int, seed=None, **kwargs) -> BatchedCore:
    """A batched core of ``num_envs`` copies of the env with CLI name ``name``."""
    if name not in ENVS:
        raise ValueError(f"unknown env {name!r}; valid names: {', '.join(ENVS)}")
    return ENVS[name][1](num_envs, seed=seed, **kwargs)


__all__ = ["ENVS", "VOID", "BatchedCore", "CoreEnv", "mix64", "register_envs", "make_core",
           "GridCore", "GridWorldEnv", "BanditCore", "BanditChainEnv",
           "SearchCore", "MockSearchEnv", "DoorsCore", "DoorsEnv"]
