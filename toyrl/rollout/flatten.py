"""From played episodes to a TurnBatch, and the trainer's log-probs under the contexts the policy saw.

Dimension legend: B rollouts, T flat token positions, H turns, n rows that have a given turn, L
context length, M new tokens per turn, V vocabulary.

``to_rollout`` lays every episode out flat (prompt, then policy and observation tokens of each
turn, right-padded) and keeps, per turn index, the exact context each row read (``TurnContext``).
``recompute_logp`` scores the batch's policy tokens with the current policy:

- ``matched``: each turn under the context the rollout used (for the ``full`` context policy that
  is the flat sequence itself, one forward);
- ``flat``: every token under the full flattened history (the trainer-side view that ignores
  truncation or summaries: RTPO's context mismatch, arXiv 2608.18682).

Either way a token is scored by the distribution that sampled it: the rollout's temperature and
the grammar state the token was drawn in (``toyrl.codecs.toy``), so on-policy ratios are 1.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Optional

import numpy as np
import torch

from ..batch import TurnBatch
from ..segments import dense_index, first_index

__all__ = ["TurnContext", "Rollout", "left_pad", "to_rollout", "recompute_logp", "logprobs_by_length",
           "shared_prefix"]


@dataclass
class TurnContext:
    """What the policy saw and wrote at turn index h, for the n rows that have that turn."""

    rows: torch.Tensor
    """(n,) long: batch rows that played this turn"""
    context: torch.Tensor
    """(n, L) long: the left-padded context the policy read"""
    context_mask: torch.Tensor
    """(n, L) bool: False on left padding"""
    gen: torch.Tensor
    """(n, M) long: tokens written in the turn (right-padded)"""
    gen_mask: torch.Tensor
    """(n, M) bool: True on real written tokens"""
    pos: torch.Tensor
    """(n, M) long: where each sampled token sits in the flat (B, T) sequence (-1 if not sampled)"""
    gen_state: torch.Tensor
    """(n, M) long: the grammar state each token was sampled in (-1: not sampled)"""


@dataclass
class Rollout:
    """A TurnBatch plus what recomputation and the log need."""

    batch: TurnBatch
    contexts: list
    codec: object
    context: str
    success: torch.Tensor
    """(B,) bool: the episode reached its goal"""
    tasks: np.ndarray
    """(B, task_dim) the task of each rollout"""
    episodes: list
    grammar: Optional[object] = None
    """the ``TurnGrammar`` policy tokens were sampled under (None: the whole vocabulary)"""
    temperature: float = 1.0
    """the sampling temperature of the rollout"""
    sample_state: Optional[torch.Tensor] = None
    """(B, T) long: the grammar state of each sampled token, -1 elsewhere"""
    stats: dict = field(default_factory=dict)

    def select(self, rows: torch.Tensor) -> "Rollout":
        """The sub-rollout of ``rows`` ((n,) long, increasing): batch, contexts and states re-indexed
        (T and H stay, so token positions keep their meaning)."""
        new_of = torch.full((self.batch.B,), -1, dtype=torch.long, device=rows.device)     # (B,)
        new_of[rows] = torch.arange(len(rows), device=rows.device)
        contexts = []
        for tc in self.contexts:
            keep = new_of[tc.rows] >= 0                                                  # (n,)
            if bool(keep.any()):
                contexts.append(TurnContext(new_of[tc.rows[keep]], tc.context[keep], tc.context_mask[keep],
                                            tc.gen[keep], tc.gen_mask[keep], tc.pos[keep], tc.gen_state[keep]))
        idx = rows.tolist()
        return replace(self, batch=self.batch.select(rows), contexts=contexts, success=self.success[rows],
                       tasks=self.tasks[idx], episodes=[self.episodes[i] for i in idx],
                       sample_state=self.sample_state[rows])


def left_pad(seqs: list, pad: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token lists to (n, L) with a mask. Example: [[5], [6, 7]] -> [[pad, 5], [6, 7]]."""
    L = max(1, max(len(s) for s in seqs))
    out = np.full((len(seqs), L), pad, dtype=np.int64)                         # (n, L)
    mask = np.zeros((len(seqs), L), dtype=bool)
    for i, s in enumerate(seqs):
        if len(s):
            out[i, L - len(s):] = s
            mask[i, L - len(s):] = True
    return torch.from_numpy(out).to(device), torch.from_numpy(mask).to(device)


