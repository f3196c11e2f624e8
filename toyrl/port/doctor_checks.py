"""The checks of ``toyrl doctor``: what a correct multi-turn batch looks like, one pure function per rule.

Dimension legend: B rows (responses), L response tokens, H turns.

A batch from another trainer is read into a ``DoctorView`` (``toyrl.port.doctor_view``; ``toyrl.port.doctor``
reads verl, TRL and plain dicts): which response tokens the loss trains on (``policy``), which the model attends
to (``attended``), token rewards, group ids, log-probs, returns. Turns are rebuilt from the policy mask: a turn is
a maximal run of policy tokens, and attended tokens outside the policy mask are tool / environment output.

Each ``check_*(view) -> list[Finding]`` returns [] on a correct batch, a ``Finding`` per kind of fault, or one
``skip`` finding naming what it would need. Severities: error (training is silently wrong), warning (worth a
look), info (numbers only), skip (not checked). The bugs they catch were each reported on a peer's tracker:
verl#6392 (tool text in the reward's view, the reward on a tool token), verl#6376 (REINFORCE++ reward-to-go reset
at tool tokens), trl#4974 (a loss mask used as the attention mask), trl#5144 (a tool mask longer than the
completion), SkyRL#201 (per-turn rewards dropped but the last).
"""
from __future__ import annotations

import torch

from ..segments import dense_index, segment_count, segment_max, segment_min
from .doctor_view import DoctorView, Finding, rows_text, run_edges, skipped, span_text, turn_bounds, where_text

__all__ = ["CHECKS", "check_policy_on_tool_tokens", "check_reward_off_turn_end", "check_length_mismatch",
           "check_returns_reset_at_tool", "check_per_turn_rewards_dropped", "check_zero_variance_groups",
           "check_logprob_gap", "check_attention_holes", "check_non_finite"]


# ---- the checks ------------------------------------------------------------------------------------------
def check_policy_on_tool_tokens(v: DoctorView) -> list:
    """The policy mask must leave out tool / environment tokens (else the loss trains the policy to write them).

    Evidence, strongest first: an explicit tool mask (error where it meets the policy mask); verl's
    ``__num_turns__`` > 2 (there were tool / user turns) on a row whose policy mask covers every attended token
    (error: e.g. a response_mask rebuilt from attention_mask); a run of 2+ policy tokens whose rollout log-prob is
    exactly 0, the value agent loops write for tokens the engine did not sample (warning).
    Example: tool [[0, 1, 1, 0]], policy [[1, 1, 1, 1]] -> one error, 2 tokens in row 0, positions 1-2.
    """
    out, name = [], "policy_on_tool_tokens"
    if v.tool is None and v.num_turns is None and v.rollout_logp is None:
        return skipped(name, "no evidence of where tool tokens are (give obs_mask, __num_turns__ or rollout_log_probs)")
    if v.tool is not None and bool((bad := v.policy & v.tool).any()):
        rows, n, first = where_text(bad)
        out.append(Finding(name, "error", f"{n} tool/env tokens are in {v.name('policy')} ({v.name('tool')} marks "
                           f"them as tool output) in {first}: the loss trains the policy to write the tool's text",
                           rows, n))
    if v.num_turns is not None:
        covered = v.attended.any(1) & ~(v.attended & ~v.policy).any(1) & (v.num_turns > 2)      # (B,)
        if bool(covered.any()):
            rows = tuple(int(r) for r in covered.nonzero().flatten())
            turns = sorted({int(v.num_turns[r]) for r in rows})
            out.append(Finding(name, "error", f"{rows_text(rows)}: {v.name('num_turns')} = {turns[0]}"
                               f"{'-' + str(turns[-1]) if len(turns) > 1 else ''} says the rollout had tool or user "
                               f"turns, but {v.name('policy')} is 1 on every attended response token: the tool tokens "
                               f"are trained on (is the mask rebuilt from {v.name('attended')}?)", rows, len(rows)))
    if v.rollout_logp is not None:
        z = v.policy & (v.rollout_logp == 0)
        run2 = z[:, :-1] & z[:, 1:]                                               # (B, L - 1) two in a row
        if bool(run2.any()):
            rows = tuple(int(r) for r in run2.any(1).nonzero().flatten())
            n = int(z[list(rows)].sum())
            out.append(Finding(name, "warning", f"{v.name('rollout_logp')} is exactly 0 on {n} policy tokens in runs "
                               f"of 2 or more in {rows_text(rows)} (first: row {rows[0]}, "
                               f"{span_text(z[rows[0]].nonzero().flatten())}): agent loops write 0 for tokens the engine "
                               f"did not sample, so these look like tool tokens inside the policy mask", rows, n))
    return out


