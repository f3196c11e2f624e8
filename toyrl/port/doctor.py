"""``toyrl doctor``: read another trainer's multi-turn RL batch and say in plain words what is wrong with it.

    from toyrl.port.doctor import diagnose, from_verl, report
    view = from_verl(fields)                 # verl DataProto fields: responses, response_mask, attention_mask, ...
    text, record = report(view, diagnose(view))

Three formats are read (``read(obj, "auto")`` picks one from the keys; ``load_batch(PATH)`` reads a ``torch.save``-d
dict or a verl ``DataProto``):

| canonical    | verl (DataProto fields)                       | TRL (GRPOTrainer inputs)        | dict (toyrl names) |
|--------------|-----------------------------------------------|---------------------------------|--------------------|
| tokens       | responses                                     | completion_ids                  | tokens             |
| policy       | response_mask (absent: from attention_mask)   | completion_mask * tool_mask     | policy_mask        |
| attention    | attention_mask (prompt + response)            | completion_mask                 | attention_mask     |
| rewards      | token_level_rewards                           | rewards (B,)                    | rewards            |
| scores       | token_level_scores, rm_scores                 |                                 | scores             |
| group        | uid                                           | uid, or num_generations blocks  | group              |
| old / rollout log-probs | old_log_probs / rollout_log_probs  | old_per_token_logps / sampling_per_token_logps | old_logp / rollout_logp |
| advantages, returns, values | the same names                  | advantages (B,)                 | the same names     |
| tool tokens  | obs_mask                                      | completion_mask & ~tool_mask    | obs_mask           |
| turns, per-turn rewards | __num_turns__, turn_scores         |                                 | num_turns, turn_rewards |

The readers are in ``toyrl.port.doctor_read``, the checks themselves (one pure function each) in
``toyrl.port.doctor_checks``; both are re-exported here. ``verl_fields(turn_batch)``
writes a toyrl ``TurnBatch`` in verl's fields, and ``example_fields()`` makes a small hand-made multi-turn verl
batch (notebook 10 computes its advantages with verl's own functions and runs the doctor on it).
"""
from __future__ import annotations

import numpy as np
import torch

from ..batch import TurnBatch, token_to_turn
from ..credit.outcome import token_returns
from .doctor_checks import CHECKS
from .doctor_read import FORMATS, detect_format, from_dataproto, from_dict, from_trl, from_verl, load_batch, read
from .doctor_view import SEVERITIES, DoctorView, Finding, run_edges

__all__ = ["FORMATS", "read", "from_verl", "from_trl", "from_dict", "from_dataproto", "load_batch", "detect_format",
           "diagnose", "report", "verl_fields", "example_fields", "DoctorView", "Finding", "CHECKS"]

# ---- diagnose and report ---------------------------------------------------------------------------------
def diagnose(view: DoctorView, *, logprob_tol: float = 0.5, logprob_share: float = 0.01) -> list:
    """Every check of ``CHECKS`` on ``view`` -> the findings, in check order (``skip`` ones included)."""
    out = []
    for name, check in CHECKS.items():
        kw = {"tol": logprob_tol, "share_tol": logprob_share} if name == "logprob_gap" else {}
        out += check(view, **kw)
    return out


def report(view: DoctorView, findings: list) -> tuple[str, dict]:
    """The doctor's report as text and as a dict (counts, findings, which checks passed or were skipped)."""
    turns = run_edges(view.policy)[0].sum(1)                                  # (B,) turns per row
    groups = int(view.group.unique().numel()) if view.group is not None else 0
    lo, hi = int(turns.min()), int(turns.max())
    head = (f"toyrl doctor: {view.source} batch, {view.B} rows x {view.L} response tokens; {int(turns.sum())} turns "
            f"rebuilt from {view.name('policy')} ({lo}{'' if lo == hi else f'-{hi}'} per row)"
            + (f"; {groups} groups ({view.name('group')})" if groups else ""))
    n = {s: sum(f.severity == s for f in findings) for s in SEVERITIES}
    found = {f.check for f in findings if f.severity in ("error", "warning")}
    skipped = {f.check: f.message for f in findings if f.severity == "skip"}
    passed = [c for c in CHECKS if c not in found and c not in skipped]
    lines = [head]
    for sev in ("error", "warning", "info"):
        lines += [f"{sev.upper():7s} {f.check}: {f.message}" for f in findings if f.severity == sev]
    lines.append("ok      " + (", ".join(passed) or "none"))
    lines += [f"skip    {c}: {m.removeprefix('not checked: ')}" for c, m in skipped.items()]
    lines.append(f"verdict: {n['error']} error(s), {n['warning']} warning(s)"
                 + (" - training on this batch is silently wrong" if n["error"] else " - no error found"))
    record = {"format": view.source, "rows": view.B, "length": view.L, "turns": int(turns.sum()), "groups": groups,
              "errors": n["error"], "warnings": n["warning"], "passed": passed, "skipped": skipped,
              "findings": [f.as_dict() for f in findings if f.severity != "skip"]}
    return "\n".join(lines), record


