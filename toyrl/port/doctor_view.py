"""What ``toyrl doctor`` reads a batch into: a ``DoctorView`` (the response tokens as masks and per-token fields),
the ``Finding`` a check returns, and the turns rebuilt from a policy mask.

Dimension legend: B rows (responses), L response tokens, H turns.

A turn is a maximal run of policy tokens (as in ``toyrl.port.verl.batch_from_verl``); attended tokens outside the
policy mask are tool / environment output, unattended ones padding. ``toyrl.port.doctor`` fills a view from verl,
TRL or a plain dict; ``toyrl.port.doctor_checks`` holds the checks.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Optional

import torch

__all__ = ["Finding", "DoctorView", "SEVERITIES", "run_edges", "turn_bounds", "span_text", "rows_text",
           "where_text", "skipped"]

SEVERITIES = ("error", "warning", "info", "skip")


@dataclass(frozen=True)
class Finding:
    """One thing a check found, in plain words."""

    check: str
    """the check's name (``reward_off_turn_end``)"""
    severity: str
    """error, warning, info or skip"""
    message: str
    """what is wrong, where (rows, positions) and how much, and what it does to training"""
    rows: tuple = ()
    """the rows concerned (all of them, sorted)"""
    count: int = 0
    """how many tokens, turns, rows or groups the message counts"""

    def as_dict(self) -> dict:
        """The finding as a JSON-ready dict (rows as a list)."""
        return {**asdict(self), "rows": list(self.rows)}


@dataclass
class DoctorView:
    """A trainer's batch as the checks read it; every token field is (B, L) over the response tokens."""

    source: str
    """the format it was read from: verl, trl or dict"""
    policy: torch.Tensor
    """(B, L) bool: the tokens the loss trains on (verl response_mask; TRL completion_mask * tool_mask)"""
    attended: torch.Tensor
    """(B, L) bool: the response tokens the model attends to (verl attention_mask[:, -L:]; TRL completion_mask)"""
    names: dict = field(default_factory=dict)
    """canonical name -> the batch's own field name, for the messages (rewards -> token_level_rewards)"""
    token_shapes: dict = field(default_factory=dict)
    """the batch's own name -> shape as given, for every per-token field (before aligning to L)"""
    row_counts: dict = field(default_factory=dict)
    """the batch's own name -> its number of rows, for every per-row field"""
    attention: Optional[torch.Tensor] = None
    """(B, N) bool: the attention mask as given (verl: prompt + response)"""
    rewards: Optional[torch.Tensor] = None
    """(B, L) float: the token rewards the advantages are computed from (verl token_level_rewards)"""
    scores: Optional[torch.Tensor] = None
    """(B, L) float: the rewards as the reward function placed them, before any per-token shaping such as a KL
    penalty (verl token_level_scores or rm_scores); None: ``rewards`` are read for placement"""
    seq_reward: Optional[torch.Tensor] = None
    """(B,) float: one reward per row where the batch has no token rewards (TRL)"""
    group: Optional[torch.Tensor] = None
    """(B,) long: dense group ids (verl uid; TRL consecutive blocks of num_generations)"""
    tool: Optional[torch.Tensor] = None
    """(B, L) bool: tokens known to be tool / environment output (obs_mask; TRL completion_mask & ~tool_mask)"""
    num_turns: Optional[torch.Tensor] = None
    """(B,) long: verl's ``__num_turns__`` (assistant turns + user / tool turns + 1)"""
    turn_rewards: Optional[list] = None
    """per row, the per-turn rewards the environment gave (verl turn_scores; dict turn_rewards)"""
    old_logp: Optional[torch.Tensor] = None
    """(B, L) float: the trainer's log-probs of the sampled tokens (verl old_log_probs)"""
    rollout_logp: Optional[torch.Tensor] = None
    """(B, L) float: the rollout engine's log-probs (verl rollout_log_probs; TRL sampling_per_token_logps)"""
    advantages: Optional[torch.Tensor] = None
    """(B, L) or (B,) float"""
    returns: Optional[torch.Tensor] = None
    """(B, L) float: returns / reward-to-go (verl returns)"""
    values: Optional[torch.Tensor] = None
    """(B, L) float: critic values"""

    @property
    def B(self) -> int:
        return self.policy.shape[0]

    @property
    def L(self) -> int:
        return self.policy.shape[1]

    def name(self, key: str) -> str:
        """The batch's own name of a canonical field (``name("rewards") -> "token_level_rewards"``)."""
        return self.names.get(key, key)


# ---- turns from masks ------------------------------------------------------------------------------------
def run_edges(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """First and last token of each maximal run of True in a (B, L) mask -> two (B, L) bool tensors.

    Example: mask [[0, 1, 1, 0, 1]] -> first [[0, 1, 0, 0, 1]], last [[0, 0, 1, 0, 1]].
    """
    m = mask.bool()
    off = torch.zeros_like(m[:, :1])
    return m & ~torch.cat([off, m[:, :-1]], 1), m & ~torch.cat([m[:, 1:], off], 1)


def turn_bounds(policy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Position of each turn's first and last policy token -> (first (B, H), last (B, H), valid (B, H)).

    Example: policy [[1, 1, 0, 1]] -> first [[0, 3]], last [[1, 3]], valid [[True, True]].
    """
    first, last = run_edges(policy)
    B, L = policy.shape
    n = first.sum(1)                                                       # (B,) turns per row
    H = max(int(n.max()) if B else 0, 1)
    col = (first.long().cumsum(1) - 1).clamp(min=0) + 1                     # (B, L) turn + 1
    pos = torch.arange(L, device=policy.device).expand(B, L)

    def at(edge):
        out = torch.zeros(B, H + 1, dtype=torch.long, device=policy.device)
        return out.scatter_reduce_(1, torch.where(edge, col, 0), pos, reduce="amax")[:, 1:]   # (B, H)
    return at(first), at(last), torch.arange(H, device=policy.device)[None, :] < n[:, None]


def span_text(pos) -> str:
    """``position 7``, ``positions 4-7`` (consecutive) or ``positions 2, 5, 9`` (at most 6 named)."""
    pos = [int(p) for p in pos]
    if len(pos) == 1:
        return f"position {pos[0]}"
    if pos == list(range(pos[0], pos[0] + len(pos))):
        return f"positions {pos[0]}-{pos[-1]}"
    more = f" and {len(pos) - 6} more" if len(pos) > 6 else ""
    return "positions " + ", ".join(map(str, pos[:6])) + more


def rows_text(rows) -> str:
    """``row 2`` or ``rows 0, 2, 5 and 3 more`` (at most 4 named)."""
    rows = [int(r) for r in rows]
    if len(rows) == 1:
        return f"row {rows[0]}"
    more = f" and {len(rows) - 4} more" if len(rows) > 4 else ""
    return "rows " + ", ".join(map(str, rows[:4])) + more


def where_text(mask: torch.Tensor) -> tuple[tuple, int, str]:
    """(rows with a True, count of True, "row r: positions ..." for the first such row) of a (B, L) mask."""
    rows = tuple(int(r) for r in mask.any(1).nonzero().flatten())
    first = f"{rows_text(rows)}; first: row {rows[0]}, {span_text(mask[rows[0]].nonzero().flatten())}" if rows else ""
    return rows, int(mask.sum()), first


def skipped(check: str, need: str) -> list:
    """The one ``skip`` finding of a check that cannot run: ``need`` says what it would need."""
    return [Finding(check, "skip", f"not checked: {need}")]
