"""Claims whose experiment is a measurement on one batch rather than a training comparison.

``context_measure``: the importance-ratio bias of a flat recompute under a truncated rollout context
(RTPO, arXiv 2608.18682), an identity that holds by construction (a ``check``).

``ratio_grad_measure``: the gradient norms of the token-ratio and the turn-ratio (SORL, arXiv
2511.20718) policy losses, on the *same* stale batch and the *same* parameters:

    g_level = || d/dtheta L_PPO(ratio=level; batch, theta) ||_2,    effect = log10 g_token - log10 g_turn

so the comparison has no sampling noise between arms.

``starpo_split_measure``: a StarPO-S run in the blind T-maze (blind_fixes' ``starpo_s`` arm), logging at every
step what the filter kept against what it dropped and against a random keep of as many groups (``kept_split``),
so a claim can ask whether the filter drops the groups that still carry the cue. Each returns
{"metrics": ..., "series": ...}.
"""
from __future__ import annotations

import numpy as np

__all__ = ["context_measure", "ratio_grad_measure", "RATIO_BASE", "kept_split", "starpo_split_measure"]

RATIO_BASE = dict(env="gridworld", env_kwargs={"size": 4, "max_turns": 12}, prompts_per_step=4, staleness=4,
                  lr=1e-2, grad_clip=0.0)
"""turn_ratio's setting: random 4x4 lakes, rollouts 4 updates stale, lr 1e-2 (reasoning length set per arm)"""
THINK = {"think12": 12, "think32": 32}
"""arm -> reasoning tokens per turn, exactly: think_min = think_max (SORL's long turns; the toy policy left to
itself ends reasoning after 2-3 tokens, which makes the turn ratio nearly the token ratio)"""


def context_measure(arm: str, seed: int, quick: bool) -> dict:
    """Train briefly under a last-1 context, then score a fresh batch with the trainer's flat recompute
    (full history) and with the matched one; |log ratio| per turn index before any update."""
    import torch
    torch.set_num_threads(1)
    from ...rollout.flatten import recompute_logp
    from ...train import Trainer, TrainConfig
    tr = Trainer(TrainConfig(env="gridworld", env_kwargs={"map_name": "4x4", "max_turns": 12, "slip": 0.2},
                             context="last_k", context_k=1, prompts_per_step=4, steps=0, seed=seed, progress=False))
    for _ in range(5 if quick else 20):
        tr.step()
    ro = tr.sample()
    b = ro.batch
    with torch.no_grad():
        flat, _ = recompute_logp(tr.policy, ro, "flat")
        matched, _ = recompute_logp(tr.policy, ro, "matched")
    pm = b.policy_mask & (b.turn_id >= 0)
    H = int(b.turn_id.max()) + 1
    per_turn = {}
    for name, lp in (("flat", flat), ("matched", matched)):
        d = (lp - b.old_logp).abs()
        per_turn[name] = [float(d[pm & (b.turn_id == k)].mean()) if (pm & (b.turn_id == k)).any() else float("nan")
                          for k in range(H)]
    f = np.array(per_turn["flat"])
    late = f[4:9]
    late_m = float(np.nanmean(late)) if np.isfinite(late).any() else float("nan")
    return {"metrics": {"flat_abs_logratio": float((flat - b.old_logp).abs()[pm].mean()),
                        "matched_abs_logratio": float((matched - b.old_logp).abs()[pm].mean()),
                        "flat_turn0": float(f[0]), "flat_turns_1_3": float(np.nanmean(f[1:4])),
                        "flat_turns_4_8": late_m, "late_minus_early": late_m - float(np.nanmean(f[1:4]))},
            "series": {"flat_by_turn": per_turn["flat"], "matched_by_turn": per_turn["matched"]}}


