"""Rollouts: G episodes per task, played turn by turn by a token policy through a batched env core.

Dimension legend: B rollouts (= P tasks x G), T flat token positions, H turns, L context length,
M new tokens per turn, V vocabulary.

A *codec* turns env state into tokens and tokens into actions (``ToyCodec`` below for the toy
policy; a text codec for language models follows the same four methods). With ``ToyCodec`` each
turn the policy writes up to M = think_max + 1 tokens: a few *thinking* tokens, then one *action*
token, which ends the turn. A turn that ends with end-of-turn (EOT, an empty reply) or runs out of
tokens before any action is a **void turn**: the env gets ``VOID`` and the event is recorded. The
env answers with observation tokens (SEP, then the env's own ``obs_tokens``), interleaved into
the history.

Context policies decide what the policy reads at turn k:
- ``full``: the prompt and every earlier turn (policy and observation tokens);
- ``last_k``: the prompt and the last ``context_k`` turns only (truncation);
- ``summary``: the last ``context_k`` turns in full, older turns compressed by the codec (the toy
  codec keeps their action token and observation, drops thinking tokens).
The exact context of every turn is stored, so the trainer can recompute log-probs under the same
context (``matched``) or under the full flattened history (``flat``, the RTPO mismatch).

Every episode is a list of ``Turn`` records; a tree rollout (``toyrl.tree``) shares the records of
a common prefix between episodes, which is how node ids of shared turns come out equal.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch

from .batch import TurnBatch
from .envs.core import VOID, BatchedCore

__all__ = ["ToyCodec", "Turn", "Episode", "TurnContext", "Rollout", "rollout", "play", "to_rollout",
           "CONTEXTS", "recompute_logp", "left_pad", "build_context"]

CONTEXTS = ("full", "last_k", "summary")


@dataclass(frozen=True)
class ToyCodec:
    """The toy policy's vocabulary and turn format: 4 specials, thinking, action and observation tokens."""

    n_think: int
    """number of distinct thinking tokens (the toy policy's "reasoning")"""
    n_actions: int
    """number of env actions (one token each)"""
    n_obs: int
    """size of the env's observation-token vocabulary (``core.obs_vocab_size``)"""
    think_max: int = 2
    """thinking tokens a turn may hold before its action"""

    PAD, BOS, EOT, SEP = 0, 1, 2, 3

    @classmethod
    def for_core(cls, core: BatchedCore, n_think: int = 2, think_max: int = 2) -> "ToyCodec":
        return cls(n_think, core.n_actions, core.obs_vocab_size, think_max)

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

    @property
    def max_new(self) -> int:
        return self.think_max + 1

    def stop_tokens(self, device=None) -> torch.Tensor:
        """(n_actions + 1,) long: the tokens that end a turn (every action token, and EOT)."""
        return torch.cat([torch.arange(self.act0, self.obs0, device=device),
                          torch.tensor([self.EOT], device=device)])

    def allowed(self, device=None) -> torch.Tensor:
        """(V,) bool: the tokens a policy turn may contain (thinking, actions, EOT)."""
        allowed = torch.zeros(self.size, dtype=torch.bool, device=device)
        allowed[self.think0:self.obs0] = True
        allowed[self.EOT] = True
        return allowed

    def prompt(self, core: BatchedCore, i: int) -> list[int]:
        return [self.BOS] + [self.obs0 + t for t in core.prompt_tokens(i)]

    def observe(self, core: BatchedCore, i: int) -> list[int]:
        return [self.SEP] + [self.obs0 + t for t in core.obs_tokens(i)]

    def parse(self, core: BatchedCore, rows: np.ndarray, gen: torch.Tensor, mask: torch.Tensor) -> np.ndarray:
        """Actions (n,) from generated turns (n, M): the turn's one action token, else ``VOID`` (an
        EOT, an observation token, a second action, or no action at all).
        Example (think 4-5, act0=6, EOT=2): [[4, 7, 0], [4, 2, 0], [5, 4, 5]] -> [1, VOID, VOID]."""
        is_act = mask & (gen >= self.act0) & (gen < self.obs0)                 # (n, M)
        other = mask & ~is_act & ((gen < self.think0) | (gen >= self.act0))    # EOT, specials, obs tokens
        valid = (is_act.sum(1) == 1) & ~other.any(1)
        action = ((gen - self.act0) * is_act).sum(1)
        return torch.where(valid, action, torch.full_like(action, VOID)).cpu().numpy()

    def summarize(self, gen: list[int]) -> list[int]:
        """A past turn in a summary context: its action token only."""
        return [t for t in gen if self.act0 <= t < self.obs0]

    def reasoning_mask(self, tokens: torch.Tensor) -> torch.Tensor:
        """(B, T) bool: thinking tokens (the template whose collapse RAGEN tracks)."""
        return (tokens >= self.think0) & (tokens < self.act0)


