"""Policies over integer token ids: the ``TokenPolicy`` protocol and the default toy transformer.

    policy = make_policy("small", vocab_size=40, device="cpu", seed=0)
    gen = policy.generate(ctx, ctx_mask, max_new=4, stop_token=EOT, generator=g)     # Generation
    logp, ent = policy.logprobs(torch.cat([ctx, gen.tokens], 1), torch.cat([ctx_mask, gen.mask], 1))
"""
from __future__ import annotations

from dataclasses import replace
from typing import Optional, Union

import torch

from .base import Generation, TokenPolicy, masked_log_softmax, positions_from_mask, prev_valid_index
from .toy import PRESETS, ToyTransformer, ToyTransformerConfig
from .hf import HFPolicy
from .tinylm import TinyLM

__all__ = ["TokenPolicy", "Generation", "ToyTransformer", "ToyTransformerConfig", "PRESETS", "make_policy",
           "masked_log_softmax", "positions_from_mask", "prev_valid_index", "HFPolicy", "TinyLM"]


def make_policy(name_or_config: Union[str, ToyTransformerConfig], vocab_size: int,
                device: Union[str, torch.device] = "cpu", *, seed: Optional[int] = None,
                max_len: Optional[int] = None) -> ToyTransformer:
    """Build a toy policy from a preset name (``PRESETS``) or a config, with ``vocab_size`` ids, on ``device``.

    ``max_len`` (if given) overrides the preset's context capacity. ``seed`` initializes the weights from ``torch.manual_seed(seed)`` without touching the global RNG
    state; without it the global RNG is used.
    """
    if isinstance(name_or_config, str):
        if name_or_config not in PRESETS:
            raise ValueError(f"unknown policy preset {name_or_config!r}; choose from {sorted(PRESETS)}")
        cfg = ToyTransformerConfig(vocab_size=vocab_size, **PRESETS[name_or_config])
    elif isinstance(name_or_config, ToyTransformerConfig):
        cfg = replace(name_or_config, vocab_size=vocab_size)
    else:
        raise TypeError(f"expected a preset name or ToyTransformerConfig, got {type(name_or_config).__name__}")
    if max_len is not None:
        cfg = replace(cfg, max_len=int(max_len))
    if seed is None:
        return ToyTransformer(cfg).to(device)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return ToyTransformer(cfg).to(device)