def _grad_norm(tr, ro, prep, level: str) -> float:
    """Pre-clip gradient norm of the policy loss at ratio level ``level`` (parameters unchanged)."""
    import torch
    tr.cfg.ratio = level
    tr.policy.train()
    loss, _ = tr.minibatch_loss(ro, prep, None)
    params = [p for p in tr.policy.parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    return float(torch.sqrt(sum((g.double() ** 2).sum() for g in grads if g is not None)))


def ratio_grad_measure(arm: str, seed: int, quick: bool) -> dict:
    """Warm up with stale rollouts, then on each of several stale batches measure both losses' gradient norms.

    Per seed: mean of log10(g_token / g_turn) over batches with a non-zero gradient, the share of
    batches where the turn loss has the smaller norm, and the reasoning tokens per turn seen.
    """
    import torch
    torch.set_num_threads(1)
    from ...train import Trainer, TrainConfig
    tr = Trainer(TrainConfig(**RATIO_BASE, think_min=THINK[arm], think_max=THINK[arm], ratio="token", steps=0,
                             seed=seed, progress=False))
    warm, batches = (6, 3) if quick else (10, 6)
    for _ in range(warm):
        tr.step()
    g_tok, g_turn, think = [], [], []
    for _ in range(batches):
        ro = tr.collect()
        prep = tr.prepare(ro)
        g_tok.append(_grad_norm(tr, ro, prep, "token"))
        g_turn.append(_grad_norm(tr, ro, prep, "turn"))
        b = ro.batch
        think.append(float((tr.codec.reasoning_mask(b.tokens) & b.policy_mask).sum()) / max(int(b.turn_mask.sum()), 1))
        tr.cfg.ratio = "token"
        tr.update(ro, prep)                                   # the same batch then trains the policy (as step())
        tr.step_idx += 1
    gt, gu = np.array(g_tok), np.array(g_turn)
    ok = (gt > 0) & (gu > 0)
    d = np.log10(gt[ok] / gu[ok]) if ok.any() else np.array([np.nan])
    return {"metrics": {"log10_token_over_turn": float(np.mean(d)), "turn_smaller_frac": float(np.mean(d > 0)),
                        "reasoning_tokens_per_turn": float(np.mean(think))},
            "series": {"grad_token": g_tok, "grad_turn": g_turn, "reasoning_tokens_per_turn": think}}


def kept_split(batch, keep, rng=None) -> dict:
    """Mean reward and template MI (RAGEN-2's I(X; Z): ``toyrl.diagnostics.template_entropy_mi`` over the turns'
    policy-token templates and the rollouts' tasks) of the rollouts a filter kept (``keep`` (B,) bool), of those
    it dropped, and of a random keep of as many whole groups (``rng``: a numpy Generator; default seed 0). NaN
    for an empty side. The plug-in MI grows as samples per task shrink, so compare kept with random (same size),
    not kept with dropped. Example: keep all -> dropped_* NaN, random_* = kept_*."""
    import torch
    from ...diagnostics import template_entropy_mi, turn_template_ids
    keep = torch.as_tensor(keep, dtype=torch.bool, device=batch.tokens.device)
    R = batch.outcome().float()                                                 # (B,)
    ids, present = turn_template_ids(batch.tokens, batch.policy_mask, batch.turn_id, batch.H)   # (B, H) each
    present &= batch.turn_mask
    task = (batch.task if batch.task is not None else batch.group)[:, None].expand(-1, batch.H)   # (B, H)
    groups = torch.unique(batch.group)
    n_kept = len(torch.unique(batch.group[keep]))
    rng = rng if rng is not None else np.random.default_rng(0)
    pick = groups[torch.as_tensor(rng.permutation(len(groups))[:n_kept], dtype=torch.long)]
    out = {}
    for side, rows in (("kept", keep), ("dropped", ~keep), ("random", torch.isin(batch.group, pick))):
        m = present & rows[:, None]
        out[f"{side}_reward"] = float(R[rows].mean()) if bool(rows.any()) else float("nan")
        out[f"{side}_template_mi"] = template_entropy_mi(ids[m], task[m])[1] if bool(m.any()) else float("nan")
    return out


def starpo_split_measure(arm: str, seed: int, quick: bool, base: dict) -> dict:
    """Train a StarPO-S run (``base``: its TrainConfig fields, with the starpo_s filter; ``echo.STARPO_CUE_BASE`` is
    blind_fixes' StarPO-S arm) and log ``kept_split`` of every step's batch. The run is the plain run: ``prepare``
    is only watched. Per seed: the means over steps of kept - random template MI and reward, kept - dropped reward,
    and the final success."""
    import torch
    torch.set_num_threads(1)
    from ...train import Trainer, TrainConfig
    if arm != "starpo_s":
        raise ValueError(f"arm must be 'starpo_s', got {arm!r}")
    if "starpo_s" not in base.get("filters", ()):
        raise ValueError(f"base must filter with starpo_s, got filters={base.get('filters')!r}")
    tr = Trainer(TrainConfig(**base, steps=20 if quick else 60, seed=seed, progress=False))
    rows, watched, rng = [], tr.prepare, np.random.default_rng([seed, 7])

    def prepare(ro):
        prep = watched(ro)
        rows.append(kept_split(ro.batch, prep.keep, rng))
        return prep
    tr.prepare = prepare
    log = tr.run()
    col = {k: np.array([r[k] for r in rows], float) for k in rows[0]}
    succ = np.asarray(log.column("success_rate"), float)
    mean = lambda x: float(np.nanmean(x)) if np.isfinite(x).any() else float("nan")   # noqa: E731
    return {"metrics": {"kept_minus_random_mi": mean(col["kept_template_mi"] - col["random_template_mi"]),
                        "kept_minus_random_reward": mean(col["kept_reward"] - col["random_reward"]),
                        "kept_minus_dropped_reward": mean(col["kept_reward"] - col["dropped_reward"]),
                        "final_success": float(np.mean(succ[-max(5, len(succ) // 5):]))},
            "series": {**{k: v.tolist() for k, v in col.items()}, "success_rate": succ.tolist(),
                       "template_mi": np.asarray(log.column("template_mi"), float).tolist()}}
