"""Filters: which rollouts (or turns) enter the loss. Each returns a keep mask plus counts for the log.

Dimension legend: B rollouts, H turns, S groups.

    zero_variance   drop groups whose reward std is below a threshold      DAPO, arXiv 2503.14476
    starpo_s        keep the top-p fraction of groups by reward std        RAGEN, arXiv 2504.20073
    void_turn       mask the loss of trajectories with a void turn         SimpleTIR, arXiv 2509.02479
    loop_abs_adv    drop rollouts with |A| below a threshold               LOOP, arXiv 2502.01600
    t2po_resample   which turns the rollout should regenerate (B, H)       T2PO, arXiv 2605.02178

A filter masks the *loss*; it does not remove the rollouts from reward / advantage statistics
(SimpleTIR keeps void trajectories in the group baseline). Apply the mask as
``loss_mask & keep[:, None]`` (a turn-level filter's (B, H) keep: ``loss_mask & turn_to_token(keep)``).
``FILTERS[name](batch, **kw)`` runs a filter on a ``TurnBatch``; ``FILTERS[name].level`` and
``.needs`` say what it returns and reads.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from .batch import token_to_turn
from .credit.needs import check_needs
from .segments import dense_index, segment_count, segment_std, segment_sum

__all__ = ["FilterResult", "Filter", "group_reward_std", "zero_variance", "starpo_s", "void_turn", "loop_abs_adv",
           "leave_one_out", "t2po_resample", "turn_uncertainty", "FILTERS"]


@dataclass
class FilterResult:
    keep: torch.Tensor
    """(B,) bool keep mask over rollouts; (B, H) for the function ``t2po_resample`` (True = resample the
    turn) and for turn-level ``FILTERS`` entries (True = the turn stays in the loss)."""
    counts: dict = field(default_factory=dict)
    """integers for the run log, e.g. {"groups": 8, "kept_groups": 2, "kept": 32}."""


def _check_1d(name: str, x: torch.Tensor, B: int | None = None) -> None:
    if not isinstance(x, torch.Tensor) or x.dim() != 1 or (B is not None and x.shape[0] != B):
        raise ValueError(f"{name} must be a 1-D tensor of shape (B,){'' if B is None else f' with B={B}'}, "
                         f"got {tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}")


def group_reward_std(reward: torch.Tensor, group: torch.Tensor, *, ddof: int = 1):
    """Reward std of each group (S,), the dense group index (B,) and S. ddof=1 is torch.std.

    Example: reward [1., 0., 1., 1.], group [0, 0, 1, 1] -> std [0.7071, 0.], idx [0, 0, 1, 1].
    """
    _check_1d("reward", reward)
    _check_1d("group", group, reward.shape[0])
    idx, S = dense_index(group)
    return segment_std(reward.float(), idx, S, ddof=ddof), idx, S


def zero_variance(reward: torch.Tensor, group: torch.Tensor, *, threshold: float = 1e-6, ddof: int = 1) -> FilterResult:
    """Keep rollouts whose group reward std is >= threshold (DAPO's dynamic sampling criterion).

    A group whose rollouts all got the same reward has zero advantage under any group baseline,
    so it only dilutes the batch. Singleton groups have std 0 and are dropped.
    Example: reward [1., 0., 1., 1.], group [0, 0, 1, 1] -> keep [T, T, F, F].
    """
    std, idx, S = group_reward_std(reward, group, ddof=ddof)
    good = std >= threshold                                                     # (S,)
    keep = good[idx]                                                            # (B,)
    return FilterResult(keep, {"groups": S, "kept_groups": int(good.sum()), "kept": int(keep.sum()),
                               "zero_var_groups": int((~good).sum())})


def starpo_s(reward: torch.Tensor, group: torch.Tensor, *, p: float = 0.25, include_zero_std: bool = True,
             ddof: int = 1) -> FilterResult:
    """StarPO-S variance filter (RAGEN ``rollout_filter_ratio=0.25``, type std): keep the top-p groups.

        kept groups = the max(1, floor(p * S)) groups with the largest reward std

    Zero-std groups rank last (ties keep the lower group index first); with
    ``include_zero_std=False`` they are never kept, even if that leaves fewer (or no) groups.
    Example: group stds [0.5, 0., 0.9, 0.1] with p = 0.5 -> groups 2 and 0 kept.
    """
    if not 0.0 < p <= 1.0:
        raise ValueError(f"starpo_s p must lie in (0, 1], got {p}")
    std, idx, S = group_reward_std(reward, group, ddof=ddof)
    k = max(1, int(p * S))
    order = torch.sort(std, descending=True, stable=True).indices               # (S,)
    rank = torch.empty_like(order)
    rank[order] = torch.arange(S, device=std.device)
    good = rank < k
    if not include_zero_std:
        good &= std > 0
    keep = good[idx]
    return FilterResult(keep, {"groups": S, "kept_groups": int(good.sum()), "kept": int(keep.sum())})


def void_turn(void: torch.Tensor, turn_mask: torch.Tensor) -> FilterResult:
    """SimpleTIR: a trajectory with any void turn (no tool call, no answer) gets loss mask 0.

        keep_i = not any_k (void_{i,k} and valid_{i,k})

    The trajectory stays in reward and advantage statistics; only its loss is masked.
    Example: void [[F, F], [F, T], [T, F]], all turns valid -> keep [T, F, F].
    """
    if void.shape != turn_mask.shape or void.dim() != 2:
        raise ValueError(f"void and turn_mask must both be (B, H), got {tuple(void.shape)} and {tuple(turn_mask.shape)}")
    void = void.bool() & turn_mask.bool()                                       # (B, H)
    bad = void.any(1)                                                           # (B,)
    return FilterResult(~bad, {"void_trajectories": int(bad.sum()), "void_turns": int(void.sum()),
                               "kept": int((~bad).sum())})


def leave_one_out(reward: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """LOOP / RLOO advantage A_i = R_i - mean_{j != i in g(i)} R_j (0 for a singleton group).

    Example: reward [1., 0., 0.], one group -> [1., -0.5, -0.5].
    """
    idx, S = dense_index(group)
    n = segment_count(idx, S, reward.dtype)[idx]
    total = segment_sum(reward, idx, S)[idx]
    return torch.where(n > 1, reward - (total - reward) / (n - 1).clamp(min=1), torch.zeros_like(reward))


def loop_abs_adv(adv: torch.Tensor, *, threshold: float = 0.01) -> FilterResult:
    """LOOP: drop rollouts whose advantage is (almost) zero, |A_i| < threshold (0.01).

    Example: adv [0.5, -0.005, 0.] -> keep [T, F, F].
    """
    _check_1d("adv", adv)
    keep = adv.abs() >= threshold
    return FilterResult(keep, {"kept": int(keep.sum()), "dropped": int((~keep).sum())})


def t2po_resample(u: torch.Tensor, turn_mask: torch.Tensor, *, eta: float = 0.3) -> FilterResult:
    """T2PO turn-level dynamic sampling: regenerate turn k when its uncertainty barely moved.

        resample_{i,k} = 0 < |u_{i,k} - u_{i,k-1}| < eta   (k >= 1, both turns valid), eta = 0.3

    The rollout calls this after each turn (at most max_try = 2 retries in T2PO). Returns (B, H).
    Example: u [[0.9, 0.8, 0.8, 0.1]] -> [[F, T, F, F]] (|diff| 0.1 stalls, 0 is identical, 0.7 moved).
    """
    if u.shape != turn_mask.shape or u.dim() != 2:
        raise ValueError(f"u and turn_mask must both be (B, H), got {tuple(u.shape)} and {tuple(turn_mask.shape)}")
    diff = (u[:, 1:] - u[:, :-1]).abs()                                         # (B, H - 1)
    both = turn_mask[:, 1:].bool() & turn_mask[:, :-1].bool()
    res = torch.zeros_like(turn_mask, dtype=torch.bool)
    res[:, 1:] = both & (diff > 0) & (diff < eta)
    return FilterResult(res, {"resample_turns": int(res.sum()), "valid_turns": int(turn_mask.sum())})


def turn_uncertainty(entropy: torch.Tensor, policy_mask: torch.Tensor, turn_id: torch.Tensor, H: int) -> torch.Tensor:
    """T2PO's turn uncertainty u_{i,k}: the mean entropy of the turn's sampled tokens -> (B, H).

    The rollout's resampling reads the same number (``rollout.Draft.u``): written tokens (the
    grammar's END, an intervention's cut) are not in ``policy_mask`` and do not count. A turn with no
    sampled token gets 0. Example: entropy [[.2, .4, 9., .6]], policy [[T, T, F, T]], turn_id
    [[0, 0, 0, 1]] -> [[.3, .6]].
    """
    return token_to_turn(entropy.float(), turn_id, H, "mean", policy_mask.bool())


def _uncertainty(batch, u):
    if u is not None:
        return u
    if batch.entropy is None:
        raise ValueError("t2po_resample needs u (B, H), the per-turn uncertainty, or TurnBatch.entropy to take "
                         "it from (the mean entropy of each turn's sampled tokens)")
    return turn_uncertainty(batch.entropy, batch.policy_mask, batch.turn_id, batch.H)


def _t2po_keep(batch, u=None, **kw) -> FilterResult:
    """The turns ``t2po_resample`` would regenerate leave the loss: keep (B, H) = not resample."""
    res = t2po_resample(_uncertainty(batch, u), batch.turn_mask, **kw)
    return FilterResult(~res.keep, res.counts)


@dataclass(frozen=True)
class Filter:
    """A registered filter: ``f(batch, **kw) -> FilterResult`` with its ``level`` and ``needs``."""

    fn: Callable
    """``fn(batch, **kw) -> FilterResult``"""
    level: str = "rollout"
    """rollout: ``keep`` is (B,), a rollout's loss is kept or masked; turn: ``keep`` is (B, H), per turn"""
    needs: tuple = ()
    """what it reads besides rewards and group ids, words of ``toyrl.credit.NEEDS``"""

    def __post_init__(self):
        if self.level not in ("rollout", "turn"):
            raise ValueError(f"filter level must be 'rollout' or 'turn', got {self.level!r}")
        object.__setattr__(self, "needs", check_needs(self.needs, "filter"))

    def __call__(self, batch, **kw) -> FilterResult:
        return self.fn(batch, **kw)


