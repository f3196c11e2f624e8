"""Rollout engines: a copy of the policy that samples a little differently from the trainer.

Dimension legend: B rows, V vocabulary; ``w`` a weight tensor whose first dimension is its output rows.

In real agent-RL runs the tokens come from an inference engine (vLLM, SGLang) and the gradient from
a training framework (FSDP, Megatron). The two hold "the same" policy, but the engine runs bf16 or
fp16 kernels, often quantized weights (int8, int4), different reduction orders, sampling filters
(top-k, top-p) and, with asynchronous rollouts, weights a few updates old. So the distribution that
drew a token, pi_engine, is not the one the loss differentiates, pi_trainer: even "on-policy" data is
off-policy (Yao et al. 2025, "Your efficient RL framework secretly brings you off-policy RL
training", blog; arXiv 2510.26788 on fp16 vs bf16). The gap is largest on low-probability tokens:
rounding has a relative error, so a log-prob of -11 moves two orders of magnitude more than one of
-0.04 (``round_logp``'s example); noise eps on the logits moves log p_v by eps_v - sum_u p_u eps_u,
of variance sigma^2 (1 - 2 p_v + sum_u p_u^2): near 0 for a dominant token, about sigma^2 for a rare
one. Rare tokens are where ratios far from 1 come from. A truncating filter (top-k, top-p) goes
further: the engine gives some tokens probability exactly 0, so they are never sampled although the
trainer gives them mass (a support mismatch no importance weight can repair), and every kept token's
engine probability is inflated (ratio < 1).

This module makes such engines for the toy policies, each a pure, documented transform:

- weight transforms, applied to the engine's copy at every sync: ``round_weights`` (bf16 / fp16
  storage), ``quantize_weights`` (symmetric per-row int8 / int4);
- logit warps, applied to each step's (B, V) log-probs before the draw (``sample_step(warp=...)``):
  ``round_logp`` (low-precision kernels), ``noise_warp`` (nondeterministic kernels), ``topk_warp``,
  ``topp_warp`` (sampling filters);
- ``ENGINES``: the named modes; ``make_engine`` builds the sampler, ``sync_engine`` reloads it.

The engine records the warped log-prob of each drawn token (``Generation.logp``, the batch's
``rollout_logp``); the trainer recomputes ``old_logp`` in fp32 and the corrections in
``toyrl.objectives.rollout_correction`` weigh tokens by exp(old_logp - rollout_logp).
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Callable, Optional

import torch
from torch import Tensor

__all__ = ["EngineMode", "ENGINES", "round_weights", "quantize_weights", "round_logp", "noise_warp",
           "topk_warp", "topp_warp", "check_engine", "weight_transform", "make_warp", "make_engine",
           "sync_engine"]

NEG_INF = float("-inf")


def round_weights(w: Tensor, dtype: torch.dtype) -> Tensor:
    """A weight stored in ``dtype`` and read back: w' = float(dtype(w)) (round to nearest even).

    bf16 keeps 8 significant bits (relative error <= 2^-9), fp16 11 bits (<= 2^-12) but a smaller
    range (|w| <= 65504). Source: Yao et al. 2025 (blog); arXiv 2510.26788 (bf16 vs fp16 mismatch).

    Example: w = [0.1234567] -> bf16 [0.12353515625], fp16 [0.12347412109375].
    """
    return w.to(dtype).to(w.dtype)


def quantize_weights(w: Tensor, bits: int) -> Tensor:
    """Symmetric per-output-row absmax quantization, round-tripped back to ``w``'s dtype.

        q = 2^(bits-1) - 1,   s_r = max_j |w_rj| / q,   w'_rj = s_r * clamp(round(w_rj / s_r), -q, q)

    A row is ``w[r]``, trailing dims flattened: an output unit of ``nn.Linear``, a token of ``nn.Embedding``
    (GPT-2's ``Conv1D`` stores (in, out), so there a row is an input channel: still one scale per channel).
    1-D tensors (biases, LayerNorm gains) are returned unchanged: int8 / int4 engines keep them in
    16-bit, they are a tiny share of the weights. An all-zero row stays zero. Sources: LLM.int8
    (arXiv 2208.07339, absmax vector-wise quantization), GPTQ (arXiv 2210.17323, 4-bit weights).

    Example: w = [[0.5, -1.0, 0.26], [0.1, 0.02, -0.04]]
      bits 8 (q = 127): [[0.50394, -1.0, 0.25984], [0.1, 0.019685, -0.040157]]
      bits 4 (q = 7):   [[0.42857, -1.0, 0.28571], [0.1, 0.014286, -0.042857]]
    """
    if isinstance(bits, bool) or not isinstance(bits, int) or not 2 <= bits <= 16:
        raise ValueError(f"bits must be an int in [2, 16], got {bits!r}")
    if w.dim() < 2:
        return w
    q = 2 ** (bits - 1) - 1
    rows = w.reshape(w.shape[0], -1)                                         # (R, C)
    s = rows.abs().amax(1, keepdim=True) / q                                 # (R, 1)
    safe = torch.where(s > 0, s, torch.ones_like(s))
    out = torch.round(rows / safe).clamp(-q, q) * s                          # (R, C)
    return out.reshape(w.shape)


def round_logp(logp: Tensor, dtype: torch.dtype) -> Tensor:
    """Low-precision kernel: log-probs rounded to ``dtype``, then renormalized (-inf stays -inf).

        logp'_v = r_v - logsumexp_u r_u,   r = float(dtype(logp))

    The rounding error is relative, so it grows with |logp|: low-probability tokens move most.
    Source: Yao et al. 2025 (blog); arXiv 2510.26788.

    Example: logp = [-0.0441, -3.1441, -11.3441]
      bf16 -> [-0.0442, -3.1407, -11.3750], |error| = [0.00015, 0.0034, 0.031]
      fp16 -> [-0.0441, -3.1445, -11.3437], |error| = [0.00002, 0.00044, 0.00034]
    """
    return torch.log_softmax(logp.to(dtype).to(logp.dtype), dim=-1)          # (B, V)


def noise_warp(logp: Tensor, sigma: float = 0.5, generator: Optional[torch.Generator] = None) -> Tensor:
    """Nondeterministic kernels as Gaussian noise on the logits: log_softmax(logp + sigma * eps).

        logp'_v = log_softmax_v(logp + sigma * eps),   eps_v ~ N(0, 1) i.i.d.;  -inf stays -inf

    ``generator`` draws eps (on ``logp``'s device). A stand-in for batch-variant reductions and
    atomics (Yao et al. 2025 blog), not a model of any one kernel; sigma = 0 is the identity.

    Example: logp = [-0.693, -0.693, -inf], sigma = 1, eps = [1.0, -1.0, 0.3]
      -> log_softmax([0.307, -1.693, -inf]) = [-0.127, -2.127, -inf]
    """
    sigma = check_engine("noise", sigma)
    eps = torch.randn(logp.shape, generator=generator, device=logp.device, dtype=logp.dtype)   # (B, V)
    return torch.log_softmax(logp + sigma * eps, dim=-1)


def _keep(logp: Tensor, keep: Tensor) -> Tensor:
    """Renormalize ``logp`` over ``keep`` (B, V), never leaving a row with no allowed token."""
    keep = keep & (logp > NEG_INF)
    top = logp.argmax(-1, keepdim=True)                                      # (B, 1) always kept
    keep = keep.scatter(-1, top, True)
    return torch.log_softmax(logp.masked_fill(~keep, NEG_INF), dim=-1)       # (B, V)


def topk_warp(logp: Tensor, k: int = 2) -> Tensor:
    """Top-k sampling: keep the k most probable allowed tokens, renormalize (Fan et al., arXiv 1805.04833).

        keep_v = [logp_v >= kth largest logp] and logp_v > -inf

    Ties at the k-th value are all kept (the rule is a threshold, not an index), so a row may keep more
    than k; tokens already at -inf (the grammar's mask) never come back; at least one token stays.

    Example: logp = log_softmax([2, 1, 0, 0]) = [-0.494, -1.494, -2.494, -2.494]
      k = 2 -> [-0.313, -1.313, -inf, -inf];   k = 3 -> all four kept (tie), logp unchanged.
    """
    k = check_engine("topk", k)
    kth = logp.topk(min(k, logp.shape[-1]), dim=-1).values[..., -1:]        # (B, 1)
    return _keep(logp, logp >= kth)


def topp_warp(logp: Tensor, p: float = 0.9) -> Tensor:
    """Nucleus (top-p) sampling: keep the smallest most-probable set of mass >= p, renormalize
    (Holtzman et al., arXiv 1904.09751).

        sort descending; keep token i iff sum_{j < i} p_(j) < p;  then every token tied with the last kept

    The most probable token is always kept; p = 1 returns ``logp`` unchanged (float sums never drop a
    token); -inf tokens stay out.

    Example: probs = [0.610, 0.225, 0.083, 0.083] (logp = log_softmax([2, 1, 0, 0]))
      p = 0.8 -> mass before each [0, 0.610, 0.835, 0.917] -> keep 2: [-0.313, -1.313, -inf, -inf]
      p = 0.5 -> [0, -inf, -inf, -inf]
    """
    if check_engine("topp", p) >= 1.0:
        return logp
    srt = logp.sort(dim=-1, descending=True).values                         # (B, V)
    before = srt.exp().cumsum(-1) - srt.exp()                                # (B, V) mass ahead
    n = (before < p).sum(-1, keepdim=True).clamp(min=1)                      # (B, 1) tokens kept
    last = srt.gather(-1, n - 1)                                             # (B, 1) smallest kept logp
    return _keep(logp, logp >= last)


@dataclass(frozen=True)
class EngineMode:
    """One way a rollout engine differs from the trainer."""
    name: str
    """registry key"""
    models: str
    """the real-engine effect it stands for"""
    strength: Optional[str]
    """what the ``strength`` argument means; None if the mode takes none"""
    default: Optional[float]
    """``strength`` when not given; None if the mode takes none"""
    source: str
    """where the effect is described"""


_YAO = "Yao et al. 2025, 'Your efficient RL framework secretly brings you off-policy RL training' (blog)"
ENGINES: dict[str, EngineMode] = {m.name: m for m in [
    EngineMode("exact", "the sampler is the trainer (no mismatch)", None, None, "-"),
    EngineMode("bf16", "bf16 weights and kernels (8 significant bits)", None, None, _YAO + "; arXiv 2510.26788"),
    EngineMode("fp16", "fp16 weights and kernels (11 significant bits)", None, None, "arXiv 2510.26788"),
    EngineMode("int8", "int8 weight-only quantization (per-row absmax)", None, None, "LLM.int8, arXiv 2208.07339"),
    EngineMode("int4", "int4 weight-only quantization (per-row absmax)", None, None, "GPTQ, arXiv 2210.17323"),
    EngineMode("noise", "nondeterministic kernels: Gaussian noise on the logits",
               "sigma, std of the noise added to each logit (float >= 0)", 0.5, _YAO),
    EngineMode("topk", "top-k sampling filter", "k, tokens kept (int >= 1)", 2, "Fan et al., arXiv 1805.04833"),
    EngineMode("topp", "top-p (nucleus) sampling filter", "p, probability mass kept (0 < p <= 1)", 0.9,
               "Holtzman et al., arXiv 1904.09751"),
    EngineMode("lag", "asynchronous rollout: the engine's weights are k updates old (the trainer keeps "
               "the stale state_dict; the engine itself is a plain copy)", "k, updates of lag (int >= 1)", 2,
               "AReaL, arXiv 2505.24298"),
]}


def check_engine(mode: str, strength=None):
    """The strength ``mode`` will use (its default if None); ValueError naming ``mode`` or
    ``strength`` and what is valid. Example: check_engine("topk") -> 2; check_engine("bf16") -> None."""
    if mode not in ENGINES:
        raise ValueError(f"mode={mode!r} is not an engine mode; expected one of {sorted(ENGINES)}")
    m = ENGINES[mode]
    if m.strength is None:
        if strength is not None:
            raise ValueError(f"strength={strength!r}: engine mode {mode!r} takes no strength (pass None)")
        return None
    s = m.default if strength is None else strength
    is_int = isinstance(s, int) and not isinstance(s, bool)
    is_num = isinstance(s, (int, float)) and not isinstance(s, bool) and math.isfinite(s)
    if mode in ("topk", "lag") and not (is_int and s >= 1):
        raise ValueError(f"strength={s!r}: engine mode {mode!r} needs {m.strength}")
    if mode == "topp" and not (is_num and 0 < s <= 1):
        raise ValueError(f"strength={s!r}: engine mode 'topp' needs {m.strength}")
    if mode == "noise" and not (is_num and s >= 0):
        raise ValueError(f"strength={s!r}: engine mode 'noise' needs {m.strength}")
    return s


def weight_transform(mode: str) -> Optional[Callable[[Tensor], Tensor]]:
    """The per-tensor weight transform of ``mode`` (None if it leaves weights alone).
    Example: weight_transform("int4")(w) == quantize_weights(w, 4)."""
    check_engine(mode)
    return {"bf16": lambda w: round_weights(w, torch.bfloat16), "fp16": lambda w: round_weights(w, torch.float16),
            "int8": lambda w: quantize_weights(w, 8), "int4": lambda w: quantize_weights(w, 4)}.get(mode)


def make_warp(mode: str, strength=None, seed: int = 0):
    """The logit warp ``(logp_all (B, V), generator) -> logp_all'`` of ``mode`` (None if it has none).

    The noise warp ignores the sampling generator and draws from its own, seeded with ``seed`` (one
    per device, made on first use), so the noise does not shift the token draws' random stream.
    Example: make_warp("topk", 3)(logp, g) == topk_warp(logp, 3).
    """
    s = check_engine(mode, strength)
    if mode in ("bf16", "fp16"):
        dtype = torch.bfloat16 if mode == "bf16" else torch.float16
        return lambda logp, generator=None: round_logp(logp, dtype)
    if mode == "topk":
        return lambda logp, generator=None: topk_warp(logp, s)
    if mode == "topp":
        return lambda logp, generator=None: topp_warp(logp, s)
    if mode == "noise":
        gens: dict = {}

        def warp(logp, generator=None):
            dev = logp.device
            if dev not in gens:
                gens[dev] = torch.Generator(device=dev).manual_seed(seed)
            return noise_warp(logp, s, gens[dev])
        return warp
    return None


def sync_engine(engine: torch.nn.Module, state_dict: dict, mode: str) -> torch.nn.Module:
    """Load the trainer's weights (for ``lag``: the stale ones) into ``engine`` and apply the mode's
    weight transform in place; returns ``engine``. Called by the trainer after every update.
    Tied weights (the toy head) are transformed once. Example: sync_engine(eng, pol.state_dict(), "int8")."""
    f = weight_transform(mode)
    engine.load_state_dict(state_dict)
    if f is not None:
        with torch.no_grad():
            for p in engine.parameters():                                    # deduplicated: tied once
                if p.is_floating_point():
                    p.copy_(f(p))
    return engine


def make_engine(policy: torch.nn.Module, mode: str = "exact", strength=None, seed: int = 0):
    """The sampler of engine ``mode``: ``policy`` itself for "exact"; otherwise a deep copy in eval
    mode without gradients, its weights transformed (``sync_engine``) and ``logit_warp`` set.

    ValueError (before any work) for an unknown ``mode``, a bad ``strength`` (see ``ENGINES``) or a
    policy without a ``logit_warp`` attribute (e.g. ``ScriptedPolicy``) in a mode other than "exact".
    Example: eng = make_engine(policy, "topp", 0.9); eng.generate(...) samples with top-p 0.9.
    """
    check_engine(mode, strength)
    if mode == "exact":
        return policy
    if not hasattr(policy, "logit_warp") or not isinstance(policy, torch.nn.Module):
        raise ValueError(f"policy: engine mode {mode!r} needs a torch policy with a logit_warp attribute "
                         f"(ToyTransformer, TinyLM, HFPolicy), got {type(policy).__name__}")
    engine = copy.deepcopy(policy).eval()
    engine.requires_grad_(False)
    sync_engine(engine, policy.state_dict(), mode)
    engine.logit_warp = make_warp(mode, strength, seed)
    return engine
