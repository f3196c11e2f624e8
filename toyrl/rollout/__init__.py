"""Rollouts: from a policy and a batched env core to episodes, and from episodes to a ``TurnBatch``.

- ``play``: G episodes per task played turn by turn (``rollout``, ``play_turn``), context policies
  (full, last-k, summary), void turns, T2PO turn resampling;
- ``flatten``: episodes -> ``Rollout`` (a ``TurnBatch`` plus the contexts each turn saw), and the
  trainer's log-probs under those contexts (``recompute_logp``);
- ``tree``: fork-from-snapshot tree rollouts (Tree-GRPO, ARPO, PATR) at an equal token budget.
- ``inference_engine``: rollout engines, policy copies that sample differently from the trainer (bf16 / fp16,
  int8 / int4 weights, noise, top-k, top-p, lagging weights): ``make_engine``, ``sync_engine``.

The rollout's public names are offered here: ``from toyrl.rollout import rollout, Sampling``.
"""
from ..codecs.toy import ToyCodec
from .flatten import Rollout, TurnContext, left_pad, recompute_logp, to_rollout
from .play import (CONTEXTS, Episode, Sampling, Turn, build_context, episode_token_bound, play, play_turn, rollout,
                   turn_grammar)
from .inference_engine import ENGINES, EngineMode, make_engine, sync_engine

__all__ = ["ToyCodec", "Turn", "Episode", "Sampling", "TurnContext", "Rollout", "rollout", "play", "play_turn",
           "to_rollout", "CONTEXTS", "recompute_logp", "left_pad", "build_context", "episode_token_bound",
           "turn_grammar", "ENGINES", "EngineMode", "make_engine", "sync_engine"]
