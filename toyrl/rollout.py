"""Rollouts: G episodes per task, played turn by turn by a token policy through a batched env core.

Dimension legend: B rollouts (= P tasks x G), T flat token positions, H turns, L context length,
M new tokens per turn, V vocabulary.

Each turn the policy reads a context and writes up to M = think_max + 1 tokens: a few *thinking*
tokens, then one *action* token, which ends the turn. A turn that ends with end-of-turn (EOT, an
empty reply) or runs out of tokens before any action is a **void turn**: the env gets ``VOID``
and the event is recorded. The env answers with observation
tokens (SEP, then the env's own ``obs_tokens``), which are interleaved into the history.

Context policies decide what the policy reads at turn k:
- ``full``: the prompt and every earlier turn (policy and observation tokens);
- ``last_k``: the prompt and the last ``context_k`` turns only (truncation);
- ``summary``: the last ``context_k`` turns in full, older turns compressed to their action token
  and observation (thinking tokens and EOT dropped).
The exact context of every turn is stored, so the trainer can recompute log-probs under the same
context (``matched``) or under the full flattened history (``flat``, the RTPO mismatch).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch

from .batch import TurnBatch
from .envs.core import VOID, BatchedCore

__all__ = ["Vocab", "TurnContext", "Rollout", "rollout", "CONTEXTS", "recompute_logp", "left_pad"]

CONTEXTS = ("full", "last_k", "summary")


@dataclass(frozen=True)
class Vocab:
    """The toy policy's vocabulary: 4 specials, thinking tokens, action tokens, observation tokens."""

    n_think: int
    """number of distinct thinking tokens (the toy policy's "reasoning")"""
    n_actions: int
    """number of env actions (one token each)"""
    n_obs: int
    """size of the env's observation-token vocabulary (``core.obs_vocab_size``)"""

    PAD, BOS, EOT, SEP = 0, 1, 2, 3

    @property
    def think0(self) -> int:
        return 4

    @property
    def act0(self) -> int:
        return 4 + self.n_think

    @property
    def obs0(self) -> int:
        return self.act0 + self.n_actions

    @property
    def size(self) -> int:
        return self.obs0 + self.n_obs

    def stop_tokens(self, device=None) -> torch.Tensor:
        """(n_actions + 1,) long: the tokens that end a turn (every action token, and EOT)."""
        return torch.cat([torch.arange(self.act0, self.obs0, device=device),
                          torch.tensor([self.EOT], device=device)])

    def policy_tokens(self, device=None) -> torch.Tensor:
        """(V,) bool: the tokens a policy turn may contain (thinking, actions, EOT)."""
        allowed = torch.zeros(self.size, dtype=torch.bool, device=device)
        allowed[self.think0:self.obs0] = True
        allowed[self.EOT] = True
        return allowed

    def parse_turn(self, gen: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Actions (B,) from generated turns (B, M): the turn's one action token, else ``VOID`` (an
        EOT, an observation token, a second action, or no action at all).
        Example (think 4-5, act0=6, EOT=2): [[4, 7, 0], [4, 2, 0], [5, 4, 5]] -> [1, VOID, VOID]."""
        is_act = mask & (gen >= self.act0) & (gen < self.obs0)                 # (B, M)
        other = mask & ~is_act & ((gen < self.think0) | (gen >= self.act0))    # EOT, specials, obs tokens
        valid = (is_act.sum(1) == 1) & ~other.any(1)
        action = ((gen - self.act0) * is_act).sum(1)
        return torch.where(valid, action, torch.full_like(action, VOID))


@dataclass
class TurnContext:
    """What the policy saw and wrote at one turn, for the rows still playing (n of them)."""

    rows: torch.Tensor
    """(n,) long: batch rows that played this turn"""
    context: torch.Tensor
    """(n, L) long: the left-padded context the policy read"""
    context_mask: torch.Tensor
    """(n, L) bool: False on left padding"""
    gen: torch.Tensor
    """(n, M) long: tokens the policy wrote"""
    gen_mask: torch.Tensor
    """(n, M) bool: True on real generated tokens (up to and including EOT)"""
    pos: torch.Tensor
    """(n, M) long: where each generated token sits in the flat (B, T) sequence (-1 if not real)"""


@dataclass
class Rollout:
    """A TurnBatch plus what recomputation and the log need."""

    batch: TurnBatch
    contexts: list[TurnContext]
    vocab: Vocab
    context: str
    success: torch.Tensor
    """(B,) bool: the episode reached its goal"""
    tasks: np.ndarray
    """(B, task_dim) the task of each rollout"""
    policy_allowed: Optional[torch.Tensor] = None
    """(V,) bool: the sampling restriction of policy tokens, None when unconstrained"""
    stats: dict = field(default_factory=dict)


def left_pad(seqs: list[list[int]], pad: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token lists to (n, L) with a mask. Example: [[5], [6, 7]] -> [[pad, 5], [6, 7]]."""
    L = max(1, max(len(s) for s in seqs))
    out = np.full((len(seqs), L), pad, dtype=np.int64)                         # (n, L)
    mask = np.zeros((len(seqs), L), dtype=bool)
    for i, s in enumerate(seqs):
        if s:
            out[i, L - len(s):] = s
            mask[i, L - len(s):] = True
    return torch.from_numpy(out).to(device), torch.from_numpy(mask).to(device)


