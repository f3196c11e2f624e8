"""The stability checklist of multi-turn agent RL as numbers: what to log from the first step.

Dimension legend: B rollouts, T token positions, H turns, S groups, N samples.

- within-group reward std and the fraction of zero-variance groups: collapses before the mean
  reward does (RAGEN's Echo Trap, arXiv 2504.20073);
- clip fraction, ratio extremes and gradient norm **per turn index** (SORL, arXiv 2511.20718);
  the gradient norm per turn exactly (one backward pass per turn) or by a cheap proxy
  ||d loss / d logp|| over the turn's tokens;
- void-turn rate, format-valid rate, turns per episode (SimpleTIR, arXiv 2509.02479);
- entropy of the policy tokens just before vs just after tool observations (ARPO, arXiv 2507.19849);
- template diversity of the reasoning tokens: H(template) and MI(template; task) (RAGEN's collapse
  signal: low MI means the reasoning no longer depends on the task);
- GiGPO's anchor share: how many turns start from a state that recurs within their group (its step-level
  groups; at 0 GiGPO is GRPO), and the rollouts per group.

``stability_report(batch, info)`` returns all of it as one flat run-log row. A value that cannot
be measured (no entropy given, no observation tokens, no void-turn labels) is NaN. A training step
takes ppo_epochs x minibatches loss evaluations; ``pool_loss_stats`` pools their ``info`` dicts into
one (``STATS_OVER`` says how, and every run-log header carries it as ``stats_over``).
"""
from __future__ import annotations

import re
from typing import Iterable, Optional, Sequence

import torch

from .batch import TurnBatch, token_to_turn, turn_to_token
from .filters import group_reward_std
from .segments import anchor_recurrence, dense_index, pair_index, segment_count, segment_sum

__all__ = ["reward_variance", "grad_norm_per_turn", "grad_norm_per_turn_proxy", "obs_boundary_masks",
           "turn_template_ids", "template_entropy_mi", "pool_loss_stats", "stability_report", "STATS_OVER",
           "text_template_stats", "repetition_rate"]

NAN = float("nan")
POOL_MEAN = ("loss", "loss_pg", "kl_ref", "clip_frac", "clip_frac_high", "clip_frac_low", "extra_frac", "ratio_mean",
             "ppo_kl", "approx_kl")
"""loss statistics pooled as token-weighted means (their ``*_turn`` lists per turn index, weighted by tokens_turn)"""
POOL_MIN, POOL_MAX, POOL_COUNT = ("ratio_min",), ("ratio_max",), ("n_tokens", "tokens_turn")
STATS_OVER = ("all minibatches x epochs, token-weighted (per-turn lists weighted per turn index); ratio_min / "
              "ratio_max: min of minima, max of maxima; n_tokens / tokens_turn: per pass over the batch")
"""how a run-log row's loss statistics span a step (``pool_loss_stats``); written into every run-log header"""


def reward_variance(reward: torch.Tensor, group: torch.Tensor, *, eps: float = 1e-6, ddof: int = 1) -> dict:
    """Mean within-group reward std and the fraction of groups with std <= eps.

    Example: reward [1., 0., 1., 1.], group [0, 0, 1, 1] -> reward_std 0.3536, zero_var_frac 0.5.
    """
    std, _, S = group_reward_std(reward, group, ddof=ddof)
    return {"reward_std": float(std.mean()) if S else 0.0,
            "zero_var_frac": float((std <= eps).float().mean()) if S else 0.0}


