"""Rollouts: G episodes per task, played turn by turn by a token policy through a batched env core.

Dimension legend: B rollouts (= P tasks x G), n rows still playing, L context length, M new tokens
per turn, V vocabulary.

A *codec* turns env state into tokens and tokens into actions (``toyrl.codecs.toy.ToyCodec`` for the
toy policy: reasoning tokens, END, one action token; ``toyrl.codecs.text.TextCodec`` for language
models: free text parsed like an LLM agent's reply). A turn that cannot be parsed is a **void
turn**: the env gets ``VOID`` and the event is recorded. The env answers with observation tokens,
interleaved into the history.

One turn of every live row is plain code (``play_turn``):

    contexts -> policy.generate -> codec.parse -> core.step -> append a Turn per row

``play`` repeats it until every copy is done, with three opt-in additions, each its own function:
KV reuse (with the ``full`` context the policy continues from its cache and reads only the new
observation tokens), T2PO turn resampling (``resample_flat_turns``) and, for tree rollouts, each
copy's env state before the turn (``keep_states``).

Context policies decide what the policy reads at turn k:
- ``full``: the prompt and every earlier turn (policy and observation tokens);
- ``last_k``: the prompt and the last ``context_k`` turns only (truncation);
- ``summary``: the last ``context_k`` turns in full, older turns compressed by the codec (the toy
  codec keeps their action token and observation, drops the reasoning);
- ``blind``: the prompt at turn 0 only; later turns read the last ``context_k`` turns (the policy's own
  tokens and the env's answers) after BOS, never the prompt again. What the task showed once (a
  T-maze's cue, a chain's plan) reaches later turns only through what the policy wrote.

``Sampling.scramble_reasoning`` (evaluation only) replaces every reasoning token by a uniformly drawn
one before later turns read it: the success it leaves is what the policy achieves without its
reasoning, so intact minus scrambled measures how much the reasoning carries.
The exact context of every turn is stored, so the trainer can recompute log-probs under the same
context (``matched``) or under the full history (``flat``): see ``toyrl.rollout.flatten``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch

from ..envs.core import VOID, BatchedCore
from .flatten import Rollout, TurnContext, left_pad, to_rollout
from ..codecs.toy import ThinkingIntervention, ToyCodec

__all__ = ["Turn", "Episode", "Sampling", "rollout", "play", "play_turn", "CONTEXTS", "build_context",
           "episode_token_bound", "turn_grammar", "scramble_reasoning"]

CONTEXTS = ("full", "last_k", "summary", "blind")


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
    """a checkable intermediate signal (MockSearch: the result holds the answer; BanditChain: the pull was right, or
    with lures found something)"""
    u: float = 0.0
    """the turn's uncertainty (mean entropy of its tokens), T2PO's resampling signal"""
    state: Optional[dict] = None
    """the env state of this copy before the turn (``core.row_state``), kept for tree branching"""
    states: list = field(default_factory=list)
    """the grammar state each token of ``gen`` was sampled in (-1: no grammar)"""
    forced: list = field(default_factory=list)
    """per token of ``gen``: written by the grammar or the thinking intervention, not chosen"""


@dataclass
class Episode:
    prompt: list
    task: np.ndarray
    turns: list = field(default_factory=list)
    success: bool = False
    group: int = 0


@dataclass
class Sampling:
    """How policy turns are sampled: the rollout side of ``TrainConfig``."""

    temperature: float = 1.0
    """softmax temperature (the trainer scores tokens at the same temperature)"""
    greedy: bool = False
    """take the argmax instead of sampling"""
    constrain: bool = True
    """sample through the codec's turn grammar (False: the whole vocabulary, observation tokens included)"""
    context: str = "full"
    """what the policy reads: full | last_k | summary | blind"""
    context_k: int = 2
    """turns kept in full by last_k, summary and blind"""
    scramble_reasoning: bool = False
    """evaluation only: later turns read uniformly random reasoning tokens in place of the written ones
    (the stored turns hold the scrambled tokens; their log-probs are those of the written ones)"""
    tti: Optional[ThinkingIntervention] = None
    """T2PO's token-level thinking intervention (None: off)"""
    t2po_eta: float = 0.0
    """T2PO turn resampling: regenerate a turn whose uncertainty moved by less than this (0: off)"""
    t2po_max_try: int = 2
    """most regenerations of one turn"""
    generator: Optional[torch.Generator] = field(default=None, repr=False)
    """the torch generator sampling draws from"""

    def __post_init__(self):
        if self.context not in CONTEXTS:
            raise ValueError(f"context must be one of {CONTEXTS}, got {self.context!r}")
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0 (use greedy=True for argmax), got {self.temperature}")


