"""The toy codec: what a toy-policy turn looks like in tokens, and the grammar its sampling follows.

Dimension legend: n rows generating, M new tokens per turn, V vocabulary, S grammar states.

Vocabulary (ids): PAD 0, BOS 1, EOT 2 (an empty reply), SEP 3 (opens each observation), END 4
(closes the reasoning, the toy's ``</think>``), then ``n_think`` reasoning tokens, ``n_actions``
action tokens (one per env action) and ``n_obs`` observation tokens (the env's token view).

A turn is a reasoning segment, END, then one action token, which ends the turn:

    r_1 r_2 ... r_k  END  a          0 <= k <= think_max

Anything else is a **void turn** (the env receives ``VOID``): EOT, an observation or special token,
a missing or second END, an action inside the reasoning, more than ``think_max`` reasoning tokens.
Reasoning tokens never reach the env, so they are free to become a template (RAGEN's Echo Trap):
``reasoning_mask`` marks them for the template diagnostics.

**The grammar.** Sampling goes through a small automaton (``TurnGrammar``) whose state says where
the turn is: states 0..think_max are "reasoning, k tokens so far", ``ACT`` is "reasoning closed,
the action is next", ``FORCE`` is "the intervention closes the reasoning now". Each state has a
set of tokens it may sample (``table``, (S, V) bool). With ``constrain=True`` the sets spell the
turn format above (reasoning: reasoning tokens or END; after think_max tokens only END; ACT: the
actions; ``think_min`` withholds END for the first reasoning tokens, as an LLM's ``min_tokens``
does), so every turn is well-formed and no turn is void; with ``constrain=False`` every state allows the whole vocabulary, so the
policy can write observation tokens and malformed turns the way an LLM can. The state of every
sampled token is recorded, so the trainer scores each token under exactly the distribution that
sampled it (``TurnGrammar.allowed_at``): the first-epoch on-policy ratio is 1.

**T2PO's token-level thinking intervention** (``ThinkingIntervention``; arXiv 2605.02178). The
released code does not contain it, so this is our reading of the paper's description, stated
here as an interpretation: the uncertainty of reasoning step t is

    M_t = alpha * H_t / log |A_t| + (1 - alpha) * (1 - p_max,t)

(H_t the entropy of the sampling distribution over its |A_t| allowed tokens, p_max,t its top
probability). When |M_t - M_{t-1}| < delta for ``window`` reasoning tokens in a row, after at
least ``min_think`` of them, the reasoning is cut: the next state is ``FORCE``, whose only token
is END. A token whose state allows a single token (the intervention's END, the END after a spent
budget, the END of a turn without reasoning) is written, not chosen: it stays in the sequence but
out of the policy mask (its log-prob is 0 and it carries no gradient).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from ..envs.core import VOID, BatchedCore

__all__ = ["ToyCodec", "TurnGrammar", "GrammarRun", "ThinkingIntervention"]


@dataclass(frozen=True)
class ThinkingIntervention:
    """T2PO's token-level thinking intervention (an interpretation, see the module docstring)."""

    delta: float = 0.02
    """cut when the uncertainty M_t moves by less than this ..."""
    window: int = 3
    """... for this many reasoning tokens in a row"""
    min_think: int = 4
    """never cut before this many reasoning tokens"""
    alpha: float = 0.5
    """weight of the normalized entropy in M_t (the rest: 1 - top probability)"""

    def __post_init__(self):
        if not self.delta > 0 or self.window < 1 or self.min_think < 0 or not 0 <= self.alpha <= 1:
            raise ValueError(f"ThinkingIntervention needs delta > 0, window >= 1, min_think >= 0, 0 <= alpha <= 1; "
                             f"got {self}")

    def uncertainty(self, logp_all: torch.Tensor) -> torch.Tensor:
        """M_t (n,) from the step's log-probs (n, V) (-inf where not allowed).

        Example: uniform over 4 allowed tokens -> 0.5 * 1 + 0.5 * 0.75 = 0.875."""
        p = logp_all.exp()                                                     # (n, V)
        n_allowed = torch.isfinite(logp_all).sum(-1).clamp(min=2)              # (n,)
        H = -(p * logp_all.masked_fill(p == 0, 0.0)).sum(-1)                   # (n,)
        return self.alpha * H / torch.log(n_allowed.to(p.dtype)) + (1 - self.alpha) * (1 - p.max(-1).values)