def _context(prompt, turns, k: int, context: str, vocab: Vocab) -> list[int]:
    """The context for the next turn from the prompt and the list of (policy, observation) turns."""
    if context == "full" or len(turns) <= k:
        keep_from = 0 if context == "full" else max(0, len(turns) - k)
    else:
        keep_from = len(turns) - k
    out = list(prompt)
    for j, (pol, obs) in enumerate(turns):
        if j >= keep_from:
            out += pol + obs
        elif context == "summary":
            out += [t for t in pol if vocab.act0 <= t < vocab.obs0] + obs
    return out


@torch.no_grad()
def rollout(policy, core: BatchedCore, tasks: np.ndarray, group: np.ndarray, *, vocab: Vocab,
            max_turns: int, think_max: int = 2, temperature: float = 1.0, context: str = "full",
            context_k: int = 2, constrain: bool = True, greedy: bool = False,
            generator: Optional[torch.Generator] = None, policy_version: int = 0) -> Rollout:
    """Play one episode per row of ``tasks`` (B, task_dim) with ``policy`` on ``core`` (B copies).

    ``group`` (B,) ids rollouts of one initial state. Returns a ``Rollout`` whose ``batch`` has
    old_logp / entropy at the policy tokens, per-turn rewards, state keys (before each turn) and
    void turns. Runs under ``torch.no_grad``; generation is batched over the rows still playing.
    """
    if context not in CONTEXTS:
        raise ValueError(f"context must be one of {CONTEXTS}, got {context!r}")
    B = core.num_envs
    if len(tasks) != B or len(group) != B:
        raise ValueError(f"tasks and group must have B={B} rows, got {len(tasks)} and {len(group)}")
    device = policy.device
    M = think_max + 1
    allowed = vocab.policy_tokens(device) if constrain else None
    stops = vocab.stop_tokens(device)
    core.reset(tasks)
    prompts = [[vocab.BOS] + [vocab.obs0 + t for t in core.prompt_tokens(i)] for i in range(B)]
    turns: list[list[tuple[list[int], list[int]]]] = [[] for _ in range(B)]
    gen_logp: list[list[list[float]]] = [[] for _ in range(B)]
    gen_ent: list[list[list[float]]] = [[] for _ in range(B)]
    H = max_turns
    reward = np.zeros((B, H))
    key = np.zeros((B, H), dtype=np.int64)
    void = np.zeros((B, H), dtype=bool)
    tmask = np.zeros((B, H), dtype=bool)
    success = np.zeros(B, dtype=bool)
    ctx_records = []
    for h in range(H):
        live = np.flatnonzero(~core.done)
        if live.size == 0:
            break
        key[live, h] = core.state_keys()[live]
        tmask[live, h] = True
        ctx_lists = [_context(prompts[b], turns[b], context_k, context, vocab) for b in live]
        ctx, ctx_mask = left_pad(ctx_lists, vocab.PAD, device)                # (n, L)
        out = policy.generate(ctx, ctx_mask, M, temperature, stop_token=stops, allowed=allowed,
                              greedy=greedy, generator=generator)
        act = vocab.parse_turn(out.tokens, out.mask).cpu().numpy()
        actions = np.full(B, VOID, dtype=np.int64)
        actions[live] = act
        _, r, term, trunc, info = core.step(actions)
        reward[live, h] = r[live]
        void[live, h] = act == VOID
        success |= info["success"]
        g_tok, g_mask = out.tokens.cpu().numpy(), out.mask.cpu().numpy()
        g_lp, g_ent = out.logp.cpu().numpy(), out.entropy.cpu().numpy()
        for j, b in enumerate(live):
            pol = g_tok[j][g_mask[j]].tolist()
            obs = [] if core.done[b] else [vocab.SEP] + [vocab.obs0 + t for t in core.obs_tokens(b)]
            turns[b].append((pol, obs))
            gen_logp[b].append(g_lp[j][g_mask[j]].tolist())
            gen_ent[b].append(g_ent[j][g_mask[j]].tolist())
        ctx_records.append((torch.as_tensor(live, device=device), ctx, ctx_mask, out.tokens, out.mask))
    # ---- flatten into a TurnBatch ----------------------------------------------------------------
    n_turns = tmask.sum(1)
    H_used = max(1, int(n_turns.max()))
    T = max(len(prompts[b]) + sum(len(p) + len(o) for p, o in turns[b]) for b in range(B))
    tokens = np.full((B, T), vocab.PAD, dtype=np.int64)                        # (B, T)
    turn_id = np.full((B, T), -1, dtype=np.int64)
    pmask = np.zeros((B, T), dtype=bool)
    omask = np.zeros((B, T), dtype=bool)
    old_logp = np.zeros((B, T), dtype=np.float32)
    entropy = np.zeros((B, T), dtype=np.float32)
    starts = np.zeros((B, H_used), dtype=np.int64)
    for b in range(B):
        seq, tid = list(prompts[b]), [0] * len(prompts[b])
        for k, (pol, obs) in enumerate(turns[b]):
            starts[b, k] = len(seq)
            s = len(seq)
            pmask[b, s:s + len(pol)] = True
            old_logp[b, s:s + len(pol)] = gen_logp[b][k]
            entropy[b, s:s + len(pol)] = gen_ent[b][k]
            omask[b, s + len(pol):s + len(pol) + len(obs)] = True
            seq += pol + obs
            tid += [k] * (len(pol) + len(obs))
        tokens[b, :len(seq)] = seq
        turn_id[b, :len(tid)] = tid
    contexts = []
    for h, (rows, ctx, ctx_mask, gen, gmask) in enumerate(ctx_records):
        offs = torch.cumsum(gmask.long(), 1) - 1                                # (n, M)
        pos = torch.as_tensor(starts[rows.cpu().numpy(), h], device=device)[:, None] + offs
        contexts.append(TurnContext(rows, ctx, ctx_mask, gen, gmask, torch.where(gmask, pos, -1)))
    t = lambda x, dt=None: torch.as_tensor(x, dtype=dt, device=device)
    batch = TurnBatch(
        tokens=t(tokens), policy_mask=t(pmask), turn_id=t(turn_id), old_logp=t(old_logp),
        turn_mask=t(tmask[:, :H_used]), turn_reward=t(reward[:, :H_used], torch.float32),
        group=t(np.asarray(group), torch.long), state_key=t(key[:, :H_used]), obs_mask=t(omask),
        entropy=t(entropy), void_turn=t(void[:, :H_used]),
        policy_version=torch.full((B,), policy_version, dtype=torch.long, device=device),
    )
    stats = {"tokens_generated": int(pmask.sum()), "env_tokens": int(omask.sum())}
    return Rollout(batch, contexts, vocab, context, t(success), tasks, allowed, stats)


