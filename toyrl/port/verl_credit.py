"""verl-compatible advantage functions: the names, keyword signatures and returns of verl 0.9.1 ``core_algos``.

Dimension legend: B responses (verl's bs), L response tokens.

A prototype written against toyrl ports to verl by swapping imports, and back:

    from toyrl.port.verl import compute_grpo_outcome_advantage
    adv, ret = compute_grpo_outcome_advantage(token_level_rewards, response_mask, index=uid)

Each function is a thin adapter over the vectorized estimators of ``toyrl.credit`` (no Python loop
over samples or groups); GRPO and RLOO call their group statistics (``credit.base.group_norm``)
straight on the ids of ``index`` (integer ids as they are, strings numbered once), so they do not
renumber the groups a second time; in verl's own layout (each uid repeated over its G consecutive
rows) the statistics are rows of an (S, G) view, with no scatter at all. ``index`` is verl's numpy array of group ids (any hashable values, e.g.
uuid strings); ``config`` may be a dict, an OmegaConf config or any object with the attributes verl
reads. Singleton groups follow verl here (GRPO: A = R / (1 + eps); RLOO, OPO, REINFORCE++-baseline:
no baseline; GPG: alpha R / F; Pass@k raises ValueError), while ``toyrl.credit`` itself gives 0.

``verl_advantage.register_with_verl()`` adds toyrl's multi-turn estimators to verl's registry as ``toyrl_<name>``.
"""
from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np
import pandas as pd
import torch

from ..batch import TurnBatch, token_to_turn
from ..credit.base import check, group_norm, masked_whiten
from ..credit.gae import gae_scan
from ..credit.outcome import dr_grpo, gpg, grpo_passk, opo, token_returns
from ..segments import dense_index, segment_count

__all__ = [
    "compute_grpo_outcome_advantage", "compute_rloo_outcome_advantage",
    "compute_reinforce_plus_plus_outcome_advantage", "compute_reinforce_plus_plus_baseline_outcome_advantage",
    "compute_remax_outcome_advantage", "compute_opo_outcome_advantage", "compute_grpo_passk_outcome_advantage",
    "compute_gpg_outcome_advantage", "compute_gae_advantage_return", "batch_from_verl", "MULTI_TURN",
]


def _cfg(config: Any, key: str, default: Any) -> Any:
    """``config[key]`` for a dict / OmegaConf / verl AlgoConfig, ``config.key`` for any object, else default."""
    if config is None:
        return default
    get = getattr(config, "get", None)
    if callable(get):
        try:
            return get(key, default)
        except Exception:  # an object whose .get has another meaning
            pass
    return getattr(config, key, default)


def _labels(index, B: int) -> tuple[Any, int, int]:
    """verl's ``index`` (B labels) as integers in [lo, lo + S) -> (ids, lo, S), ids a numpy array or a tensor.

    Integer labels (numpy or torch) whose range is under 4B + 16 stay as they are (shared, not
    copied): no sort and no hash. Other labels of any hashable kind (verl: uuid strings) are numbered
    by ``pandas.factorize``, a hash table (~0.2 ms for 8192 uid strings against ~2 ms for ``np.unique``),
    in order of first appearance; wider integer tensors by ``torch.unique``. Example: [7, 9, 7] ->
    ([7, 9, 7], 7, 3); ["b", "a", "b"] -> ([0, 1, 0], 0, 2).
    """
    if isinstance(index, torch.Tensor):
        ids = index.reshape(-1)
        exact = ids.numel() > 0 and not ids.is_floating_point() and ids.dtype != torch.bool
        lo, hi = torch.stack(ids.aminmax()).tolist() if exact else (0, 2**62)   # one sync
        if hi - lo >= 4 * B + 16:
            ids, S = dense_index(ids)
            lo, hi = 0, S - 1
    else:
        ids = np.asarray(index).reshape(-1)
        lo, hi = (int(ids.min()), int(ids.max())) if ids.dtype.kind in "iu" and ids.size else (0, 2**62)
        if hi - lo >= 4 * B + 16:
            ids, uniques = pd.factorize(ids)
            if (ids < 0).any():                                           # a missing label (None / NaN)
                raise ValueError("index holds a missing label (None or NaN)")
            lo, hi = 0, len(uniques) - 1
    if ids.shape[0] != B:
        raise ValueError(f"index: expected {B} labels (one per response), got {ids.shape[0]}")
    return ids, lo, hi - lo + 1


