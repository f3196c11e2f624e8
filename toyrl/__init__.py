"""toyrl: multi-turn RL for LLM agents, small enough to see.

Toy environments, a turn-aware batch (``TurnBatch``), every advantage estimator and clipping scheme
named in the multi-turn agent-RL literature, filters, diagnostics, a trainer and a CLI.
"""
from .batch import TurnBatch, discounted_returns, token_to_turn, turn_to_token
from .envs import ENVS, make_core, register_envs

__version__ = "0.1.0"

register_envs()

__all__ = ["TurnBatch", "turn_to_token", "token_to_turn", "discounted_returns", "ENVS", "make_core",
           "register_envs", "__version__"]
