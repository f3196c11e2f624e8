"""GiGPO: group-in-group policy optimization, episode + anchor-state step advantages (arXiv 2505.10978).

Dimension legend: B rollouts, H turns, N = B * H flattened turns, D feature size.

Rollouts of a group start from the same state and often pass through the same later states. GiGPO
regroups, inside each episode group, every turn taken from an identical *anchor state* (any rollout,
any time index) and scores its discounted return against the others of that anchor:

    A(a_{i,k}) = A^E_i + omega * A^S_{i,k}                                     # Eq. (GiGPO)
    A^E_i     = (R_i - mean_g R) / F,            R_i = sum_k r_{i,k}
    A^S_{i,k} = (R_{i,k} - mean_anchor R) / F,   R_{i,k} = sum_{k' >= k} gamma^{k'-k} r_{i,k'}

F = std + eps ("std") or 1 ("mean"). The anchors are the distinct (group, state_key) pairs, found by a
vectorized hash table (``anchor_slots``: O(N), no sort; a pair is compared in full, so two pairs with
the same hash never merge), and the statistics of every anchor are segment sums over those ids
(``group_norm``), accumulated in float64, so an anchor whose returns are all equal gets exactly 0.
``segments.anchor_index`` gives the same partition numbered in sorted order (``torch.unique``).
``credit/reference/multiturn.py`` holds the same estimator as loops over groups and anchors.
"""
from __future__ import annotations

from typing import Optional

import torch

from ..batch import discounted_returns
from ..segments import anchor_index, dense_index, pair_index
from .base import check, group_norm
from .registry import register_estimator

__all__ = ["gigpo", "anchor_index", "anchor_slots", "similarity_keys"]

_MIX_K, _MIX_P = -7046029254386353131, 0x2545F4914F6CDD1D                     # odd 64-bit multipliers


def anchor_slots(group: torch.Tensor, state_key: torch.Tensor, turn_mask: torch.Tensor, *,
                 table_bits: Optional[int] = None, rounds: int = 8) -> tuple[torch.Tensor, int]:
    """Anchor id of every turn over the (group, state_key) pairs of valid turns, by hashing -> ((B, H) long, S).

    The partition of ``segments.anchor_index`` (valid turns get ids 0..S-1, every invalid turn S) in
    O(N) vectorized steps instead of two sorts. The table has one region of 2^table_bits slots per
    group (default: the smallest >= 2x the largest group's turns), so a slot only ever holds keys of
    its own group. A key k hashes to a slot h(k) of its group's region; each round, the free slots
    are claimed by their lowest pending row (``scatter_reduce`` amin), and a row whose slot's owner
    holds the same key, compared in full, takes that slot; the others probe the next slot of the
    region (linear probing). The rows of one pair move in lockstep, so a pair gets one slot and a
    slot one pair: exact, whatever the hash collisions. Rows still pending after ``rounds`` rounds
    (pairs disjoint from all placed ones) are numbered by ``pair_index`` after the table, as are all
    rows when the regions would outgrow 8 slots per turn (very unequal groups). Ids follow the order
    of first appearance. Example: group [0, 1], keys [[5, 7], [5, 5]], mask [[1, 1], [1, 0]] ->
    [[0, 1], [2, 3]], S = 3 (``anchor_index`` numbers in sorted order; the cells are the same).
    """
    if table_bits is not None and not 0 <= table_bits <= 62:
        raise ValueError(f"table_bits must be None or an int in [0, 62], got {table_bits!r}")
    if rounds < 0:
        raise ValueError(f"rounds must be >= 0, got {rounds!r}")
    g, nG = dense_index(group)                                                    # (B,)
    ids, S = _slots(g, state_key, turn_mask, table_bits, rounds, invalid_last=True)
    return ids.long().view(state_key.shape), S