@dataclass
class Draft:
    """One generated turn of the n live rows, before the env sees it."""

    contexts: list
    tokens: torch.Tensor
    """(n, M) long"""
    mask: torch.Tensor
    """(n, M) bool: real written tokens"""
    logp: torch.Tensor
    entropy: torch.Tensor
    states: torch.Tensor
    """(n, M) long: grammar state of each token (-1: none)"""
    forced: torch.Tensor
    """(n, M) bool: written by the grammar or the intervention (a single allowed token), not chosen"""
    cut: torch.Tensor
    """(n,) bool: the thinking intervention ended this turn's reasoning"""
    past: Optional[object] = None

    @property
    def u(self) -> torch.Tensor:
        """(n,) the turn's uncertainty: mean entropy over its sampled tokens."""
        m = self.mask & ~self.forced
        return (self.entropy * m).sum(1) / m.sum(1).clamp(min=1)


def build_context(ep: Episode, codec, context: str = "full", k: int = 2) -> list[int]:
    """The tokens the policy reads before its next turn, under a context policy."""
    if context not in CONTEXTS:
        raise ValueError(f"context must be one of {CONTEXTS}, got {context!r}")
    keep_from = 0 if context == "full" else max(0, len(ep.turns) - k)
    if context == "blind" and ep.turns:                 # BOS (if the codec opens prompts with it), no prompt
        out = list(ep.prompt[:1]) if ep.prompt and ep.prompt[0] == getattr(codec, "BOS", None) else []
    else:
        out = list(ep.prompt)
    for j, t in enumerate(ep.turns):
        if j >= keep_from:
            out += t.gen + t.obs
        elif context == "summary":
            out += codec.summarize(t.gen) + t.obs
    return out


def episode_token_bound(core: BatchedCore, codec, turns: Optional[int] = None, probe_turns: int = 4) -> int:
    """A bound on the tokens of one episode (prompt, then ``turns`` (default ``core.max_turns``) x
    (longest turn + observation)): what a policy's context must hold. Prompt and observation lengths
    are probed on a copy of ``core`` (random tasks and actions), with a 1.5x margin on observations."""
    import copy
    probe, rng = copy.deepcopy(core), np.random.default_rng(0)
    probe.reset(probe.sample_tasks(rng, probe.num_envs))
    prompt = max(len(codec.prompt(probe, i)) for i in range(probe.num_envs))
    obs = max(len(codec.observe(probe, i)) for i in range(probe.num_envs))    # so the bound holds for one copy too
    for _ in range(probe_turns):
        probe.step(rng.integers(0, core.n_actions, probe.num_envs))
        obs = max([obs] + [len(codec.observe(probe, i)) for i in np.flatnonzero(~probe.done)])
        if probe.done.all():
            break
    turns = int(core.max_turns) if turns is None else int(turns)
    return prompt + turns * (codec.max_new + int(np.ceil(1.5 * obs)))


def turn_grammar(codec, s: Sampling, device):
    """The codec's turn grammar for sampling ``s`` (None for a codec without one); build it once per rollout."""
    make = getattr(codec, "grammar", None)
    return make(s.constrain, s.tti, device) if make is not None else None