def _right_pad(seqs: list, pad, dtype) -> np.ndarray:
    """(n, M) array of lists right-padded with ``pad``. Example: [[1], [2, 3]] -> [[1, pad], [2, 3]]."""
    out = np.full((len(seqs), max(1, max(len(s) for s in seqs))), pad, dtype=dtype)
    for j, s in enumerate(seqs):
        out[j, :len(s)] = s
    return out


def _flat_arrays(episodes: list, codec) -> dict:
    """The (B, T) and (B, H) numpy arrays of a TurnBatch, plus each turn's start position."""
    B, H = len(episodes), max(1, max(len(ep.turns) for ep in episodes))
    T = max(len(ep.prompt) + sum(len(t.gen) + len(t.obs) for t in ep.turns) for ep in episodes)
    a = {"tokens": np.full((B, T), codec.PAD, np.int64), "turn_id": np.full((B, T), -1, np.int64),   # (B, T)
         "policy_mask": np.zeros((B, T), bool), "obs_mask": np.zeros((B, T), bool),
         "old_logp": np.zeros((B, T), np.float32), "entropy": np.zeros((B, T), np.float32),
         "state": np.full((B, T), -1, np.int64),
         "turn_reward": np.zeros((B, H), np.float32), "state_key": np.zeros((B, H), np.int64),      # (B, H)
         "void_turn": np.zeros((B, H), bool), "turn_mask": np.zeros((B, H), bool),
         "turn_signal": np.zeros((B, H), np.float32), "node": np.full((B, H), -1, np.int64),
         "start": np.zeros((B, H), np.int64)}
    node_of: dict[int, int] = {}
    for b, ep in enumerate(episodes):
        s = len(ep.prompt)
        a["tokens"][b, :s], a["turn_id"][b, :s] = ep.prompt, 0
        for k, t in enumerate(ep.turns):
            g, o = len(t.gen), len(t.obs)
            a["start"][b, k] = s
            a["tokens"][b, s:s + g + o], a["turn_id"][b, s:s + g + o] = t.gen + t.obs, k
            forced = np.asarray(t.forced, bool) if len(t.forced) == g else np.zeros(g, bool)   # hand-made turns
            a["policy_mask"][b, s:s + g] = ~forced
            a["obs_mask"][b, s + g:s + g + o] = True
            a["old_logp"][b, s:s + g], a["entropy"][b, s:s + g] = t.logp, t.entropy
            a["state"][b, s:s + g] = t.states if len(t.states) == g else -1
            for name, v in (("turn_reward", t.reward), ("state_key", t.key), ("void_turn", t.void),
                            ("turn_mask", True), ("turn_signal", t.signal)):
                a[name][b, k] = v
            a["node"][b, k] = node_of.setdefault(id(t), len(node_of))
            s += g + o
    return a


def _turn_contexts(episodes: list, codec, start: np.ndarray, device) -> list:
    """One ``TurnContext`` per turn index h."""
    out = []
    for h in range(start.shape[1]):
        rows = [b for b, ep in enumerate(episodes) if len(ep.turns) > h]
        if not rows:
            break
        turns = [episodes[b].turns[h] for b in rows]
        ctx, cmask = left_pad([t.context for t in turns], codec.PAD, device)
        gen = torch.as_tensor(_right_pad([t.gen for t in turns], codec.PAD, np.int64))          # (n, M)
        gmask = torch.as_tensor(_right_pad([[True] * len(t.gen) for t in turns], False, bool))
        state = torch.as_tensor(_right_pad([t.states if len(t.states) == len(t.gen) else [-1] * len(t.gen)
                                            for t in turns], -1, np.int64))
        sampled = torch.as_tensor(_right_pad([[not f for f in t.forced] if len(t.forced) == len(t.gen)
                                              else [True] * len(t.gen) for t in turns], False, bool))
        pos = torch.as_tensor(start[rows, h])[:, None] + torch.arange(gen.shape[1])[None]
        out.append(TurnContext(torch.as_tensor(rows, device=device), ctx, cmask, gen.to(device), gmask.to(device),
                               torch.where(sampled, pos, -1).to(device), state.to(device)))
    return out


