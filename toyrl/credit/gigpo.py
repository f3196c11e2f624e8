"""GiGPO: group-in-group policy optimization, episode + anchor-state step advantages (arXiv 2505.10978).

Dimension legend: B rollouts, H turns, N = B * H flattened turns, D feature size.

Rollouts of a group start from the same state and often pass through the same later states. GiGPO
regroups, inside each episode group, every turn taken from an identical *anchor state* (any rollout,
any time index) and scores its discounted return against the others of that anchor:

    A(a_{i,k}) = A^E_i + omega * A^S_{i,k}                                     # Eq. (GiGPO)
    A^E_i     = (R_i - mean_g R) / F,            R_i = sum_k r_{i,k}
    A^S_{i,k} = (R_{i,k} - mean_anchor R) / F,   R_{i,k} = sum_{k' >= k} gamma^{k'-k} r_{i,k'}

F = std + eps ("std") or 1 ("mean"). The anchors are the distinct (group, state_key) pairs of valid turns
(``segments.anchor_index``), and the statistics of every anchor are segment sums over those ids
(``group_norm``), accumulated in float64, so an anchor whose returns are all equal gets exactly 0.
``credit/reference/multiturn.py`` holds the same estimator as loops over groups and anchors.
"""
from __future__ import annotations

import torch

from ..batch import discounted_returns
from ..segments import anchor_index, dense_index
from .base import check, group_norm
from .registry import register_estimator

__all__ = ["gigpo", "anchor_index", "similarity_keys"]

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
    s, S = anchor_index(group, state_key, turn_mask)                              # (B, H) anchor s(i,k); invalid: S
    A_S = group_norm(Rk.reshape(-1), s.reshape(-1), S + 1, norm=norm, ddof=ddof, eps=eps).view(B, H)   # (B, H)
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
