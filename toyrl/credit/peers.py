"""Estimators the peers ship and toyrl lacked: GDPO and the Optimal Token Baseline (plain and multi-turn).

Dimension legend: B rollouts, T token positions, D reward components, L compact policy-token index.

All three return token-level advantages (B, T), zero off the mask, and follow verl 0.9.1
(``compute_gdpo_outcome_advantage``, ``compute_optimal_token_baseline_advantage``,
``compute_multi_turn_optimal_token_baseline_advantage``); FORMULAS.md 1.22-1.24. Group statistics are
``torch.unique(return_inverse=True)`` plus ``index_add_`` over rows, never a loop over samples.
On a TurnBatch (the registered names) each turn's reward sits on its last policy token; OTB's
sum_v pi_v^2 needs the actor's logits (verl: ``calculate_sum_pi_squared``): pass ``sum_pi_squared``
(B, T); without it toyrl uses pi(y)^2, a lower bound (our choice, so the trainer can run OTB).

    A = gdpo(components_BD, group, mask)                                        # (B, T)
    A, G = optimal_token_baseline(token_reward, mask, group, old_logp, sum_pi_sq)
    A, G = tir_optimal_token_baseline(token_reward, mask, group, old_logp, sum_pi_sq)
"""
from __future__ import annotations

from typing import Optional

import torch

from ..batch import check_finite
from .registry import register_estimator

__all__ = ["gdpo", "optimal_token_baseline", "tir_optimal_token_baseline", "token_energy", "energy_baseline",
           "turn_end_rewards"]


def _groups(group: torch.Tensor) -> tuple[torch.Tensor, int]:
    g = torch.unique(group, return_inverse=True)[1].view(-1)                   # (B,) dense ids
    return g, int(g.max()) + 1 if g.numel() else 0


def _rows_sum(x: torch.Tensor, g: torch.Tensor, S: int) -> torch.Tensor:
    """Sum of the rows of x (B, ...) over each group -> (S, ...)."""
    return x.new_zeros((S,) + tuple(x.shape[1:])).index_add_(0, g, x)


def gdpo(components: torch.Tensor, group: torch.Tensor, mask: torch.Tensor, *, weights=None,
         eps: float = 1e-6, whiten_eps: float = 1e-8) -> torch.Tensor:
    """GDPO (arXiv 2601.05242; verl ``gdpo``): normalize each reward component in its group, sum, whiten.

        A_{i,d} = (r_{i,d} - mean_g r_{.,d}) / (std_g r_{.,d} + eps)       (unbiased std, eps 1e-6)
        S_i = sum_d w_d A_{i,d};   A_{i,t} = (S_i - mu) / sqrt(var + 1e-8) m_{i,t}

    mu, var (unbiased) run over every mask token of the batch, so a long response counts once per
    token. Singleton group: mean 0, std 1 (verl's GRPO rule, A = r / (1 + eps)), not 0. Raises
    ValueError when the batch has fewer than 2 mask tokens. components (B, D), group (B,), mask (B, T).
    Paper vs library: the paper's batch normalization is over responses [S]; verl's (followed here)
    whitens over tokens; TRL's ``normalize_then_sum`` standardizes over sequences with eps 1e-4.
    Example: components [[1, 0], [0, 0], [0, 10]], one group, one token each -> A_d1 [1.155, -.577,
    -.577], A_d2 [-.577, -.577, 1.155], S [.577, -1.155, .577] -> whitened [.577, -1.155, .577].
    """
    if components.dim() != 2 or components.shape[0] != mask.shape[0] or group.shape != (mask.shape[0],):
        raise ValueError(f"components must be (B, D), group (B,) and mask (B, T) with one B, got "
                         f"{tuple(components.shape)}, {tuple(group.shape)}, {tuple(mask.shape)}")
    check_finite("components", components)
    r = components.to(torch.float64)                                            # (B, D)
    g, S = _groups(group)
    n = torch.bincount(g, minlength=S).to(r.dtype)[:, None]                     # (S, 1)
    mean = _rows_sum(r, g, S) / n
    std = (_rows_sum((r - mean[g]) ** 2, g, S) / (n - 1).clamp(min=1)).sqrt()   # (S, D) unbiased
    mean, std = torch.where(n > 1, mean, 0.0), torch.where(n > 1, std, 1.0)     # singleton: verl's GRPO rule
    A = (r - mean[g]) / (std[g] + eps)                                          # (B, D)
    w = torch.ones(r.shape[1], dtype=r.dtype) if weights is None else torch.as_tensor(weights, dtype=r.dtype)
    check_finite("weights", w)
    m = mask.to(r.dtype)
    x = (A @ w.to(A.device))[:, None] * m                                       # (B, T)
    N = m.sum()
    if N < 2:
        raise ValueError(f"gdpo whitens over the mask tokens and needs at least 2, got {int(N)}")
    mu = x.sum() / N
    var = ((x - mu) ** 2 * m).sum() / (N - 1)
    return ((x - mu) * torch.rsqrt(var + whiten_eps) * m).to(components.dtype)


