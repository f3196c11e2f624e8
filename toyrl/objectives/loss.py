"""The policy loss: ratio level x clipping scheme x aggregation x KL, one switch each, plus per-turn stats.

Dimension legend: B rollouts, T token positions, H turns.

    mask = loss_mask(batch.policy_mask, batch.turn_id, mask_env_tokens=True)
    loss, info = policy_loss(logp, batch.old_logp, adv_BH, mask, batch.turn_id,
                             ratio="turn", clip="ppo", agg="token-mean")

Pipeline (``policy_loss``, read top to bottom):

    1. ratio      r_t = exp(clamp(log pi - log pi_old)) at the level (token, or pooled over a turn / sequence)
    2. surrogate  l_t from the scheme's function in ``CLIP_SCHEMES`` (PPO: -min(r_t A_t, clip(r_t, 1 - eps_low,
                  1 + eps_high) A_t)); times optional importance weights
    3. aggregate  loss = sum_t w_t (l_t + kl_coef KL_t(pi || ref)) over the mask tokens (``agg_weights``)

Input checks live in ``check_loss_inputs``
(shapes; no rollouts; NaN / inf adv, NaN or +inf log-probs on the mask: ValueError naming the
argument and the first (b, t)); -inf log-probs are floored (``ratios.floor_logp``) so the loss and
its gradient stay finite for every scheme at every level;
statistics in ``loss_stats``: scalars and the same statistics per turn index (H,) computed with
scatter ops over the mask tokens; a turn index with no token gets clip fraction 0, approx KL 0
and ratio min / max / mean 1 (check ``tokens_turn``).
"""
from __future__ import annotations

import torch

from ..batch import check_finite, turn_to_token
from ..segments import segment_count, segment_max, segment_min, segment_sum
from .aggregate import agg_weights
from .kl import kl_estimate
from .ratios import LEVELS, clamp_log, floor_logp, log_ratio, token_log_ratio
from .schemes import CLIP_SCHEMES, LossContext

__all__ = ["policy_loss", "loss_mask", "turn_stats", "check_loss_inputs", "loss_stats", "resolve_scheme"]


def loss_mask(policy_mask: torch.Tensor, turn_id: torch.Tensor, mask_env_tokens: bool = True) -> torch.Tensor:
    """Which tokens the loss and the KL see (B, T) bool: the Search-R1 switch (arXiv 2503.09516).

    True: the policy tokens only. False: policy tokens plus observation tokens, i.e. every
    non-padding token (turn_id >= 0) at or after the row's first policy token. The prompt is told
    apart by position: prompt tokens carry turn 0 but come before the first policy token.
    Example: policy [F, T, F, T, F], turn_id [0, 0, 0, 1, -1] -> True: [F, T, F, T, F];
    False: [F, T, T, T, F].
    """
    if policy_mask.shape != turn_id.shape or policy_mask.dim() != 2:
        raise ValueError(f"policy_mask and turn_id must both be (B, T), got {tuple(policy_mask.shape)} "
                         f"and {tuple(turn_id.shape)}")
    pm = policy_mask.bool()
    if mask_env_tokens:
        return pm
    started = torch.cumsum(pm.long(), dim=1) > 0                               # (B, T)
    return pm | (started & (turn_id >= 0))