def to_rollout(episodes: list, codec, device, *, context: str = "full", grammar=None, temperature: float = 1.0,
               policy_version: int = 0, stats: Optional[dict] = None) -> Rollout:
    """Flatten episodes into a TurnBatch plus the per-turn contexts for matched recompute. Turn
    records shared between episodes (tree prefixes) get one node id. Tokens the harness wrote
    (a thinking intervention's END) are in the sequence but not in ``policy_mask``."""
    a = _flat_arrays(episodes, codec)
    t = lambda x, dt=None: torch.as_tensor(x, dtype=dt, device=device)        # noqa: E731
    B = len(episodes)
    batch = TurnBatch(**{k: t(a[k]) for k in ("tokens", "policy_mask", "turn_id", "old_logp", "turn_mask",
                                              "turn_reward", "state_key", "obs_mask", "entropy", "void_turn",
                                              "node", "turn_signal")},
                      group=t(np.array([ep.group for ep in episodes]), torch.long),
                      policy_version=torch.full((B,), policy_version, dtype=torch.long, device=device))
    pm = a["policy_mask"]
    obs_vocab = codec.obs_token_mask(torch.as_tensor(a["tokens"])).numpy()      # (B, T) observation vocabulary
    stats = dict(stats or {})
    stats.update({"policy_tokens": int(pm.sum()), "env_tokens": int(a["obs_mask"].sum()),
                  "obs_token_rate": float((obs_vocab & pm).sum() / max(pm.sum(), 1))})
    return Rollout(batch, _turn_contexts(episodes, codec, a["start"], device), codec, context,
                   t(np.array([ep.success for ep in episodes])), np.stack([ep.task for ep in episodes]), episodes,
                   grammar, temperature, t(a["state"]), stats)


def shared_prefix(tokens: torch.Tensor, attn: torch.Tensor,
                  group: torch.Tensor) -> Optional[tuple[torch.Tensor, torch.Tensor, int]]:
    """The leading tokens every row shares with the first row of its group: (rep, inv, k), or None if none.

        k = min( min_b lcp(row b, row rep[inv[b]]),  min_b len_b - 1 )

    lcp counts the leading positions where both rows hold the same real token; ``rep`` (n,) is the first
    row of each of the n groups, ``inv`` (B,) the group of each row, and every row keeps at least one token
    after the prefix. Rows of one group (``TurnBatch.group``: one task, one reset) open with the same
    prompt, so a teacher-forced pass can run those k positions once per group instead of once per row
    (``HFPolicy.logprobs(share=...)``). None when k < 1 or no two rows share a group.

    Example: tokens [[5, 6, 7], [5, 6, 8], [9, 9, 9]], all real, group [4, 4, 2] -> rep [2, 0],
    inv [1, 1, 0], k 2 (row 2, alone in its group, is capped at its length - 1).
    """
    B, T = tokens.shape
    inv, n = dense_index(group)                                                 # (B,) 0..n-1
    if n == B:
        return None
    rep = first_index(inv, n)                                                   # (n,) first row of each group
    same = (tokens == tokens[rep[inv]]) & attn & attn[rep[inv]]                 # (B, T)
    lcp = same.long().cumprod(1).sum(1)                                         # (B,) shared leading positions
    k = min(int(lcp.min()), int(attn.sum(1).min()) - 1)
    return (rep, inv, k) if k >= 1 else None


