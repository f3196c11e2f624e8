"""Loss aggregation: how a (B, T) matrix of token losses becomes one scalar (verl ``agg_loss``).

Dimension legend: B rollouts, T token positions. m = loss mask, l = token loss, n_i = sum_t m_{i,t},
B' = number of rows with n_i > 0 (fully masked rows are excluded, never divided by zero).

    token-mean               sum_{i,t} m l / sum_{i,t} m                       (DAPO; verl default)
    token-sum                sum_{i,t} m l
    seq-mean-token-sum       (1/B') sum_i sum_t m l
    seq-mean-token-mean      (1/B') sum_i (sum_t m l / n_i)                    (GRPO, GSPO, SAPO)
    seq-mean-token-sum-norm  (1/B') sum_i sum_t m l / L                        (verl 0.9.1)

Normalizers of seq-mean-token-sum-norm: verl 0.9.1 divides by B' (non-empty rows) and by
L = ``norm_len`` (verl's ``loss_scale_factor``, default the padded length T). Dr. GRPO
(arXiv 2503.20783) writes (1/B) sum_i sum_t m l / L_max with B all rows and L_max the generation
budget, a constant; the two agree when no row is empty and L = L_max. Older verl and ARLArena's
copy do not divide by B at all. Pass ``n_seqs`` / ``norm_len`` to get either convention.

Length bias: under seq-mean-token-mean a token of row i weighs 1 / (B' n_i), so short trajectories
get larger per-token updates (ARLArena, arXiv 2602.21534).

Every mode is linear in l, so ``agg_weights`` returns the (B, T) weight of each token and
``aggregate`` is ``sum(w * l)``; diagnostics use the weights to split a loss by turn exactly.
"""
from __future__ import annotations

import torch

__all__ = ["AGGREGATIONS", "agg_weights", "aggregate"]

AGGREGATIONS = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def agg_weights(mask: torch.Tensor, mode: str = "token-mean", *, dtype=torch.float32, n_tokens=None,
                n_seqs=None, norm_len=None) -> torch.Tensor:
    """Weight of each token in the aggregate (B, T): loss = sum_{i,t} w_{i,t} l_{i,t}.

    ``n_tokens`` / ``n_seqs`` override the token and row counts (verl's ``batch_num_tokens`` /
    ``global_batch_size`` for data-parallel shards); ``norm_len`` is the sum-norm length L.
    Example: mask [[1, 1, 0], [1, 0, 0]], seq-mean-token-mean -> [[.25, .25, 0], [.5, 0, 0]].
    """
    if mode not in AGGREGATIONS:
        raise ValueError(f"agg must be one of {AGGREGATIONS}, got {mode!r}")
    m = mask.to(dtype)                                                          # (B, T)
    if mode == "token-mean":
        n = m.sum() if n_tokens is None else torch.as_tensor(n_tokens, dtype=dtype, device=m.device)
        return m / n.clamp(min=1)
    if mode == "token-sum":
        return m
    n_i = m.sum(1, keepdim=True)                                                # (B, 1)
    rows = (n_i > 0).to(dtype).sum() if n_seqs is None else torch.as_tensor(n_seqs, dtype=dtype, device=m.device)
    w = m / rows.clamp(min=1)                                                   # seq-mean
    if mode == "seq-mean-token-mean":
        return w / n_i.clamp(min=1)
    if mode == "seq-mean-token-sum-norm":
        return w / float(mask.shape[1] if norm_len is None else norm_len)
    return w


def aggregate(loss: torch.Tensor, mask: torch.Tensor, mode: str = "token-mean", **kw) -> torch.Tensor:
    """Aggregate token losses (B, T) to a scalar; off-mask entries are ignored even if non-finite.

    Example: losses [[1, 1, 1, 0], [2, 2, 0, 0]] with their masks, seq-mean-token-sum-norm (L = 4)
    -> (3 / 4 + 4 / 4) / 2 = 0.875; token-mean -> 7 / 5 = 1.4.
    """
    if loss.shape != mask.shape:
        raise ValueError(f"loss must have the shape of mask (B, T)={tuple(mask.shape)}, got {tuple(loss.shape)}")
    mask = mask.bool()
    w = agg_weights(mask, mode, dtype=loss.dtype, **kw)                         # (B, T)
    return (torch.where(mask, loss, torch.zeros_like(loss)) * w).sum()
