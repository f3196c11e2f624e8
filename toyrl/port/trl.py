"""Port a toyrl ``TrainConfig`` to TRL's ``GRPOTrainer``: the ``GRPOConfig`` keywords TRL can express.

    from trl import GRPOConfig
    from toyrl.port.trl import grpo_config
    args = GRPOConfig(output_dir="out", **grpo_config(train_config))

TRL (huggingface/trl, read at 1.16.0; FORMULAS.md 2.17) trains single completions with one scalar
advantage each: GRPO-family scaling (``scale_rewards``), a ratio at token or sequence level, a
``loss_type`` that fixes both the surrogate and the aggregation, k3 KL to a reference (``beta``).
What a TrainConfig means on multi-turn structure has no TRL keyword, and ``grpo_config`` raises one
``ValueError`` listing every such setting (turn-level ratios, GiGPO / turn estimators, filters, ...).

| toyrl                                    | TRL                                                     |
|------------------------------------------|---------------------------------------------------------|
| estimator grpo (norm std) / dr_grpo      | scale_rewards "group" / "none" (TRL's eps is 1e-4)      |
| ratio token / sequence                   | importance_sampling_level "token" / "sequence"          |
| ppo-family agg token-mean                | loss_type "dapo" (global token mean)                    |
| ... seq-mean-token-mean                  | "grpo"                                                  |
| ... seq-mean-token-sum                   | "luspo" (sum over tokens, mean over all completions)    |
| ... seq-mean-token-sum-norm              | "dr_grpo" (norm length = max_completion_length)         |
| clip ppo / clip_higher / gspo / luspo    | epsilon = eps_low, epsilon_high = eps_high              |
| clip dual_clip (c)                       | delta = c (INTELLECT-2 two-sided clip; same bound)      |
| clip cispo (eps_low >= 1)                | "cispo", epsilon_high = 1 + eps_high (TRL: absolute cap)|
| clip sapo / vespo                        | "sapo" / "vespo" with their temperatures / (k, lambda)  |
| kl k3, kl_coef                           | beta = kl_coef                                          |
"""
from __future__ import annotations

from ..train.defaults import learning_rate

__all__ = ["grpo_config", "TRL_AGG"]

TRL_AGG = {"token-mean": "dapo", "seq-mean-token-mean": "grpo", "seq-mean-token-sum": "luspo",
           "seq-mean-token-sum-norm": "dr_grpo"}
"""toyrl aggregation -> TRL loss_type for the clipped surrogate (ppo family)."""

_CLIPPED = ("ppo", "clip_higher", "gspo", "luspo", "turn_ppo", "dual_clip")
_OWN_AGG = {"cispo": "token-mean", "sapo": "seq-mean-token-mean", "vespo": "token-mean"}
_ESTIMATORS = {"grpo": "group", "dr_grpo": "none"}


def _estimator(cfg, bad: list) -> dict:
    if cfg.estimator not in _ESTIMATORS:
        bad.append(f"estimator={cfg.estimator!r} (TRL has group-normalized outcome advantages only: grpo, dr_grpo)")
        return {}
    kw = dict(cfg.estimator_kwargs)
    norm = kw.pop("norm", "std")
    kw.pop("eps", None)                                     # TRL fixes eps = 1e-4
    if kw.pop("ddof", 1) != 1:
        bad.append("estimator_kwargs ddof != 1 (TRL's std is unbiased)")
    if kw or norm not in ("std", "mean"):
        bad.append(f"estimator_kwargs {dict(kw, norm=norm)} (TRL: scale_rewards group / none only)")
    scale = "none" if cfg.estimator == "dr_grpo" or norm == "mean" else "group"
    return {"scale_rewards": scale}


