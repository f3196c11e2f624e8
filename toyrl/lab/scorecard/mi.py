"""RAGEN-2's reasoning-collapse diagnostics: I(X;Z) and H(Z|X) by cross-scoring (FORMULAS.md 5.1).

RAGEN-2 (arXiv 2604.06268; mll-lab-nu/RAGEN ``collapse_metrics.py``) asks whether the reasoning Z
still depends on the input X. Take n sampled (prompt, reasoning) pairs whose prompts are N distinct
x_1..x_N (sample i came from column c(i)). Score every Z_i after every x_j with the current policy,

    l_j(Z_i) = sum_t log pi(z_{i,t} | x_j, z_{i,<t})                   (n, N) "cross scores"
    matched_i  = l_{c(i)}(Z_i)
    marginal_i = logsumexp_j l_j(Z_i) - log N        (= log of the uniform mixture over prompts)
    I(X;Z) = mean_i(matched_i - marginal_i),  H(Z|X) = -mean_i matched_i,  H(Z) = -mean_i marginal_i

so I = H(Z) - H(Z|X) exactly and 0 <= I <= log N. The per-token variant divides each l_j(Z_i) by
|Z_i| before the same formulas (a proxy, not the MI of one distribution). Retrieval accuracy
(argmax_j of the per-token score = c(i)) is about 1/N when the reasoning ignores the input.

Four regimes (RAGEN-2's figure; the code defines no numeric cut-offs, so ours are stated in
``regime``): high H(Z|X) + high I = diverse, input-driven; high H + low I = template collapse
(invisible to entropy alone); low H + high I = compressed; low H + low I = low-entropy collapse.

Toy reading (``first_turn_pairs``): X is the episode's prompt (the first turn's context) and Z
the leading run of reasoning tokens of the first turn when END follows it (the toy's ``</think>``;
malformed turns and empty reasoning are dropped, as RAGEN drops empty Z). Every Z is scored under
the distribution it was sampled from (the turn grammar's sampling set at each reasoning position).
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
import torch

__all__ = ["cross_score_mi", "regime", "entropy_ref", "REGIMES", "first_turn_pairs", "cross_scores", "reasoning_diagnostics"]

REGIMES = ("diverse", "template collapse", "compressed", "low-entropy collapse")
"""the four reasoning regimes, in the order (high H, high I), (high H, low I), (low H, high I), (low H, low I)"""


def cross_score_mi(scores: torch.Tensor, column: torch.Tensor, lengths: torch.Tensor) -> dict:
    """RAGEN-2's cross-scoring estimates from ``scores`` (n, N) = l_j(Z_i), ``column`` (n,) = c(i)
    and ``lengths`` (n,) = |Z_i| > 0. Returns per-sequence (``*_seq``) and per-token estimates of
    I(X;Z) (``mi``), H(Z|X) (``cond_entropy``), H(Z) (``entropy``), ``retrieval_acc``, ``chance``
    = 1/N and ``mi_upper_bound`` = log N, all in nats; NaNs when N < 2 or n = 0.

    Example: two prompts, scores [[log .8, log .2], [log .2, log .8]], columns [0, 1], lengths [1, 1]:
    matched = log .8, marginal = log .5 -> mi = log 1.6 = 0.470, cond_entropy = 0.223,
    entropy = 0.693, retrieval_acc = 1.0.
    """
    n, N = scores.shape
    keys = ("mi", "cond_entropy", "entropy", "mi_seq", "cond_entropy_seq", "entropy_seq", "retrieval_acc")
    out = {"n_pairs": n, "n_prompts": N, "chance": 1.0 / N if N else float("nan"),
           "mi_upper_bound": math.log(N) if N else float("nan")}
    if N < 2 or n == 0:
        return {**out, **{k: float("nan") for k in keys}}
    rows = torch.arange(n)
    for suffix, l in (("_seq", scores), ("", scores / lengths[:, None].to(scores.dtype))):
        matched = l[rows, column]                                            # (n,)
        marginal = torch.logsumexp(l, dim=1) - math.log(N)                   # (n,)
        out["mi" + suffix] = float((matched - marginal).mean())
        out["cond_entropy" + suffix] = float(-matched.mean())
        out["entropy" + suffix] = float(-marginal.mean())
    per_token = scores / lengths[:, None].to(scores.dtype)
    out["retrieval_acc"] = float((per_token.argmax(1) == column).float().mean())
    return out


def entropy_ref(n_think: int) -> float:
    """The largest per-token H(Z|X) of the toy's reasoning: log(n_think + 1), every reasoning position sampled
    uniformly over its ``n_think`` reasoning tokens and END (the turn grammar's sampling set there). The one
    entropy scale of the scorecard: its regime rule (``regime(..., h_ref=entropy_ref(n))``) and its heatmap's
    H(Z|X) column (H over this) both read it.

    Example: entropy_ref(4) -> log 5 = 1.609; regime cut-off at half of it: 0.805 nats per token.
    """
    if int(n_think) != n_think or n_think < 1:
        raise ValueError(f"n_think must be an integer >= 1 (reasoning tokens), got {n_think!r}")
    return math.log(n_think + 1)


def regime(cond_entropy: float, mi: float, *, h_ref: float, mi_ref: float, frac: float = 0.5,
           mi_frac: float = 0.1) -> str:
    """The RAGEN-2 regime of a point (per-token H(Z|X), per-sequence I(X;Z)); "n/a" if either is NaN.

    Cut-offs (ours; RAGEN-2 gives none): H(Z|X) is high when >= ``frac`` x ``h_ref`` (e.g. the log of
    the reasoning alphabet, the entropy of uniform reasoning), I(X;Z) is high when >= ``mi_frac`` x
    ``mi_ref`` (e.g. log N, its upper bound).

    Example: regime(1.2, 0.01, h_ref=log 5, mi_ref=log 8) -> "template collapse" (1.2 >= 0.80, 0.01 < 0.21);
    regime(0.72, 0.07, h_ref=log 5, mi_ref=log 8) -> "low-entropy collapse" (0.72 < 0.80, 0.07 < 0.21).
    """
    if not (np.isfinite(cond_entropy) and np.isfinite(mi)):
        return "n/a"
    high_h, high_i = cond_entropy >= frac * h_ref, mi >= mi_frac * mi_ref
    return REGIMES[(0 if high_h else 2) + (0 if high_i else 1)]


def first_turn_pairs(episodes: list, codec) -> tuple[list, list, list]:
    """(prompts, segments, column) from rollout episodes: the distinct prompts x_1..x_N (token lists),
    the reasoning Z_i of each episode's first turn (leading reasoning tokens closed by END; episodes
    without one are dropped) and the prompt index c(i) of each kept Z_i."""
    prompts, index, segments, column = [], {}, [], []
    for ep in episodes:
        if not ep.turns:
            continue
        gen = ep.turns[0].gen
        k = 0
        while k < len(gen) and codec.think0 <= gen[k] < codec.act0:
            k += 1
        if k == 0 or k >= len(gen) or gen[k] != codec.END:
            continue
        key = tuple(ep.prompt)
        if key not in index:
            index[key] = len(prompts)
            prompts.append(list(ep.prompt))
        segments.append(list(gen[:k]))
        column.append(index[key])
    return prompts, segments, column


@torch.no_grad()
def cross_scores(policy, prompts: list, segments: list, *, temperature: float = 1.0,
                 allowed_at: Optional[torch.Tensor] = None) -> torch.Tensor:
    """(n, N) l_j(Z_i): every segment teacher-forced after every prompt, one batched forward.

    ``allowed_at`` (K, V) bool: the sampling set of the k-th reasoning token (a grammar's rows for
    states 0..K-1); None scores under the whole vocabulary.
    """
    n, N, dev = len(segments), len(prompts), policy.device
    seqs = [p + z for z in segments for p in prompts]                       # row i * N + j
    T = max(len(s) for s in seqs)
    tokens = torch.full((n * N, T), policy.pad_id, dtype=torch.long)
    score = torch.zeros(n * N, T, dtype=torch.bool)                          # (nN, T) the Z positions
    mask = torch.zeros(n * N, T, dtype=torch.bool)
    allowed = None if allowed_at is None else torch.ones(n * N, T, allowed_at.shape[1], dtype=torch.bool)
    for r, s in enumerate(seqs):
        p, z = len(prompts[r % N]), len(segments[r // N])
        tokens[r, :len(s)] = torch.tensor(s)
        mask[r, :len(s)] = True
        score[r, p:p + z] = True
        if allowed is not None:
            allowed[r, p:p + z] = allowed_at[:z]
    logp, _ = policy.logprobs(tokens.to(dev), mask.to(dev), temperature=temperature,
                              allowed=None if allowed is None else allowed.to(dev))
    return (logp.cpu() * score).sum(1).view(n, N)                           # (n, N)


def reasoning_diagnostics(policy, episodes: list, codec, *, temperature: float = 1.0, grammar=None) -> dict:
    """``cross_score_mi`` of the first-turn (prompt, reasoning) pairs of ``episodes``, scored by
    ``policy``; also ``valid_thinking_rate`` (share of episodes with a scored Z)."""
    prompts, segments, column = first_turn_pairs(episodes, codec)
    rate = len(segments) / max(len(episodes), 1)
    if len(prompts) < 2:
        return {**cross_score_mi(torch.zeros(0, len(prompts)), torch.zeros(0, dtype=torch.long),
                                 torch.zeros(0)), "valid_thinking_rate": rate}
    K = max(len(z) for z in segments)
    allowed_at = None if grammar is None else grammar.table[:K].cpu()
    scores = cross_scores(policy, prompts, segments, temperature=temperature, allowed_at=allowed_at)
    lengths = torch.tensor([len(z) for z in segments], dtype=torch.float32)
    return {**cross_score_mi(scores, torch.tensor(column), lengths), "valid_thinking_rate": rate}