def generate_turn(policy, episodes: list, codec, live: np.ndarray, s: Sampling, grammar=None,
                  past=None) -> Draft:
    """Generate one turn for the ``live`` rows. With ``past`` (the previous turn's cache, rows in the
    same order) only each row's newest observation is fed; the stored contexts are the same."""
    dev = policy.device
    full = [build_context(episodes[b], codec, s.context, s.context_k) for b in live]
    run = grammar.start(len(live)) if grammar is not None else None
    if past is not None:
        ctx, ctx_mask = left_pad([episodes[b].turns[-1].obs for b in live], codec.PAD, dev)    # (n, L)
    else:
        ctx, ctx_mask = left_pad(full, codec.PAD, dev)                                          # (n, L)
    kw = {"past": past} if past is not None else {}
    if run is not None:
        kw["constraint"] = run
    out = policy.generate(ctx, ctx_mask, codec.max_new, s.temperature, stop_token=codec.stop_tokens(dev),
                          greedy=s.greedy, generator=s.generator, **kw)
    M = out.tokens.shape[1]
    if run is not None:
        (states, forced), cut = run.record(M), run.cut
    else:
        states, forced, cut = torch.full_like(out.tokens, -1), torch.zeros_like(out.mask), torch.zeros_like(out.mask[:, 0])
    return Draft(full, out.tokens, out.mask, out.logp, out.entropy, states, forced & out.mask, cut,
                 getattr(out, "past", None))


def resample_flat_turns(policy, episodes: list, codec, live: np.ndarray, s: Sampling, grammar,
                        draft: Draft) -> tuple[int, int]:
    """T2PO turn-level dynamic sampling: regenerate (at most ``t2po_max_try`` times) the rows whose
    turn uncertainty moved by less than eta (but moved) from their previous turn, in place.
    Returns (turns regenerated, tokens of the discarded attempts)."""
    prev = torch.tensor([episodes[b].turns[-1].u if episodes[b].turns else float("nan") for b in live],
                        device=draft.u.device)
    n_redo = n_wasted = 0
    for _ in range(s.t2po_max_try):
        du = (draft.u - prev).abs()
        redo = torch.isfinite(prev) & (du > 0) & (du < s.t2po_eta)
        if not bool(redo.any()):
            break
        again = generate_turn(policy, episodes, codec, live[redo.cpu().numpy()], s, grammar)
        n_wasted += int(draft.mask[redo].sum())
        for name in ("tokens", "mask", "logp", "entropy", "states", "forced", "cut"):   # n rows each
            getattr(draft, name)[redo] = getattr(again, name)
        n_redo += int(redo.sum())
    return n_redo, n_wasted


def scramble_reasoning(tokens: torch.Tensor, mask: torch.Tensor, codec, generator=None) -> torch.Tensor:
    """``tokens`` (n, M) with every written reasoning token replaced by one drawn uniformly from the codec's
    ``n_think`` reasoning tokens; END, actions and padding untouched, so each turn parses to the same action.
    Example (think0 5, n_think 4): [5, 5, END, a] -> [r, r', END, a] with r, r' uniform in 5..8."""
    if not hasattr(codec, "reasoning_mask") or not hasattr(codec, "n_think"):
        raise ValueError(f"scramble_reasoning needs a codec with reasoning tokens, got {type(codec).__name__}")
    where = codec.reasoning_mask(tokens) & mask                                   # (n, M)
    draw = torch.randint(0, codec.n_think, tokens.shape, generator=generator, device=tokens.device)
    return torch.where(where, codec.think0 + draw, tokens)


def _signal(info: dict, n: int) -> np.ndarray:
    for key in ("contains_answer", "found", "right"):            # BanditChain with lures: found = right or lure
        if key in info:
            return info[key].astype(np.float64)
    return np.zeros(n)


def play_turn(core: BatchedCore, episodes: list, codec, live: np.ndarray, draft: Draft,
              keep_states: bool = False) -> None:
    """Parse the drafted turn, step the env, and append one ``Turn`` to each live episode."""
    keys = core.state_keys()
    states = {b: core.row_state(b) for b in live} if keep_states else {}
    act = codec.parse(core, live, draft.tokens, draft.mask)
    actions = np.full(core.num_envs, VOID, dtype=np.int64)
    actions[live] = act
    _, r, _, _, info = core.step(actions)
    sig = _signal(info, core.num_envs)
    n = draft.mask.sum(1)                                                   # (n,) written tokens per row
    prefix = bool((draft.mask == (torch.arange(draft.mask.shape[1], device=n.device) < n[:, None])).all())
    cols = [x.tolist() for x in (draft.tokens, draft.logp, draft.entropy, draft.states, draft.forced)]
    if not prefix:                                                          # a mask with holes: keep its True entries
        keep = draft.mask.tolist()
        cols = [[[x for x, k in zip(row, mk) if k] for row, mk in zip(c, keep)] for c in cols]
    n, u = n.tolist(), draft.u.tolist()
    for j, b in enumerate(live):                                            # a mask is a prefix: slice each row
        tok, lp, ent, st, fo = (c[j][:n[j]] for c in cols)
        episodes[b].turns.append(Turn(
            context=draft.contexts[j], gen=tok, logp=lp, entropy=ent,
            obs=[] if core.done[b] else codec.observe(core, b), reward=float(r[b]), key=int(keys[b]),
            void=bool(act[j] == VOID), signal=float(sig[b]), u=u[j], state=states.get(b),
            states=st, forced=fo))
        episodes[b].success |= bool(info["success"][b])