@dataclass
class Turn:
    """One turn of one episode: what the policy read and wrote, and what the env answered."""

    context: list
    gen: list
    logp: list
    entropy: list
    obs: list
    reward: float
    key: int
    void: bool
    signal: float = 0.0
    """a checkable intermediate signal (MockSearch: the result holds the answer; BanditChain: the pull was right)"""
    u: float = 0.0
    """the turn's uncertainty (mean entropy of its tokens), T2PO's resampling signal"""
    state: Optional[dict] = None
    """the env state of this copy before the turn (``core.row_state``), kept for tree branching"""


@dataclass
class Episode:
    prompt: list
    task: np.ndarray
    turns: list = field(default_factory=list)
    success: bool = False
    group: int = 0


@dataclass
class TurnContext:
    """What the policy saw and wrote at turn index h, for the rows that have that turn (n of them)."""

    rows: torch.Tensor
    """(n,) long: batch rows that played this turn"""
    context: torch.Tensor
    """(n, L) long: the left-padded context the policy read"""
    context_mask: torch.Tensor
    """(n, L) bool: False on left padding"""
    gen: torch.Tensor
    """(n, M) long: tokens the policy wrote (right-padded)"""
    gen_mask: torch.Tensor
    """(n, M) bool: True on real generated tokens"""
    pos: torch.Tensor
    """(n, M) long: where each generated token sits in the flat (B, T) sequence (-1 if not real)"""


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
    policy_allowed: Optional[torch.Tensor] = None
    """(V,) bool: the sampling restriction of policy tokens, None when unconstrained"""
    stats: dict = field(default_factory=dict)


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


def build_context(ep: Episode, codec, context: str = "full", k: int = 2) -> list[int]:
    """The tokens the policy reads before its next turn, under a context policy."""
    if context not in CONTEXTS:
        raise ValueError(f"context must be one of {CONTEXTS}, got {context!r}")
    n = len(ep.turns)
    keep_from = 0 if context == "full" else max(0, n - k)
    out = list(ep.prompt)
    for j, t in enumerate(ep.turns):
        if j >= keep_from:
            out += t.gen + t.obs
        elif context == "summary":
            out += codec.summarize(t.gen) + t.obs
    return out


def _signal(info: dict, n: int) -> np.ndarray:
    for key in ("contains_answer", "right"):
        if key in info:
            return info[key].astype(np.float64)
    return np.zeros(n)


@torch.no_grad()
def play(policy, core: BatchedCore, episodes: list, codec, *, temperature: float = 1.0, context: str = "full",
         context_k: int = 2, constrain: bool = True, greedy: bool = False,
         generator: Optional[torch.Generator] = None, t2po_eta: float = 0.0, t2po_max_try: int = 2,
         keep_states: bool = False) -> dict:
    """Play every copy of ``core`` (row i continues ``episodes[i]``) until all are done, appending Turns.

    Works from a fresh reset or from a forked mid-episode state. With ``t2po_eta > 0`` a turn whose
    uncertainty moved by less than eta from the previous turn (but moved) is regenerated, at most
    ``t2po_max_try`` times (T2PO's turn-level dynamic sampling). ``keep_states`` stores each copy's
    env state before every turn in ``Turn.state`` (for tree branching). Returns token counts.
    """
    device = policy.device
    allowed = codec.allowed(device) if constrain else None
    stops = codec.stop_tokens(device)
    stats = {"tokens_generated": 0, "turns_resampled": 0}
    # with the full context and a policy that returns a KV cache (``Generation.past``), each turn feeds
    # only the new observation tokens; the stored contexts are the same either way
    reuse = context == "full" and t2po_eta <= 0
    past, past_rows = None, None
    while not core.done.all():
        live = np.flatnonzero(~core.done)
        keys = core.state_keys()
        states = {b: core.row_state(b) for b in live} if keep_states else {}
        full = [build_context(episodes[b], codec, context, context_k) for b in live]
        ctx, ctx_mask = left_pad(full, codec.PAD, device)                      # (n, L)
        if past is not None:
            keep = torch.as_tensor(np.searchsorted(past_rows, live), device=device)
            new, new_mask = left_pad([episodes[b].turns[-1].obs for b in live], codec.PAD, device)
            out = policy.generate(new, new_mask, codec.max_new, temperature, stop_token=stops, allowed=allowed,
                                  greedy=greedy, generator=generator, past=past.select(keep))
        else:
            out = policy.generate(ctx, ctx_mask, codec.max_new, temperature, stop_token=stops, allowed=allowed,
                                  greedy=greedy, generator=generator)
        if reuse:
            past, past_rows = getattr(out, "past", None), live
        stats["tokens_generated"] += int(out.mask.sum())
        u = (out.entropy * out.mask).sum(1) / out.mask.sum(1).clamp(min=1)     # (n,)
        if t2po_eta > 0:
            prev = torch.tensor([episodes[b].turns[-1].u if episodes[b].turns else float("nan") for b in live],
                                device=device)
            for _ in range(t2po_max_try):
                redo = torch.isfinite(prev) & ((u - prev).abs() > 0) & ((u - prev).abs() < t2po_eta)
                if not bool(redo.any()):
                    break
                again = policy.generate(ctx[redo], ctx_mask[redo], codec.max_new, temperature, stop_token=stops,
                                        allowed=allowed, greedy=greedy, generator=generator)
                stats["tokens_generated"] += int(again.mask.sum())
                stats["turns_resampled"] += int(redo.sum())
                for name in ("tokens", "logp", "entropy", "mask"):
                    getattr(out, name)[redo] = getattr(again, name)
                u[redo] = (again.entropy * again.mask).sum(1) / again.mask.sum(1).clamp(min=1)
        act = codec.parse(core, live, out.tokens, out.mask)
        actions = np.full(core.num_envs, VOID, dtype=np.int64)
        actions[live] = act
        _, r, term, trunc, info = core.step(actions)
        sig = _signal(info, core.num_envs)
        g_tok, g_mask = out.tokens.cpu().numpy(), out.mask.cpu().numpy()
        g_lp, g_ent, u = out.logp.cpu().numpy(), out.entropy.cpu().numpy(), u.cpu().numpy()
        for j, b in enumerate(live):
            ep = episodes[b]
            m = g_mask[j]
            ep.turns.append(Turn(
                context=full[j], gen=g_tok[j][m].tolist(), logp=g_lp[j][m].tolist(),
                entropy=g_ent[j][m].tolist(), obs=[] if core.done[b] else codec.observe(core, b),
                reward=float(r[b]), key=int(keys[b]), void=bool(act[j] == VOID), signal=float(sig[b]), u=float(u[j]),
                state=states.get(b)))
            ep.success |= bool(info["success"][b])
    return stats


