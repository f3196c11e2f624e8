"""TurnBatch: the one data structure of toyrl, a padded batch of multi-turn rollouts that keeps turns.

Dimension legend: B rollouts, T token positions, H turns (at most).

A rollout is a token sequence ``prompt, a_1, o_1, a_2, o_2, ..., a_H`` where ``a_k`` are the policy's
tokens of turn k and ``o_k`` the environment's observation tokens that follow them. ``turn_id`` says
which turn each token belongs to (observation tokens carry the turn they follow, prompt tokens turn
0, padding -1), ``policy_mask`` which tokens the policy generated. Everything per turn lives in
(B, H) tensors, everything per token in (B, T) tensors, and two helpers move values between them:

    adv_BT = batch.turn_to_token(adv_BH)           # broadcast a turn advantage to its tokens
    len_BH = batch.token_to_turn(batch.policy_mask.float(), "sum")   # policy tokens per turn

Construction checks every shape, dtype and device, and that the float fields are finite (a log-prob
field may hold -inf, never NaN or +inf), and raises ``ValueError`` naming the field; an empty batch
(B = 0) is refused the same way.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any, Optional

import torch

from .segments import anchor_index, dense_index

__all__ = ["TurnBatch", "turn_to_token", "token_to_turn", "discounted_returns", "check_finite", "all_finite",
           "NonFiniteError"]

# field -> (shape over B / T / H, dtype kind, required)
_FIELDS = {
    "tokens": ("BT", "long", True), "policy_mask": ("BT", "bool", True), "turn_id": ("BT", "long", True),
    "old_logp": ("BT", "float", True), "turn_mask": ("BH", "bool", True), "turn_reward": ("BH", "float", True),
    "group": ("B", "long", True), "state_key": ("BH", "long", True),
    "obs_mask": ("BT", "bool", False), "ref_logp": ("BT", "float", False), "rollout_logp": ("BT", "float", False),
    "entropy": ("BT", "float", False), "values": ("BH", "float", False), "void_turn": ("BH", "bool", False),
    "node": ("BH", "long", False), "info_gain": ("BH", "float", False), "turn_signal": ("BH", "float", False),
    "policy_version": ("B", "long", False), "task": ("B", "long", False),
}
_KINDS = {
    "long": (torch.int64, torch.int32, torch.int16, torch.uint8, torch.int8),
    "bool": (torch.bool,),
    "float": (torch.float16, torch.bfloat16, torch.float32, torch.float64),
}
_LOG_PROBS = ("old_logp", "ref_logp", "rollout_logp")    # may be -inf: a token the policy can never pick


class NonFiniteError(ValueError):
    """A tensor holds NaN or +-inf where it must not (raised by ``check_finite``; a ``ValueError``)."""


def all_finite(x: torch.Tensor) -> bool:
    """True when no element of ``x`` is NaN or +-inf: one sum first (a NaN or an inf makes it non-finite), the
    elementwise test only when the sum is not finite (that, or finite values overflowing it). The same answer as
    ``torch.isfinite(x).all()`` without an elementwise pass on the common, finite case.
    Example: all_finite(tensor([1., 3e38, 3e38])) -> True (the sum overflows; the elementwise test decides)."""
    return bool(torch.isfinite(x.sum())) or bool(torch.isfinite(x).all())


def check_finite(name: str, x: torch.Tensor, mask: Optional[torch.Tensor] = None, *, log_prob: bool = False) -> None:
    """ValueError naming ``name`` and the first position (row-major) where ``x`` is NaN or +-inf, on ``mask`` if given.

    ``log_prob=True`` lets -inf through (a token the policy can never pick); NaN and +inf still raise.
    One sum when nothing is wrong (``all_finite``; with a mask or ``log_prob``, one ``isfinite`` and one ``any``).
    Example: check_finite("r", [[0., nan]]) ->
    ValueError("r has a non-finite value nan at (0, 1)").
    """
    if mask is None and not log_prob and all_finite(x):                       # the common case: one sum
        return
    bad = ~(x < math.inf) if log_prob else ~torch.isfinite(x)                 # NaN compares False
    if mask is not None:
        bad = bad & mask
    if bool(bad.any()):
        pos = tuple(int(i) for i in bad.nonzero()[0])
        note = " (a log-prob may be -inf, never NaN or +inf)" if log_prob else ""
        where = ", ".join(map(str, pos))
        raise NonFiniteError(f"{name} has a non-finite value {float(x.detach()[pos])} at ({where}){note}")


def _check(name: str, x: Any, spec: str, kind: str, dims: dict, device) -> None:
    want = "(" + ", ".join(f"{d}={dims[d]}" for d in spec) + ")"
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"TurnBatch.{name} must be a torch.Tensor of shape {want}, got {type(x).__name__}")
    if tuple(x.shape) != tuple(dims[d] for d in spec):
        raise ValueError(f"TurnBatch.{name} must have shape {want}, got {tuple(x.shape)}")
    if x.dtype not in _KINDS[kind]:
        raise ValueError(f"TurnBatch.{name} must have a {kind} dtype, got {x.dtype}")
    if x.device != device:
        raise ValueError(f"TurnBatch.{name} is on {x.device}, expected {device} (the device of tokens)")


@dataclass
class TurnBatch:
    """A padded batch of B multi-turn rollouts with T token positions and at most H turns."""

    tokens: torch.Tensor
    """(B, T) long: prompt, policy and observation tokens in order (padding value arbitrary)."""
    policy_mask: torch.Tensor
    """(B, T) bool: True where the policy generated the token; loss and KL apply only here."""
    turn_id: torch.Tensor
    """(B, T) long: turn index of each token in [0, H); observation tokens carry the turn they
    follow, padding is -1. Non-decreasing along each row outside padding (checked)."""
    old_logp: torch.Tensor
    """(B, T) float: behaviour log-probs under the context the policy saw at rollout (0 off-policy-mask).
    Log-prob fields may hold -inf (a token the policy could never pick); every other float field is finite."""
    turn_mask: torch.Tensor
    """(B, H) bool: valid turns."""
    turn_reward: torch.Tensor
    """(B, H) float: reward of each turn (sparse outcome: only the last valid turn is non-zero)."""
    group: torch.Tensor
    """(B,) long: rollouts that started from the same initial state share a group id."""
    state_key: torch.Tensor
    """(B, H) long: canonical hash of the environment state at the start of each turn."""
    obs_mask: Optional[torch.Tensor] = None
    """(B, T) bool: True on environment observation tokens (not the prompt, not padding); what the
    env-token masking switch puts into the loss when it is off."""
    ref_logp: Optional[torch.Tensor] = None
    """(B, T) float: reference-policy log-probs, for the KL term."""
    rollout_logp: Optional[torch.Tensor] = None
    """(B, T) float: log-probs reported by the rollout engine (for truncated importance sampling)."""
    entropy: Optional[torch.Tensor] = None
    """(B, T) float: policy entropy at each generated token."""
    values: Optional[torch.Tensor] = None
    """(B, H) float: critic value of the state at the start of each turn."""
    void_turn: Optional[torch.Tensor] = None
    """(B, H) bool: the turn was neither a tool call nor an answer (SimpleTIR's void turn)."""
    node: Optional[torch.Tensor] = None
    """(B, H) long: tree node id of each turn (tree rollouts share ids over shared prefixes)."""
    info_gain: Optional[torch.Tensor] = None
    """(B, H) float: information gain of each turn about the ground-truth answer (A2TGPO)."""
    turn_signal: Optional[torch.Tensor] = None
    """(B, H) float: a checkable intermediate signal per turn (e.g. retrieved text holds the answer)."""
    policy_version: Optional[torch.Tensor] = None
    """(B,) long: the policy update count that generated each rollout (staleness)."""
    task: Optional[torch.Tensor] = None
    """(B,) long: task / prompt id of each rollout (several groups may share a task)."""
    privileged: Any = None
    """Training-time-only reference information (e.g. reference solutions), any Python object."""

    def __post_init__(self) -> None:
        if not isinstance(self.tokens, torch.Tensor) or self.tokens.dim() != 2:
            shape = tuple(self.tokens.shape) if isinstance(self.tokens, torch.Tensor) else type(self.tokens).__name__
            raise ValueError(f"TurnBatch.tokens must be a 2-D tensor of shape (B, T), got {shape}")
        if not isinstance(self.turn_mask, torch.Tensor) or self.turn_mask.dim() != 2:
            shape = tuple(self.turn_mask.shape) if isinstance(self.turn_mask, torch.Tensor) else type(self.turn_mask).__name__
            raise ValueError(f"TurnBatch.turn_mask must be a 2-D tensor of shape (B, H), got {shape}")
        B, T = self.tokens.shape
        dims = {"B": B, "T": T, "H": self.turn_mask.shape[1]}
        device = self.tokens.device
        for name, (spec, kind, required) in _FIELDS.items():
            if required or getattr(self, name) is not None:
                _check(name, getattr(self, name), spec, kind, dims, device)
                if kind == "float":
                    check_finite(f"TurnBatch.{name}", getattr(self, name), log_prob=name in _LOG_PROBS)
        if B == 0:
            raise ValueError("TurnBatch has no rollouts (B = 0)")
        H = dims["H"]
        if T and (int(self.turn_id.min()) < -1 or int(self.turn_id.max()) >= max(H, 1)):
            raise ValueError(f"TurnBatch.turn_id values must lie in [-1, H={H}), got range "
                             f"[{int(self.turn_id.min())}, {int(self.turn_id.max())}]")
        if bool((self.policy_mask & (self.turn_id < 0)).any()):
            raise ValueError("TurnBatch.policy_mask is True on a padding token (turn_id == -1)")
        if not _turns_in_order(self.turn_id):
            raise ValueError("TurnBatch.turn_id must be non-decreasing along each row outside padding "
                             "(tokens in order: prompt, a_1, o_1, a_2, ...; -1 padding anywhere)")

    # ---- sizes -------------------------------------------------------------------------------
    @property
    def B(self) -> int:
        return self.tokens.shape[0]

    @property
    def T(self) -> int:
        return self.tokens.shape[1]

    @property
    def H(self) -> int:
        return self.turn_mask.shape[1]

    @property
    def device(self) -> torch.device:
        return self.tokens.device

    # ---- turn <-> token ----------------------------------------------------------------------
    def turn_to_token(self, x_BH: torch.Tensor, fill: float = 0.0) -> torch.Tensor:
        """Broadcast a per-turn value (B, H) to every token of that turn (B, T); padding gets ``fill``."""
        return turn_to_token(x_BH, self.turn_id, fill)

    def token_to_turn(self, x_BT: torch.Tensor, reduce: str = "sum", mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Reduce a per-token value (B, T) to turns (B, H) over ``mask`` (default: policy tokens)."""
        return token_to_turn(x_BT, self.turn_id, self.H, reduce, self.policy_mask if mask is None else mask)

    # ---- outcome and returns -----------------------------------------------------------------
    def outcome(self) -> torch.Tensor:
        """Total reward of each rollout R_i = sum_k r_{i,k} over valid turns -> (B,)."""
        return (self.turn_reward * self.turn_mask).sum(1)                           # (B,)

    def returns(self, gamma: float = 1.0) -> torch.Tensor:
        """Discounted return-to-go per turn R_{i,k} = sum_{k'>=k} gamma^(k'-k) r_{i,k'} -> (B, H)."""
        return discounted_returns(self.turn_reward, self.turn_mask, gamma)

    def num_turns(self) -> torch.Tensor:
        """Number of valid turns per rollout -> (B,) long."""
        return self.turn_mask.sum(1)

    # ---- grouping ----------------------------------------------------------------------------
    def group_index(self) -> tuple[torch.Tensor, int]:
        """Dense group index (B,) in [0, G_count) and the number of groups."""
        return dense_index(self.group)

    def anchor_index(self) -> tuple[torch.Tensor, int]:
        """Dense anchor-state index (B, H) over (group, state_key) cells of valid turns: the S anchors get
        0..S-1 and every invalid turn the id S (``segments.anchor_index``), so ``bincount(idx.flatten(),
        minlength=S + 1)`` counts the turns of each anchor. Equal state keys in different groups never share one.
        """
        return anchor_index(self.group, self.state_key, self.turn_mask)

    # ---- utilities ---------------------------------------------------------------------------
    def to(self, device) -> "TurnBatch":
        """A copy with every tensor on ``device``."""
        kw = {f.name: (v.to(device) if isinstance(v := getattr(self, f.name), torch.Tensor) else v)
              for f in fields(self)}
        return TurnBatch(**kw)

    def replace(self, **changes) -> "TurnBatch":
        """A copy with some fields replaced (validated again)."""
        return replace(self, **changes)

    def select(self, rows: torch.Tensor) -> "TurnBatch":
        """The sub-batch of the given rows (index or bool mask over B)."""
        kw = {}
        for f in fields(self):
            v = getattr(self, f.name)
            kw[f.name] = v[rows] if isinstance(v, torch.Tensor) else v
        return TurnBatch(**kw)


def turn_to_token(x_BH: torch.Tensor, turn_id: torch.Tensor, fill: float = 0.0) -> torch.Tensor:
    """Gather a turn value for every token: out[b, t] = x[b, turn_id[b, t]], ``fill`` where turn_id < 0.

    Example: x [[1., 2.]], turn_id [[0, 0, 1, -1]] -> [[1., 1., 2., 0.]].
    """
    if x_BH.dim() != 2 or turn_id.dim() != 2 or x_BH.shape[0] != turn_id.shape[0]:
        raise ValueError(f"x_BH must be (B, H) and turn_id (B, T) with the same B, got "
                         f"{tuple(x_BH.shape)} and {tuple(turn_id.shape)}")
    table = torch.nn.functional.pad(x_BH, (1, 0), value=fill)               # (B, H + 1) column 0: padding
    return table.gather(1, turn_id + 1)                                     # (B, T)


_REDUCE = {"sum": "sum", "mean": "mean", "max": "amax", "min": "amin", "prod": "prod"}


def token_to_turn(x_BT: torch.Tensor, turn_id: torch.Tensor, H: int, reduce: str = "sum",
                  mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Reduce token values to turns over ``mask``: out[b, k] = reduce{x[b, t] : turn_id[b, t] = k, mask[b, t]}.

    ``reduce`` is one of sum, mean, max, min, prod, last (the last masked token of the turn).
    A turn with no masked token gets 0 (the identity is never leaked as +-inf).
    Example: x [[1., 2., 4.]], turn_id [[0, 0, 1]], H=2, "sum" -> [[3., 4.]].
    """
    if x_BT.shape != turn_id.shape:
        raise ValueError(f"x_BT must have the shape of turn_id (B, T)={tuple(turn_id.shape)}, got {tuple(x_BT.shape)}")
    if mask is None:
        mask = turn_id >= 0
    elif mask.shape != turn_id.shape:
        raise ValueError(f"mask must have shape (B, T)={tuple(turn_id.shape)}, got {tuple(mask.shape)}")
    B, T = turn_id.shape
    col = (turn_id + 1) * (mask & (turn_id >= 0))                         # (B, T) turn + 1, or 0: not reduced
    if reduce == "last":                                                   # x at the largest masked position
        pos = torch.arange(1, T + 1, device=turn_id.device).expand(B, T)
        last = col.new_zeros(B, H + 1).scatter_reduce_(1, col, pos, reduce="amax")[:, 1:]   # (B, H) position + 1
        return x_BT.gather(1, (last - 1).clamp(min=0)) * (last > 0)        # (B, H)
    if reduce not in _REDUCE:
        raise ValueError(f"reduce must be one of {sorted(_REDUCE) + ['last']}, got {reduce!r}")
    out = x_BT.new_zeros(B, H + 1).scatter_reduce_(1, col, x_BT, reduce=_REDUCE[reduce], include_self=False)
    return out[:, 1:]                                                      # (B, H) column 0 held the others


def _turns_in_order(turn_id: torch.Tensor) -> bool:
    """True if every row's turn ids never fall below an earlier one, padding (-1) ignored.

    A token is out of order when it is below the running max of its row (cummax).
    Example: [[0, 1, -1, 1]] -> True, [[0, 1, -1, 0]] -> False.
    """
    return not bool(((turn_id < turn_id.cummax(1).values) & (turn_id >= 0)).any())


def discounted_returns(reward_BH: torch.Tensor, mask_BH: torch.Tensor, gamma: float = 1.0) -> torch.Tensor:
    """Return-to-go over valid turns: R_k = r_k + gamma * R_{k+1}, 0 on invalid turns -> (B, H).

    Invalid turns are skipped (their reward ignored) but do not break the chain. A loop over the H
    turns, vectorized over B, with the same two roundings as the Python loop ``acc = r + gamma * acc``,
    so equal reward suffixes give bit-equal returns (what GiGPO's anchors need for an exact 0). Each
    step is R_k = R_{k+1} * g_k + x_k with g = gamma (valid) or 1 (invalid) and x = r * mask, on
    rows laid out in blocks of c <= 512 rollouts as (B/c, H, c), so a turn is a contiguous run of c
    values per block: two passes transpose in and out (cache-sized blocks), the 2H steps are cheap.
    Example: r [[0., 0., 1.]], gamma 0.5 -> [[0.25, 0.5, 1.]].
    """
    if reward_BH.dim() != 2 or reward_BH.shape != mask_BH.shape:
        raise ValueError(f"reward and mask must both be (B, H), got {tuple(reward_BH.shape)} and {tuple(mask_BH.shape)}")
    B, H = reward_BH.shape
    c = math.gcd(B, 512)                                                      # rollouts per block
    n = B // c
    m = mask_BH.to(torch.bool).view(torch.uint8).reshape(n, c, H).transpose(1, 2)      # (n, H, c) view
    mf = reward_BH.new_empty(n, H, c).copy_(m)                                # (n, H, c) 1 on valid turns
    r = reward_BH.reshape(n, c, H).transpose(1, 2)                            # (n, H, c) view
    x = torch.mul(r, mf, out=torch.empty_like(mf))                            # (n, H, c) reward of valid turns
    if not all_finite(x):                                                     # inf * 0 on an invalid turn:
        x = torch.where(m.bool(), r, 0.0)                                     # ignore invalid rewards
    g = (1 - mf).add_(mf, alpha=gamma)                                        # (n, H, c) gamma, or 1: carry R on
    acc = reward_BH.new_empty(n, H + 1, c)                                    # (n, H + 1, c) R_k; R_H = 0
    a, xs, gs = acc.unbind(1), x.unbind(1), g.unbind(1)
    a[H].zero_()
    for k in reversed(range(H)):                                              # R_k = r_k + gamma R_{k+1}
        torch.mul(a[k + 1], gs[k], out=a[k]).add_(xs[k])
    out = reward_BH.new_empty(B, H)                                           # (B, H) 0 on invalid turns
    torch.mul(acc[:, :H].transpose(1, 2), mf.transpose(1, 2), out=out.view(n, c, H))
    return out