def check_reward_off_turn_end(v: DoctorView) -> list:
    """A reward belongs on the last policy token of the turn it judges, never on a tool token or padding.

    Placement is read from ``scores`` where given, else ``rewards``. Error: a non-zero reward on a tool token
    (verl#6392 put it on the last attended token) or on padding (no loss sees it). Warning: one inside a turn
    (its later tokens miss it in a reward-to-go); not raised for dense rewards (non-zero on most policy tokens,
    e.g. a per-token KL penalty), whose tool and padding positions are still checked.
    Example: policy [[1, 1, 0]], attended [[1, 1, 1]], reward [[0, 0, 1]] -> error, a reward on a tool token.
    """
    name = "reward_off_turn_end"
    r, key = (v.scores, "scores") if v.scores is not None else (v.rewards, "rewards")
    if r is None:
        return skipped(name, "no token rewards")
    nz = r != 0
    _, last = run_edges(v.policy)
    dense = int((nz & v.policy).sum()) > 0.5 * int(v.policy.sum())
    kinds = [(nz & v.attended & ~v.policy, "error", "a tool/env token (attended, not in the policy mask)"),
             (nz & ~v.attended, "error", "padding (attention 0: nothing the policy wrote)")]
    if not dense:
        kinds.append((nz & v.policy & ~last, "warning", "a policy token that is not its turn's last (the turn's "
                                                        "later tokens miss it in a reward-to-go)"))
    out = []
    for bad, sev, what in kinds:
        if bool(bad.any()):
            rows, n, first = where_text(bad)
            b, t = (int(i) for i in bad.nonzero()[0])
            before = v.policy[b, :t].nonzero().flatten()
            end = f" (the last policy token before it: position {int(before[-1])})" if len(before) and \
                not bool(v.policy[b, t]) else ""
            out.append(Finding(name, sev, f"{n} non-zero {v.name(key)} sit on {what} in {first}{end}; a reward "
                               "belongs on the last policy token of the turn it judges", rows, n))
    return out


def check_length_mismatch(v: DoctorView) -> list:
    """Every per-token field has the length of the tokens, every per-row field B rows, and the policy mask stays
    inside the attended tokens (a mask longer than its sequence trains on padding).

    A field of another length was cut or zero-padded to L before the other checks (trl#5144: a tool mask
    longer than the completion after re-tokenization). Example: tool_mask (2, 14) beside completion_ids (2, 12)
    -> error naming both.
    """
    name, out = "length_mismatch", []
    ref = v.name("length")
    bad = {k: s for k, s in v.token_shapes.items() if len(s) < 2 or s[-1] != v.L or s[0] != v.B}
    bad.update({k: (n,) for k, n in v.row_counts.items() if n != v.B})
    if bad:
        said = "; ".join(f"{k} {tuple(s)}" for k, s in bad.items())
        out.append(Finding(name, "error", f"fields disagree with {ref} ({v.B}, {v.L}): {said}. Cut or zero-padded "
                           f"to {v.L} tokens here, but a trainer multiplying them would fail or misalign tokens "
                           "(e.g. a tool mask longer than the completion after re-tokenization)", (), len(bad)))
    if bool((past := v.policy & ~v.attended).any()):
        rows, n, first = where_text(past)
        out.append(Finding(name, "error", f"{v.name('policy')} is 1 on {n} tokens where {v.name('attended')} is 0 "
                           f"in {first}: the policy mask runs past the sequence (padding is trained on)", rows, n))
    return out


def check_returns_reset_at_tool(v: DoctorView, *, tol: float = 1e-6) -> list:
    """Reward-to-go (REINFORCE++ returns, GAE returns = A + V) must carry across tool tokens to earlier turns.

    At the last token s of turn k and the first token n of turn k + 1, a return equal to s's own reward while
    n's return is non-zero means the scan restarted at the tool tokens (verl#6376: every earlier turn loses the
    later reward). With gamma = 0 a correct return looks the same; such a batch needs no reward-to-go check.
    Example: policy [[1, 0, 1]], rewards [[0, 0, 1]], returns [[0, 0, 1]] -> error at the boundary 0 | 2.
    """
    name = "returns_reset_at_tool"
    if v.returns is None or v.rewards is None:
        return skipped(name, "needs returns and token rewards")
    first, last, valid = turn_bounds(v.policy)
    if first.shape[1] < 2:
        return skipped(name, "no row has two turns")
    s, n = last[:, :-1], first[:, 1:]                                      # (B, H - 1) boundary positions
    ok = valid[:, 1:]
    ret_s, ret_n, r_s = v.returns.gather(1, s), v.returns.gather(1, n), v.rewards.gather(1, s)
    bad = ok & (ret_n.abs() > tol) & ((ret_s - r_s).abs() <= tol)            # (B, H - 1)
    if not bool(bad.any()):
        return []
    rows = tuple(int(x) for x in bad.any(1).nonzero().flatten())
    b, k = (int(i) for i in bad.nonzero()[0])
    ps, pn = int(s[b, k]), int(n[b, k])
    msg = (f"{int(bad.sum())} of {int(ok.sum())} turn boundaries in {rows_text(rows)}: the return ({v.name('returns')}) "
           f"falls to the token's own reward at the end of a turn and restarts after the tool tokens (first: row {b}, "
           f"{float(ret_s[b, k]):.3f} at position {ps}, the last of turn {k + 1}, against {float(ret_n[b, k]):.3f} "
           f"at position {pn}, the first of turn {k + 2}): the reward-to-go is reset at tool tokens, so earlier turns "
           "never see later rewards")
    return [Finding(name, "error", msg, rows, int(bad.sum()))]