def to_rollout(episodes: list, codec, device, *, context: str = "full", constrain: bool = True,
               policy_version: int = 0, stats: Optional[dict] = None) -> Rollout:
    """Flatten episodes into a TurnBatch (tokens: prompt, then gen + obs per turn, right-padded) plus
    the per-turn contexts for matched recompute. Turn records shared between episodes (tree
    prefixes) get one node id."""
    B = len(episodes)
    H = max(1, max(len(ep.turns) for ep in episodes))
    T = max(len(ep.prompt) + sum(len(t.gen) + len(t.obs) for t in ep.turns) for ep in episodes)
    tokens = np.full((B, T), codec.PAD, dtype=np.int64)                        # (B, T)
    turn_id = np.full((B, T), -1, dtype=np.int64)
    pmask = np.zeros((B, T), dtype=bool)
    omask = np.zeros((B, T), dtype=bool)
    old_logp = np.zeros((B, T), dtype=np.float32)
    entropy = np.zeros((B, T), dtype=np.float32)
    reward = np.zeros((B, H), dtype=np.float32)                                # (B, H)
    key = np.zeros((B, H), dtype=np.int64)
    void = np.zeros((B, H), dtype=bool)
    tmask = np.zeros((B, H), dtype=bool)
    signal = np.zeros((B, H), dtype=np.float32)
    node = np.full((B, H), -1, dtype=np.int64)
    node_of: dict[int, int] = {}
    starts = np.zeros((B, H), dtype=np.int64)
    for b, ep in enumerate(episodes):
        s = len(ep.prompt)
        tokens[b, :s] = ep.prompt
        turn_id[b, :s] = 0
        for k, t in enumerate(ep.turns):
            starts[b, k] = s
            g, o = len(t.gen), len(t.obs)
            tokens[b, s:s + g + o] = t.gen + t.obs
            turn_id[b, s:s + g + o] = k
            pmask[b, s:s + g] = True
            omask[b, s + g:s + g + o] = True
            old_logp[b, s:s + g] = t.logp
            entropy[b, s:s + g] = t.entropy
            reward[b, k], key[b, k], void[b, k], tmask[b, k], signal[b, k] = t.reward, t.key, t.void, True, t.signal
            node[b, k] = node_of.setdefault(id(t), len(node_of))
            s += g + o
    contexts = []
    for h in range(H):
        rows = [b for b, ep in enumerate(episodes) if len(ep.turns) > h]
        ctx, cmask = left_pad([episodes[b].turns[h].context for b in rows], codec.PAD, device)
        gens = [episodes[b].turns[h].gen for b in rows]
        M = max(1, max(len(g) for g in gens))
        gen = torch.full((len(rows), M), codec.PAD, dtype=torch.long)           # (n, M)
        gmask = torch.zeros((len(rows), M), dtype=torch.bool)
        for j, g in enumerate(gens):
            gen[j, :len(g)] = torch.tensor(g, dtype=torch.long)
            gmask[j, :len(g)] = True
        pos = torch.as_tensor(starts[rows, h])[:, None] + torch.arange(M)[None]
        contexts.append(TurnContext(torch.as_tensor(rows, device=device), ctx, cmask, gen.to(device),
                                    gmask.to(device), torch.where(gmask, pos, -1).to(device)))
    t = lambda x, dt=None: torch.as_tensor(x, dtype=dt, device=device)
    batch = TurnBatch(
        tokens=t(tokens), policy_mask=t(pmask), turn_id=t(turn_id), old_logp=t(old_logp), turn_mask=t(tmask),
        turn_reward=t(reward), group=t(np.array([ep.group for ep in episodes]), torch.long), state_key=t(key),
        obs_mask=t(omask), entropy=t(entropy), void_turn=t(void), node=t(node), turn_signal=t(signal),
        policy_version=torch.full((B,), policy_version, dtype=torch.long, device=device),
    )
    stats = dict(stats or {})
    stats.update({"policy_tokens": int(pmask.sum()), "env_tokens": int(omask.sum())})
    return Rollout(batch, contexts, codec, context, t(np.array([ep.success for ep in episodes])),
                   np.stack([ep.task for ep in episodes]), episodes,
                   codec.allowed(device) if constrain else None, stats)


