"""HFPolicy: any local Hugging Face causal LM + tokenizer behind the TokenPolicy protocol.

Dimension legend: B rows, L context positions, N new tokens, T sequence positions, V vocabulary.

    policy = HFPolicy.from_pretrained("/models/qwen2.5-0.5b", device="cuda", autocast="bf16")
    codec = policy.codec()            # chat-style multi-turn text (TextCodec)
    # or from the CLI: toyrl train --policy hf:/models/qwen2.5-0.5b --context last_k ...

The same three rules as the toy transformer (``base.py``) hold: positions come from the padding
mask (``position_ids``), a token is scored by the logits of the previous real position, and an
``allowed`` mask (None for text policies) travels with the tokens. Generation prefills the context
once and then feeds one token at a time through the model's own KV cache (``past_key_values``),
which persists across turns (``HFPast``): the next turn feeds only the environment's new tokens.
Positions count real tokens only (cache slots of padding take none), and a call that would need more
than the model's ``n_positions`` / ``max_position_embeddings`` (``position_limit``) raises a
ValueError up front instead of an IndexError in the position embeddings; the trainer checks the
whole episode before the first rollout (``toyrl.train.limits.check_context``).

The model is loaded with ``local_files_only=True``: the path must exist on disk (no hub download at
run time). ``lora={"r": 8, "alpha": 16}`` wraps the model in LoRA adapters with ``peft`` when it is
installed (only the adapters train); ``grad_ckpt=True`` recomputes each block's activations in backward
(``toyrl.policies.hf_load``). ``autocast="bf16"`` runs forwards under bf16 autocast; the
softmax over the vocabulary is always taken in fp32. The tokenizer side (special ids, chat template) is
``toyrl.policies.hf_chat``; loading, LoRA, checkpointing and the CPU heap setting ``toyrl.policies.hf_load``.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Tuple, Union

import torch
from torch import Tensor

from ..codecs.text import TextCodec
from ..segments import first_index
from .base import Generation, positions_from_mask, score_tokens
from .decode import Decode, sample_step, stop_table
from .hf_chat import (HFTokenizer, chat_template_strings, model_token_ids, special_ids, system_head,  # noqa: F401
                      tokenizer_token_ids)
from .hf_load import DECODE_MMAP_THRESHOLD, HEAP_MMAP_THRESHOLD, compact_heap, load_model

__all__ = ["HFPolicy", "HFPast", "HFTokenizer", "chat_template_strings", "special_ids", "model_token_ids",
           "system_head", "logit_transform"]


class HFPolicy(torch.nn.Module):
    """A ``transformers`` causal LM as a TokenPolicy (ids in, ids out)."""

    heap = False
    """True when the glibc heap is set per pass (CPU with grad_ckpt, ``from_pretrained``): a gradient pass hands
    freed blocks of 128 KiB or more back to the kernel (``HEAP_MMAP_THRESHOLD``), generation keeps them
    (``DECODE_MMAP_THRESHOLD``)"""
    logit_warp = None
    """None, or ``(logp_all (B, V), generator) -> logp_all'``: how a rollout engine copy samples
    differently from the trainer (set by ``toyrl.rollout.inference_engine.make_engine``; see ``sample_step``)"""

    def __init__(self, model, tokenizer, autocast: Optional[str] = None):
        super().__init__()
        self.model, self.tokenizer = model, tokenizer
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        self.hf_tokenizer = HFTokenizer(tokenizer, max(self.vocab_size, len(tokenizer)), model)
        self.pad_id = int(self.hf_tokenizer.pad_id)
        self.autocast_dtype = {None: None, "none": None, "fp32": None, "bf16": torch.bfloat16,
                               "fp16": torch.float16}[autocast]

    @classmethod
    def from_pretrained(cls, path: Union[str, Path], device="cpu", *, autocast: Optional[str] = None,
                        dtype: Optional[torch.dtype] = None, lora: Optional[dict] = None,
                        grad_ckpt: bool = False) -> "HFPolicy":
        """Load a local model directory (config, weights, tokenizer) with ``hf_load.load_model``. ``lora``:
        LoraConfig fields (``r``, ``alpha``, ``dropout``, ``target_modules``), needs ``peft``; ``grad_ckpt``:
        recompute each block's activations in backward instead of keeping them and, on CPU, set the process's
        heap per pass (``heap``, ``hf_load.compact_heap``: freed blocks go back to the kernel in gradient
        passes): the memory-first choice, slower per update."""
        model, tok = load_model(path, dtype=dtype, lora=lora, grad_ckpt=grad_ckpt)
        policy = cls(model, tok, autocast).to(device)
        policy.heap = grad_ckpt and torch.device(device).type == "cpu" and compact_heap(DECODE_MMAP_THRESHOLD)
        return policy

    def codec(self, *, render: str = "full", max_new: int = 24, system: str = "") -> TextCodec:
        """The chat-style TextCodec of this tokenizer (template from ``chat_template_strings``). ``system``, an
        instruction, is the chat's system message where the template has one (``system_head``: it replaces a
        default system message), else the start of the first user text."""
        template, head = chat_template_strings(self.tokenizer), system_head(self.tokenizer, system)
        if head is not None:
            template, system = (head,) + tuple(template[1:]), ""
        return TextCodec(self.hf_tokenizer, max_new=max_new, render=render, template=template, system=system)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def position_limit(self) -> Optional[Tuple[str, int]]:
        """(config field, value) of the most positions the model reads (``n_positions`` of GPT-2,
        ``max_position_embeddings`` of most others), None if its config names none."""
        cfg = self.model.config
        cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
        for name in ("n_positions", "max_position_embeddings", "n_ctx", "seq_length"):
            if isinstance(getattr(cfg, name, None), int):
                return name, int(getattr(cfg, name))
        return None

    def _check_positions(self, n: int, what: str) -> None:
        """ValueError (not an IndexError deep in the position embeddings) if ``n`` positions outgrow the model."""
        limit = self.position_limit()
        if limit is not None and n > limit[1]:
            raise ValueError(f"HFPolicy: {what} needs {n} positions, more than the model holds "
                             f"({limit[0]}={limit[1]}); use a shorter context (--context last_k) or fewer reply tokens")

    def _autocast(self):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)

    def _decoder(self, tokens: Tensor, mask: Tensor, position_ids: Tensor, **kw):
        """The model's decoder (``get_decoder()``: the transformer without its LM head) on ``tokens`` (B, T)
        with padding ``mask`` (B, S, the cached slots first): its last hidden states are final-normed."""
        with self._autocast():
            return self.model.get_decoder()(input_ids=tokens.masked_fill(~mask[:, -tokens.shape[1]:], self.pad_id),
                                            attention_mask=mask.long(), position_ids=position_ids, **kw)

    def _head(self, h: Tensor) -> Tensor:
        """(n, d) last hidden states -> (n, V) fp32 logits: the output embeddings, then the model's own
        logit transform (``logit_transform``), the same numbers as ``model(...).logits``."""
        with self._autocast():
            z = self.model.get_output_embeddings()(h)
        return logit_transform(self.model.config, z.float())

    def hidden(self, tokens: Tensor, attn_mask: Tensor, share: Optional[Tuple[Tensor, Tensor, int]] = None) -> Tensor:
        """(B, T, d) last-layer hidden states (fp32, after the final norm). ``share`` = (rep (n,), inv (B,), k)
        (``toyrl.rollout.flatten.shared_prefix``): the first k positions, the same in every row of a group, run
        once per group (rows ``rep``); each row's copy of that KV cache (``inv``) then serves its own
        positions k.. . The same numbers at float rounding, gradients included, for n k + B (T - k) positions
        of work instead of B T."""
        attn_mask = attn_mask.bool()
        self._check_positions(int(attn_mask.sum(1).max()) if attn_mask.numel() else 0, "a sequence")
        pos = positions_from_mask(attn_mask)                                          # (B, T)
        if share is None:
            return self._decoder(tokens, attn_mask, pos, use_cache=False).last_hidden_state.float()
        rep, inv, k = share
        first = self._decoder(tokens[rep, :k], attn_mask[rep, :k], pos[rep, :k], use_cache=True)  # (n, k, d)
        tail = self._decoder(tokens[:, k:], attn_mask, pos[:, k:], use_cache=True,   # (B, T - k, d) on a copy
                             past_key_values=cache_rows(first.past_key_values, inv))  # of the cache per row
        return torch.cat([first.last_hidden_state[inv], tail.last_hidden_state], 1).float()

    def shares_prefix(self) -> bool:
        """Whether ``logprobs`` can take ``share`` now: the KV cache is on (a checkpointed block in training
        mode drops it, see ``_cache_on``)."""
        return not (self.model.training and bool(getattr(self.model, "is_gradient_checkpointing", False)))

    def logprobs(self, tokens: Tensor, attn_mask: Tensor, *, allowed: Optional[Tensor] = None,
                 temperature: float = 1.0, score: Optional[Tensor] = None,
                 share: Optional[Tuple[Tensor, Tensor, int]] = None) -> Tuple[Tensor, Tensor]:
        """Teacher-forced (logp, entropy) (B, T) of each token given its real prefix (see ``base.py``), from
        the hidden states through the head in chunks (``score_tokens``): never the (B, T, V) logits;
        ``score`` (B, T) bool: only those tokens (the others 0); ``share``: a prefix run once per group
        (``hidden``)."""
        attn_mask = attn_mask.bool()
        if self.heap and torch.is_grad_enabled():
            compact_heap(HEAP_MMAP_THRESHOLD)
        if share is not None and not self.shares_prefix():
            raise ValueError("share: this model checkpoints its blocks in training mode and keeps no KV cache; "
                             "pass share=None")
        return score_tokens(self.hidden(tokens, attn_mask, share), self._head, tokens, attn_mask, allowed=allowed,
                            temperature=temperature, score=score)

    def _prefill(self, context: Tensor, mask: Tensor, past: Optional["HFPast"], width: int):
        """Run the new context tokens (after ``past``'s pending token, if any) -> (cache, attn (B, S + width)
        with ``width`` free slots for the decode steps, n_real (B,), logits (B, V) after each row's last real
        token). The head runs on those B positions only; a first turn runs each distinct context once (the G
        rows of a group share their prompt) and copies its cache to the rows that repeat it."""
        if past is not None:                                                         # feed the pending token first
            context, mask = torch.cat([past.pending, context], 1), torch.cat([past.pending_mask, mask], 1)
        B, dev = context.shape[0], context.device
        if past is None:                                                             # rows of one prompt: run once
            uniq, inv = torch.unique(context.masked_fill(~mask, -1), dim=0, return_inverse=True)
            if len(uniq) < B:
                rep = first_index(inv, len(uniq))                                    # (n,) first row of each
                cache, attn, n_real, logits = self._prefill(context[rep], mask[rep], None, width)
                return cache_rows(cache, inv), attn[inv], n_real[inv], logits[inv]
        n0 = torch.zeros(B, dtype=torch.long, device=dev) if past is None else past.n_real
        attn = torch.cat([mask if past is None else torch.cat([past.attn, mask], 1),
                          mask.new_zeros(B, width)], 1)                              # (B, S + width) bool
        S = attn.shape[1] - width
        out = self._decoder(context, attn[:, :S], n0[:, None] + positions_from_mask(mask), use_cache=True,
                            past_key_values=None if past is None else past.cache)
        idx = torch.arange(mask.shape[1], device=dev).expand_as(mask)
        last = torch.where(mask, idx, -1).amax(1)                                    # (B,) last real new position
        logits = self._head(out.last_hidden_state[torch.arange(B, device=dev), last.clamp(min=0)])   # (B, V)
        if past is not None:                                                         # rows with nothing new
            logits = torch.where((last >= 0)[:, None], logits, past.logits)
        return out.past_key_values, attn, n0 + mask.sum(1), logits

    @torch.no_grad()
    def generate(self, context: Tensor, context_mask: Tensor, max_new: int, temperature: float = 1.0, *,
                 stop_token=None, allowed: Optional[Tensor] = None, greedy: bool = False,
                 generator: Optional[torch.Generator] = None, past: Optional["HFPast"] = None,
                 constraint=None) -> Generation:
        """Sample up to ``max_new`` tokens per row after ``context`` (B, L) with the model's KV cache,
        which persists across turns: with ``past`` (the previous call's ``Generation.past``) only the
        new tokens are fed (``constraint``: a per-row sampling set, see ``ToyTransformer.generate``).
        The attention mask is allocated once for the whole call; each step feeds one token per row
        through the decoder and the head."""
        if max_new < 1 or temperature <= 0:
            raise ValueError(f"need max_new >= 1 and temperature > 0, got {max_new}, {temperature}")
        if self.heap:
            compact_heap(DECODE_MMAP_THRESHOLD)
        with self._cache_on():
            return self._generate(context, context_mask, max_new, temperature, stop_token=stop_token,
                                  allowed=allowed, greedy=greedy, generator=generator, past=past, constraint=constraint)

    @contextlib.contextmanager
    def _cache_on(self):
        """The model in eval mode for the block when it checkpoints its blocks in training mode: a checkpointed
        block drops the KV cache (``use_cache`` and ``past_key_values``), which generation reads."""
        switch = self.model.training and bool(getattr(self.model, "is_gradient_checkpointing", False))
        if switch:
            self.model.eval()
        try:
            yield
        finally:
            if switch:
                self.model.train()

    def _generate(self, context: Tensor, context_mask: Tensor, max_new: int, temperature: float, *, stop_token,
                  allowed, greedy, generator, past, constraint) -> Generation:
        dev = context.device
        n_ctx = int((context_mask.sum(1) + (0 if past is None else past.n_real + past.pending_mask.sum(1))).max())
        self._check_positions(n_ctx + max_new - 1, f"a context of {n_ctx} tokens + {max_new} new")   # last fed: N - 1
        cache, attn, pos, logits = self._prefill(context, context_mask.bool(), past, max_new - 1)
        S0 = attn.shape[1] - (max_new - 1)                                                # slot of the first new token
        stops = None if stop_token is None else stop_table(torch.as_tensor(stop_token, device=dev).reshape(-1),
                                                           logits.shape[-1])              # (V,) bool: one lookup a step
        buf = Decode.empty(logits.shape[0], max_new, self.pad_id, dev)                    # (B, N) buffers
        for t in range(max_new):
            live = sample_step(buf, t, logits, temperature, self.pad_id, allowed=allowed, constraint=constraint,
                               greedy=greedy, generator=generator, stops=stops, warp=self.logit_warp)
            if t == max_new - 1 or bool(buf.done.all()):
                break
            attn[:, S0 + t] = live
            out = self._decoder(buf.tokens[:, t:t + 1], attn[:, :S0 + t + 1], pos[:, None], use_cache=True,
                                past_key_values=cache)
            pos = pos + live                                                              # (B,) next position
            logits = torch.where(live[:, None], self._head(out.last_hidden_state[:, -1]), logits)
        return buf.generation(HFPast(cache, attn[:, :S0 + t], pos, logits, buf.tokens[:, t:t + 1],
                                     buf.mask[:, t:t + 1]))


def cache_rows(cache, rows: Tensor):
    """A model's KV cache with its batch rows taken in ``rows`` order (B,), e.g. [0, 0, 1, 1]: each row a copy of
    its group's prompt. A ``Cache`` object (transformers >= 4.36) is reordered in place (``reorder_cache``, an
    ``index_select`` per layer, so gradients flow back to the rows it copies); a legacy tuple of per-layer
    (key, value) tensors is rebuilt."""
    if hasattr(cache, "reorder_cache"):
        cache.reorder_cache(rows)
        return cache
    return tuple(tuple(t.index_select(0, rows) for t in layer) for layer in cache)


def logit_transform(config, logits: Tensor) -> Tensor:
    """What a model's causal-LM head does to its output embeddings' logits, read from its (text) config:

        Gemma-2/3 soft-cap   z -> c tanh(z / c)      c = final_logit_softcapping
        Cohere scale         z -> z * logit_scale
        Granite              z -> z / logits_scaling

    and nothing for the rest (GPT-2, Llama and SmolLM2 name none of these). Example: c = 30, z = 60 ->
    30 tanh(2) = 28.92.
    """
    cfg = config.get_text_config() if hasattr(config, "get_text_config") else config
    cap = getattr(cfg, "final_logit_softcapping", None)
    if cap:
        logits = cap * torch.tanh(logits / cap)
    scale = getattr(cfg, "logit_scale", None)
    if isinstance(scale, (int, float)):
        logits = logits * scale
    div = getattr(cfg, "logits_scaling", None)
    if isinstance(div, (int, float)):
        logits = logits / div
    return logits


@dataclass
class HFPast:
    """Where an ``HFPolicy.generate`` call left off, so the next turn feeds only its new tokens."""
    cache: object
    """the model's cache (``past_key_values``) of every token fed so far"""
    attn: Tensor
    """(B, S) bool: which of the S cached slots are real tokens"""
    n_real: Tensor
    """(B,) long: real tokens fed so far (the next real token's position)"""
    logits: Tensor
    """(B, V): next-token logits after each row's last real fed token"""
    pending: Tensor
    """(B, 1) long: the last generated token, sampled but not yet fed"""
    pending_mask: Tensor
    """(B, 1) bool: whether ``pending`` is real"""

    def select(self, rows: Tensor) -> "HFPast":
        """The state of a subset of rows (the episodes still running). The cache is selected in
        place (``batch_select_indices``): the dropped rows are never needed again."""
        self.cache.batch_select_indices(rows)
        return HFPast(self.cache, self.attn[rows], self.n_real[rows], self.logits[rows], self.pending[rows],
                      self.pending_mask[rows])