FILTERS = {
    "zero_variance": Filter(lambda batch, **kw: zero_variance(batch.outcome(), batch.group, **kw)),
    "starpo_s": Filter(lambda batch, **kw: starpo_s(batch.outcome(), batch.group, **kw)),
    "void_turn": Filter(lambda batch, **kw: void_turn(
        batch.void_turn if batch.void_turn is not None else torch.zeros_like(batch.turn_mask), batch.turn_mask, **kw)),
    "loop_abs_adv": Filter(lambda batch, adv=None, **kw: loop_abs_adv(
        leave_one_out(batch.outcome(), batch.group) if adv is None else adv, **kw)),
    "t2po_resample": Filter(_t2po_keep, level="turn", needs=("entropy",)),
}
"""name -> Filter(batch: TurnBatch, **kw) -> FilterResult whose ``keep`` is True where the loss stays.
loop_abs_adv defaults to the leave-one-out advantage of the outcome. t2po_resample is turn-level: its
``keep`` (B, H) is False on the turns T2PO would regenerate, with u (B, H) defaulting to each turn's
mean sampled-token entropy (``turn_uncertainty``), the signal the rollout's ``t2po_eta`` resampling
reads: the turns still stalled after the rollout's retries (or, with resampling off, every turn it
would have regenerated) give no gradient."""