def logprobs_by_length(policy, tokens: torch.Tensor, attn: torch.Tensor, allowed: Optional[torch.Tensor] = None,
                       temperature: float = 1.0, buckets: int = 4, score: Optional[torch.Tensor] = None,
                       group: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``policy.logprobs(tokens, attn, ...)`` of right-padded rows (B, T), run the cheaper of two ways, each
    giving the same numbers: on ``buckets`` groups of rows of similar length, each cut at its longest row
    (no padding), or, where the policy can (``shares_prefix()``) and ``group`` (B,) is given, on all rows
    at once with the prompt they share with their group run once per group (``shared_prefix``). The cost of
    each is the positions it runs: sum over buckets of rows x longest row, against n k + B (T' - k).
    ``score`` (B, T) bool: only those tokens are scored (the others 0).

    Buckets buy >= 2x where episodes differ in length: GridWorld 4x4 at 32 reasoning tokens (B 64, T 436,
    mean length 176, 1 thread) forward 0.10 -> 0.04 s, forward + backward 0.28 -> 0.07 s. The shared prefix
    buys it where the prompt is most of the row: SmolLM2's hidden states, 2 prompts of 77 tokens x 4 replies of
    24, forward + backward 5.6-6.8 -> 1.5-1.7 s (2 threads, load about 1). Rows must be right-padded (real tokens
    first).
    """
    B, T = tokens.shape
    pos = torch.arange(1, T + 1, device=tokens.device)
    ends = torch.where(attn, pos, 0).amax(1)                                   # (B,) one past the last real token
    order, bucketed = torch.argsort(ends), buckets > 1 and B >= 2 * buckets
    share = shared_prefix(tokens, attn, group) if group is not None and _shares(policy) else None
    if share is not None:
        Tm, (_, _, k) = int(ends.max()), share
        bucket_cost = sum(len(r) * int(ends[r].max()) for r in order.chunk(buckets)) if bucketed else B * T
        if len(share[0]) * k + B * (Tm - k) < bucket_cost:
            lp, en = policy.logprobs(tokens[:, :Tm], attn[:, :Tm], temperature=temperature, share=share,
                                     allowed=None if allowed is None else allowed[:, :Tm],
                                     score=None if score is None else score[:, :Tm])
            return torch.nn.functional.pad(lp, (0, T - Tm)), torch.nn.functional.pad(en, (0, T - Tm))
    if not bucketed:
        return policy.logprobs(tokens, attn, allowed=allowed, temperature=temperature, score=score)
    parts = []
    for rows in order.chunk(buckets):
        Tm = max(int(ends[rows].max()), 1)
        lp, en = policy.logprobs(tokens[rows, :Tm], attn[rows, :Tm], temperature=temperature,
                                 allowed=None if allowed is None else allowed[rows, :Tm],
                                 score=None if score is None else score[rows, :Tm])
        parts.append((torch.nn.functional.pad(lp, (0, T - Tm)), torch.nn.functional.pad(en, (0, T - Tm))))
    inverse = torch.argsort(order)
    logp = torch.cat([p[0] for p in parts])[inverse]                          # (B, T) in row order
    ent = torch.cat([p[1] for p in parts])[inverse]
    return logp, ent


def _shares(policy) -> bool:
    """Whether ``policy.logprobs`` takes ``share`` now (``HFPolicy`` with its KV cache on)."""
    fn = getattr(policy, "shares_prefix", None)
    return bool(fn()) if fn is not None else False


def _allowed(ro: Rollout, state: torch.Tensor) -> Optional[torch.Tensor]:
    """(n, L, V) sampling sets of the tokens with grammar ``state`` (n, L); None when unconstrained."""
    if ro.grammar is None or not ro.grammar.constrain:
        return None
    return ro.grammar.allowed_at(state)


def recompute_logp(policy, ro: Rollout, mode: str = "matched", env_tokens: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs and entropies (B, T) of the batch's tokens under ``policy`` (with gradient).

    Policy tokens are scored at the rollout's temperature, restricted to the set their grammar
    state allowed. Observation and prompt tokens get their flat log-probs (used only when env-token
    masking is switched off); ``env_tokens=False`` skips that flat pass in matched mode and leaves them 0,
    so only the policy's tokens go through the LM head (full context: the prompt's rows cost no head work).
    """
    if mode not in ("matched", "flat"):
        raise ValueError(f"mode must be 'matched' or 'flat', got {mode!r}")
    b, temp = ro.batch, ro.temperature
    if mode == "flat" or ro.context == "full" or env_tokens:
        logp, ent = logprobs_by_length(policy, b.tokens, b.turn_id >= 0, _allowed(ro, ro.sample_state), temp,
                                       score=None if env_tokens or mode == "flat" else b.policy_mask, group=b.group)
        if mode == "flat" or ro.context == "full":
            return logp, ent
    else:
        logp = ent = torch.zeros(b.tokens.shape, device=b.tokens.device)       # (B, T), filled per turn below
    for tc in ro.contexts:
        L = tc.context.shape[1]
        seq = torch.cat([tc.context, tc.gen], 1)                               # (n, L + M)
        mask = torch.cat([tc.context_mask, tc.gen_mask], 1)
        state = torch.cat([torch.full_like(tc.context, -1), tc.gen_state], 1)
        lp, en = policy.logprobs(seq, mask, allowed=_allowed(ro, state), temperature=temp,
                                 score=torch.cat([torch.zeros_like(tc.context_mask), tc.gen_mask], 1))
        real = tc.pos >= 0
        rows = tc.rows[:, None].expand_as(real)[real]
        logp = logp.index_put((rows, tc.pos[real]), lp[:, L:][real])
        ent = ent.index_put((rows, tc.pos[real]), en[:, L:][real])
    return logp, ent
