"""What a run's context policy asks of a text policy's fixed number of positions, checked before any rollout.

A toy preset is sized to the longest episode (``episode_token_bound``); a text policy is not:
TinyLM reads at most ``config.max_len`` tokens, a Hugging Face model ``n_positions`` (GPT-2) or
``max_position_embeddings``. With the ``full`` context (or ``flat`` recompute, or trained
observation tokens, both of which score every turn under the whole history) an episode of

    need = prompt + max_turns * (reply budget + 1.5 x longest probed observation)

tokens must fit; with ``last_k`` only the prompt and ``context_k + 1`` turns (the kept turns and the
one being written). ``check_context`` refuses a run that cannot fit with one line naming ``need``,
the limit and the largest ``context_k`` of ``last_k`` that fits. ``resolve_context`` (``TrainConfig.context=None``:
the policy's own context) lives with the other policy-dependent defaults in ``toyrl.train.defaults``; it is
re-exported here.
"""
from __future__ import annotations

from typing import Optional

from ..rollout.play import episode_token_bound
from ..codecs.toy import ToyCodec
from .defaults import resolve_context

__all__ = ["position_limit", "resolve_context", "check_context"]


def position_limit(policy, codec) -> Optional[tuple]:
    """(config field, value) of the most positions a text policy reads: TinyLM's ``max_len``, a Hugging
    Face model's ``n_positions`` / ``max_position_embeddings`` (``HFPolicy.position_limit``); None for
    a toy preset (sized to the episode) or a policy that states no limit."""
    if isinstance(codec, ToyCodec):
        return None
    if hasattr(policy, "position_limit"):
        return policy.position_limit()
    max_len = getattr(getattr(policy, "config", None), "max_len", None)
    return None if max_len is None else ("max_len", int(max_len))


def check_context(policy, codec, core, cfg) -> None:
    """ValueError before any rollout if an episode under ``cfg``'s context can outgrow the policy's
    positions (``position_limit``). The one-line message names the episode's bound, the limit and
    the fix: the largest ``last_k`` context that fits (or, when none does, what else to lower)."""
    limit = position_limit(policy, codec)
    if limit is None:
        return
    field, max_len = limit
    flat = cfg.context == "full" or cfg.recompute == "flat" or not cfg.mask_env_tokens
    need = episode_token_bound(core, codec, None if flat else cfg.context_k + 1)
    if need <= max_len:
        return
    prompt = episode_token_bound(core, codec, 0)
    per_turn = episode_token_bound(core, codec, 1) - prompt
    k = min((max_len - prompt) // per_turn - 1, int(core.max_turns) - 1)     # prompt + (k + 1) turns fit
    reads = (f"context={cfg.context!r} with context_k={cfg.context_k}" if not flat else
             "context='full'" if cfg.context == "full" else
             f"recompute={cfg.recompute!r}" if cfg.recompute == "flat" else "mask_env_tokens=False")
    head = (f"{reads}: an episode of {cfg.env} can reach {need} tokens (think_max={cfg.think_max}, "
            f"max_turns={core.max_turns}, replies of up to {codec.max_new} tokens), more than policy "
            f"{cfg.policy!r} holds ({field}={max_len})")
    think = ", or lower think_max" if cfg.think_max else ""
    if k < 1:
        raise ValueError(f"{head}; even the prompt and 2 turns ({prompt + 2 * per_turn} tokens) do not fit: use a "
                         f"model with more positions or a tokenizer with fewer tokens per word{think}")
    flags = "--context last_k" + (f" --context-k {k}" if cfg.context_k > k else "")
    if cfg.recompute == "flat":
        flags += " --recompute matched"
    if not cfg.mask_env_tokens:
        flags += " --mask-env-tokens"
    turns = (max_len - prompt) // per_turn                                   # a full-context episode that fits
    shorter = f", or max_turns <= {turns}" if flat and turns >= 1 else ""
    raise ValueError(f"{head}; use {flags} (context='last_k' fits up to context_k={k}){shorter}{think}")
