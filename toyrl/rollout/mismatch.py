"""How far the rollout engine is from the trainer: the gap between the log-probs a sample was drawn with and
the trainer's own recompute, per step, per turn index and per token-probability bin.

Dimension legend: B rollouts, T token positions, H turns, K probability bins.

A rollout engine (vLLM / SGLang in real runs: bf16 kernels, quantized weights, top-p, a lagging weight copy)
samples token y_t with probability p_engine(y_t) = exp(rollout_logp_t); the fp32 trainer gives the same token
p_trainer(y_t) = exp(old_logp_t). On the loss-mask tokens

    d_t = log rho_t = old_logp_t - rollout_logp_t          (trainer over engine, verl's log_ratio sign)

The tokens were drawn from the ENGINE, so the divergence we can estimate without bias is KL(engine || trainer),
with Schulman's k3 estimator (joschu.net, "Approximating KL divergence", 2020) and r = p_trainer / p_engine:

    KL(engine || trainer) = E_engine[ r - 1 - log r ] = E_engine[ exp(d) - 1 - d ]          (k3 >= 0 per token)

(E_engine[r] = 1, so the k3 mean and the plain mean of -d estimate the same KL; k3 is never negative.)
The gap is largest on tokens the trainer finds unlikely (low p_trainer): a few of them carry ratios far from 1,
which is why the mismatch is reported binned by p_trainer and by its extremes, not only by its mean.

    stats = engine_mismatch(old_logp, rollout_logp, mask, turn_id)     # floats and lists, one host sync
    row = mismatch_row(old_logp, rollout_logp, mask, turn_id)          # the trainer's engine_* run-log columns

Ratios and k3 use d clamped to [-20, 20] before ``exp`` (verl's safety bound), so one token the trainer or the
engine gives probability 0 (log-prob -inf) cannot overflow them; ``frac_far`` and the binned gap use the
unclamped d (log-probs floored at -1000).
"""
from __future__ import annotations

import numbers
from typing import Optional, Sequence

import torch

__all__ = ["PROB_BINS", "ROW_KEYS", "engine_mismatch", "mismatch_row"]

PROB_BINS = (0.0, 1e-3, 1e-2, 0.1, 0.5, 0.9, 1.0)
"""default edges of the trainer-probability bins: [0, 1e-3), [1e-3, 1e-2), ..., [0.9, 1.0]"""
ROW_KEYS = ("engine_kl", "engine_ratio_min", "engine_ratio_max", "engine_ratio_p99", "engine_frac_far",
            "engine_kl_turn", "engine_gap_by_prob", "engine_count_by_prob")
"""the run-log columns ``mismatch_row`` writes, in order"""
LOG_BOUND = 20.0
"""|d| is clamped to this before ``exp`` (ratios and k3); verl's SAFETY_BOUND"""
LOGP_FLOOR = -1e3
"""log-probs below this (-inf included) are raised to it before any arithmetic"""


def _check(old_logp, rollout_logp, mask, turn_id, H, bins, far) -> tuple:
    """ValueError naming the bad argument; returns the bin edges as a tuple of floats."""
    if not isinstance(old_logp, torch.Tensor) or old_logp.dim() != 2 or not old_logp.is_floating_point():
        raise ValueError(f"old_logp must be a float tensor (B, T), got {getattr(old_logp, 'shape', type(old_logp))}")
    for name, x in (("rollout_logp", rollout_logp), ("mask", mask), ("turn_id", turn_id)):
        if not isinstance(x, torch.Tensor) or x.shape != old_logp.shape:
            got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"{name} must have the shape of old_logp (B, T)={tuple(old_logp.shape)}, got {got}")
    if not rollout_logp.is_floating_point():
        raise ValueError(f"rollout_logp must be a float tensor, got {rollout_logp.dtype}")
    if mask.dtype != torch.bool:
        raise ValueError(f"mask must be a bool tensor, got {mask.dtype}")
    if turn_id.is_floating_point() or turn_id.dtype == torch.bool:
        raise ValueError(f"turn_id must be an integer tensor, got {turn_id.dtype}")
    if H is not None and (isinstance(H, bool) or not isinstance(H, numbers.Integral) or H < 0):
        raise ValueError(f"H must be a non-negative int or None, got {H!r}")
    edges = tuple(float(b) for b in bins)
    if len(edges) < 2 or edges[0] != 0.0 or edges[-1] != 1.0 or any(a >= b for a, b in zip(edges, edges[1:])):
        raise ValueError(f"bins must be strictly increasing probability edges from 0.0 to 1.0, got {bins!r}")
    if not far > 0:
        raise ValueError(f"far must be > 0, got {far!r}")
    if bool((torch.isnan(old_logp) | torch.isnan(rollout_logp))[mask].any()):
        raise ValueError("old_logp and rollout_logp must not be NaN on mask tokens")
    return edges