@dataclass(frozen=True)
class ToyCodec:
    """The toy policy's vocabulary and turn format (see the module docstring)."""

    n_think: int
    """number of distinct reasoning tokens"""
    n_actions: int
    """number of env actions (one token each)"""
    n_obs: int
    """size of the env's observation-token vocabulary (``core.obs_vocab_size``)"""
    think_max: int = 0
    """reasoning tokens a turn may hold before END (0: no reasoning, a turn is END + action)"""
    think_min: int = 0
    """reasoning tokens before END may be sampled (a sampling constraint, like an LLM's min_tokens)"""

    PAD, BOS, EOT, SEP, END = 0, 1, 2, 3, 4

    def __post_init__(self):
        if self.n_think < 1 or self.think_max < 0 or self.n_actions < 1 or not 0 <= self.think_min <= self.think_max:
            raise ValueError(f"ToyCodec needs n_think >= 1, 0 <= think_min <= think_max, n_actions >= 1; got n_think="
                             f"{self.n_think}, think_min={self.think_min}, think_max={self.think_max}, "
                             f"n_actions={self.n_actions}")

    @classmethod
    def for_core(cls, core: BatchedCore, n_think: int = 2, think_max: int = 0, think_min: int = 0) -> "ToyCodec":
        return cls(n_think, core.n_actions, core.obs_vocab_size, think_max, think_min)

    think0 = property(lambda self: 5)
    act0 = property(lambda self: 5 + self.n_think)
    obs0 = property(lambda self: self.act0 + self.n_actions)
    size = property(lambda self: self.obs0 + self.n_obs)
    max_new = property(lambda self: self.think_max + 2, doc="most tokens of one turn: reasoning, END, action")

    def stop_tokens(self, device=None) -> torch.Tensor:
        """(n_actions + 1,) long: the tokens that end a turn (every action token, and EOT)."""
        return torch.cat([torch.arange(self.act0, self.obs0, device=device),
                          torch.tensor([self.EOT], device=device)])

    def allowed(self, device=None) -> torch.Tensor:
        """(V,) bool: every token a well-formed turn may contain (reasoning, END, actions, EOT)."""
        allowed = torch.zeros(self.size, dtype=torch.bool, device=device)
        allowed[self.think0:self.obs0] = True
        allowed[[self.EOT, self.END]] = True
        return allowed

    def grammar(self, constrain: bool = True, tti: Optional[ThinkingIntervention] = None,
                device=None) -> "TurnGrammar":
        return TurnGrammar(self, constrain, tti, device)

    def prompt(self, core: BatchedCore, i: int) -> list[int]:
        return [self.BOS] + [self.obs0 + t for t in core.prompt_tokens(i)]

    def observe(self, core: BatchedCore, i: int) -> list[int]:
        return [self.SEP] + [self.obs0 + t for t in core.obs_tokens(i)]

    def parse(self, core: BatchedCore, rows: np.ndarray, gen: torch.Tensor, mask: torch.Tensor) -> np.ndarray:
        """Actions (n,) from generated turns (n, M): the action of a well-formed turn, else ``VOID``.

        Example (think 5-6, END 4, act0 7, EOT 2, PAD 0):
        [[5, 4, 8, 0], [4, 7, 0, 0], [5, 7, 0, 0], [2, 0, 0, 0]] -> [1, 0, VOID, VOID]."""
        n_tok = mask.sum(1)                                                    # (n,)
        pos = torch.arange(gen.shape[1], device=gen.device)[None]              # (1, M)
        g = gen.masked_fill(~mask, self.PAD)
        last = g.gather(1, (n_tok - 1).clamp(min=0)[:, None]).squeeze(1)
        end = g.gather(1, (n_tok - 2).clamp(min=0)[:, None]).squeeze(1)
        think = (g >= self.think0) & (g < self.act0)
        before = pos < (n_tok - 2)[:, None]                                    # the reasoning positions
        valid = ((n_tok >= 2) & (last >= self.act0) & (last < self.obs0) & (end == self.END)
                 & (think | ~before).all(1) & (n_tok - 2 <= self.think_max))
        return torch.where(valid, last - self.act0, torch.full_like(last, VOID)).cpu().numpy()

    def action_ids(self, core: BatchedCore, action: int, i: int = 0) -> list[int]:
        """The expert's turn for ``action``: END then its token (EOT alone for VOID)."""
        return [self.EOT] if action == VOID else [self.END, self.act0 + int(action)]

    def think_ids(self, values) -> list[int]:
        """The reasoning tokens that write ``values`` (ints in [0, n_think): e.g. an expert's remembered cue or
        remaining plan), cut at ``think_max``. Example (n_think 4, think_max 2): [2, 0, 3] -> [7, 5]."""
        values = [int(v) for v in values][:self.think_max]
        if any(not 0 <= v < self.n_think for v in values):
            raise ValueError(f"reasoning values must lie in [0, n_think={self.n_think}), got {values}")
        return [self.think0 + v for v in values]

    def summarize(self, gen: list[int]) -> list[int]:
        """A past turn in a summary context: its action token only."""
        return [t for t in gen if self.act0 <= t < self.obs0]

    def reasoning_mask(self, tokens: torch.Tensor) -> torch.Tensor:
        """(B, T) bool: reasoning tokens (the template whose collapse RAGEN tracks)."""
        return (tokens >= self.think0) & (tokens < self.act0)

    def describe(self, ids, action_names=None) -> str:
        """Readable text of token ids. Example (n_think 2, actions left/down/right/up):
        [5, 6, 4, 8] -> "r0 r1 </think> down"; observation tokens read "o<k>", SEP "|"."""
        names = {self.PAD: "_", self.BOS: "<bos>", self.EOT: "<eot>", self.SEP: "|", self.END: "</think>"}
        out = []
        for i in (int(x) for x in ids):
            if i in names:
                out.append(names[i])
            elif i < self.act0:
                out.append(f"r{i - self.think0}")
            elif i < self.obs0:
                a = i - self.act0
                out.append(action_names[a] if action_names is not None else f"a{a}")
            else:
                out.append(f"o{i - self.obs0}")
        return " ".join(out)

    def obs_token_mask(self, tokens: torch.Tensor) -> torch.Tensor:
        """(B, T) bool: tokens of the observation vocabulary (SEP and the env's tokens)."""
        return (tokens >= self.obs0) | (tokens == self.SEP)


