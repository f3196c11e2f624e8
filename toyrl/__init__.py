"""toyrl: multi-turn RL for LLM agents, small enough to see.

Toy environments, a turn-aware batch (``TurnBatch``), every advantage estimator and clipping scheme
named in the multi-turn agent-RL literature, filters, diagnostics, a trainer and a CLI.

``import toyrl`` registers the envs with gymnasium and does not import torch: the ``TurnBatch`` names are
loaded from ``toyrl.batch`` on first use, so the ``toyrl`` command answers ``--help`` at once.
"""
from .envs import ENVS, make_core, register_envs

BATCH_NAMES = ("TurnBatch", "turn_to_token", "token_to_turn", "discounted_returns")
"""names of ``toyrl.batch`` (torch) offered here, imported on first use (PEP 562)"""


def __getattr__(name):
    if name in BATCH_NAMES:
        from . import batch
        return getattr(batch, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__version__ = "0.1.0"

register_envs()

__all__ = ["TurnBatch", "turn_to_token", "token_to_turn", "discounted_returns", "ENVS", "make_core",
           "register_envs", "__version__"]
