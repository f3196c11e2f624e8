"""A scripted token policy: it plays a chooser's actions (a planner's, or a demonstration's) as tokens.

``ScriptedPolicy`` writes the codec's canonical turn of each chosen action, behind the same
``generate`` interface as a learned policy, so ``rollout`` turns demonstrations into TurnBatches;
``replay_chooser`` replays fixed action lists (the shipped transcripts of ``toyrl.envs.experts``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
import torch

from ..envs.core import VOID, BatchedCore
from ..envs.experts import expert_actions, expert_memo

__all__ = ["ScriptedPolicy", "replay_chooser", "expert_memo"]


@dataclass
class _Gen:
    tokens: torch.Tensor
    logp: torch.Tensor
    entropy: torch.Tensor
    mask: torch.Tensor


class ScriptedPolicy:
    """A token policy that plays ``choose(core, live_rows) -> actions``: each turn is the codec's
    canonical reply of the chosen action (``codec.action_ids``: END + action token for the toy
    codec, the action's text for text codecs; EOT / EOS for VOID).

    It follows the rollout's convention that ``generate`` is called for the copies not yet done,
    in order, and tells a ``constraint`` (the turn grammar) what it wrote, so its tokens carry their
    grammar states like sampled ones. Log-probs and entropies are 0 (the behaviour is deterministic).

    ``reason(core, live_rows) -> list of int lists`` (e.g. ``expert_memo``: the cue or plan the task asks
    to remember) makes the expert *write reasoning*: each turn opens with ``codec.think_ids`` of its
    row's list, so behaviour cloning teaches the policy to carry that through its own tokens. None: the
    turn is the action alone.
    """

    def __init__(self, core: BatchedCore, codec, choose: Callable = expert_actions, device="cpu",
                 reason: Optional[Callable] = None):
        if reason is not None and not hasattr(codec, "think_ids"):
            raise ValueError(f"reason needs a codec that writes reasoning tokens (think_ids), got {type(codec).__name__}")
        self.core, self.codec, self.choose, self._device = core, codec, choose, torch.device(device)
        self.reason = reason
        self.vocab_size = codec.size

    @property
    def device(self) -> torch.device:
        return self._device

    def generate(self, context, context_mask, max_new, temperature=1.0, *, constraint=None, **kw):
        live = np.flatnonzero(~self.core.done)
        tokens, mask = self.turn_tokens(np.asarray(self.choose(self.core, live)), live, max_new)   # (n, M)
        zeros = torch.zeros(tokens.shape, device=self.device)
        if constraint is not None:
            for t in range(max_new):
                constraint.advance(tokens[:, t], None, mask[:, t])
        return _Gen(tokens, zeros, zeros.clone(), mask)

    def turn_tokens(self, act: np.ndarray, rows: np.ndarray, max_new: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The tokens (n, M) and mask of the turns that play ``act`` (right-padded, cut at ``max_new``)."""
        if self.reason is None:                                   # the action alone
            think = [[] for _ in rows]
        else:                                                     # what the task asks to remember, then the action
            think = [self.codec.think_ids(r) if a != VOID else [] for r, a in zip(self.reason(self.core, rows), act)]
        seqs = [(w + self.codec.action_ids(self.core, int(a), int(i)))[:max_new]
                for w, a, i in zip(think, act, rows)]
        tokens = torch.full((len(seqs), max_new), self.codec.PAD, dtype=torch.long)   # (n, M)
        mask = torch.zeros(len(seqs), max_new, dtype=torch.bool)
        for j, s in enumerate(seqs):
            tokens[j, :len(s)] = torch.tensor(s, dtype=torch.long)
            mask[j, :len(s)] = True
        return tokens.to(self.device), mask.to(self.device)


def replay_chooser(actions: list[list[int]]) -> Callable:
    """A chooser that replays fixed action lists (one per copy), turn by turn."""

    def choose(core, rows):
        k = int(core.state["turn"][rows[0]]) if len(rows) else 0
        return np.array([actions[i][k] if k < len(actions[i]) else VOID for i in rows], dtype=np.int64)
    return choose