def grad_norm_per_turn(info: dict, turn_id: torch.Tensor, params: Iterable[torch.Tensor], *,
                       H: Optional[int] = None) -> torch.Tensor:
    """Exact gradient norm of each turn index's share of the loss w.r.t. ``params`` -> (H,).

        L_k = sum_{i,t: turn(t) = k} w_{i,t} l_{i,t},   sum_k L_k = loss,   g_k = || dL_k / d params ||

    Uses ``info["token_loss"]`` and ``info["agg_weight"]`` from ``policy_loss`` (the aggregation is
    linear, so the split is exact). One backward pass per turn index (graph retained).
    """
    params = [p for p in params if p.requires_grad]
    loss_BT, w = info["token_loss"], info["agg_weight"]
    H = int(turn_id.max()) + 1 if H is None else H
    out = torch.zeros(H, dtype=loss_BT.dtype, device=loss_BT.device)
    for k in range(H):
        Lk = (loss_BT * w * (turn_id == k)).sum()
        grads = torch.autograd.grad(Lk, params, retain_graph=True, allow_unused=True)
        sq = [(g.detach().double() ** 2).sum() for g in grads if g is not None]
        out[k] = torch.stack(sq).sum().sqrt() if sq else 0.0
    return out


def grad_norm_per_turn_proxy(loss: torch.Tensor, logp: torch.Tensor, turn_id: torch.Tensor, mask: torch.Tensor,
                             *, H: Optional[int] = None) -> torch.Tensor:
    """Cheap proxy: the L2 norm of d loss / d logp over each turn index's tokens -> (H,).

    One backward pass to logp (graph retained). Example: loss = sum(logp * [1, 2, 2]) with turns
    [0, 1, 1] -> [1., 2.8284].
    """
    H = int(turn_id.max()) + 1 if H is None else H
    (g,) = torch.autograd.grad(loss, logp, retain_graph=True)
    m = mask.bool() & (turn_id >= 0)
    return segment_sum(g[m].detach() ** 2, turn_id[m], H).sqrt()


def obs_boundary_masks(policy_mask: torch.Tensor, turn_id: torch.Tensor, H: int, *, window: int = 1):
    """Policy tokens just before and just after a tool observation -> (pre, post), each (B, T) bool.

    pre: the last ``window`` policy tokens of a turn followed by observation tokens; post: the first
    ``window`` policy tokens of a turn that follows one. Observation tokens are non-policy tokens
    with turn_id >= 0 after the row's first policy token (the prompt comes before it).
    Example: policy [F, T, T, F, T], turn_id [0, 0, 0, 0, 1] -> pre [F, F, T, F, F], post [F, F, F, F, T].
    """
    pm = policy_mask.bool()
    obs = ~pm & (turn_id >= 0) & (torch.cumsum(pm.long(), 1) > 0)              # (B, T)
    has_obs = token_to_turn(obs.long(), turn_id, H, "max", turn_id >= 0) > 0    # (B, H) turn k ends with o_k
    after_obs = torch.zeros_like(has_obs)
    after_obs[:, 1:] = has_obs[:, :-1]
    c = torch.cumsum(pm.long(), 1)                                              # (B, T)
    first = turn_to_token(token_to_turn(c, turn_id, H, "min", pm), turn_id)
    n = turn_to_token(token_to_turn(pm.long(), turn_id, H, "sum", pm), turn_id)
    rank = c - first                                                            # 0 = first policy token
    pre = pm & (n - 1 - rank < window) & turn_to_token(has_obs.long(), turn_id).bool()
    post = pm & (rank < window) & turn_to_token(after_obs.long(), turn_id).bool()
    return pre, post


def _mix(v: torch.Tensor) -> torch.Tensor:
    """splitmix64 finalizer on int64 (wrapping arithmetic)."""
    c1, c2 = 0xBF58476D1CE4E5B9 - 2**64, 0x94D049BB133111EB - 2**64
    v = (v ^ (v >> 30)) * c1
    v = (v ^ (v >> 27)) * c2
    return v ^ (v >> 31)


def turn_template_ids(tokens: torch.Tensor, mask: torch.Tensor, turn_id: torch.Tensor, H: int):
    """Hash each turn's masked token sequence to an int64 template id -> (ids (B, H), present (B, H)).

    Order-sensitive (each token is mixed with its rank in the turn) and length-sensitive; equal
    sequences always get equal ids, different ones collide with probability ~2^-64.
    Example: turns "7 8" and "7 8" share an id; "8 7" gets another.
    """
    m = mask.bool() & (turn_id >= 0)
    c = torch.cumsum(m.long(), 1)
    rank = c - turn_to_token(token_to_turn(c, turn_id, H, "min", m), turn_id)  # (B, T)
    h = _mix(_mix(tokens.long() + 1) + rank * (0x9E3779B97F4A7C15 - 2**64))   # (B, T) token x position
    ids = token_to_turn(torch.where(m, h, torch.zeros_like(h)), turn_id, H, "sum", m)   # (B, H)
    n = token_to_turn(m.long(), turn_id, H, "sum", m)
    return _mix(ids + n), n > 0


