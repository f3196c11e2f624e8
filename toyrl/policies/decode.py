"""One step of a decode loop, shared by every policy's ``generate``: draw a token per row, keep it, stop rows.

Dimension legend: B rows, N new tokens (``max_new``), k steps taken so far, V vocabulary size.

A policy's ``generate`` prefills its context, then repeats: logits (B, V) -> ``sample_step`` -> feed the drawn
tokens. ``sample_step`` draws from the distribution the trainer will score the token under (``base.py``'s rule 2:
softmax(logits / temperature) restricted to the step's allowed set) and writes into a ``Decode``:

    logp_v = log softmax(z | allowed)_v,   z = logits / temperature
    tok    = argmax_v p_v / q_v,   q_v ~ Exp(1)          (a draw from p: torch.multinomial's own rule)
    H      = -sum_{v: logp_v > -inf} p_v logp_v

A loop over a small model (the toy transformer) is bound by the number of tensor operations per step, not by
their size, so ``Decode`` can keep a step's (B, V) log-probs and compute every step's logp and entropy in one
go at the end (``flush``); a loop over a large vocabulary (an HF model, V = 49152) writes each column at once.
Either way the numbers are the same, bit for bit (tests/test_decode_fast.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from .base import Generation, _nonempty, allowed_at

__all__ = ["Decode", "sample_step", "stop_table"]


@dataclass
class Decode:
    """The buffers of a decode loop: up to N new tokens for each of B rows, filled one step at a time
    by ``sample_step``. During the loop a column holds what was drawn for every row, live or not;
    ``generation()`` writes ``pad_id`` / 0 where ``mask`` is False, once, at the end."""
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
    """None: each step is written into the tensors' column t at once; a list: step t's (tok (B,), live (B,),
    logp_all (B, V), p (B, V)) is its t-th entry, and ``flush()`` writes them all (logp and entropy included)"""
    u: Optional[Tensor] = None
    """(B, V) float64 scratch for the uniforms of the CPU draw, reused from step to step"""

    @classmethod
    def empty(cls, B: int, N: int, pad_id: int, device, dtype=torch.float32, keep_steps: bool = False) -> "Decode":
        return cls(torch.full((B, N), pad_id, dtype=torch.long, device=device),          # (B, N)
                   torch.zeros(B, N, dtype=dtype, device=device), torch.zeros(B, N, dtype=dtype, device=device),
                   torch.zeros(B, N, dtype=torch.bool, device=device), torch.zeros(B, dtype=torch.bool, device=device),
                   pad_id, [] if keep_steps else None)

    def keep(self, t: int, tok: Tensor, live: Tensor, logp_all: Tensor, p: Tensor) -> None:
        """Step t: the (B,) tokens drawn and which rows were live, from log-probs ``logp_all`` (B, V) and
        p = exp(logp_all) (B, V)."""
        if self.steps is not None:                                            # step t is the list's t-th entry
            self.steps.append((tok, live, logp_all, p))
            return
        lp, ent = _scores(tok[:, None], logp_all[:, None], p[:, None])        # (B, 1) each
        for col, val in zip((self.tokens, self.logp, self.entropy, self.mask), (tok, lp[:, 0], ent[:, 0], live)):
            col.select(1, t).copy_(val)

    def flush(self) -> "Decode":
        """Write the k steps kept in ``steps`` into columns 0..k-1 (one copy per buffer, one scoring pass)."""
        if self.steps:
            tok, live, logp_all, p = (torch.stack(x, 1) for x in zip(*self.steps))   # (B, k), (B, k), (B, k, V) x 2
            lp, ent = _scores(tok, logp_all, p)                                       # (B, k) each
            k = tok.shape[1]
            for buf, val in zip((self.tokens, self.logp, self.entropy, self.mask), (tok, lp, ent, live)):
                buf[:, :k] = val
            self.steps = []
        return self

    def generation(self, past=None) -> Generation:
        """The finished buffers: ``pad_id``, logp 0 and entropy 0 wherever ``mask`` is False."""
        off = ~self.flush().mask                                                      # (B, N)
        self.tokens.masked_fill_(off, self.pad_id)
        self.logp.masked_fill_(off, 0.0)
        self.entropy.masked_fill_(off, 0.0)
        return Generation(tokens=self.tokens, logp=self.logp, entropy=self.entropy, mask=self.mask, past=past)


def _scores(tok: Tensor, logp_all: Tensor, p: Tensor) -> tuple[Tensor, Tensor]:
    """(logp of ``tok`` (B, k), entropy (B, k)) from the steps' log-probs ``logp_all`` and p (B, k, V); a token
    out of the set (logp -inf, p 0) adds nothing to the entropy."""
    lp = logp_all.gather(2, tok[..., None]).squeeze(2)                               # (B, k)
    return lp, -(p * logp_all.masked_fill(torch.isinf(logp_all), 0.0)).sum(-1)


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
    set (``constraint.allowed()`` if given, else ``allowed``), keep it in ``buf``, tell the
    constraint, and mark rows that emitted a stop token done. Returns the (B,) rows that were live.

    On CPU the draw is ``torch.multinomial``'s own single-sample rule written out, so it is the same
    token for the same ``generator``, bit for bit (tests/test_decode_fast.py), at a third of the cost:

        q_v = -log1p(-u_v) = Exp(1) draws,  u ~ U[0, 1) (B, V) float64,   tok = argmax_v p_v / q_v

    (the numbers ``Tensor.exponential_`` makes from the same uniforms), without multinomial's input
    checks (p comes from a log-softmax: finite, >= 0). It is computed as argmin_v p_v / log1p(-u_v), the
    same quotients negated (one operation fewer). Other devices call ``torch.multinomial``. ``stops``: stop
    ids (1-D long), or their (V,) bool ``stop_table``. A constraint with ``blocked()`` (the complement of
    ``allowed()``, never a whole row) saves rebuilding it every step.

    ``warp``: None, or a callable ``(logp_all (B, V), generator) -> logp_all' (B, V)`` applied after
    temperature and masking and before the draw: a rollout engine that samples differently from
    the trainer (``toyrl.rollout.inference_engine``). The token is drawn (or, for ``greedy``, argmax-ed) from
    the warped distribution, and the logp and entropy kept in ``buf`` are the warped ones, i.e.
    what the engine sampled with. It must return normalized log-probs, -inf where a token is out.
    With ``warp=None`` nothing changes."""
    if constraint is not None and hasattr(constraint, "blocked"):
        blocked = constraint.blocked()                                        # (B, V)
    else:
        step_allowed = constraint.allowed() if constraint is not None else allowed_at(allowed, t)
        blocked = None if step_allowed is None else ~_nonempty(step_allowed.to(device=logits.device,
                                                                               dtype=torch.bool))
    z = logits / temperature if temperature != 1.0 else logits
    logp_all = torch.log_softmax(z if blocked is None else z.masked_fill(blocked, float("-inf")), dim=-1)  # (B, V)
    if warp is not None:
        logp_all = warp(logp_all, generator)                                  # (B, V) what the engine samples
    p = logp_all.exp()                                                        # (B, V)
    if greedy:
        tok = logp_all.argmax(-1)                                             # (B,)
    elif p.device.type == "cpu" and p.dtype in (torch.float32, torch.float64):
        if buf.u is None or buf.u.shape != p.shape:
            buf.u = torch.empty(p.shape, dtype=torch.float64)
        u = buf.u.uniform_(generator=generator)                               # (B, V)
        q = torch.log1p(u.neg_(), out=u).to(p.dtype)                          # -q_v: exponential_'s numbers, negated
        tok = torch.div(p, q, out=q).argmin(-1)                               # (B,) argmax_v p_v / q_v
    else:
        tok = torch.multinomial(p, 1, generator=generator).squeeze(1)
    live = ~buf.done                                                          # (B,)
    buf.keep(t, tok, live, logp_all, p)
    if constraint is not None:
        constraint.advance(tok, logp_all, live)
    if stops is not None:                                                     # done | (live & stop) = done | stop
        hit = stops[tok] if stops.dtype == torch.bool else torch.isin(tok, stops)
        buf.done = buf.done | hit
    return live