def rollout(policy, core: BatchedCore, tasks: np.ndarray, group: np.ndarray, *, codec, temperature: float = 1.0,
            context: str = "full", context_k: int = 2, constrain: bool = True, greedy: bool = False,
            generator: Optional[torch.Generator] = None, policy_version: int = 0, t2po_eta: float = 0.0) -> Rollout:
    """Play one episode per row of ``tasks`` (B, task_dim) with ``policy`` on ``core`` (B copies).

    ``group`` (B,) ids rollouts of one initial state. The returned ``Rollout.batch`` has old_logp /
    entropy at the policy tokens, per-turn rewards, state keys (before each turn), void turns and
    node ids. Generation is batched over the rows still playing; no gradient.
    """
    if context not in CONTEXTS:
        raise ValueError(f"context must be one of {CONTEXTS}, got {context!r}")
    B = core.num_envs
    if len(tasks) != B or len(group) != B:
        raise ValueError(f"tasks and group must have B={B} rows, got {len(tasks)} and {len(group)}")
    core.reset(tasks)
    episodes = [Episode(codec.prompt(core, i), np.asarray(tasks[i]), group=int(group[i])) for i in range(B)]
    stats = play(policy, core, episodes, codec, temperature=temperature, context=context, context_k=context_k,
                 constrain=constrain, greedy=greedy, generator=generator, t2po_eta=t2po_eta)
    return to_rollout(episodes, codec, policy.device, context=context, constrain=constrain,
                      policy_version=policy_version, stats=stats)


def _allowed_at(allowed_V: Optional[torch.Tensor], policy_pos: torch.Tensor) -> Optional[torch.Tensor]:
    """(n, L, V) per-position sampling mask: the policy set where ``policy_pos``, every token elsewhere."""
    if allowed_V is None:
        return None
    return allowed_V[None, None, :] | ~policy_pos[..., None]                   # (n, L, V)


def recompute_logp(policy, ro: Rollout, mode: str = "matched", env_tokens: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs and entropies (B, T) of the batch's tokens under ``policy`` (with gradient).

    ``matched``: each turn's tokens under the exact context the rollout used (one forward per
    turn; for the ``full`` context policy this is the flat sequence, one forward). ``flat``: every
    token under the full flattened history, the trainer-side view that ignores truncation.
    Observation and prompt tokens get their flat log-probs (used only when env-token masking is
    switched off); ``env_tokens=False`` skips that flat pass in matched mode (they are left 0).
    """
    if mode not in ("matched", "flat"):
        raise ValueError(f"mode must be 'matched' or 'flat', got {mode!r}")
    b = ro.batch
    attn = b.turn_id >= 0                                                      # (B, T)
    if mode == "flat" or ro.context == "full" or env_tokens:
        logp, ent = policy.logprobs(b.tokens, attn, allowed=_allowed_at(ro.policy_allowed, b.policy_mask))
        if mode == "flat" or ro.context == "full":
            return logp, ent
    else:
        logp = ent = torch.zeros(b.tokens.shape, device=b.tokens.device)       # (B, T), filled per turn below
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