@torch.no_grad()
def play(policy, core: BatchedCore, episodes: list, codec, sampling: Optional[Sampling] = None, *,
         keep_states: bool = False, grammar=None, **sampling_kw) -> dict:
    """Play every copy of ``core`` (row i continues ``episodes[i]``) until all are done, appending Turns.

    Works from a fresh reset or from a forked mid-episode state. ``sampling`` (or its fields as
    keywords) says how turns are sampled; ``keep_states`` stores each copy's env state before every
    turn in ``Turn.state`` (for tree branching); ``grammar`` is ``turn_grammar(codec, sampling)``,
    built here when not given. Returns token counts.
    """
    s = sampling if sampling is not None else Sampling(**sampling_kw)
    grammar = turn_grammar(codec, s, policy.device) if grammar is None else grammar
    stats = {"tokens_generated": 0, "turns_resampled": 0, "turns_cut": 0, "turns": 0}
    reuse = s.context == "full" and s.t2po_eta <= 0 and not s.scramble_reasoning   # KV reuse: the cache holds it all
    past = past_rows = None
    while not core.done.all():
        live = np.flatnonzero(~core.done)
        keep = None if past is None else torch.as_tensor(np.searchsorted(past_rows, live), device=policy.device)
        draft = generate_turn(policy, episodes, codec, live, s, grammar, None if past is None else past.select(keep))
        if s.t2po_eta > 0:
            n_redo, n_wasted = resample_flat_turns(policy, episodes, codec, live, s, grammar, draft)
            stats["turns_resampled"] += n_redo
            stats["tokens_generated"] += n_wasted
        if reuse and draft.past is not None:
            past, past_rows = draft.past, live
        stats["tokens_generated"] += int(draft.mask.sum())
        stats["turns_cut"] += int(draft.cut.sum())
        stats["turns"] += len(live)
        if s.scramble_reasoning:
            draft.tokens = scramble_reasoning(draft.tokens, draft.mask, codec, s.generator)
        play_turn(core, episodes, codec, live, draft, keep_states)
    return stats


def rollout(policy, core: BatchedCore, tasks: np.ndarray, group: np.ndarray, *, codec,
            sampling: Optional[Sampling] = None, policy_version: int = 0, **sampling_kw) -> Rollout:
    """Play one episode per row of ``tasks`` (B, task_dim) with ``policy`` on ``core`` (B copies).

    ``group`` (B,) ids rollouts of one initial state. ``sampling`` (or its fields as keywords:
    ``temperature``, ``context``, ``constrain``, ``generator``, ...) says how turns are sampled. The
    returned ``Rollout.batch`` has old_logp / entropy at the policy tokens, per-turn rewards, state
    keys (before each turn), void turns and node ids. Batched over the rows still playing; no gradient.
    """
    s = sampling if sampling is not None else Sampling(**sampling_kw)
    B = core.num_envs
    if len(tasks) != B or len(group) != B:
        raise ValueError(f"tasks and group must have B={B} rows, got {len(tasks)} and {len(group)}")
    core.reset(tasks)
    episodes = [Episode(codec.prompt(core, i), np.asarray(tasks[i]), group=int(group[i])) for i in range(B)]
    grammar = turn_grammar(codec, s, policy.device)
    stats = play(policy, core, episodes, codec, s, grammar=grammar)
    return to_rollout(episodes, codec, policy.device, context=s.context, grammar=grammar,
                      temperature=s.temperature, policy_version=policy_version, stats=stats)
