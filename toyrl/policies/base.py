"""TokenPolicy: the contract between rollout / trainer code and a policy over integer token ids.

Dimension legend: B rows, L context positions, N new tokens (``max_new``), T sequence positions,
V vocabulary size, d hidden size.

A policy sees only integer ids: ids in, ids out. The rollout code maps observations to tokens,
calls ``generate`` each turn, and later ``logprobs`` on the whole trajectory to recompute the
log-probs the loss needs. Three rules make the two agree to float precision:

1. **Padding never shifts anything.** A (B, T) bool mask says which positions are real. Padding
   (left, right or in the middle) is excluded from attention, and positions are counted from the
   mask (``positions_from_mask``), so a row means the same with or without extra padding.
2. **A token is scored by the distribution it was drawn from**: the logits at the previous *real*
   position (``prev_valid_index``), divided by ``temperature``, with disallowed tokens set to -inf
   and the rest renormalized (``masked_log_softmax``). ``logprobs`` is 0 at padding and at each
   row's first real token (it has no prefix).
3. **The ``allowed`` mask travels with the tokens.** Sampling under a mask and recomputing under the
   same mask gives the same ``logp`` and ``entropy``: both are of the renormalized masked
   distribution, not of the raw model distribution.

Implementations are ``torch.nn.Module`` s (the trainer optimizes ``parameters()``): the toy
transformer in ``toy.py``; a Hugging Face adapter follows the same protocol.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional, Protocol, Sequence, Tuple, Union, runtime_checkable

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

__all__ = ["Generation", "TokenPolicy", "positions_from_mask", "prev_valid_index", "masked_log_softmax",
           "allowed_at", "Decode", "sample_step", "stop_table", "score_tokens", "LOGIT_BUDGET"]


@dataclass
class Generation:
    """What ``TokenPolicy.generate`` returns: N new tokens per row, right-padded after a stop."""
    tokens: Tensor
    """(B, N) long: generated ids; ``pad_id`` where ``mask`` is False."""
    logp: Tensor
    """(B, N) float: log-prob of each token under the tempered, ``allowed``-masked distribution; 0 where masked."""
    entropy: Tensor
    """(B, N) float: entropy of the distribution each token was drawn from; 0 where masked."""
    mask: Tensor
    """(B, N) bool: True for real generated tokens, the stop token included."""
    past: Optional[Any] = field(default=None, repr=False)
    """opaque state (e.g. a KV cache) to continue from: pass it as ``generate(new_ctx, ..., past=past)``
    with only the tokens that came after these; None if the policy does not support it."""

    @property
    def lengths(self) -> Tensor:
        """(B,) long: number of real generated tokens per row."""
        return self.mask.sum(1)


@runtime_checkable
class TokenPolicy(Protocol):
    """A policy over integer token ids (see the module docstring for the padding and masking rules)."""

    vocab_size: int
    """number of token ids, V"""
    pad_id: int
    """id emitted after a row stopped, and substituted for padding before embedding"""

    @property
    def device(self) -> torch.device:
        """device of the parameters; inputs must live there"""
        ...

    def generate(self, context: Tensor, context_mask: Tensor, max_new: int, temperature: float = 1.0, *,
                 stop_token: Union[None, int, Sequence[int], Tensor] = None, allowed: Optional[Tensor] = None, greedy: bool = False,
                 generator: Optional[torch.Generator] = None, past: Optional[Any] = None,
                 constraint: Optional[Any] = None) -> Generation:
        """Sample up to ``max_new`` tokens after ``context`` (B, L) (usually left-padded; ``context_mask``
        False at padding, any pattern works; every row needs at least one real token). ``allowed``:
        (V,), (B, V) or (B, N, V) bool, tokens that may be sampled (per step for the 3-d form). A row
        stops after emitting ``stop_token`` (an id, or any of a sequence / 1-D tensor of ids); later slots are ``pad_id`` with mask False. Sampling uses
        ``torch.multinomial(..., generator=generator)`` (a generator on the policy's device);
        ``greedy`` takes the argmax instead. ``temperature`` > 0 divides the logits. No grad.
        ``past``: a previous call's ``Generation.past``; then ``context`` holds only the new tokens
        that follow that call's generated tokens, and the result equals a call on the whole prefix.
        ``constraint``: an object with ``allowed() -> (B, V) bool`` (asked before each step, used
        instead of ``allowed``; or its complement ``blocked()`` where it has one) and
        ``advance(tok, logp_all, live)`` (told each step's tokens, a stopped row's draws too), for
        sampling sets that depend on what a row wrote so far (``toyrl.codecs.toy.GrammarRun``)."""
        ...

    def logprobs(self, tokens: Tensor, attn_mask: Tensor, *, allowed: Optional[Tensor] = None,
                 temperature: float = 1.0, score: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
        """Teacher-forced (logp (B, T), entropy (B, T)) of each token given its prefix; 0 at padding and
        at each row's first real token. ``allowed``: (V,), (B, V) or (B, T, V) bool, the mask of the
        distribution token ``t`` was drawn from. ``score``: (B, T) bool, the tokens wanted (others 0; None:
        all). Differentiable."""
        ...

    def hidden(self, tokens: Tensor, attn_mask: Tensor) -> Tensor:
        """(B, T, d) final hidden states, for critics / value heads that live outside the policy."""
        ...

    def parameters(self, recurse: bool = True) -> Iterator[torch.nn.Parameter]:
        ...


@dataclass
class Decode:
    """The buffers of a decode loop: up to N new tokens for each of B rows, filled one step at a time
    by ``sample_step`` (shared by every policy's ``generate``). During the loop a column holds what was
    drawn for every row, live or not; ``generation()`` writes ``pad_id`` / 0 where ``mask`` is False,
    once, at the end."""
    tokens: Tensor
    """(B, N) long; ``pad_id`` after a row stopped (once ``generation()`` ran)"""
    logp: Tensor
    """(B, N) float"""
    entropy: Tensor
    """(B, N) float"""
    mask: Tensor
    """(B, N) bool: real generated tokens"""
    done: Tensor
    """(B,) bool: the row has emitted a stop token"""
    pad_id: int = 0
    """id written where ``mask`` is False"""
    steps: Optional[list] = None
    """None: ``sample_step`` writes each step into the tensors' column t; a list: it appends the step's
    (tokens, logp, entropy, live) (B,) each there instead, and ``flush()`` writes them all at once"""

    @classmethod
    def empty(cls, B: int, N: int, pad_id: int, device, dtype=torch.float32, keep_steps: bool = False) -> "Decode":
        return cls(torch.full((B, N), pad_id, dtype=torch.long, device=device),          # (B, N)
                   torch.zeros(B, N, dtype=dtype, device=device), torch.zeros(B, N, dtype=dtype, device=device),
                   torch.zeros(B, N, dtype=torch.bool, device=device), torch.zeros(B, dtype=torch.bool, device=device),
                   pad_id, [] if keep_steps else None)

    def flush(self) -> "Decode":
        """Write the steps kept in ``steps`` into columns 0.. of the tensors (one copy per buffer)."""
        if self.steps:
            for buf, cols in zip((self.tokens, self.logp, self.entropy, self.mask), zip(*self.steps)):
                buf[:, :len(cols)] = torch.stack(cols, 1)                     # (B, k)
            self.steps = []
        return self

    def generation(self, past=None) -> Generation:
        """The finished buffers: ``pad_id``, logp 0 and entropy 0 wherever ``mask`` is False."""
        off = ~self.flush().mask                                                      # (B, N)
        self.tokens.masked_fill_(off, self.pad_id)
        self.logp.masked_fill_(off, 0.0)
        self.entropy.masked_fill_(off, 0.0)
        return Generation(tokens=self.tokens, logp=self.logp, entropy=self.entropy, mask=self.mask, past=past)


def stop_table(stops: Tensor, V: int) -> Tensor:
    """(V,) bool: True at the stop ids (ids outside [0, V) can never be drawn and are dropped), so a
    decode step tests its tokens with one lookup instead of ``torch.isin``. Example: [2, 7], V 4 ->
    [F, F, T, F]."""
    table = torch.zeros(V, dtype=torch.bool, device=stops.device)
    table[stops[(stops >= 0) & (stops < V)]] = True
    return table


def sample_step(buf: Decode, t: int, logits: Tensor, temperature: float, pad_id: int, *, allowed=None,
                constraint=None, greedy: bool = False, generator=None, stops: Optional[Tensor] = None,
                warp=None) -> Tensor:
    """Draw token t of every row from softmax(logits / temperature) restricted to the step's allowed
    set (``constraint.allowed()`` if given, else ``allowed``), write it into ``buf``, tell the
    constraint, and mark rows that emitted a stop token done. Returns the (B,) rows that were live.

    On CPU the draw is ``torch.multinomial``'s own single-sample rule written out, so it is the same
    token for the same ``generator``, bit for bit (tests/test_decode_fast.py), at a third of the cost:

        q_v = -log1p(-u_v) = Exp(1) draws,  u ~ U[0, 1) (B, V) float64,   tok = argmax_v p_v / q_v

    (the numbers ``Tensor.exponential_`` makes from the same uniforms), without multinomial's input
    checks (p comes from a log-softmax: finite, >= 0); other devices call ``torch.multinomial``. ``stops``: stop ids (1-D
    long), or their (V,) bool ``stop_table``. A constraint with ``blocked()`` (the complement of
    ``allowed()``, never a whole row) saves rebuilding it every step.

    ``warp``: None, or a callable ``(logp_all (B, V), generator) -> logp_all' (B, V)`` applied after
    temperature and masking and before the draw: a rollout engine that samples differently from
    the trainer (``toyrl.rollout.engines``). The token is drawn (or, for ``greedy``, argmax-ed) from
    the warped distribution, and the logp and entropy written into ``buf`` are the warped ones, i.e.
    what the engine sampled with. It must return normalized log-probs, -inf where a token is out.
    With ``warp=None`` nothing changes."""
    if constraint is not None and hasattr(constraint, "blocked"):
        logp_all, p, ent = _step_dist(logits, constraint.blocked(), temperature)        # (B, V), (B, V), (B,)
    else:
        step_allowed = constraint.allowed() if constraint is not None else allowed_at(allowed, t)
        blocked = None if step_allowed is None else ~_nonempty(step_allowed.to(device=logits.device,
                                                                               dtype=torch.bool))
        logp_all, p, ent = _step_dist(logits, blocked, temperature)
    if warp is not None:
        logp_all = warp(logp_all, generator)                                  # (B, V) what the engine samples
        p = logp_all.exp()
        ent = -(p * logp_all.masked_fill(torch.isinf(logp_all), 0.0)).sum(-1)   # (B,)
    if greedy:
        tok = logp_all.argmax(-1)                                             # (B,)
    elif p.device.type == "cpu" and p.dtype in (torch.float32, torch.float64):
        u = torch.empty(p.shape, dtype=torch.float64).uniform_(generator=generator)     # (B, V)
        q = torch.log1p(u.neg_()).neg_().to(p.dtype)                          # exponential_'s own numbers
        tok = torch.div(p, q, out=q).argmax(-1)                               # (B,)
    else:
        tok = torch.multinomial(p, 1, generator=generator).squeeze(1)
    live, lp = ~buf.done, logp_all.gather(1, tok.unsqueeze(1)).squeeze(1)    # (B,), (B,)
    if buf.steps is not None:                                                 # step t is the list's t-th entry
        buf.steps.append((tok, lp, ent, live))
    else:
        for col, val in zip((buf.tokens, buf.logp, buf.entropy, buf.mask), (tok, lp, ent, live)):
            col.select(1, t).copy_(val)
    if constraint is not None:
        constraint.advance(tok, logp_all, live)
    if stops is not None:                                                     # done | (live & stop) = done | stop
        hit = stops[tok] if stops.dtype == torch.bool else torch.isin(tok, stops)
        buf.done = buf.done | hit
    return live


def _nonempty(allowed: Tensor) -> Tensor:
    """``allowed`` with every all-False row made all-True (a position allowing nothing is unrestricted)."""
    return allowed | ~allowed.any(-1, keepdim=True)


def _step_dist(logits: Tensor, blocked: Optional[Tensor], temperature: float) -> Tuple[Tensor, Tensor, Tensor]:
    """(logp (B, V), p = exp(logp), entropy (B,)) of one decode step: ``masked_log_softmax``'s numbers,
    bit for bit, from the disallowed set ``blocked`` (B, V) or (V,), with the exp computed once."""
    z = logits / temperature if temperature != 1.0 else logits
    if blocked is None:
        logp = torch.log_softmax(z, dim=-1)
        p = logp.exp()
        return logp, p, -(p * logp).sum(-1)
    logp = torch.log_softmax(z.masked_fill(blocked, float("-inf")), dim=-1)
    p = logp.exp()
    return logp, p, -(p * logp.masked_fill(blocked, 0.0)).sum(-1)


def positions_from_mask(mask: Tensor) -> Tensor:
    """Position of each token among its row's real tokens, (B, T) long; padding gets the previous
    real position (0 before the first), a harmless value since padding is never attended to.

    Example: mask [[F, F, T, T, T]] -> [[0, 0, 0, 1, 2]].
    """
    return (mask.long().cumsum(1) - 1).clamp(min=0)        # (B, T)


def prev_valid_index(mask: Tensor) -> Tensor:
    """Index of the previous real position of each position, -1 if there is none, (B, T) long.

    Example: mask [[F, T, F, T, T]] -> [[-1, -1, 1, 1, 3]].
    """
    B, T = mask.shape
    idx = torch.arange(T, device=mask.device).expand(B, T)                   # (B, T)
    last = torch.where(mask, idx, torch.full_like(idx, -1)).cummax(1).values  # last real index <= t
    return torch.cat([last.new_full((B, 1), -1), last[:, :-1]], 1)            # (B, T)


def allowed_at(allowed: Optional[Tensor], step: int) -> Optional[Tensor]:
    """The (V,) or (B, V) mask of step ``step`` from a (V,), (B, V) or (B, N, V) ``allowed`` mask."""
    if allowed is None or allowed.dim() < 3:
        return allowed
    return allowed[:, step]


def masked_log_softmax(logits: Tensor, allowed: Optional[Tensor] = None,
                       temperature: float = 1.0) -> Tuple[Tensor, Tensor]:
    """Log-probs (..., V) and entropy (...) of softmax(logits / temperature) restricted to ``allowed``.

        logp_v = z_v - logsumexp_{u allowed} z_u  (v allowed),  -inf otherwise,   z = logits / temperature
        H = -sum_{v allowed} p_v logp_v

    ``allowed`` broadcasts against ``logits`` (e.g. (V,) against (B, T, V)); a (B, V) mask against
    (B, T, V) logits is taken per row. A position that allows no token at all is treated as
    unrestricted (so padding positions may carry an all-False mask). Gradients are finite.

    Example: logits [0, 0, 0], allowed [T, T, F] -> logp [-0.693, -0.693, -inf], H = 0.693.
    """
    z = logits / temperature if temperature != 1.0 else logits
    if allowed is None:
        logp = torch.log_softmax(z, dim=-1)
        return logp, -(logp.exp() * logp).sum(-1)
    allowed = allowed.to(device=z.device, dtype=torch.bool)
    if allowed.dim() == 2 and z.dim() == 3:
        allowed = allowed[:, None, :]                                       # (B, 1, V)
    allowed = _nonempty(allowed)                                            # empty mask = no restriction
    logp = torch.log_softmax(z.masked_fill(~allowed, float("-inf")), dim=-1)
    ent = -(logp.exp() * logp.masked_fill(~allowed, 0.0)).sum(-1)           # 0 * -inf would be NaN
    return logp, ent


LOGIT_BUDGET = 1 << 22
"""most logits (rows x V) one chunk of ``score_tokens`` holds at once: 16 MB in fp32 (SmolLM2, V = 49152: 85 rows)"""


def score_tokens(hidden: Tensor, head: Callable[[Tensor], Tensor], tokens: Tensor, attn_mask: Tensor, *,
                 allowed: Optional[Tensor] = None, temperature: float = 1.0,
                 chunk: Optional[int] = None, score: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """Teacher-forced log-prob and entropy (B, T) of each token, from the final hidden states (B, T, d) and
    the LM head, without the (B, T, V) logits: the shared ``TokenPolicy.logprobs`` of every policy.

        logp[b, t] = log softmax(head(hidden[b, prev(t)]) / temperature | allowed[b, t])[tokens[b, t]]
        H[b, t]    = -sum_v p_v log p_v   of that same distribution

    prev(t) is the previous real position (``prev_valid_index``): the hidden states are shifted, not the
    logits. Only the N scored tokens (real, with a real prefix) are computed, ``chunk`` rows at a time
    (default: ``LOGIT_BUDGET // V``); each chunk's head, fp32 log-softmax and entropy run under
    ``torch.utils.checkpoint``, so backward recomputes them chunk by chunk instead of keeping N x V
    tensors. 0 at padding and at each row's first real token. ``allowed``: (V,), (B, V) or (B, T, V) bool
    (``masked_log_softmax``'s rules). ``score``: (B, T) bool, the tokens wanted (None: every real token); the
    others are 0 and cost no head row: a loss on the reply alone skips the prompt's (N x V) head work. ``head``: (n, d) -> (n, V) logits (the policy's LM head, plus any
    logit scaling the model applies).

    Example: one row, mask [F, T, T], a head giving uniform logits over V = 4 -> logp [0, 0, -1.386],
    H [0, 0, 1.386] (the first real token has no prefix).
    """
    if hidden.dim() != 3 or hidden.shape[:2] != tokens.shape or attn_mask.shape != tokens.shape:
        raise ValueError(f"hidden (B, T, d) {tuple(hidden.shape)}, tokens {tuple(tokens.shape)} and attn_mask "
                         f"{tuple(attn_mask.shape)} must share (B, T)")
    if chunk is not None and chunk < 1:
        raise ValueError(f"chunk must be >= 1 tokens, got {chunk}")
    if score is not None and score.shape != tokens.shape:
        raise ValueError(f"score must be a (B, T) mask like tokens {tuple(tokens.shape)}, got {tuple(score.shape)}")
    attn_mask = attn_mask.bool()
    prev = prev_valid_index(attn_mask)                                          # (B, T)
    want = attn_mask & (prev >= 0) if score is None else attn_mask & (prev >= 0) & score.bool()
    rows, cols = want.nonzero(as_tuple=True)                                    # (N,) the scored tokens
    h = hidden[rows, prev[rows, cols]]                                          # (N, d) at each token's prefix end
    ids = tokens[rows, cols]                                                    # (N,)
    if allowed is not None:
        allowed = allowed.to(device=hidden.device, dtype=torch.bool)
        allowed = allowed[rows, cols] if allowed.dim() == 3 else allowed[rows] if allowed.dim() == 2 else allowed
    if chunk is None:
        with torch.no_grad():
            V = int(head(h[:1]).shape[-1]) if len(h) else 1                     # the head's width, from one row
        chunk = max(1, LOGIT_BUDGET // V)
    grad = torch.is_grad_enabled()
    parts = []
    for i in range(0, max(len(h), 1), chunk):                                   # one empty chunk when N = 0
        a = allowed if allowed is None or allowed.dim() == 1 else allowed[i:i + chunk]
        args = (h[i:i + chunk], ids[i:i + chunk], a)
        fn = lambda h_, ids_, a_: _chunk_scores(h_, ids_, a_, head, temperature)        # noqa: E731
        parts.append(checkpoint(fn, *args, use_reentrant=False) if grad else fn(*args))
    out = []
    for j in range(2):
        vals = torch.cat([p[j] for p in parts])                                 # (N,)
        out.append(vals.new_zeros(tokens.shape).index_put((rows, cols), vals))  # (B, T)
    return out[0], out[1]


def _chunk_scores(h: Tensor, ids: Tensor, allowed: Optional[Tensor], head, temperature: float):
    """(logp (n,), entropy (n,)) of tokens ``ids`` under head(h) (n, d) -> (n, V), softmax in fp32."""
    logp_all, ent = masked_log_softmax(head(h).float(), allowed, temperature)  # (n, V), (n,)
    return logp_all.gather(1, ids[:, None]).squeeze(1), ent