def token_energy(old_logp: torch.Tensor, sum_pi_sq: torch.Tensor, mask: torch.Tensor,
                 is_weights: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Cumulative logit-gradient energy W_t = sum_{j<=t} m_j w_j, w = 1 - 2 pi(y) + sum_v pi_v^2 (B, T).

    w = ||e_y - pi||^2 in [0, 2); with rollout IS weights rho, w <- w rho^2.
    Example: pi(y) [0.5, 1.0, 0.2], sum pi^2 [0.5, 1.0, 0.2], all masked -> w [0.5, 0, 0.8], W [0.5, 0.5, 1.3].
    """
    check_finite("old_logp", old_logp, log_prob=True)
    check_finite("sum_pi_sq", sum_pi_sq)
    if is_weights is not None:
        check_finite("is_weights", is_weights)
    w = 1.0 - 2.0 * torch.exp(old_logp) + sum_pi_sq                            # (B, T)
    w = w if is_weights is None else w * is_weights ** 2
    return (w * mask).cumsum(-1)


def energy_baseline(G: torch.Tensor, W: torch.Tensor, valid: torch.Tensor, group: torch.Tensor,
                    member: torch.Tensor, *, zero_tail: bool = True, eps: float = 1e-8) -> torch.Tensor:
    """B_t = sum_{i in g} valid G W / (sum_{i in g} valid W + eps) per group and index t -> (B, T').

    Only ``member`` rows form groups (others get B = 0); a group of one member gets B = 0. ``zero_tail``: the unique
    longest member (length = valid count) gets B = 0 from the second-longest length on.
    Example: G [[1, 1], [0, 0]], W [[1, 2], [1, 0]], one group, lengths [2, 1] -> B row 0 [0.5, 0]
    (zero tail from index 1), row 1 [0.5, 1.0].
    """
    g, S = _groups(group)                                                       # non-members add 0 and count 0
    v = (valid & member[:, None]).to(G.dtype)
    Bt = _rows_sum(G * W * v, g, S) / (_rows_sum(W * v, g, S) + eps)           # (S, T')
    size = _rows_sum(member.to(G.dtype), g, S)                                  # (S,)
    base = torch.where(((size[g] > 1) & member)[:, None], Bt[g], torch.zeros_like(G))   # (B, T')
    if not zero_tail:
        return base
    n = valid.sum(1).to(G.dtype)                                                # (B,) lengths
    n_m = torch.where(member, n, -1.0)
    top = G.new_full((S,), -1.0).scatter_reduce(0, g, n_m, "amax")             # (S,) longest
    is_top = member & (n_m == top[g])
    n_top = _rows_sum(is_top.to(G.dtype), g, S)
    second = G.new_full((S,), -1.0).scatter_reduce(0, g, torch.where(is_top, -1.0, n_m), "amax")
    row = is_top & (n_top[g] == 1) & (size[g] > 1)                              # (B,) the unique longest
    tail = torch.arange(G.shape[1], device=G.device)[None, :] >= second[g][:, None]
    return torch.where(row[:, None] & tail, torch.zeros_like(base), base)


def _returns_to_go(token_reward: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (token_reward * mask).flip(-1).cumsum(-1).flip(-1)                   # (B, T), gamma = 1


@torch.no_grad()
def optimal_token_baseline(token_reward, mask, group, old_logp, sum_pi_sq, *, is_weights=None,
                           zero_tail: bool = True, eps: float = 1e-8) -> tuple[torch.Tensor, torch.Tensor]:
    """Optimal Token Baseline (arXiv 2602.07078; verl ``optimal_token_baseline``) -> (A, G), (B, T).

        G_{i,t} = sum_{s>=t} m r;   B_t = sum_{i in g} m G W / (sum_{i in g} m W + 1e-8);   A = (G - B) m

    W = ``token_energy`` (trajectories with more gradient energy weigh more in the baseline).
    t is the padded POSITION: with observations interleaved, rows are misaligned (use the TIR form).
    Singleton group -> A = G. Zero tail (verl's default, always on in its trainer) on positions.
    Paper vs library: the paper states the baseline per timestep in expectation; the energy proxy,
    the zero-tail rule and eps are verl's.
    Example: one group, outcome rewards R [1, 0] at the last token, lengths 2 and 1, W [[1, 2], [1, 1]]
    -> B row 0 [0.5, 0] (its tail beyond length 1 is zeroed), row 1 [0.5, .] -> A [[0.5, 1], [-0.5, 0]].
    """
    m = mask.to(token_reward.dtype)
    G = _returns_to_go(token_reward, m)
    W = token_energy(old_logp, sum_pi_sq, m, is_weights)
    member = torch.ones_like(group, dtype=torch.bool)
    return (G - energy_baseline(G, W, mask.bool(), group, member, zero_tail=zero_tail, eps=eps)) * m, G


@torch.no_grad()
def tir_optimal_token_baseline(token_reward, mask, group, old_logp, sum_pi_sq, *, is_weights=None,
                               zero_tail: bool = True, eps: float = 1e-8) -> tuple[torch.Tensor, torch.Tensor]:
    """Multi-turn OTB (arXiv 2602.07078; verl ``tir_optimal_token_baseline``): baseline on the k-th POLICY token.

    Returns (A, G), (B, T). Same G and W as ``optimal_token_baseline``, then each row is compacted to its policy tokens
    (k = 1..L_i), B_k = sum_{i in g} G_{i,k} W_{i,k} / (sum_{i in g} W_{i,k} + 1e-8) over members
    with k <= L_i, and A = G - B is scattered back; observation and padding positions get 0. Rows
    with L_i = 0 are left out of their group (A = 0). Zero tail on the compact length.
    Paper vs library: verl's docstring says zero tail defaults to False; its signature (followed) says True.
    Example: mask [[1, 0, 1], [1, 1, 0]], R [1, 0] at each row's last policy token, w = 1 everywhere ->
    compact G [[1, 1], [0, 0]], W [[1, 2], [1, 2]], B [0.5, 0.5] -> A [[0.5, 0, 0.5], [-0.5, -0.5, 0]].
    """
    m = mask.to(token_reward.dtype)
    G = _returns_to_go(token_reward, m)
    W = token_energy(old_logp, sum_pi_sq, m, is_weights)
    pm = mask.bool()
    L = pm.sum(1)                                                               # (B,)
    k = (pm.long().cumsum(1) - 1).clamp(min=0)                                  # (B, T) compact index
    Lmax = max(int(L.max()) if L.numel() else 0, 1)
    Gc = G.new_zeros(G.shape[0], Lmax).scatter_add_(1, k, G * m)               # (B, L)
    Wc = W.new_zeros(W.shape[0], Lmax).scatter_add_(1, k, W * m)
    valid = torch.arange(Lmax, device=G.device)[None, :] < L[:, None]           # (B, L)
    Bc = energy_baseline(Gc, Wc, valid, group, L > 0, zero_tail=zero_tail, eps=eps)
    return (Gc - Bc).gather(1, k) * m, G


# ---- on a TurnBatch (registered as gdpo, optimal_token_baseline, tir_optimal_token_baseline) -----
def turn_end_rewards(batch) -> torch.Tensor:
    """Each valid turn's reward on its last policy token (B, T), verl's token_level_rewards layout.

    Example: turn_id [[0, 0, 0, 1]], policy [[F, T, F, T]], turn_reward [[0.5, 1.]] -> [[0, .5, 0, 1.]].
    """
    pm, tid = batch.policy_mask, batch.turn_id.clamp(min=0)
    pos = torch.where(pm, torch.arange(batch.T, device=pm.device).expand_as(tid), -1)     # (B, T)
    end = torch.full((batch.B, batch.H), -1, dtype=torch.long, device=pm.device)
    end = end.scatter_reduce(1, tid, pos, "amax")                               # (B, H) last policy position
    r = batch.turn_reward * (batch.turn_mask & (end >= 0)).to(batch.turn_reward.dtype)
    return torch.zeros(batch.B, batch.T, dtype=r.dtype, device=r.device).scatter_add_(1, end.clamp(min=0), r)


def _otb_inputs(batch, sum_pi_squared):
    """sum_v pi^2 (B, T): given by the caller (the actor's logits), else pi(y)^2, its lower bound."""
    return torch.exp(2 * batch.old_logp) if sum_pi_squared is None else sum_pi_squared


@register_estimator("gdpo", level="token")
def gdpo_batch(batch, *, components=None, weights=None, eps: float = 1e-6) -> torch.Tensor:
    """GDPO over reward components (B, D) (default: the outcome alone, = GRPO then token whitening)."""
    comps = batch.outcome()[:, None] if components is None else torch.as_tensor(components).to(batch.turn_reward)
    return gdpo(comps, batch.group, batch.policy_mask, weights=weights, eps=eps)


@register_estimator("optimal_token_baseline", level="token")
def otb_batch(batch, *, sum_pi_squared=None, is_weights=None, zero_tail: bool = True) -> torch.Tensor:
    """Optimal Token Baseline on padded positions; sum_pi_squared (B, T) from the actor, else pi(y)^2."""
    return optimal_token_baseline(turn_end_rewards(batch), batch.policy_mask, batch.group, batch.old_logp,
                                  _otb_inputs(batch, sum_pi_squared), is_weights=is_weights, zero_tail=zero_tail)[0]


@register_estimator("tir_optimal_token_baseline", level="token")
def tir_otb_batch(batch, *, sum_pi_squared=None, is_weights=None, zero_tail: bool = True) -> torch.Tensor:
    """Multi-turn Optimal Token Baseline on the policy-token index; sum_pi_squared as ``otb_batch``."""
    return tir_optimal_token_baseline(turn_end_rewards(batch), batch.policy_mask, batch.group, batch.old_logp,
                                      _otb_inputs(batch, sum_pi_squared), is_weights=is_weights,
                                      zero_tail=zero_tail)[0]