def check_per_turn_rewards_dropped(v: DoctorView) -> list:
    """Per-turn rewards the environment gave must each reach the token rewards (SkyRL#201 kept only the last).

    A row with m >= 2 non-zero declared turn rewards needs at least m non-zero token-reward positions.
    Example: turn_rewards [[0.5, 1.0]], token rewards with one non-zero -> error, 2 declared, 1 placed.
    """
    name = "per_turn_rewards_dropped"
    r = v.scores if v.scores is not None else v.rewards
    if v.turn_rewards is None or r is None:
        return skipped(name, "needs declared per-turn rewards (turn_scores / turn_rewards) and token rewards")
    declared = torch.tensor([sum(1 for x in (t if t is not None else []) if float(x) != 0) for t in v.turn_rewards])
    placed = (r != 0).sum(1).cpu()                                          # (B,)
    bad = (declared >= 2) & (placed < declared)
    if not bool(bad.any()):
        return []
    rows = tuple(int(x) for x in bad.nonzero().flatten())
    b = rows[0]
    return [Finding(name, "error", f"{rows_text(rows)}: {v.name('turn_rewards')} holds more non-zero per-turn rewards "
                    f"than {v.name('rewards')} has non-zero positions (first: row {b}, {int(declared[b])} declared "
                    f"{[round(float(x), 3) for x in v.turn_rewards[b]]}, {int(placed[b])} placed): per-turn rewards "
                    "are dropped, only the last survives", rows, len(rows))]


def check_zero_variance_groups(v: DoctorView) -> list:
    """Share of groups (same uid) whose rows all got the same reward: group-normalized advantages are 0 there.

    The row reward is the sum of its token rewards (verl's outcome), else ``seq_reward``, else a per-row
    advantage (all 0 in a group: no signal). Warning when any group of 2+ rows has zero variance; info for
    groups of one row (no baseline). Example: rewards per row [1, 1, 0, 1], group [0, 0, 1, 1] -> 1 of 2 groups.
    """
    name = "zero_variance_groups"
    R = (v.rewards.sum(1) if v.rewards is not None else v.seq_reward if v.seq_reward is not None
         else v.advantages if v.advantages is not None and v.advantages.dim() == 1 else None)
    if v.group is None or R is None:
        return skipped(name, "needs group ids (uid) and rewards")
    g, S = dense_index(v.group)
    n = segment_count(g, S, torch.long)                                      # (S,)
    lo, hi = segment_min(R.double(), g, S), segment_max(R.double(), g, S)
    flat = (n > 1) & ((hi - lo).abs() <= 1e-9)                                # (S,)
    out = []
    if bool(flat.any()):
        rows = tuple(int(x) for x in flat[g].nonzero().flatten())
        values = sorted({round(float(x), 3) for x in lo[flat]})
        share = int(flat.sum()) / int((n > 1).sum())
        out.append(Finding(name, "warning", f"{int(flat.sum())} of {int((n > 1).sum())} groups ({share:.0%}; "
                           f"{len(rows)} of {v.B} rows) got one reward in every row (values {values}): their "
                           "group-normalized advantages are 0, so they add no gradient (filter them, or sample more "
                           "per prompt)", rows, int(flat.sum())))
    if bool((n == 1).any()):
        out.append(Finding(name, "info", f"{int((n == 1).sum())} groups have one row: no group baseline there",
                           (), int((n == 1).sum())))
    return out