def _entropy(counts: torch.Tensor) -> float:
    p = counts[counts > 0].double() / counts.sum().clamp(min=1)
    return float(-(p * p.log()).sum())


def template_entropy_mi(template: torch.Tensor, task: torch.Tensor) -> tuple[float, float]:
    """Plug-in H(template) and MI(template; task) = H(template) - H(template | task), in nats.

    template, task: (N,) ids of N samples. MI is biased upward for few samples per task.
    Example: templates [1, 2, 1, 2], tasks [0, 0, 1, 1] -> H = log 2, MI = 0;
    templates [1, 1, 2, 2] -> H = log 2, MI = log 2.
    """
    if template.numel() == 0:
        return 0.0, 0.0
    ti, St = dense_index(template)
    ki, Sk = dense_index(task)
    pi, Sp = pair_index(ki, ti)
    h_t = _entropy(segment_count(ti, St))
    h_joint, h_task = _entropy(segment_count(pi, Sp)), _entropy(segment_count(ki, Sk))
    return h_t, max(h_t - (h_joint - h_task), 0.0)


def _pool(x: torch.Tensor, w: torch.Tensor, how: str) -> torch.Tensor:
    """Pool x (N, ...) over its first axis with token weights w (N, ...); entries of weight 0 are left out
    unless every weight is 0 (then the plain mean / min / max: an empty statistic's fill value)."""
    has = w > 0
    if how == "mean":
        W = w.sum(0)
        p = w / torch.where(W > 0, W, torch.ones_like(W))                      # one entry of weight w: p = w / w = 1
        pooled = torch.where(has, p * x, torch.zeros_like(x)).sum(0)
        return torch.where(W > 0, pooled, x.mean(0))
    pick = torch.amin if how == "min" else torch.amax
    fill = torch.full_like(x, float("inf") if how == "min" else float("-inf"))
    return torch.where(has.any(0), pick(torch.where(has, x, fill), 0), pick(x, 0))


