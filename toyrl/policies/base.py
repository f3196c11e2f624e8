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
           "allowed_at", "score_tokens", "LOGIT_BUDGET"]


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


def _nonempty(allowed: Tensor) -> Tensor:
    """``allowed`` with every all-False row made all-True (a position allowing nothing is unrestricted)."""
    return allowed | ~allowed.any(-1, keepdim=True)


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