def check_logprob_gap(v: DoctorView, *, tol: float = 0.5, share_tol: float = 0.01) -> list:
    """Rollout-engine vs trainer log-probs on policy tokens: max and mean |diff| and the share above ``tol`` nats.

    Info with the numbers; warning when some token is over ``tol``; error when more than ``share_tol`` of the
    tokens are, or when the two agree once shifted by one position (an off-by-one alignment).
    Example: old [[-1.0, -2.0]], rollout [[-1.0, -0.5]] -> max 1.5, mean 0.75, 50% over 0.5: error.
    """
    name = "logprob_gap"
    if v.old_logp is None or v.rollout_logp is None:
        return skipped(name, "needs both rollout and trainer log-probs")
    m = v.policy & torch.isfinite(v.old_logp) & torch.isfinite(v.rollout_logp)
    if not bool(m.any()):
        return skipped(name, "no policy token with finite log-probs")
    d = (v.old_logp - v.rollout_logp).abs()[m]
    mean, top, over = float(d.mean()), float(d.max()), float((d > tol).float().mean())
    pair = m[:, 1:] & m[:, :-1]
    shifted = [float((a - b).abs()[pair].mean()) for a, b in ((v.old_logp[:, 1:], v.rollout_logp[:, :-1]),
                                                            (v.old_logp[:, :-1], v.rollout_logp[:, 1:]))]
    shift = bool(pair.any()) and mean > tol / 10 and min(shifted) < mean / 4
    sev = "error" if over > share_tol or shift else "warning" if over > 0 else "info"
    msg = (f"{v.name('rollout_logp')} vs {v.name('old_logp')} on {int(m.sum())} policy tokens: max |diff| {top:.3f}, "
           f"mean {mean:.4f}; {over:.1%} of tokens differ by more than {tol} nats")
    zeros = int((v.policy & (v.rollout_logp == 0) & (v.old_logp != 0)).sum())
    if shift:
        msg += (f"; shifted by one position they agree (mean {min(shifted):.4f}): the two are misaligned by a token")
    elif zeros > 1:
        msg += (f"; on {zeros} of them the rollout log-prob is exactly 0, what agent loops write for tokens the "
                "engine did not sample: tool tokens in the policy mask?")
    elif sev != "info":
        msg += " (engine / trainer mismatch: correct it, e.g. truncated importance sampling, or find the cause)"
    return [Finding(name, sev, msg, (), int((d > tol).sum()))]


def check_attention_holes(v: DoctorView) -> list:
    """The attention mask is one contiguous block per row (padding only at the ends).

    A 0 between attended tokens cuts those tokens out of the context of every later token: tool output must be
    masked out of the loss, not out of attention (trl#4974). Example: attention [[1, 0, 1]] -> error at 1.
    """
    name = "attention_holes"
    if v.attention is None:
        return skipped(name, "no attention mask")
    a = v.attention.bool().long()
    before = a.cummax(1).values.bool()
    after = a.flip(1).cummax(1).values.flip(1).bool()
    hole = before & after & ~a.bool()
    if not bool(hole.any()):
        return []
    rows, n, first = where_text(hole)
    return [Finding(name, "error", f"{v.name('attention')} is 0 on {n} tokens between attended tokens in {first}: "
                    "those tokens vanish from the context of every later token (was a loss mask used as the attention "
                    "mask? mask tool tokens out of the loss only)", rows, n)]


def check_non_finite(v: DoctorView) -> list:
    """Rewards, returns, advantages, values and log-probs are finite on policy tokens (a NaN spreads through
    the loss). Example: advantages [[nan, 1.0]] on policy [[1, 1]] -> error, 1 value in row 0."""
    out = []
    for key in ("rewards", "scores", "returns", "advantages", "values", "old_logp", "rollout_logp"):
        x = getattr(v, key)
        if x is None:
            continue
        bad = ~torch.isfinite(x) & (v.policy if x.dim() == 2 else torch.ones_like(x, dtype=torch.bool))
        if bool(bad.any()):
            rows = tuple(int(r) for r in (bad.any(1) if bad.dim() == 2 else bad).nonzero().flatten())
            out.append(Finding("non_finite", "error", f"{v.name(key)} has {int(bad.sum())} NaN or infinite values "
                               f"on policy tokens in {rows_text(rows)}", rows, int(bad.sum())))
    return out


CHECKS = {"policy_on_tool_tokens": check_policy_on_tool_tokens, "reward_off_turn_end": check_reward_off_turn_end,
          "length_mismatch": check_length_mismatch, "returns_reset_at_tool": check_returns_reset_at_tool,
          "per_turn_rewards_dropped": check_per_turn_rewards_dropped,
          "zero_variance_groups": check_zero_variance_groups, "logprob_gap": check_logprob_gap,
          "attention_holes": check_attention_holes, "non_finite": check_non_finite}
"""name -> check, in the order the report lists them"""