@torch.no_grad()
def pool_loss_stats(infos: list, *, passes: int = 1) -> dict:
    """Pool the loss statistics of the N loss evaluations of one step (every minibatch of every epoch).

        mean-like s:  s = sum_i n_i s_i / sum_i n_i,   n_i = minibatch i's loss-mask tokens (``n_tokens``)
        s_turn[k]:    s[k] = sum_i n_ik s_ik[k] / sum_i n_ik,   n_ik = its tokens of turn index k (``tokens_turn``)
        ratio_min = min_i ratio_min_i,   ratio_max = max_i ratio_max_i   (likewise per turn index)
        n_tokens, tokens_turn = sum_i n_i / passes   (the tokens of one pass over the batch)

    Mean-like: ``POOL_MEAN`` (``loss``, the minibatch's total loss, included when an info holds it).
    Minibatches with no tokens (of turn k) are left out unless all are empty (then the fill value).
    Each ``infos[i]`` is a ``policy_loss`` info (or its statistics alone); keys other than these
    statistics are dropped. Returns float64 tensors: scalars and (H,) lists. With one info the
    result equals it exactly (p = n / n = 1). Example: clip_frac 0.5 over 1 token and 0.0 over
    3 tokens -> 0.125; ratio_max 1.3 and 1.1 -> 1.3; tokens_turn [1, 0] and [2, 1] -> [3., 1.].
    """
    if not isinstance(infos, (list, tuple)) or not infos or not all(isinstance(i, dict) for i in infos):
        raise ValueError(f"infos must be a non-empty list of policy_loss info dicts, got {infos!r:.80}")
    if not isinstance(passes, int) or passes < 1:
        raise ValueError(f"passes must be an int >= 1 (the epochs the infos span), got {passes!r}")
    known = {*POOL_MEAN, *POOL_MIN, *POOL_MAX, *POOL_COUNT}
    stat_keys = lambda info: [k for k in info if k in known or (k.endswith("_turn") and k[:-5] in known)]   # noqa: E731
    keys = stat_keys(infos[0])
    for i, info in enumerate(infos):
        if "n_tokens" not in info or "tokens_turn" not in info:
            raise ValueError(f"infos[{i}] must hold n_tokens and tokens_turn (a policy_loss info)")
        if set(stat_keys(info)) != set(keys):
            raise ValueError(f"infos[{i}] holds other statistics {sorted(stat_keys(info))} "
                             f"than infos[0] {sorted(keys)}")
    f64 = lambda v: torch.as_tensor(v).detach().to("cpu", torch.float64)     # noqa: E731
    stack = lambda k: torch.stack([f64(info[k]) for info in infos])           # noqa: E731
    n, n_turn = stack("n_tokens"), stack("tokens_turn")                         # (N,), (N, H)
    out = {}
    for k in keys:
        base, turn = (k[:-5], True) if k.endswith("_turn") and k != "tokens_turn" else (k, False)
        if base in POOL_COUNT:
            out[k] = stack(k).sum(0) / passes
            continue
        x = stack(k)                                                            # (N,) or (N, H)
        if turn and x.shape != n_turn.shape:
            raise ValueError(f"{k} must have the shape of tokens_turn (H,) in every info, got {tuple(x.shape)}")
        how = "mean" if base in POOL_MEAN else "min" if base in POOL_MIN else "max"
        out[k] = _pool(x, n_turn if turn else n, how)
    return out


def _tolist(x) -> list:
    return [float(v) for v in x.detach().cpu().tolist()]