class TurnGrammar:
    """The automaton of a toy turn: per state a set of allowed tokens and a next state per token.

    States: k = 0..think_max "reasoning, k tokens so far"; ``ACT`` = think_max + 1; ``FORCE`` = think_max + 2.
    Example (think_max 1): state 0 --r--> 1 --END--> ACT --a--> (turn over); state 1 allows only END / EOT.
    """

    def __init__(self, codec: ToyCodec, constrain: bool = True, tti: Optional[ThinkingIntervention] = None,
                 device=None):
        self.codec, self.constrain, self.tti = codec, constrain, tti
        K, V, c = codec.think_max, codec.size, codec
        self.ACT, self.FORCE = K + 1, K + 2
        S = K + 3
        table = torch.ones(S, V, dtype=torch.bool) if not constrain else torch.zeros(S, V, dtype=torch.bool)  # (S, V)
        if constrain:
            table[:K, c.think0:c.act0] = True                                  # reasoning tokens while k < think_max
            table[:K + 1, c.END] = True
            table[self.ACT, c.act0:c.obs0] = True
        table[:codec.think_min, c.END] = False                                 # min_tokens: no END before think_min
        table[self.FORCE] = False
        table[self.FORCE, c.END] = True
        nxt = torch.arange(S)[:, None].repeat(1, V)                            # (S, V) stay by default
        nxt[:K + 1] = torch.arange(1, K + 2).clamp(max=K)[:, None]            # a reasoning token: k -> k + 1
        nxt[:K + 1, c.END] = self.ACT
        nxt[self.FORCE] = self.ACT
        self.table, self.next = table.to(device), nxt.to(device)
        self.blocked = ~(self.table | ~self.table.any(-1, keepdim=True))     # (S, V) what each state rules out

    def start(self, n: int) -> "GrammarRun":
        return GrammarRun(self, n)

    def allowed_at(self, state: torch.Tensor) -> torch.Tensor:
        """(..., V) bool: the sampling set of each recorded state (..., ) long; state < 0 (not sampled:
        prompt, observations, forced or padding tokens) allows everything."""
        table = self.table.to(state.device)
        return table[state.clamp(min=0)] | (state < 0)[..., None]