def engine_mismatch(old_logp: torch.Tensor, rollout_logp: torch.Tensor, mask: torch.Tensor, turn_id: torch.Tensor,
                    H: Optional[int] = None, bins: Sequence[float] = PROB_BINS, *, far: float = 1.0) -> dict:
    """Summary of the engine-trainer gap d = old_logp - rollout_logp over the ``mask`` tokens -> dict.

        kl_k3        mean_t [exp(d_t) - 1 - d_t]          KL(engine || trainer), k3 (Schulman 2020)
        kl_k3_turn   the same mean per turn index k = 0..H-1 (tokens_turn: their counts)
        ratio_*      rho = exp(d): p01, p50, p99 quantiles (linear interpolation), min, max
        frac_far     share of tokens with |d| > far (1 nat: rho outside [1/e, e])
        gap_by_prob  per trainer-probability bin [e_k, e_k+1) of exp(old_logp): mean |d|; count_by_prob its tokens

    ``turn_id`` < 0 on a mask token leaves it out of the per-turn lists only; ``H`` defaults to the largest mask
    turn id + 1 (mask turn ids >= H are an error). Empty sets give the identity, never NaN: no mask tokens ->
    kl 0, every ratio 1, frac_far 0; an empty turn or bin -> 0.0 with count 0. Values are Python floats and
    lists (one host sync), ready for a run-log row; ``n_tokens`` and ``bin_edges`` say what they cover.

    Example: old [[-1., -1., -3.]], rollout [[-1., -2., -1.]], mask all True, turn_id [[0, 0, 1]]
        -> d [0., 1., -2.]; k3 [0., e - 2, e^-2 + 1] = [0., 0.7183, 1.1353]; kl_k3 0.6179;
           kl_k3_turn [0.3591, 1.1353]; ratio_min 0.1353, ratio_max 2.7183; frac_far 1/3 (|d| = 2);
           exp(old) = [0.37, 0.37, 0.05] -> bins [0.1, 0.5) holds 2 tokens (mean |d| 0.5), [0.01, 0.1) holds 1 (2.0).
    With old_logp == rollout_logp: kl_k3 0, every ratio 1, frac_far 0, every gap 0 (counts unchanged).
    """
    edges = _check(old_logp, rollout_logp, mask, turn_id, H, bins, far)
    dev = old_logp.device
    lo_t = old_logp.double().clamp(min=LOGP_FLOOR)                                     # (B, T)
    d = lo_t - rollout_logp.double().clamp(min=LOGP_FLOOR)                             # (B, T) log rho
    dm = d[mask]                                                                       # (N,) mask tokens
    dc = dm.clamp(-LOG_BOUND, LOG_BOUND)
    k3 = torch.expm1(dc) - dc                                                          # (N,) exp(d) - 1 - d >= 0
    n = dm.numel()
    rho = torch.exp(dc) if n else torch.ones(1, dtype=torch.float64, device=dev)       # (N,) or the identity
    q = torch.quantile(rho, torch.tensor([0.01, 0.5, 0.99], dtype=torch.float64, device=dev))
    # per turn index
    tid = turn_id[mask].long()                                                         # (N,)
    if H is None:
        H = int(tid.max().clamp(min=-1)) + 1 if n else 0
    elif n and int(tid.max()) >= H:
        raise ValueError(f"turn_id has mask tokens at turn {int(tid.max())} >= H={H}")
    H = int(H)
    keep = tid >= 0
    col = torch.where(keep, tid, torch.full_like(tid, H))                              # (N,) H: dropped column
    turn_sum = torch.zeros(H + 1, dtype=torch.float64, device=dev).index_add_(0, col, k3)[:H]       # (H,)
    turn_n = torch.zeros(H + 1, dtype=torch.float64, device=dev).index_add_(0, col, torch.ones_like(k3))[:H]
    # per trainer-probability bin: bucketize with right=True puts p in [e_k, e_k+1); p >= 1 in the last bin
    inner = torch.tensor(edges[1:-1], dtype=torch.float64, device=dev)
    b = torch.bucketize(lo_t[mask].exp(), inner, right=True)                           # (N,) bin 0..K-1
    K = len(edges) - 1
    gap_sum = torch.zeros(K, dtype=torch.float64, device=dev).index_add_(0, b, dm.abs())             # (K,)
    gap_n = torch.zeros(K, dtype=torch.float64, device=dev).index_add_(0, b, torch.ones_like(dm))    # (K,)
    scalars = torch.stack([k3.sum() / max(n, 1), q[0], q[1], q[2], rho.min(), rho.max(),
                           (dm.abs() > far).double().sum() / max(n, 1)])
    flat = torch.cat([scalars, turn_sum / turn_n.clamp(min=1), turn_n, gap_sum / gap_n.clamp(min=1), gap_n]).tolist()
    s, flat = flat[:7], flat[7:]
    return {"kl_k3": s[0], "ratio_p01": s[1], "ratio_p50": s[2], "ratio_p99": s[3], "ratio_min": s[4],
            "ratio_max": s[5], "frac_far": s[6], "kl_k3_turn": flat[:H], "tokens_turn": [int(c) for c in flat[H:2 * H]],
            "gap_by_prob": flat[2 * H:2 * H + K], "count_by_prob": [int(c) for c in flat[2 * H + K:]],
            "bin_edges": list(edges), "n_tokens": n}


def mismatch_row(old_logp: torch.Tensor, rollout_logp: torch.Tensor, mask: torch.Tensor, turn_id: torch.Tensor,
                 H: Optional[int] = None, bins: Sequence[float] = PROB_BINS, *, far: float = 1.0) -> dict:
    """The engine columns of a trainer's run-log row (``ROW_KEYS``), from ``engine_mismatch``.

        engine_kl, engine_ratio_min, engine_ratio_max, engine_ratio_p99, engine_frac_far   floats
        engine_kl_turn (H,), engine_gap_by_prob (K,), engine_count_by_prob (K,)             lists

    Example: with old_logp == rollout_logp -> engine_kl 0.0, ratios 1.0, frac_far 0.0, engine_gap_by_prob all
    0.0, engine_count_by_prob the token count per trainer-probability bin.
    """
    m = engine_mismatch(old_logp, rollout_logp, mask, turn_id, H, bins, far=far)
    return {"engine_kl": m["kl_k3"], "engine_ratio_min": m["ratio_min"], "engine_ratio_max": m["ratio_max"],
            "engine_ratio_p99": m["ratio_p99"], "engine_frac_far": m["frac_far"], "engine_kl_turn": m["kl_k3_turn"],
            "engine_gap_by_prob": m["gap_by_prob"], "engine_count_by_prob": m["count_by_prob"]}