# ---- correct batches to compare with ---------------------------------------------------------------------
def verl_fields(batch: TurnBatch) -> dict:
    """A TurnBatch in verl's DataProto fields: prompts (tokens before the first policy token, left-padded),
    responses (the rest, right-padded), attention_mask, response_mask, token_level_rewards (each turn's reward on
    its last policy token), returns (their reward-to-go over the policy tokens, gamma 1), turn_scores (each row's
    per-turn rewards, a list), uid, old_log_probs, rollout_log_probs (the engine's, else old_logp: what the
    rollout sampled with), obs_mask, __num_turns__ (2 H: H turns, H - 1 env replies, + 1): every field the
    doctor's checks read. Example: tokens [[1, 5, 7, 9]], policy [[0, 1, 0, 1]] -> prompts [[1]],
    responses [[5, 7, 9]], response_mask [[1, 0, 1]]."""
    B, T = batch.tokens.shape
    valid = batch.turn_id >= 0                                                # (B, T)
    pos = torch.arange(T).expand(B, T)
    start = torch.where(batch.policy_mask, pos, T).amin(1).clamp(max=T)       # (B,) first policy token
    end = torch.where(valid, pos + 1, 0).amax(1)                              # (B,) one past the last token
    P, L = int(start.max()), max(int((end - start).max()), 1)
    j = start[:, None] + torch.arange(L)[None, :]                             # (B, L) response positions
    inside = j < end[:, None]
    take = lambda x: torch.where(inside, x.gather(1, j.clamp(max=T - 1)), torch.zeros((), dtype=x.dtype))
    jp = start[:, None] - P + torch.arange(P)[None, :]                        # (B, P) prompt positions
    p_in = jp >= 0
    prompts = torch.where(p_in, batch.tokens.gather(1, jp.clamp(min=0)), 0)
    m, H = batch.policy_mask, batch.H
    has = token_to_turn(m.float(), batch.turn_id, H, "sum", m) > 0            # (B, H) turns with policy tokens
    end_pos = token_to_turn(pos.float(), batch.turn_id, H, "max", m).long()   # (B, H) each turn's last one
    r = batch.turn_reward * (batch.turn_mask & has)
    rewards = torch.zeros(B, T, dtype=r.dtype).scatter_add_(1, end_pos, r)    # the turn's reward on its end
    response_mask, token_rewards = take(batch.policy_mask).long(), take(rewards)
    turn_scores = np.empty(B, dtype=object)                                   # the declared per-turn rewards
    turn_scores[:] = [[float(x) for x in row[ok]] for row, ok in zip(batch.turn_reward, batch.turn_mask & has)]
    out = {"prompts": prompts, "responses": take(batch.tokens), "response_mask": response_mask,
           "attention_mask": torch.cat([p_in, inside], 1).long(), "token_level_rewards": token_rewards,
           "uid": np.array([f"g{int(g)}" for g in batch.group], dtype=object), "old_log_probs": take(batch.old_logp),
           "rollout_log_probs": take(batch.rollout_logp if batch.rollout_logp is not None else batch.old_logp),
           "returns": token_returns(token_rewards, response_mask, 1.0), "turn_scores": turn_scores,
           "__num_turns__": (2 * batch.num_turns()).numpy().astype(np.int32)}
    if batch.obs_mask is not None:
        out["obs_mask"] = take(batch.obs_mask).long()
    return out


def example_fields(seed: int = 0, B: int = 8, L: int = 16) -> dict:
    """A hand-made, correct multi-turn verl batch: B rows in groups of 2 (uid), left-padded prompts of 2-3 tokens,
    1-3 policy turns of 1-3 tokens with 1-2 tool tokens after each but the last (rows 1, 5, ... are cut after a
    tool reply), the outcome reward (1 on odd rows) on the last policy token, critic values, trainer log-probs on
    every response token and engine log-probs within 0.01 of them on policy tokens (0 on tool tokens, as agent
    loops write). Advantages and returns are left to the caller (verl's functions)."""
    rng = np.random.default_rng(seed)
    P = 3
    mask, attn = np.zeros((B, L), np.int64), np.zeros((B, P + L), np.int64)
    reward, turns = np.zeros((B, L)), np.zeros(B, np.int32)
    for b in range(B):
        attn[b, P - int(rng.integers(2, P + 1)):P] = 1
        t, n, cut = 0, int(rng.integers(1, 4)), b % 4 == 1
        for k in range(n):
            a = int(rng.integers(1, 4))
            mask[b, t:t + a] = 1
            t += a
            last = t - 1
            if k < n - 1 or cut:
                t += int(rng.integers(1, 3))
        attn[b, P:P + t] = 1
        reward[b, last], turns[b] = float(b % 2), 2 * n + int(cut)
    old = -rng.uniform(0.05, 2.0, (B, L)) * attn[:, P:]
    roll = (old + rng.normal(0, 0.003, (B, L)).clip(-0.01, 0.01)) * mask
    f = lambda x, dt=torch.float32: torch.tensor(x, dtype=dt)
    return {"prompts": f(rng.integers(5, 50, (B, P)) * attn[:, :P], torch.long),
            "responses": f(rng.integers(5, 50, (B, L)) * attn[:, P:], torch.long), "response_mask": f(mask),
            "attention_mask": f(attn, torch.long), "token_level_rewards": f(reward),
            "uid": np.array([f"prompt-{b // 2}" for b in range(B)], dtype=object), "__num_turns__": turns,
            "values": f(rng.normal(0, 0.5, (B, L)) * attn[:, P:]), "old_log_probs": f(old),
            "rollout_log_probs": f(roll)}