def _groups(index, device, B: int, labels: Optional[tuple] = None) -> tuple[torch.Tensor, int, torch.Tensor]:
    """Segment ids (B,) in [0, S), the segment count S and the rows of each segment (S,) from verl's ``index``.

    The labels of ``_labels`` (or ``labels``, its result) minus their smallest; gaps in their range
    are empty segments, which no statistic reads. Example: [7, 9, 7] -> ([0, 2, 0], 3, [2, 0, 1]).
    """
    ids, lo, S = _labels(index, B) if labels is None else labels
    if isinstance(ids, torch.Tensor):
        g = ids.to(device).long() - lo if lo else ids.to(device).long()
    else:                                                                 # numpy: shift in its own dtype (uint64)
        g = torch.from_numpy((ids - ids.dtype.type(lo) if lo else ids).astype(np.int64, copy=False)).to(device)
    return g, S, segment_count(g, S, torch.long)


def _blocks(ids, lo: int, S: int) -> int:
    """G when the B labels ``ids`` (``_labels``) run lo, lo + 1, ..., lo + S - 1, each over G consecutive
    rows (verl's layout: one uid repeated over its G rollouts), else 0: then a group's statistics are
    a row of an (S, G) view, with no counts and no scatter. Two passes over the labels (numpy or torch).
    Example: [0, 0, 1, 1] -> 2; [0, 1, 0, 1] -> 0; [1, 1, 0, 0] -> 0.
    """
    B = ids.shape[0]
    if S < 1 or B % S:
        return 0
    rows = ids.reshape(S, B // S)                                          # (S, G)
    head = rows[:, 0]                                                      # (S,) each row's label
    return B // S if bool((rows == head[:, None]).all()) and bool((head[1:] - head[:-1] == 1).all()) else 0


def _block_norm(R: torch.Tensor, G: int, norm: str, ddof: int, eps: float) -> torch.Tensor:
    """``group_norm`` of R (B,) over groups of G > ddof consecutive rows (``_blocks``), in float64 like it -> (B,).

    Two-pass over the (S, G) view, in place on one float64 copy; a group of equal values has mean
    exactly its value (the float64 sum of float32 values is exact), so it gets exactly 0.
    Example: R [1., 0., 0., 0.], G 2, "mean" -> [0.5, -0.5, 0., 0.].
    """
    x = R.view(-1, G).to(torch.float64, copy=True)                         # (S, G) our own copy
    x.sub_(x.mean(1, keepdim=True))                                        # centered
    if norm == "mean":
        return x.view(-1).to(R.dtype)
    std = torch.linalg.vector_norm(x, dim=1, keepdim=True).mul_(1 / math.sqrt(max(G - ddof, 1)))   # (S, 1)
    den = std.add_(eps) if eps > 0 else torch.where(std > 0, std, 1.0)
    return torch.div(x, den, out=torch.empty_like(R).view(-1, G)).view(-1)   # written in R's dtype


def _returns(token_level_rewards: torch.Tensor) -> torch.Tensor:
    """Each response's total reward R (B,), checked finite (a ValueError naming the argument)."""
    if not isinstance(token_level_rewards, torch.Tensor) or token_level_rewards.dim() != 2:
        raise ValueError("token_level_rewards: expected a (B, L) tensor, got "
                         f"{getattr(token_level_rewards, 'shape', type(token_level_rewards).__name__)}")
    R = token_level_rewards.sum(-1)                                        # (B,)
    if not math.isfinite(float(R.sum(dtype=torch.float64))):               # no overflow in float64: one pass
        check("token_level_rewards (summed over tokens)", R, "B", {}, kind="float")   # names the position
    return R


def _tokens(a_B: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """A per-response scalar on every response token -> (B, L)."""
    return a_B[:, None] * response_mask                                    # (B, L)


@torch.no_grad()
def compute_grpo_outcome_advantage(token_level_rewards, response_mask, index, epsilon: float = 1e-6,
                                   norm_adv_by_std_in_grpo: bool = True, config=None):
    """GRPO as verl: (R - mean) / (std + eps) per ``index`` group, broadcast to tokens -> (adv, adv), (B, L)."""
    R = _returns(token_level_rewards)                                      # (B,)
    labels = _labels(index, R.shape[0])
    norm, G = "std" if norm_adv_by_std_in_grpo else "mean", _blocks(*labels)
    if G > 1:                                                              # verl's layout: an (S, G) view
        adv = _tokens(_block_norm(R, G, norm, 1, epsilon), response_mask)
        return adv, adv
    g, S, n = _groups(index, R.device, R.shape[0], labels)
    A = group_norm(R, g, S, norm=norm, ddof=1, eps=epsilon, count=n)
    if bool((n == 1).any()):                                               # verl: a singleton has mean 0, std 1
        A = torch.where((n > 1).index_select(0, g), A, R / (1 + epsilon) if norm_adv_by_std_in_grpo else R)
    adv = _tokens(A, response_mask)
    return adv, adv


@torch.no_grad()
def compute_rloo_outcome_advantage(token_level_rewards, response_mask, index, epsilon: float = 1e-6,
                                   config=None, **kwargs):
    """RLOO as verl: R - mean of the other rollouts (singleton: R) -> (adv, adv), (B, L)."""
    R = _returns(token_level_rewards)                                      # (B,)
    labels = _labels(index, R.shape[0])
    G = _blocks(*labels)
    if G > 1:                                                              # verl's layout: an (S, G) view
        adv = _tokens(_block_norm(R, G, "mean", 0, 0.0) * (G / (G - 1)), response_mask)
        return adv, adv
    g, S, n = _groups(index, R.device, R.shape[0], labels)
    scale = (n / (n - 1).clamp(min=1)).to(R.dtype)                        # (S,) G/(G-1); singleton: 1
    A = group_norm(R, g, S, norm="mean", count=n) * scale.index_select(0, g)   # rloo(): G/(G-1) (R - mean_g R)
    if bool((n == 1).any()):                                               # verl: a singleton keeps A = R
        A = torch.where((n > 1).index_select(0, g), A, R)
    adv = _tokens(A, response_mask)
    return adv, adv


@torch.no_grad()
def compute_reinforce_plus_plus_outcome_advantage(token_level_rewards, response_mask, config=None, **kwargs):
    """REINFORCE++ as verl: gamma return-to-go over response tokens, whitened -> (adv, returns), (B, L).

    gamma is read from ``config.gamma`` (verl requires a config; here it defaults to 1.0).
    """
    ret = token_returns(token_level_rewards, response_mask, float(_cfg(config, "gamma", 1.0)))
    return masked_whiten(ret, response_mask), ret


@torch.no_grad()
def compute_reinforce_plus_plus_baseline_outcome_advantage(token_level_rewards, response_mask, index,
                                                           epsilon: float = 1e-6, config=None, **kwargs):
    """REINFORCE++-baseline as verl: R - group mean (singleton: R), tiled, whitened over tokens -> (adv, adv)."""
    R = _returns(token_level_rewards)
    g, _, n = _groups(index, R.device, R.shape[0])
    G = n.index_select(0, g)                                               # (B,) group size of each row
    adv = masked_whiten(_tokens(torch.where(G > 1, dr_grpo(R, g), R), response_mask), response_mask)
    return adv, adv


@torch.no_grad()
def compute_remax_outcome_advantage(token_level_rewards, reward_baselines, response_mask, config=None, **kwargs):
    """ReMax as verl: token reward-to-go minus the greedy baseline on response tokens -> (adv, returns)."""
    m = response_mask.to(token_level_rewards.dtype)
    ret = (token_level_rewards * m).flip(-1).cumsum(-1).flip(-1)          # (B, L)
    return ret - reward_baselines[:, None] * m, ret


@torch.no_grad()
def compute_opo_outcome_advantage(token_level_rewards, response_mask, index, epsilon: float = 1e-6,
                                  config=None, **kwargs):
    """OPO as verl: R minus the response-length-weighted group mean (singleton: R) -> (adv, adv)."""
    R = _returns(token_level_rewards)
    g, _, n = _groups(index, R.device, R.shape[0])
    G = n.index_select(0, g)                                               # (B,) group size of each row
    adv = _tokens(torch.where(G > 1, opo(R, g, response_mask.sum(-1)), R), response_mask)
    return adv, adv


@torch.no_grad()
def compute_gpg_outcome_advantage(token_level_rewards, response_mask, index, epsilon: float = 1e-6,
                                  f_norm: float = 1.0, alpha: float = 1.0, config=None, **kwargs):
    """GPG as verl: alpha (R - group mean) / f_norm, alpha = B / #non-zero R (singleton: alpha R / f_norm)."""
    R = _returns(token_level_rewards)
    g, _, n = _groups(index, R.device, R.shape[0])
    G = n.index_select(0, g)                                               # (B,) group size of each row
    a = R.shape[0] / (R != 0).sum().clamp(min=1).to(R.dtype)
    adv = _tokens(torch.where(G > 1, gpg(R, g, f_norm=f_norm), a * R / f_norm), response_mask)
    return adv, adv


@torch.no_grad()
def compute_grpo_passk_outcome_advantage(token_level_rewards, response_mask, index, epsilon: float = 1e-6,
                                         norm_adv_by_std_in_grpo: bool = True, config=None, **kwargs):
    """Pass@k as verl: the group's best gets (R_max - R_second) / (std + eps) -> (adv, adv).

    Like verl, ``config.norm_adv_by_std_in_grpo`` (default True) overrides the argument when a config
    is given, and a group of one raises ValueError.
    """
    norm = bool(_cfg(config, "norm_adv_by_std_in_grpo", True)) if config is not None else norm_adv_by_std_in_grpo
    R = _returns(token_level_rewards)
    g, _, n = _groups(index, R.device, R.shape[0])
    G = n.index_select(0, g)                                               # (B,) group size of each row
    if bool((G < 2).any()):
        raise ValueError("Pass@k requires at least 2 samples per group (index has a singleton group)")
    adv = _tokens(grpo_passk(R, g, norm=norm, ddof=1, eps=epsilon), response_mask)
    return adv, adv


@torch.no_grad()
def compute_gae_advantage_return(token_level_rewards, values, response_mask, gamma, lam):
    """Token GAE as verl (observation tokens skipped, advantages whitened over the mask) -> (adv, returns).

    As in verl, positions outside the mask keep the carried (whitened) advantage and returns = A + V.
    """
    raw = gae_scan(token_level_rewards, values, response_mask, gamma=float(gamma), lam=float(lam))
    return masked_whiten(raw, response_mask, zero_outside=False), raw + values


# ---- toyrl's multi-turn estimators inside verl --------------------------------------------------
MULTI_TURN = ("gigpo", "mt_grpo", "tree_grpo", "rtpo", "empg", "a2tgpo", "spa", "sweet", "archer",
              "turn_gae", "bilevel_gae")
_TURN_FIELDS = ("state_key", "node", "info_gain", "turn_signal", "values", "void_turn")
_TOKEN_FIELDS = ("entropy", "ref_logp")


def batch_from_verl(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index=None,
                    **fields) -> TurnBatch:
    """A TurnBatch from verl tensors: each maximal run of response-mask 1s is one turn.

    Observation tokens (0-runs) carry the turn they follow; tokens before the first run are padding.
    turn_reward = sum of token rewards of the turn; per-turn fields (B, H) and per-token fields (B, L)
    may be given as tensors or numpy arrays; missing state keys are unique per turn (no anchors).
    """
    m = response_mask.to(torch.bool)
    B, L = m.shape
    dev = token_level_rewards.device
    start = m & ~torch.cat([torch.zeros_like(m[:, :1]), m[:, :-1]], 1)            # (B, L) run starts
    turn_id = start.long().cumsum(1) - 1                                          # (B, L), -1 before run 1
    n_turns = start.sum(1)                                                        # (B,)
    H = max(int(n_turns.max()) if B else 0, 1)
    turn_mask = torch.arange(H, device=dev)[None, :] < n_turns[:, None]           # (B, H)
    reward = token_to_turn(token_level_rewards, turn_id, H, "sum", turn_id >= 0)
    group = _groups(index, dev, B)[0] if index is not None else torch.arange(B, device=dev)
    kw = {}
    for name, val in fields.items():
        if val is not None and (name in _TURN_FIELDS or name in _TOKEN_FIELDS):
            t = torch.as_tensor(np.asarray(val) if not isinstance(val, torch.Tensor) else val, device=dev)
            kw[name] = t.to(token_level_rewards.dtype) if t.is_floating_point() else t
    kw.setdefault("state_key", torch.arange(B * H, device=dev).view(B, H))
    return TurnBatch(tokens=torch.zeros(B, L, dtype=torch.long, device=dev), policy_mask=m, turn_id=turn_id,
                     old_logp=torch.zeros(B, L, dtype=token_level_rewards.dtype, device=dev),
                     turn_mask=turn_mask, turn_reward=reward, group=group, **kw)