def stability_report(batch: TurnBatch, info: Optional[dict] = None, *, reward: Optional[torch.Tensor] = None,
                     format_valid: Optional[torch.Tensor] = None, reasoning_mask: Optional[torch.Tensor] = None,
                     grad_norm_turn: Optional[torch.Tensor] = None, window: int = 1, eps: float = 1e-6) -> dict:
    """One flat run-log row of the stability checklist.

    reward (B,) defaults to ``batch.outcome()``; format_valid (B, H) bool defaults to the valid
    turns that are not void; reasoning_mask (B, T) the tokens hashed into templates (default
    the policy tokens); the template's task is ``batch.task`` or else ``batch.group``.
    Keys: reward_mean, reward_std, zero_var_frac, entropy, entropy_pre_obs, entropy_post_obs,
    void_turn_rate, void_traj_rate, format_valid_rate, turns_per_episode, GiGPO's anchor statistics
    (``segments.anchor_recurrence``: anchor_share, anchor_states_recur, anchor_group_mean, anchor_group_max),
    the rollouts per group (group_size_min, group_size_mean), template_entropy,
    template_mi, template_entropy_turn; from ``info``: loss_pg, kl_ref, clip_frac, clip_frac_low,
    clip_frac_high, ratio_max, ratio_min, ratio_mean, approx_kl, ppo_kl and the per-turn lists
    clip_frac_turn, clip_frac_low_turn, ratio_max_turn, ratio_min_turn, ratio_mean_turn,
    approx_kl_turn, tokens_turn; grad_norm_turn if given. The trainer passes the step's pooled info
    (``pool_loss_stats``: all minibatches x epochs, token-weighted), not one minibatch's.
    """
    H, tm = batch.H, batch.turn_mask
    R = batch.outcome() if reward is None else reward
    row = {"reward_mean": float(R.float().mean()) if R.numel() else 0.0, **reward_variance(R, batch.group, eps=eps)}

    pm = batch.policy_mask
    if batch.entropy is not None:
        pre, post = obs_boundary_masks(pm, batch.turn_id, H, window=window)
        mean_on = lambda m: float(batch.entropy[m].float().mean()) if bool(m.any()) else NAN   # noqa: E731
        row.update(entropy=mean_on(pm), entropy_pre_obs=mean_on(pre), entropy_post_obs=mean_on(post))
    else:
        row.update(entropy=NAN, entropy_pre_obs=NAN, entropy_post_obs=NAN)

    n_valid = int(tm.sum())
    if batch.void_turn is not None:
        void = batch.void_turn & tm
        row["void_turn_rate"] = float(void.sum()) / n_valid if n_valid else 0.0
        row["void_traj_rate"] = float(void.any(1).float().mean()) if batch.B else 0.0
    else:
        row["void_turn_rate"] = row["void_traj_rate"] = NAN
    if format_valid is None and batch.void_turn is not None:
        format_valid = ~batch.void_turn
    row["format_valid_rate"] = (float((format_valid.bool() & tm).sum()) / n_valid if n_valid else 0.0) \
        if format_valid is not None else NAN
    row["turns_per_episode"] = float(tm.sum(1).float().mean()) if batch.B else 0.0
    row.update(anchor_recurrence(batch.group, batch.state_key, tm))          # GiGPO's step-level groups
    g, S = dense_index(batch.group)
    n = segment_count(g, S)                                                   # (S,) rollouts per group
    row["group_size_min"], row["group_size_mean"] = int(n.min()), float(n.mean())

    ids, present = turn_template_ids(batch.tokens, pm if reasoning_mask is None else reasoning_mask, batch.turn_id, H)
    present &= tm
    task = (batch.task if batch.task is not None else batch.group)[:, None].expand(-1, H)   # (B, H)
    row["template_entropy"], row["template_mi"] = template_entropy_mi(ids[present], task[present])
    row["template_entropy_turn"] = [template_entropy_mi(ids[:, k][present[:, k]], task[:, k][present[:, k]])[0]
                                    for k in range(H)]

    if info is not None:
        for key in ("loss_pg", "kl_ref", "clip_frac", "clip_frac_low", "clip_frac_high", "ratio_max", "ratio_min",
                    "ratio_mean", "approx_kl", "ppo_kl"):
            if key in info:
                row[key] = float(info[key])
        for key in ("clip_frac_turn", "clip_frac_low_turn", "ratio_max_turn", "ratio_min_turn", "ratio_mean_turn",
                    "approx_kl_turn", "tokens_turn"):
            if key in info:
                row[key] = _tolist(info[key])
    if grad_norm_turn is not None:
        row["grad_norm_turn"] = _tolist(grad_norm_turn)
        row["grad_norm_max_turn"] = max(row["grad_norm_turn"], default=0.0)
    return row


# ---- text replies (TinyLM, hf: policies) ------------------------------------------------------------
def _ids(items) -> torch.Tensor:
    index: dict = {}
    return torch.tensor([index.setdefault(x, len(index)) for x in items], dtype=torch.long)


def text_template_stats(texts: Sequence[str], tasks: Sequence) -> tuple[float, float]:
    """H(template) and MI(template; task) in nats, where a reply's template is its text with every
    bracket argument and digit run blanked (RAGEN's template collapse: replies that stop depending on
    the input have high H, zero MI). Example: ["search[A]", "search[B]"] for tasks [0, 1] -> one
    template, (0.0, 0.0); ["search[A]", "answer[B]"] -> (log 2, log 2)."""
    tpl = [re.sub(r"\d+", "#", re.sub(r"\[[^\]]*\]?", "[_]", t)) for t in texts]
    return template_entropy_mi(_ids(tpl), _ids(tasks))


def repetition_rate(episodes_texts: Sequence[Sequence[str]]) -> float:
    """Fraction of turns (after the first) whose reply repeats the episode's previous reply word for
    word, the echo of a policy stuck in a loop. Example: [["a", "a", "b"]] -> 0.5."""
    rep = tot = 0
    for texts in episodes_texts:
        for prev, cur in zip(texts, texts[1:]):
            rep += prev == cur
            tot += 1
    return rep / tot if tot else 0.0