def turn_stats(x: torch.Tensor, mask: torch.Tensor, turn_id: torch.Tensor, H: int, reduce: str = "mean",
               empty: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """A statistic of x (B, T) over the mask tokens, overall (scalar) and per turn index (H,).

    ``reduce`` is mean, max or min; empty sets give ``empty``. Turn index k pools the tokens of
    turn k over all rows. Example: x [[1., 3., 5.]], turn_id [[0, 0, 1]], mean -> (3., [2., 5.]).
    """
    idx, v = turn_id[mask], x[mask].detach()                                    # (N,)
    n = segment_count(idx, H, v.dtype)                                          # (H,)
    fill = torch.tensor(empty, dtype=v.dtype, device=v.device)
    if reduce == "mean":
        per = segment_sum(v, idx, H) / n.clamp(min=1)
        tot = v.sum() / max(v.numel(), 1) if v.numel() else fill
    elif reduce in ("max", "min"):
        per = (segment_max if reduce == "max" else segment_min)(v, idx, H)
        tot = (v.max() if reduce == "max" else v.min()) if v.numel() else fill
    else:
        raise ValueError(f"reduce must be mean, max or min, got {reduce!r}")
    return tot, torch.where(n > 0, per, fill)


def _check(name: str, x, shape: tuple, want: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor of shape {want}, got {type(x).__name__}")
    if tuple(x.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {want}={tuple(shape)}, got {tuple(x.shape)}")


def check_loss_inputs(logp, old_logp, adv, loss_mask, turn_id, *, H=None, adv_level=None, **optional):
    """Validate the inputs of ``policy_loss`` -> (mask bool, turn_id long, adv_t (B, T), H).

    ``adv`` is (B, T) token-level or (B, H) turn-level (broadcast by turn_id; when T == H it is read
    as token-level unless ``adv_level="turn"``); ``optional`` holds (B, T) tensors or None.
    ValueErrors name the argument and the expected shape, or the first (b, t) on the mask where adv
    (or is_weights) is NaN / +-inf, or a log-prob is NaN / +inf (-inf is allowed); B = 0 raises.
    """
    if not isinstance(logp, torch.Tensor) or logp.dim() != 2:
        raise ValueError(f"logp must be a tensor of shape (B, T), got {getattr(logp, 'shape', type(logp).__name__)}")
    B, T = logp.shape
    if B == 0:
        raise ValueError(f"policy_loss got no rollouts (B = 0): logp has shape {tuple(logp.shape)}")
    for name, x in (("old_logp", old_logp), ("loss_mask", loss_mask), ("turn_id", turn_id)):
        _check(name, x, (B, T), "(B, T)")
    for name, x in optional.items():
        if x is not None:
            _check(name, x, (B, T), "(B, T)")
    if turn_id.dtype.is_floating_point or turn_id.dtype == torch.bool:
        raise ValueError(f"turn_id must be an integer tensor, got {turn_id.dtype}")
    turn_id = turn_id.long()
    mask = loss_mask.bool()
    if bool((mask & (turn_id < 0)).any()):
        raise ValueError("loss_mask is True on a padding token (turn_id == -1)")
    if not isinstance(adv, torch.Tensor) or adv.dim() != 2 or adv.shape[0] != B:
        raise ValueError(f"adv must have shape (B, T)=({B}, {T}) or (B, H)=({B}, H), "
                         f"got {tuple(adv.shape) if isinstance(adv, torch.Tensor) else type(adv).__name__}")
    turn_adv = adv_level == "turn" or (adv_level is None and adv.shape[1] != T)
    if turn_adv and H is not None and H != adv.shape[1]:
        raise ValueError(f"adv is turn-level (B, H) with H={adv.shape[1]} but H={H} was given")
    H = adv.shape[1] if turn_adv else H
    H = max(int(turn_id.max()) + 1 if turn_id.numel() else 1, 1) if H is None else max(H, 1)
    if turn_id.numel() and int(turn_id.max()) >= H:
        raise ValueError(f"turn_id has values up to {int(turn_id.max())} but H={H}")
    adv_t = turn_to_token(adv, turn_id) if turn_adv else adv                    # (B, T)
    check_finite("adv", adv_t, mask)
    for name, x in (("logp", logp), ("old_logp", old_logp), *optional.items()):
        if x is not None:
            check_finite(name, x.detach(), mask, log_prob=name.endswith("logp"))
    return mask, turn_id, torch.where(mask, adv_t, torch.zeros_like(adv_t)).to(logp.dtype), H


@torch.no_grad()
def loss_stats(out, r, d, mask, turn_id, H: int, log_ratio_clamp=(-20.0, 20.0)) -> dict:
    """The statistics of one loss evaluation: scalars and per turn index (H,), see ``policy_loss``.

    ``out`` is the scheme's ``Clip``, ``r`` the level ratio (B, T), ``d`` the raw token log-ratio.
    Example: one token with r = 1.5 clipped from above -> clip_frac 1, clip_frac_high 1, ratio_max 1.5.
    """
    dc = clamp_log(d, (-20.0, 20.0))
    f = lambda b: b.to(r.dtype)                                                 # noqa: E731
    stats = {"clip_frac": (f(out.high | out.low), "mean", 0.0), "clip_frac_high": (f(out.high), "mean", 0.0),
             "clip_frac_low": (f(out.low), "mean", 0.0), "extra_frac": (f(out.extra), "mean", 0.0),
             "ratio_mean": (r, "mean", 1.0), "ratio_min": (r, "min", 1.0), "ratio_max": (r, "max", 1.0),
             "ppo_kl": (-clamp_log(d, log_ratio_clamp), "mean", 0.0),
             "approx_kl": (torch.expm1(dc) - dc, "mean", 0.0)}
    info = {}
    for name, (x, red, empty) in stats.items():
        info[name], info[name + "_turn"] = turn_stats(x, mask, turn_id, H, red, empty)
    info["n_tokens"] = mask.sum()
    info["tokens_turn"] = segment_count(turn_id[mask], H, torch.long)
    info.update(ratio=r.detach(), clipped=(out.high | out.low) & mask)
    return info


def resolve_scheme(clip: str, ratio: str | None, agg: str | None):
    """The registry entry of ``clip`` and the ratio level and aggregation it runs at -> (Scheme, level, agg).

    None takes the scheme's default (its ``level`` / paper ``agg``); ValueError names an unknown
    scheme or level. Example: ("gspo", None, None) -> (CLIP_SCHEMES["gspo"], "sequence", "seq-mean-token-mean").
    """
    if clip not in CLIP_SCHEMES:
        raise ValueError(f"clip must be one of {sorted(CLIP_SCHEMES)}, got {clip!r}")
    scheme = CLIP_SCHEMES[clip]
    level = scheme.level if ratio is None else ratio
    if level not in LEVELS:
        raise ValueError(f"ratio must be one of {LEVELS}, got {level!r}")
    return scheme, level, scheme.agg if agg is None else agg


def policy_loss(logp, old_logp, adv, loss_mask, turn_id, *,
                ratio: str | None = None, clip: str = "ppo", agg: str | None = None,      # the three switches
                ref_logp=None, kl: str | None = None, kl_coef: float = 0.0,                # + kl_coef * KL(pi || ref)
                clip_kwargs: dict | None = None, agg_kwargs: dict | None = None,           # scheme / agg options
                rollout_logp=None, is_weights=None, generator: torch.Generator | None = None,   # scheme inputs
                H: int | None = None, adv_level: str | None = None,                        # shape hints
                straight_through: bool = False, log_ratio_clamp: tuple[float, float] = (-20.0, 20.0),
                **kw) -> tuple[torch.Tensor, dict]:
    """Clipped policy-gradient loss of any scheme at any ratio level: ratio -> surrogate -> aggregate; (loss, info).

        r_t = exp(log pi(a_t) - log pi_old(a_t))      pooled in log space over the level's unit
        l_t = -min(r_t A_t, clip(r_t, 1 - eps_low, 1 + eps_high) A_t)      PPO, Eq. 7 of arXiv 1707.06347
        loss = sum_t w_t (l_t + kl_coef * KL_t)        w: the aggregation's weights on the mask tokens

    Args (tensors on one device; B rollouts, T tokens, H turns):
        logp, old_logp: (B, T) current and behaviour log-probs (gradients flow through logp).
        adv: (B, T) token advantages, or (B, H) turn advantages broadcast by turn_id. If T == H the
            tensor is read as token-level unless ``adv_level="turn"``.
        loss_mask: (B, T) tokens in the loss and the KL (see ``loss_mask``); turn_id (B, T) long.
        ratio: token | turn | sequence | trajectory; None -> the scheme's level (gspo, luspo:
            sequence, turn_ppo / sorl / a2tgpo: turn, vespo: trajectory, others token).
        clip: a name of ``CLIP_SCHEMES``; its hyperparameters come from ``clip_kwargs`` and / or
            explicit keywords (``eps_high=0.28``); unknown names raise ``ValueError``.
        agg: a name of ``AGGREGATIONS``; None -> the scheme's paper default. ``agg_kwargs`` passes
            n_tokens / n_seqs / norm_len to ``agg_weights``.
        ref_logp, kl, kl_coef: adds kl_coef * KL estimator ``kl`` (default k3) on the mask tokens.
        rollout_logp: (B, T) rollout-engine log-probs, required by ``clip="tis"``.
        is_weights: (B, T) extra per-token weights multiplied into the token loss (verl's
            rollout_is_weights); pass them detached.
        generator: randomness of schemes that sample tokens (clip_cov).
        H: number of turn indices (default: from adv or turn_id).
        straight_through: GSPO-token gradient for unit-level ratios (see ``ratios.log_ratio``).
        log_ratio_clamp: bounds on the log-ratio before exp (token d at token level, the unit value
            otherwise); verl: (-20, 20), its GSPO (-inf, 10).

    info: loss_pg, kl_ref (if ref_logp), clip_frac (either bound), clip_frac_high, clip_frac_low,
    extra_frac (dual clip / covariance selection), ratio_mean / min / max (level ratio), ppo_kl
    (mean -d, verl's), approx_kl (k3 estimate of KL(old || new)), n_tokens; per turn index (H,):
    clip_frac_turn, clip_frac_low_turn, clip_frac_high_turn, ratio_mean_turn, ratio_min_turn,
    ratio_max_turn, approx_kl_turn, tokens_turn; and (B, T): ratio, clipped, token_loss (with graph),
    agg_weight (loss == sum(token_loss * agg_weight)). level / clip / agg name what was used.
    Example: one token, logp - old_logp = log 1.5, A = 1, clip="ppo" -> r 1.5, loss -1.2, clip_frac 1.
    """
    scheme, level, agg = resolve_scheme(clip, ratio, agg)
    mask, turn_id, adv, H = check_loss_inputs(logp, old_logp, adv, loss_mask, turn_id, H=H, adv_level=adv_level,
                                              ref_logp=ref_logp, rollout_logp=rollout_logp, is_weights=is_weights)
    hyper = scheme.resolve(clip, {**(clip_kwargs or {}), **kw})
    logp, old_logp, ref_logp, rollout_logp = (None if x is None else floor_logp(x, mask)   # -inf -> LOGP_FLOOR
                                              for x in (logp, old_logp, ref_logp, rollout_logp))

    # 1. ratio r = pi / pi_old at the level (B, T): exp of the token log-ratio, pooled over turn / sequence
    d = token_log_ratio(logp, old_logp, mask)                                   # (B, T) raw log pi - log pi_old
    lr = log_ratio(logp, old_logp, mask, turn_id, level, H=H, straight_through=straight_through)
    r = torch.where(mask, torch.exp(clamp_log(lr, log_ratio_clamp)), torch.ones_like(lr))   # (B, T)

    # 2. surrogate per token (B, T): the scheme's function (CLIP_SCHEMES; PPO: -min(r A, clip(r) A))
    ctx = LossContext(mask, turn_id, logp, old_logp, rollout_logp, d, log_ratio_clamp, generator, level, H)
    out = scheme(r, adv, ctx, **hyper)
    token_loss = out.loss if is_weights is None else out.loss * torch.where(mask, is_weights, 0.0)
    zero = torch.zeros_like(token_loss)

    # 3. aggregate: loss = sum_t w_t (l_t + kl_coef KL_t) over the mask tokens
    w = agg_weights(mask, agg, dtype=logp.dtype, **(agg_kwargs or {}))         # (B, T)
    info: dict = {"level": level, "clip": clip, "agg": agg,
                  "loss_pg": (torch.where(mask, token_loss, zero) * w).sum().detach()}
    if ref_logp is not None:
        kl_tok = torch.where(mask, kl_estimate(logp, ref_logp, kl or "k3"), zero)   # (B, T)
        info["kl_ref"] = (kl_tok * w).sum().detach()
        token_loss = token_loss + kl_coef * kl_tok if kl_coef else token_loss
    token_loss = torch.where(mask, token_loss, zero)
    loss = (token_loss * w).sum()

    info.update(loss_stats(out, r, d, mask, turn_id, H, log_ratio_clamp), agg_weight=w.detach(), token_loss=token_loss)
    return loss, info