def _slots(g: torch.Tensor, state_key: torch.Tensor, turn_mask: torch.Tensor, table_bits: Optional[int],
           rounds: int, invalid_last: bool = False) -> tuple[torch.Tensor, int]:
    """``anchor_slots`` on dense group ids g (B,) -> (ids (N,) int32 (long past 2^31 rows), n).

    The table maps each row to the *owner* of its pair's slot (the pair's lowest row), and the
    owners, ranked by one cumsum over the N rows, number the pairs in order of first appearance.
    ``invalid_last``: the anchors get 0..S-1 and every invalid turn S, n = S (``anchor_slots``).
    Else (GiGPO's own use) the invalid turns are one more segment among the n ids 0..n-1.
    """
    B, H = turn_mask.shape
    N = B * H
    dev, i32 = state_key.device, torch.int32 if N < 2**31 - 1 else torch.long   # int32 ids: half the bytes
    m = turn_mask.reshape(-1)                                                     # (N,)
    kf = state_key.reshape(-1).long()                                             # (N,)
    row = torch.arange(N, dtype=i32, device=dev)                                  # (N,) row index
    per_group = torch.bincount(g)                                                 # (nG,) rollouts per group
    nG, most = per_group.numel(), int(per_group.max()) * H if B else 0           # most turns in one group
    bits = max(1, (2 * most - 1).bit_length()) if table_bits is None else table_bits
    R = 1 << bits                                                                 # slots per group region
    P = nG * R                                                                    # table slots; slot P: invalid
    if P > 8 * N + 64:                                                            # unequal groups: no table, all
        P = 0                                                                     # valid rows numbered below
        h = torch.zeros(N, dtype=torch.long, device=dev)
        owner = torch.full((1,), N, dtype=i32, device=dev)                        # slot 0: the invalid turns
        owner.scatter_reduce_(0, h, torch.where(m, N, row), reduce="amin")
        o, rp = owner.expand(N).clone(), m.nonzero().squeeze(1)                  # (N,) owner of each row
    else:
        h = kf * (_MIX_P if bits else 0)                                          # (N,) hash of the key: its top
        h.bitwise_right_shift_(min(64 - bits, 63))                                # bits, signed: [-R/2, R/2)
        h.view(B, H).add_((g * R + R // 2)[:, None])                              # + the group's region start
        h.masked_fill_(~m, P)                                                     # (N,) slot of each row
        owner = torch.full((P + 1,), N, dtype=i32, device=dev)                   # (P + 1,) owning row; N = free
        owner.scatter_reduce_(0, h, row, reduce="amin")                           # lowest row
        o = owner.index_select(0, h)                                              # (N,) owner of each row's slot
        rp = (kf.index_select(0, o) != kf).logical_and_(m).nonzero().squeeze(1)  # (M,) rows of another key
    if rp.numel() and rounds and P:                                               # collisions: probe onwards
        rp = rp.to(i32)
        hp = h.index_select(0, rp)
        hp = (hp & ~(R - 1)) | ((hp + 1) & (R - 1))                               # next slot of the same region
        kp = kf.index_select(0, rp)                                               # (M,) their keys
        for _ in range(rounds):
            free = owner.index_select(0, hp) == N
            owner.scatter_reduce_(0, torch.where(free, hp, P), rp, reduce="amin")  # free slots: lowest row claims
            op = owner.index_select(0, hp)
            o.index_put_((rp,), op)                                               # final for the matched rows
            left = (kf.index_select(0, op) != kp).nonzero().squeeze(1)
            rp, hp, kp = rp[left], hp[left], kp[left]
            hp = (hp & ~(R - 1)) | ((hp + 1) & (R - 1))
            if rp.numel() == 0:
                break
    if rp.numel():                                                                # pairs that found no slot
        rest, n_rest = pair_index(g.index_select(0, rp.long() // H), kf.index_select(0, rp))
        first = torch.full((n_rest,), N, dtype=i32, device=dev).scatter_reduce_(0, rest, rp.to(i32), reduce="amin")
        o.index_put_((rp,), first.index_select(0, rest))                          # the pair's lowest row
    own = o == row                                                                # (N,) each pair's first row
    if invalid_last:
        own.logical_and_(m)                                                       # the invalid turns: no anchor
    rank = own.cumsum(0, dtype=i32)                                               # (N,) anchors up to each row
    S = int(rank[-1]) if N else 0
    ids = rank.index_select(0, o).sub_(1)                                         # (N,) 0..S-1, first-seen order
    return (ids.masked_fill_(~m, S), S) if invalid_last else (ids, S)


def gigpo(turn_reward: torch.Tensor, turn_mask: torch.Tensor, group: torch.Tensor, state_key: torch.Tensor, *,
          gamma: float = 0.95, omega: float = 1.0, norm: str = "std", ddof: int = 0, eps: float = 1e-6,
          episode: str = "trajectory") -> torch.Tensor:
    """GiGPO advantages (Feng et al., arXiv 2505.10978) -> (B, H), 0 on invalid turns.

        A_{i,k} = (R_i - mean_g R) / F_g  +  omega * (R_{i,k} - mean_{s(i,k)} R) / F_{s(i,k)}

    g = episode group, s(i,k) = anchor cell (group, state_key[i, k]); R_{i,k} the gamma-discounted
    return-to-go, R_i the undiscounted total; F = std(ddof) + eps ("std") or 1 ("mean"). A singleton
    anchor (or group) contributes 0. Defaults gamma=0.95, omega=1 (paper); norm="std", ddof=0,
    eps=1e-6 reproduce the seed article's snippet; the authors' ALFWorld script is norm="std", ddof=1;
    their YAML default is norm="mean". ``episode="step"`` pools episode stats over turn-rows
    (verl-agent's ``compute_mean_std_cross_steps``), weighting long episodes more.
    Example (one group, gamma=1, norm="mean"): keys [[1, 2], [1, 3]], r [[0, 1], [0, 0]] ->
    A^E [0.5, -0.5]; anchor 1 holds returns {1, 0} -> A^S [0.5, -0.5]; -> [[1.0, 0.5], [-1.0, -0.5]].
    """
    dims = check("turn_reward", turn_reward, "BH", {}, kind="float")
    check("turn_mask", turn_mask, "BH", dims, kind="bool")
    check("group", group, "B", dims)
    check("state_key", state_key, "BH", dims)
    if episode not in ("trajectory", "step"):
        raise ValueError(f"episode must be 'trajectory' or 'step', got {episode!r}")
    B, H = turn_reward.shape
    mf = turn_mask.view(torch.uint8).to(turn_reward.dtype)                        # (B, H) 1. on valid turns
    Rk = discounted_returns(turn_reward, turn_mask, gamma)                        # (B, H) R_{i,k}, return-to-go
    R = torch.mv(turn_reward * mf, turn_reward.new_ones(H))                       # (B,) R_i, episode return
    g, nG = dense_index(group)                                                    # (B,) episode group
    if episode == "trajectory":
        A_E = group_norm(R, g, nG, norm=norm, ddof=ddof, eps=eps)[:, None]        # (B, 1) A^E_i
    else:                                                                         # one row per valid turn
        seg = torch.where(turn_mask, g[:, None], nG)                              # (B, H) invalid: extra cell nG
        A_E = group_norm(R[:, None].expand(B, H).reshape(-1), seg.reshape(-1), nG + 1,
                         norm=norm, ddof=ddof, eps=eps).view(B, H)                # (B, H)
    s, n = _slots(g, state_key, turn_mask, None, 8)                               # (N,) anchor s(i,k), ids < n
    A_S = group_norm(Rk.reshape(-1), s, n, norm=norm, ddof=ddof, eps=eps).view(B, H)   # invalid turns: masked below
    if omega != 1:
        A_S.mul_(omega)
    return A_S.add_(A_E).mul_(mf)                                                 # Eq. (GiGPO), in place


def similarity_keys(features: torch.Tensor, turn_mask: torch.Tensor, group: torch.Tensor, *,
                    threshold: float = 0.95) -> torch.Tensor:
    """Anchor keys by greedy similarity clustering inside each group (GiGPO's similarity variant) -> (B, H).

    Items of a group are visited in (rollout, turn) order; an item joins the first existing cluster
    whose representative has cosine similarity >= ``threshold`` with it, else founds a new cluster.
    The paper compares text with difflib's ratio (default 0.95); here any (B, H, D) feature tensor
    (e.g. bag-of-words counts) with cosine similarity. Vectorized over groups; a loop over the
    G*H item positions of a group. Memory O(n_groups * (G*H)^2). Invalid turns get key -1.
    Example: features [[[1, 0], [0.99, 0.1], [0, 1]]], threshold 0.9 -> keys [[0, 0, 2]].
    """
    dims = check("features", features, "BHD", {}, kind="float")
    check("turn_mask", turn_mask, "BH", dims, kind="bool")
    check("group", group, "B", dims)
    B, H, D = features.shape
    dev = features.device
    gi, nG = dense_index(group)
    order = torch.argsort(gi, stable=True)                                        # (B,)
    size = torch.bincount(gi, minlength=nG)                                       # (nG,)
    start = torch.cumsum(size, 0) - size
    rank = torch.empty_like(gi)
    rank[order] = torch.arange(B, device=dev) - start[gi[order]]                  # position in its group
    P = int(size.max()) * H if B else 0
    pos = rank[:, None] * H + torch.arange(H, device=dev)                         # (B, H) item position
    X = torch.zeros(nG, P, D, dtype=features.dtype, device=dev)                   # (nG, P, D)
    valid = torch.zeros(nG, P, dtype=torch.bool, device=dev)                      # (nG, P)
    X[gi[:, None], pos] = torch.nn.functional.normalize(features, dim=-1)
    valid[gi[:, None], pos] = turn_mask
    close = (X @ X.transpose(1, 2) >= threshold) | torch.eye(P, dtype=torch.bool, device=dev)  # (nG, P, P)
    close &= valid[:, :, None] & valid[:, None, :]
    leader = torch.zeros(nG, P, dtype=torch.bool, device=dev)
    for j in range(P):                                                            # greedy, in visit order
        leader[:, j] = valid[:, j] & ~(leader[:, :j] & close[:, j, :j]).any(1)
    first = (close & leader[:, None, :]).int().argmax(2)                          # (nG, P) first leader
    key = torch.arange(nG, device=dev)[:, None] * P + first                       # unique across groups
    out = key[gi[:, None], pos]                                                   # (B, H)
    return torch.where(turn_mask, out, torch.full_like(out, -1))


@register_estimator("gigpo", level="turn")
def _gigpo(batch, *, gamma: float = 0.95, omega: float = 1.0, norm: str = "std", ddof: int = 0,
           eps: float = 1e-6, episode: str = "trajectory", similarity_features=None, threshold: float = 0.95):
    """GiGPO: episode advantage + omega * anchor-state step advantage (exact keys or similarity_features)."""
    keys = batch.state_key
    if similarity_features is not None:
        keys = similarity_keys(similarity_features, batch.turn_mask, batch.group, threshold=threshold)
    return gigpo(batch.turn_reward, batch.turn_mask, batch.group, keys, gamma=gamma, omega=omega, norm=norm,
                 ddof=ddof, eps=eps, episode=episode)
