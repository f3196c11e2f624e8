"""Loading a Hugging Face causal LM for ``HFPolicy``: the weights, LoRA adapters, gradient checkpointing and the
heap setting that keeps a CPU run's resident memory near what its tensors need.

    model, tok = load_model("/models/smollm2", lora={"r": 8}, grad_ckpt=True)

- ``lora``: peft's LoRA adapters on every linear layer; the base weights are frozen (``requires_grad`` False),
  so they get no gradient and no optimizer state.
- ``grad_ckpt``: each decoder block keeps only its input in the forward and recomputes the rest in backward
  (``gradient_checkpointing_enable``, non-reentrant): the activations kept for backward shrink from every
  intermediate of every block to one (B, T, d) tensor per block, for about one more forward of time.
- ``compact_heap``: on Linux with glibc, a fixed allocation size above which memory comes straight from the
  kernel and goes back to it when freed: small in a gradient pass, large while sampling. glibc otherwise raises that bound to the largest block freed so far
  (up to 32 MiB), after which the blocks of a training step's many mid-sized tensors stay in its heap, scattered
  among live ones, and the process's resident size grows far past its live tensors.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import sys
from pathlib import Path
from typing import Optional, Union

import torch

__all__ = ["load_model", "enable_grad_ckpt", "compact_heap", "HEAP_MMAP_THRESHOLD", "DECODE_MMAP_THRESHOLD"]

HEAP_MMAP_THRESHOLD = 128 * 1024
"""bytes: in a gradient pass, allocations at least this large are mapped from the kernel and unmapped when freed
(glibc's own starting value, kept fixed by ``compact_heap``)"""
DECODE_MMAP_THRESHOLD = 32 * 1024 * 1024
"""bytes: the bound while sampling (glibc's largest dynamic value): the KV cache grows by a new copy of every
layer's keys and values at each token, and mapping each copy afresh costs a page fault per page, which made
generation about twice as slow; from the heap the copies reuse the space of the ones before"""
_M_MMAP_THRESHOLD = -3                                     # mallopt's parameter number (malloc.h)
_heap_set = {}


def compact_heap(threshold: int = HEAP_MMAP_THRESHOLD) -> bool:
    """Fix glibc's mmap threshold at ``threshold`` bytes for this process (``mallopt(M_MMAP_THRESHOLD, .)``):
    freed blocks of that size or more go back to the kernel at once instead of staying in the heap. True when
    set (or already set to that value); False where there is no glibc (macOS, Windows, musl), which is left as
    it is. Example: compact_heap() -> True on Linux / glibc; the multi-turn SmolLM2 update's peak resident
    memory then stays near its live tensors (see ``toyrl bench smollm2``). ``HFPolicy`` on CPU sets
    ``HEAP_MMAP_THRESHOLD`` for a gradient pass and ``DECODE_MMAP_THRESHOLD`` for generation.
    """
    if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 4096:
        raise ValueError(f"threshold must be an integer >= 4096 bytes, got {threshold!r}")
    if _heap_set.get("threshold") == threshold:
        return True
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    ok = bool(mallopt(_M_MMAP_THRESHOLD, threshold))
    if ok:
        _heap_set["threshold"] = threshold
    return ok


def enable_grad_ckpt(model) -> None:
    """Turn on the model's gradient checkpointing (non-reentrant, so frozen inputs and LoRA need no extra hook);
    ValueError if the model's class has none."""
    if not getattr(model, "supports_gradient_checkpointing", False) and not hasattr(model, "base_model"):
        raise ValueError(f"grad_ckpt: {type(model).__name__} does not support gradient checkpointing")
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def load_model(path: Union[str, Path], *, dtype: Optional[torch.dtype] = None, lora: Optional[dict] = None,
               grad_ckpt: bool = False):
    """(model, tokenizer) from a local model directory (never a download). ``lora``: LoraConfig fields (``r``,
    ``alpha``, ``dropout``, ``target_modules``), needs ``peft``; ``grad_ckpt``: gradient checkpointing on."""
    if not isinstance(grad_ckpt, bool):
        raise ValueError(f"grad_ckpt must be True or False, got {grad_ckpt!r}")
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError:
        raise ImportError("an hf: policy needs transformers: pip install 'toyrl[hf]'") from None
    path = Path(path).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(f"no local model directory at {path} (HFPolicy never downloads)")
    tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True,
                                                 **({"dtype": dtype} if dtype is not None else {}))
    if lora is not None:
        try:
            from peft import LoraConfig, get_peft_model
        except ImportError:
            raise ImportError("lora=... needs peft: pip install 'toyrl[lora]'") from None
        cfg = LoraConfig(r=lora.get("r", 8), lora_alpha=lora.get("alpha", 16), lora_dropout=lora.get("dropout", 0.0),
                         target_modules=lora.get("target_modules", "all-linear"), task_type="CAUSAL_LM")
        model = get_peft_model(model, cfg)
    if grad_ckpt:
        enable_grad_ckpt(model)
    return model, tok
