"""A tiny decoder-only transformer over a small integer vocabulary: the default toyrl policy.

Dimension legend: B rows, T (or L) positions, N new tokens, C = d_model channels, nh heads,
hs = C / nh head size, V vocabulary size, S = L + N cache slots.

nanoGPT's model (pre-LN blocks, GELU MLP, weight-tied head, learned position embeddings) with two
changes for padded multi-turn rollouts (see ``base.py`` for the contract):

- positions come from the padding mask, not from the column index, so left padding shifts nothing;
- attention takes an explicit boolean mask ``causal & key_is_real``, plus the diagonal so a padding
  query that has no real key before it (left padding) attends to itself instead of producing NaN.

``generate`` prefills the context once into a preallocated KV cache and then feeds one token at a
time through ``_direct``: the full pass's kernels called directly (no module calls, an additive float
mask built once per call), so its numbers are the full pass's bit for bit. Sized for 2 CPU cores: the
"small" preset (2 layers, d 48) rolls out 64 episodes x 5 turns x 4 tokens and recomputes +
backpropagates them in a few tens of milliseconds.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from .base import Generation, positions_from_mask, score_tokens
from .decode import Decode, sample_step, stop_table
from .toy_cache import KVCache, ToyPast

__all__ = ["ToyTransformerConfig", "ToyTransformer", "ToyPast", "PRESETS"]


@dataclass
class ToyTransformerConfig:
    vocab_size: int
    """number of token ids, V"""
    d_model: int = 48
    """width of the residual stream, C"""
    n_layer: int = 2
    """number of transformer blocks"""
    n_head: int = 2
    """attention heads per block (must divide d_model)"""
    max_len: int = 192
    """most real (non-padding) tokens in one row: size of the position embedding table"""
    dropout: float = 0.0
    """dropout on embeddings, attention and residual branches (only in train mode)"""
    pad_id: int = 0
    """id emitted after a row stopped and put in place of padding before embedding"""

    def __post_init__(self):
        if self.d_model % self.n_head:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_head={self.n_head}")
        if not 0 <= self.pad_id < self.vocab_size:
            raise ValueError(f"pad_id={self.pad_id} is outside the vocabulary [0, {self.vocab_size})")


# Named presets: keyword overrides of ToyTransformerConfig (vocab_size comes from the caller).
PRESETS = {
    "tiny": dict(d_model=32, n_layer=1, n_head=2),    # ~ 10k params + embeddings: smoke tests
    "small": dict(d_model=48, n_layer=2, n_head=2),   # the default
    "base": dict(d_model=64, n_layer=2, n_head=4),    # a bit more capacity, still fast on 2 cores
}


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: ToyTransformerConfig):
        super().__init__()
        self.n_head, self.dropout = cfg.n_head, cfg.dropout
        self.c_attn = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.c_proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.resid_drop = nn.Dropout(cfg.dropout)

    def forward(self, x: Tensor, attn_mask: Tensor, cache: Optional[KVCache] = None) -> Tensor:
        """x (B, T, C); attn_mask (B, 1, T, S) bool, True = may attend; S = T without a cache."""
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)   # (B, nh, T, hs)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)   # (B, nh, T, hs)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)   # (B, nh, T, hs)
        if cache is not None:
            k, v = cache.append(k, v)                                      # (B, nh, S, hs)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask,
                                           dropout_p=self.dropout if self.training else 0.0)
        y = y.transpose(1, 2).contiguous().view(B, T, C)                   # (B, T, C)
        return self.resid_drop(self.c_proj(y))


class Block(nn.Module):
    def __init__(self, cfg: ToyTransformerConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, 4 * cfg.d_model), nn.GELU(),
                                 nn.Linear(4 * cfg.d_model, cfg.d_model), nn.Dropout(cfg.dropout))

    def forward(self, x: Tensor, attn_mask: Tensor, cache: Optional[KVCache] = None) -> Tensor:
        x = x + self.attn(self.ln_1(x), attn_mask, cache)
        return x + self.mlp(self.ln_2(x))


class ToyTransformer(nn.Module):
    """Decoder-only transformer implementing ``TokenPolicy`` (ids in, ids out)."""

    logit_warp = None
    """None, or ``(logp_all (B, V), generator) -> logp_all'``: how a rollout engine copy samples
    differently from the trainer (set by ``toyrl.rollout.inference_engine.make_engine``; see ``sample_step``)"""

    def __init__(self, cfg: ToyTransformerConfig):
        super().__init__()
        self.config = cfg
        self.vocab_size, self.pad_id = cfg.vocab_size, cfg.pad_id
        self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.wpe = nn.Embedding(cfg.max_len, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.h = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)])
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight                              # weight tying
        self.apply(self._init_weights)
        for name, p in self.named_parameters():                            # GPT-2 scaled residual init
            if name.endswith("attn.c_proj.weight") or name.endswith("mlp.2.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init_weights(m: nn.Module):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    @property
    def device(self) -> torch.device:
        return self.wte.weight.device

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    # ---- full-sequence passes -------------------------------------------------------------------
    def _check(self, tokens: Tensor, mask: Tensor, extra: int = 0):
        if tokens.dim() != 2 or mask.shape != tokens.shape:
            raise ValueError(f"tokens {tuple(tokens.shape)} and mask {tuple(mask.shape)} must be the same (B, T)")
        n = int(mask.sum(1).max()) + extra if mask.numel() else 0
        if n > self.config.max_len:
            raise ValueError(f"a row has {n} real tokens, more than max_len={self.config.max_len}")

    def _trunk(self, tokens: Tensor, pos: Tensor, attn_mask: Tensor,
               caches: Optional[List[KVCache]] = None) -> Tensor:
        """tokens, pos (B, T); attn_mask (B, 1, T, S) -> final hidden states (B, T, C)."""
        x = self.drop(self.wte(tokens) + self.wpe(pos))                    # (B, T, C)
        for i, block in enumerate(self.h):
            x = block(x, attn_mask, None if caches is None else caches[i])
        return self.ln_f(x)

    def _weights(self) -> tuple:
        """What ``_direct`` reads, looked up once per ``generate`` (a module attribute costs more than a small op)."""
        def ln(m): return m.normalized_shape, m.weight, m.bias, m.eps                 # noqa: E704
        return self.wte.weight, ln(self.ln_f), [
            (ln(b.ln_1), b.attn.c_attn.weight, b.attn.c_attn.bias, b.attn.n_head, b.attn.c_proj.weight, b.attn.c_proj.bias,
             ln(b.ln_2), b.mlp[0].weight, b.mlp[0].bias, b.mlp[1].approximate, b.mlp[2].weight, b.mlp[2].bias) for b in self.h]

    def _direct(self, tokens: Tensor, pe: Tensor, mask: Tensor, caches: List[KVCache], weights: tuple) -> Tensor:
        """``_trunk`` with its kernels called directly (no module calls), bit for bit, without dropout: tokens
        (B, T), pe (B, T, C) their position embeddings, mask (B, 1, T, S) -> (B, T, C); or, for one new token
        per row (a decode step), tokens (B,), pe (B, C), mask (B, 1, 1, S) -> (B, C). ``mask``: bool, or float
        0 = may attend, -inf = not (what a bool mask becomes in attention); ``weights`` = ``_weights()``."""
        wte, ln_f, blocks = weights
        x = torch.embedding(wte, tokens) + pe                                       # (B, T, C) or (B, C)
        B, C = x.shape[0], x.shape[-1]
        for (ln1, w_qkv, b_qkv, nh, w_o, b_o, ln2, w_fc, b_fc, approx, w_pr, b_pr), cache in zip(blocks, caches):
            qkv = F.linear(torch.layer_norm(x, *ln1), w_qkv, b_qkv)                   # (B, T, 3C)
            q, k, v = qkv.view(B, -1, 3, nh, C // nh).permute(2, 0, 3, 1, 4)         # (B, nh, T, hs) each
            k, v = cache.append(k, v)                                               # (B, nh, S, hs)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)             # (B, nh, T, hs)
            x = x + F.linear(y.transpose(1, 2).reshape(x.shape), w_o, b_o)
            x = x + F.linear(F.gelu(F.linear(torch.layer_norm(x, *ln2), w_fc, b_fc), approximate=approx), w_pr, b_pr)
        return torch.layer_norm(x, *ln_f)

    def _prefill(self, tokens: Tensor, mask: Tensor, caches: Optional[List[KVCache]] = None,
                 past: Optional[ToyPast] = None, weights: Optional[tuple] = None) -> Tensor:
        """Hidden states (B, T, C) of a chunk of tokens, after the tokens of ``past`` if given (through
        ``_direct`` when given its ``weights``)."""
        mask = mask.to(torch.bool)
        B, T = tokens.shape
        tokens = tokens.masked_fill(~mask, self.pad_id)                    # padding ids are arbitrary
        pos = positions_from_mask(mask)                                    # (B, T)
        causal = torch.ones(T, T, dtype=torch.bool, device=tokens.device).tril()         # (T, T)
        eye = torch.eye(T, dtype=torch.bool, device=tokens.device)                       # (T, T)
        attn = (causal & mask[:, None, :]) | eye                           # (B, T, T) no empty rows
        if past is not None:
            pos = pos + past.n_real[:, None]
            attn = torch.cat([past.key_valid[:, None, :].expand(B, T, -1), attn], 2)    # (B, T, n + T)
        if weights is not None:
            return self._direct(tokens, self.wpe(pos), attn[:, None], caches, weights)
        return self._trunk(tokens, pos, attn[:, None], caches)

    def hidden(self, tokens: Tensor, attn_mask: Tensor) -> Tensor:
        """(B, T, C) final (post-LayerNorm) hidden states; values at padding are meaningless."""
        self._check(tokens, attn_mask)
        return self._prefill(tokens, attn_mask)

    def forward(self, tokens: Tensor, attn_mask: Optional[Tensor] = None) -> Tensor:
        """Next-token logits (B, T, V): row b, position t predicts the token after t."""
        if attn_mask is None:
            attn_mask = torch.ones_like(tokens, dtype=torch.bool)
        return self.lm_head(self.hidden(tokens, attn_mask))

    def logprobs(self, tokens: Tensor, attn_mask: Tensor, *, allowed: Optional[Tensor] = None,
                 temperature: float = 1.0, score: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
        """Teacher-forced log-prob and entropy (B, T) of each token given its real prefix.

            logp[b, t] = log softmax(logits[b, prev(t)] / temperature | allowed[b, t])[tokens[b, t]]

        where prev(t) is the previous real position; 0 at padding and at each row's first real token.
        Computed from the hidden states in chunks (``score_tokens``), never the whole (B, T, V) logits;
        ``score`` (B, T) bool: only those tokens (the others 0).
        """
        attn_mask = attn_mask.to(torch.bool)
        return score_tokens(self.hidden(tokens, attn_mask), self.lm_head, tokens, attn_mask, allowed=allowed,
                            temperature=temperature, score=score)

    # ---- generation with a KV cache -------------------------------------------------------------
    def _generate_inputs(self, context: Tensor, context_mask: Tensor, max_new: int, temperature: float,
                         past: Optional[ToyPast]) -> Tuple[Tensor, Tensor, Tensor]:
        """Checked (context, mask) with ``past``'s pending token in front, and real tokens so far (B,)."""
        if max_new < 1 or temperature <= 0:
            raise ValueError(f"need max_new >= 1 and temperature > 0 (use greedy=True for argmax), "
                             f"got {max_new}, {temperature}")
        context_mask = context_mask.to(torch.bool)
        if context.dim() != 2 or context_mask.shape != context.shape:
            raise ValueError(f"context {tuple(context.shape)} and context_mask {tuple(context_mask.shape)} "
                             "must be the same (B, L)")
        if past is not None:                                               # feed the pending token first
            context = torch.cat([past.pending, context], 1)
            context_mask = torch.cat([past.pending_mask, context_mask], 1)
        n_ctx = context_mask.sum(1) + (0 if past is None else past.n_real)    # (B,) real tokens so far
        if past is None and not bool((n_ctx > 0).all()):
            raise ValueError("every row of the context needs at least one real token")
        if int(n_ctx.max()) + max_new > self.config.max_len:
            raise ValueError(f"context + max_new = {int(n_ctx.max()) + max_new} real tokens > max_len="
                             f"{self.config.max_len}")
        return context, context_mask, n_ctx

    @torch.no_grad()
    def generate(self, context: Tensor, context_mask: Tensor, max_new: int, temperature: float = 1.0, *,
                 stop_token=None, allowed: Optional[Tensor] = None, greedy: bool = False,
                 generator: Optional[torch.Generator] = None, past: Optional[ToyPast] = None,
                 constraint=None) -> Generation:
        """Sample up to ``max_new`` tokens per row after ``context`` (B, L); see ``TokenPolicy.generate``.

        ``stop_token`` is an id, a sequence of ids or a 1-D tensor of ids: a row stops after any of them.

        The context is prefilled once into per-layer KV caches of L + max_new slots; each new token is then
        one length-1 pass (``_direct``; ``_trunk`` if a subclass overrides it or dropout is on in train mode).
        A step's logp/entropy are of softmax(logits / temperature) restricted to ``allowed`` (also for
        ``greedy``, which takes its argmax). With ``past`` (the previous turn's ``Generation.past``) only
        the new context tokens are run through the model.
        ``constraint`` (e.g. a ``toyrl.codecs.toy.GrammarRun``) replaces ``allowed`` by a per-row set that
        depends on what the row wrote so far: ``constraint.allowed()`` (B, V) before each step,
        ``constraint.advance(tok, logp_all, live)`` after it.
        """
        context, context_mask, n_ctx = self._generate_inputs(context, context_mask, max_new, temperature, past)
        (B, L), dev = context.shape, context.device
        n0 = 0 if past is None else past.key_valid.size(1)                 # cached slots
        S0 = n0 + L                                                        # slot of the first new token
        caches = [KVCache(S0 + max_new, *(() if past is None else (past.k[i], past.v[i])))
                  for i in range(len(self.h))]
        lean = type(self)._trunk is ToyTransformer._trunk and not (self.training and self.config.dropout > 0)
        weights = self._weights() if lean else None
        h = self._prefill(context, context_mask, caches, past, weights)   # (B, L, C)
        last = torch.where(context_mask, torch.arange(L, device=dev), -1).amax(1)   # (B,) last real position
        W = self.lm_head.weight                                            # (V, C)
        logits = F.linear(h[torch.arange(B, device=dev), last.clamp(min=0)], W)          # (B, V)
        if past is not None:                                               # rows with no new real token
            logits = torch.where((last >= 0)[:, None], logits, past.logits)
        # new slots count as real while decoding (a live row's new tokens are; a stopped row's output is unused)
        key_valid = torch.cat([context_mask.new_ones(B, 0) if past is None else past.key_valid,
                               context_mask, context_mask.new_ones(B, max_new)], 1)       # (B, S)
        stops = None if stop_token is None else stop_table(torch.as_tensor(stop_token, device=dev).reshape(-1),
                                                           logits.shape[-1])             # (V,) bool
        mask = key_valid[:, None, None]                                    # (B, 1, 1, S) bool, or additive 0 / -inf
        mask = torch.zeros(mask.shape, dtype=h.dtype, device=dev).masked_fill_(~mask, float("-inf")) if lean else mask
        pos = (n_ctx + torch.arange(max_new, device=dev)[:, None]).clamp(max=self.config.max_len - 1)   # (N, B)
        pe = self.wpe(pos) if lean else None                               # (N, B, C) position embeddings
        buf = Decode.empty(B, max_new, self.pad_id, dev, logits.dtype, keep_steps=True)    # (B, N), written at the end
        seen, pad, warp = [logits], self.pad_id, self.logit_warp  # seen[j]: the logits after j fed tokens
        for t in range(max_new):
            sample_step(buf, t, logits, temperature, pad, allowed=allowed, constraint=constraint,
                        greedy=greedy, generator=generator, stops=stops, warp=warp)
            if t == max_new - 1 or (stops is not None and bool(buf.done.all())):
                break
            tok = buf.steps[t][0]                                          # (B,) drawn (a stopped row's too)
            if lean:
                h = self._direct(tok, pe[t], mask.narrow(3, 0, S0 + t + 1), caches, weights)     # (B, C)
            else:
                h = self._trunk(tok[:, None], pos[t, :, None], mask[..., :S0 + t + 1], caches)[:, 0]   # (B, C)
            logits = F.linear(h, W)                                        # (B, V) a stopped row's output is unused
            seen.append(logits)
        fed = buf.flush().mask[:, :t]                                      # (B, t) the fed slots: real if live then
        key_valid[:, S0:S0 + t] = fed
        n_fed = fed.sum(1)                                                 # (B,) a row's live steps form a prefix
        last = torch.stack(seen, 1)[torch.arange(B, device=dev), n_fed]    # (B, V) after each row's last real token
        new_past = ToyPast(k=[c.k[:, :, :c.n] for c in caches], v=[c.v[:, :, :c.n] for c in caches],
                           key_valid=key_valid[:, :S0 + t], n_real=n_ctx + n_fed, logits=last,
                           pending=buf.tokens[:, t:t + 1], pending_mask=buf.mask[:, t:t + 1])
        return buf.generation(new_past)