def _loss(cfg, bad: list) -> dict:
    from ..objectives import CLIP_SCHEMES
    if cfg.clip not in CLIP_SCHEMES:
        bad.append(f"clip={cfg.clip!r} (unknown)")
        return {}
    scheme = CLIP_SCHEMES[cfg.clip]
    hp = scheme.resolve(cfg.clip, dict(cfg.clip_kwargs))
    level, agg = cfg.ratio or scheme.level, cfg.agg or scheme.agg
    out = {}
    if cfg.clip in _CLIPPED:
        if agg not in TRL_AGG:
            bad.append(f"agg={agg!r} with a clipped surrogate (TRL: {sorted(TRL_AGG)})")
        out.update(loss_type=TRL_AGG.get(agg), epsilon=hp["eps_low"], epsilon_high=hp["eps_high"])
        if cfg.clip == "dual_clip":
            out["delta"] = hp["c"]
    elif cfg.clip in _OWN_AGG:
        if agg != _OWN_AGG[cfg.clip]:
            bad.append(f"agg={agg!r} with clip={cfg.clip!r} (TRL's {cfg.clip} aggregates {_OWN_AGG[cfg.clip]})")
        out["loss_type"] = cfg.clip
        if cfg.clip == "cispo":
            if hp["eps_low"] < 1.0:
                bad.append("cispo eps_low < 1 (TRL's CISPO has no lower bound on the weight)")
            out["epsilon_high"] = 1.0 + hp["eps_high"]
        elif cfg.clip == "sapo":
            out.update(sapo_temperature_pos=hp["tau_pos"], sapo_temperature_neg=hp["tau_neg"])
        else:
            out.update({f"vespo_{k}": v for k, v in hp.items()})
    else:
        bad.append(f"clip={cfg.clip!r} (not a TRL loss_type)")
    trl_level = "token" if cfg.clip == "vespo" else {"token": "token", "sequence": "sequence"}.get(level)
    if trl_level is None or (cfg.clip == "vespo" and level not in ("trajectory", "sequence")):
        bad.append(f"ratio={level!r} (TRL's importance_sampling_level is token or sequence)")
    out["importance_sampling_level"] = trl_level or "token"
    return out


def _unsupported(cfg, bad: list) -> None:
    checks = [(cfg.filters, f"filters={cfg.filters!r}"), (not cfg.mask_env_tokens, "mask_env_tokens=False"),
              (cfg.context not in (None, "full"), f"context={cfg.context!r}"), (cfg.rollout != "independent",
                                                                    f"rollout={cfg.rollout!r}"),
              (cfg.kl is not None and cfg.kl != "k3" and cfg.kl_coef, f"kl={cfg.kl!r} (TRL's KL is k3)"),
              (cfg.staleness, f"staleness={cfg.staleness}"), (cfg.critic, "critic=True"),
              (cfg.recompute != "matched", f"recompute={cfg.recompute!r}")]
    bad.extend(msg for cond, msg in checks if cond)


def grpo_config(train_config) -> dict:
    """``trl.GRPOConfig`` keyword arguments for ``train_config`` (a ``toyrl.train.TrainConfig``).

    Raises ValueError naming every setting TRL cannot express. The keywords cover the advantage
    scaling, loss type, clip widths, importance-sampling level, KL (beta), group size
    (num_generations), sampling temperature, epochs (num_iterations), learning rate, gradient clip,
    entropy bonus, steps and seed. Example: TrainConfig(clip="clip_higher", agg="token-mean") ->
    {"scale_rewards": "group", "loss_type": "dapo", "epsilon": 0.2, "epsilon_high": 0.28, ...}.
    """
    cfg, bad = train_config, []
    out = {**_estimator(cfg, bad), **_loss(cfg, bad)}
    _unsupported(cfg, bad)
    if bad:
        raise ValueError("TRL's GRPOTrainer cannot express: " + "; ".join(bad))
    out.update(beta=float(cfg.kl_coef) if cfg.kl else 0.0, num_generations=cfg.group_size,
               temperature=cfg.temperature, num_iterations=cfg.ppo_epochs, learning_rate=learning_rate(cfg),
               max_grad_norm=cfg.grad_clip if cfg.grad_clip else 1e9, entropy_coef=cfg.entropy_coef,
               max_steps=cfg.steps, seed=cfg.seed)
    return out
