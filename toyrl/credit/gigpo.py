"""GiGPO: group-in-group policy optimization, episode + anchor-state step advantages (arXiv 2505.10978).

Dimension legend: B rollouts, H turns, N = B * H flattened turns, D feature size.

Rollouts of a group start from the same state and often pass through the same later states. GiGPO
regroups, inside each episode group, every turn taken from an identical *anchor state* (any rollout,
any time index) and scores its discounted return against the others of that anchor:

    A(a_{i,k}) = A^E_i + omega * A^S_{i,k}                                     # Eq. (GiGPO)
    A^E_i     = (R_i - mean_g R) / F,            R_i = sum_k r_{i,k}
    A^S_{i,k} = (R_{i,k} - mean_anchor R) / F,   R_{i,k} = sum_{k' >= k} gamma^{k'-k} r_{i,k'}

F = std + eps ("std") or 1 ("mean"). Anchor cells come from a vectorized hash table over the pairs
(group, state_key) (no sort, O(N)): each cell is named by one of its rows, and the step statistics
are segment sums over those names (``group_norm``).
"""
from __future__ import annotations

import torch

from ..batch import discounted_returns
from ..segments import dense_index
from .base import check, group_norm
from .registry import register_estimator

__all__ = ["gigpo", "anchor_index", "similarity_keys"]

def _mixers(salt: int) -> tuple[int, int]:
    """Two odd signed 64-bit multipliers for hashing round ``salt`` (splitmix64 of the salt)."""
    out = []
    for k in (1, 2):
        z = ((2 * salt + k) * 0x9E3779B97F4A7C15) & (2**64 - 1)
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & (2**64 - 1)
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & (2**64 - 1)
        z = (z ^ (z >> 31)) | 1
        out.append(z - 2**64 if z >= 2**63 else z)
    return out[0], out[1]


def _pair_rep(a: torch.Tensor, b: torch.Tensor, salt: int = 0) -> torch.Tensor:
    """Representative row of each distinct pair (a_n, b_n) -> (N,) in [0, N): equal pairs, equal rows.

    A vectorized hash table, no sort: every row writes its index into slot h(a, b) of a table with
    >= N slots (multiply-shift hashing; any writer of a slot may win) and reads the winner back.
    A row whose winner holds the same pair is done; all rows of a pair share their slot, so a pair
    is done or retried as a whole: the few losers (pairs sharing a slot) retry with a new salt. O(N).
    """
    N = a.numel()
    bits = max(4, (N - 1).bit_length())                                          # >= N slots
    c1, c2 = _mixers(salt)
    h = (a * c2).bitwise_xor_(b).mul_(c1).bitwise_right_shift_(64 - bits).bitwise_and_((1 << bits) - 1)  # (N,) slot
    slot = torch.empty(1 << bits, dtype=torch.long, device=a.device)
    slot.scatter_(0, h, torch.arange(N, device=a.device))
    rep = slot.index_select(0, h)                                                 # (N,) the slot's winner
    lost = (b.index_select(0, rep) != b).logical_or_(a.index_select(0, rep) != a).nonzero().squeeze(1)
    if lost.numel():
        if salt >= 64:
            raise RuntimeError("anchor hashing did not converge")  # pragma: no cover  (p ~ 0)
        rep[lost] = lost.index_select(0, _pair_rep(a.index_select(0, lost), b.index_select(0, lost), salt + 1))
    return rep


def _anchor_index(gi: torch.Tensor, state_key: torch.Tensor, turn_mask: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Dense anchor cell of every turn -> ((N,) long, S); the invalid turns, if any, form the last cell S - 1.

    Cells are first named by a representative row (``_pair_rep``), then numbered in row order
    (a used-flag per row id and its cumsum: no sort).
    """
    B, H = state_key.shape
    N = B * H
    rep = _pair_rep(gi.repeat_interleave(H), state_key.reshape(-1).long())       # (N,) representative row
    rep.masked_fill_(~turn_mask.reshape(-1), N)                                   # invalid turns: row id N
    used = torch.zeros(N + 1, dtype=torch.bool, device=rep.device).index_fill_(0, rep, True)
    rank = used.cumsum(0)                                                         # (N + 1,) dense id + 1
    return rank.index_select(0, rep).sub_(1), int(rank[-1])


def anchor_index(group: torch.Tensor, state_key: torch.Tensor, turn_mask: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Dense anchor id of every turn over (group, state_key) cells -> ((B, H) long, S); invalid turns get S.

    Equal keys in different groups never share an anchor. Any int64 keys (e.g. 63-bit hashes), via
    the vectorized hash table ``_pair_rep`` (O(N), no sort).
    Example: group [0, 1], keys [[5, 7], [5, 5]], all valid -> [[0, 1], [2, 2]], S=3.
    """
    B, H = state_key.shape
    if not bool(turn_mask.any()):
        return torch.zeros((B, H), dtype=torch.long, device=state_key.device), 0
    idx, S = _anchor_index(dense_index(group)[0], state_key, turn_mask)
    return idx.view(B, H), S - int(bool((~turn_mask).any()))   # the invalid cell S - 1 is reported as S


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
    m = turn_mask.to(turn_reward.dtype)
    R = (turn_reward * m).sum(1)                                                  # (B,)
    gi, nG = dense_index(group)
    if episode == "trajectory":
        A_E = group_norm(R, gi, nG, norm=norm, ddof=ddof, eps=eps)[:, None]       # (B, 1)
    else:
        seg = torch.where(turn_mask, gi[:, None], torch.full_like(turn_mask, nG, dtype=torch.long))
        A_E = group_norm(R[:, None].expand(B, H).reshape(-1), seg.reshape(-1), nG + 1,
                         norm=norm, ddof=ddof, eps=eps).view(B, H)                # (B, H)
    Rk = discounted_returns(turn_reward, turn_mask, gamma)                        # (B, H)
    aid, S = _anchor_index(gi, state_key, turn_mask)                              # (N,) anchor cell, invalid: S - 1
    A_S = group_norm(Rk.reshape(-1), aid, S, norm=norm, ddof=ddof, eps=eps).view(B, H)
    return A_S.mul_(omega).add_(A_E).mul_(m)                                      # (A_E + omega * A_S) * m


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
    first = (close & leader[:, None, :]).to(torch.uint8).argmax(2)                # (nG, P) first leader
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