def _allowed_at(allowed_V: Optional[torch.Tensor], policy_pos: torch.Tensor) -> Optional[torch.Tensor]:
    """(n, L, V) per-position sampling mask: the policy set where ``policy_pos``, every token elsewhere."""
    if allowed_V is None:
        return None
    return allowed_V[None, None, :] | ~policy_pos[..., None]                   # (n, L, V)


def recompute_logp(policy, ro: Rollout, mode: str = "matched") -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs and entropies (B, T) of the batch's tokens under ``policy`` (with gradient).

    ``matched``: each turn's tokens under the exact context the rollout used (one forward per
    turn; for the ``full`` context policy this is the flat sequence, one forward). ``flat``: every
    token under the full flattened history, the trainer-side view that ignores truncation.
    Observation and prompt tokens always get their flat log-probs (used only when env-token
    masking is switched off).
    """
    if mode not in ("matched", "flat"):
        raise ValueError(f"mode must be 'matched' or 'flat', got {mode!r}")
    b = ro.batch
    attn = b.turn_id >= 0                                                      # (B, T)
    logp, ent = policy.logprobs(b.tokens, attn, allowed=_allowed_at(ro.policy_allowed, b.policy_mask))
    if mode == "flat" or ro.context == "full":
        return logp, ent
    logp, ent = logp.clone(), ent.clone()
    for tc in ro.contexts:
        L = tc.context.shape[1]
        seq = torch.cat([tc.context, tc.gen], 1)                               # (n, L + M)
        mask = torch.cat([tc.context_mask, tc.gen_mask], 1)
        pol = torch.zeros_like(mask)
        pol[:, L:] = tc.gen_mask
        lp, en = policy.logprobs(seq, mask, allowed=_allowed_at(ro.policy_allowed, pol))
        real = tc.gen_mask
        rows = tc.rows[:, None].expand_as(real)[real]
        logp = logp.index_put((rows, tc.pos[real]), lp[:, L:][real])
        ent = ent.index_put((rows, tc.pos[real]), en[:, L:][real])
    return logp, ent