class GrammarRun:
    """The grammar state of n rows through one ``generate`` call (the ``constraint`` a policy takes).

    A policy calls ``allowed()`` (or its complement ``blocked()``) before each step and
    ``advance(tok, logp_all, live)`` after it. Each step keeps the state its tokens were sampled in
    and which rows were live; ``record`` turns them into ``states`` (n, steps), -1 where no token was
    sampled, and ``forced`` (n, steps), the tokens that had a single allowed token (written by the
    grammar or the intervention, not chosen: kept out of the policy mask); ``cut`` (n,) says which
    rows the intervention cut. The bookkeeping is done once at the end, not at every step.
    """

    def __init__(self, grammar: TurnGrammar, n: int):
        self.g = grammar
        dev = grammar.table.device
        self.state = torch.zeros(n, dtype=torch.long, device=dev)              # (n,)
        self.calm = torch.zeros(n, dtype=torch.long, device=dev)               # reasoning steps in a row with small dM
        self.prev_u = torch.full((n,), math.nan, device=dev)
        self._n_allowed = grammar.table.sum(-1)                                 # (S,)
        self._states, self._live = [], []                                       # per step: (n,) each

    def allowed(self) -> torch.Tensor:
        """(n, V) bool: what each row may sample next."""
        return self.g.table[self.state]

    def blocked(self) -> torch.Tensor:
        """(n, V) bool: what each row may not sample next (``~allowed()``; no row is all True)."""
        return self.g.blocked[self.state]

    def advance(self, tok: torch.Tensor, logp_all: torch.Tensor, live: torch.Tensor) -> None:
        """Keep the step (state, live) and move every live row to its next state."""
        g = self.g
        self._states.append(self.state)                                         # replaced below, never mutated
        self._live.append(live)
        nxt = g.next[self.state, tok]                                           # (n,)
        if g.tti is not None and logp_all is not None:
            reasoning = live & (self.state <= g.ACT - 1) & (tok != g.codec.END)
            u = g.tti.uncertainty(logp_all.float())
            calm = (u - self.prev_u).abs() < g.tti.delta                       # NaN (first step) -> False
            self.calm = torch.where(reasoning, torch.where(calm, self.calm + 1, 0), self.calm)
            self.prev_u = torch.where(reasoning, u, self.prev_u)
            least = max(g.tti.min_think, g.codec.think_min)
            cut = reasoning & (self.calm >= g.tti.window) & (nxt >= least) & (nxt < g.ACT)
            nxt = torch.where(cut, torch.full_like(nxt, g.FORCE), nxt)
        self.state = torch.where(live, nxt, self.state)

    @property
    def cut(self) -> torch.Tensor:
        """(n,) bool: the intervention cut this row (a live step in ``FORCE``)."""
        if not self._states:
            return torch.zeros_like(self.state, dtype=torch.bool)
        return (torch.stack(self._live, 1) & (torch.stack(self._states, 1) == self.g.FORCE)).any(1)

    def record(self, M: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(states (n, M) long, -1 where no token was sampled; forced (n, M) bool)."""
        n, dev = self.state.shape[0], self.state.device
        states = torch.full((n, M), -1, dtype=torch.long, device=dev)
        forced = torch.zeros(n, M, dtype=torch.bool, device=dev)
        if self._states:
            k = min(M, len(self._states))
            st, live = torch.stack(self._states[:k], 1), torch.stack(self._live[:k], 1)     # (n, k)
            states[:, :k] = torch.where(live, st, -1)
            forced[:, :k] = live & (self._n_allowed[st] == 1)                   # one allowed token: no decision
        return states, forced
