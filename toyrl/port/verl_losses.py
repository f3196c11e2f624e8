"""toyrl's policy losses inside verl 0.9.1: every clipping scheme as ``toyrl_<scheme>`` in verl's registry.

Dimension legend: B responses (rows), L response tokens.

    from toyrl.port.verl import register_with_verl
    register_with_verl()                    # estimators and policy losses
    # actor_rollout_ref.actor.policy_loss.loss_mode=toyrl_sorl

Each adapter has verl's policy-loss signature ``(old_log_prob, log_prob, advantages, response_mask,
loss_agg_mode, config, rollout_is_weights)`` and returns verl's ``(pg_loss, metrics)`` with the keys
actor/pg_clipfrac (either bound), actor/ppo_kl and actor/pg_clipfrac_lower (the scheme's own
intervention: dual clip, DPPO's TIS cap, a covariance selection; 0 for the others). The math is
``toyrl.objectives.policy_loss`` at the scheme's own ratio level and with its defaults.

Turns: verl's multi-turn masks zero the tool / observation tokens, so each maximal run of
response-mask ones is one turn (``turn_ids_from_mask``); a ``turn_id`` (B, L) keyword overrides it.
Hyperparameters, lowest precedence first: toyrl's defaults; verl's actor config where a field has
the same meaning (clip_ratio(_low / _high) -> eps_low / eps_high / eps / delta_low / delta_high,
clip_ratio_c -> c / cap, tau_pos / tau_neg, policy_loss.{dro_beta, clip_cov_*, kl_cov_ratio,
ppo_kl_coef}); ``config.toyrl_kwargs`` (a dict); keyword arguments (e.g. a2tgpo's ``z`` (B, H)).

Errors where verl errs (``VERL_CHECKS``, verl 0.9.1's own conditions, raised as ValueError): dual_clip
clip_ratio_c > 1 (vanilla), clip_cov policy_loss.clip_cov_ratio > 0, kl_cov policy_loss.kl_cov_ratio
> 0, dro policy_loss.dro_beta given and > 0 (verl has no default for it, so neither has the adapter:
toyrl's beta = 0.05 is not used). ``config=None`` means toyrl's paper defaults (verl's trainer always
passes its ActorConfig); dicts and namespaces are read like an ActorConfig.

Inputs verl does not pass. verl calls a policy loss with (old_log_prob, log_prob, advantages,
response_mask, loss_agg_mode, config, rollout_is_weights) only:
- tis: verl's decoupled rollout correction already computes sg(min(pi_old / pi_rollout, C)) as
  ``rollout_is_weights`` (algorithm.rollout_correction.rollout_is = "token" or "sequence",
  rollout_is_threshold = C), so ``toyrl_tis`` given those weights is PPO times them, the same math as
  ``clip="tis"`` on rollout_logp. Called directly, pass ``rollout_log_probs`` (B, L) instead (not both:
  that would correct twice). Neither -> ValueError naming both.
- a2tgpo: z (B, H), the turn-group z-score of the information gain (``toyrl.credit.a2tgpo_z``), is
  per-batch data verl's signature has no slot for; pass it as the ``z`` keyword (a custom actor that
  computes it), or get a ValueError naming it.
"""
from __future__ import annotations

from typing import Any, Optional

import torch

from ..objectives import CLIP_SCHEMES, policy_loss
from ..objectives.schemes import REQUIRED
from .verl_loader import load_core_algos
from .verl_policy import POLICY_LOSS_REGISTRY, _batch_info, _cfg, _metrics

__all__ = ["get_policy_loss_fn", "turn_ids_from_mask", "verl_policy_loss", "register_policy_losses", "check_like_verl",
           "VERL_CHECKS"]

# toyrl hyperparameter -> (verl actor-config path, fallback path)
_FROM_VERL = {
    "eps_low": ("clip_ratio_low", "clip_ratio"), "eps_high": ("clip_ratio_high", "clip_ratio"),
    "eps": ("clip_ratio", None), "delta_low": ("clip_ratio_low", "clip_ratio"),
    "delta_high": ("clip_ratio_high", "clip_ratio"), "c": ("clip_ratio_c", None), "cap": ("clip_ratio_c", None),
    "tau_pos": ("tau_pos", None), "tau_neg": ("tau_neg", None), "beta": ("policy_loss.dro_beta", None),
    "clip_cov_ratio": ("policy_loss.clip_cov_ratio", None), "clip_cov_lb": ("policy_loss.clip_cov_lb", None),
    "clip_cov_ub": ("policy_loss.clip_cov_ub", None), "kl_cov_ratio": ("policy_loss.kl_cov_ratio", None),
    "ppo_kl_coef": ("policy_loss.ppo_kl_coef", None),
}
_NO_VERL_CAP = ("tis",)            # tis's cap is the rollout-IS cap, not verl's dual-clip clip_ratio_c
VERL_CHECKS = {
    "clip_cov": ("clip_cov_ratio", "policy_loss.clip_cov_ratio should be larger than 0 (verl asserts it)"),
    "kl_cov": ("kl_cov_ratio", "policy_loss.kl_cov_ratio should be larger than 0 (verl asserts it)"),
    "dro": ("beta", "policy_loss.dro_beta must be a positive value when using DRO"),
}
"""scheme -> (hyperparameter, message): verl 0.9.1 raises unless the value is > 0 (dual_clip's c > 1 the
scheme checks itself, as verl's vanilla does)"""
_NO_DEFAULT = {"dro": "beta"}      # verl's PolicyLossConfig.dro_beta defaults to None: it must be given


def turn_ids_from_mask(response_mask: torch.Tensor) -> torch.Tensor:
    """Turn index of each response token (B, L): each maximal run of mask ones is one turn.

    Zeros after a run (tool output) carry the turn they follow; zeros before the first run get -1.
    Example: mask [[0, 1, 1, 0, 1, 0]] -> [[-1, 0, 0, 0, 1, 1]].
    """
    m = response_mask.bool()
    start = m & ~torch.cat([torch.zeros_like(m[:, :1]), m[:, :-1]], 1)          # (B, L) run starts
    return start.long().cumsum(1) - 1                                           # (B, L)


def _path(config, path: str):
    for key in path.split("."):
        config = _cfg(config, key, None)
    return config


def _hyper(name: str, config) -> dict:
    """The scheme's hyperparameters that the verl config sets, then ``config.toyrl_kwargs``."""
    out = {}
    for k in CLIP_SCHEMES[name].hyperparameters():
        if k not in _FROM_VERL or (k == "cap" and name in _NO_VERL_CAP):
            continue
        first, fallback = _FROM_VERL[k]
        value = _path(config, first)
        value = _path(config, fallback) if value is None and fallback else value
        if value is not None:
            out[k] = value
    out.update(dict(_cfg(config, "toyrl_kwargs", None) or {}))
    return out


def check_like_verl(name: str, hyper: dict) -> None:
    """Raise ValueError where verl 0.9.1 raises for the scheme's counterpart (``VERL_CHECKS``), on the
    hyperparameters the adapter resolved; toyrl's default stands in unless verl has none (dro's beta).
    Example: check_like_verl("dro", {}) raises "policy_loss.dro_beta must be a positive value ..."."""
    if name not in VERL_CHECKS:
        return
    key, message = VERL_CHECKS[name]
    value = hyper.get(key) if _NO_DEFAULT.get(name) == key else hyper.get(key, CLIP_SCHEMES[name].hyper[key])
    if value is None or not value > 0:
        raise ValueError(f"{message}; toyrl_{name} got {key}={value!r}")


def _required(name: str, hyper: dict) -> None:
    missing = [k for k, v in CLIP_SCHEMES[name].hyper.items() if v is REQUIRED and hyper.get(k) is None]
    if missing:
        raise ValueError(f"toyrl_{name} needs {missing}: {_NEEDS.get(name, 'a value per batch')}; verl's policy-loss "
                         f"call passes no such input, so give it as a keyword (fn(..., {missing[0]}=...))")


_NEEDS = {"a2tgpo": "z (B, H), the turn-group z-score of each turn's information gain (toyrl.credit.a2tgpo_z)"}


def verl_policy_loss(name: str):
    """The verl-signature adapter of toyrl's scheme ``name`` (see the module docstring)."""
    if name not in CLIP_SCHEMES:
        raise ValueError(f"unknown toyrl clipping scheme {name!r}; known: {sorted(CLIP_SCHEMES)}")

    def compute_policy_loss_toyrl(old_log_prob, log_prob, advantages, response_mask,
                                  loss_agg_mode: str = "token-mean", config: Optional[Any] = None,
                                  rollout_is_weights=None, turn_id=None, rollout_log_probs=None, **kwargs):
        agg_kwargs, dp = _batch_info(config, loss_agg_mode)
        mask = response_mask.bool()
        tid = turn_ids_from_mask(mask) if turn_id is None else turn_id.long()
        hyper = {**_hyper(name, config), **kwargs}
        check_like_verl(name, hyper)
        _required(name, hyper)
        clip = name
        if name == "tis":
            if rollout_log_probs is None and rollout_is_weights is None:
                raise ValueError("toyrl_tis needs the rollout engine's correction: verl's rollout_is_weights (B, L) "
                                 "(algorithm.rollout_correction.rollout_is = 'token' or 'sequence') or "
                                 "rollout_log_probs=(B, L)")
            if rollout_log_probs is not None and rollout_is_weights is not None:
                raise ValueError("toyrl_tis got both rollout_is_weights and rollout_log_probs: each is the TIS "
                                 "correction, both would apply it twice; pass one")
            if rollout_log_probs is None:        # verl's weights are sg(min(pi_old / pi_rollout, C)): PPO times them
                clip, hyper = "ppo", {k: v for k, v in hyper.items() if k in ("eps_low", "eps_high")}
        loss, info = policy_loss(log_prob, old_log_prob, advantages, mask, tid, clip=clip, agg=loss_agg_mode,
                                 is_weights=rollout_is_weights, rollout_logp=rollout_log_probs, adv_level="token",
                                 agg_kwargs=agg_kwargs, **hyper)
        return loss * dp, _metrics(info, lower=info["extra_frac"])

    compute_policy_loss_toyrl.__name__ = f"compute_policy_loss_toyrl_{name}"
    compute_policy_loss_toyrl.__doc__ = (f"toyrl '{name}' ({CLIP_SCHEMES[name].level} ratio) with verl's "
                                         f"policy-loss signature; see toyrl.port.verl_losses.")
    return compute_policy_loss_toyrl


_ADAPTERS: dict[str, Any] = {}


def _adapter(name: str):
    """The one adapter object of scheme ``name`` (what verl's registry holds as ``toyrl_<name>``)."""
    return _ADAPTERS.setdefault(f"toyrl_{name}", verl_policy_loss(name))


def register_policy_losses(names: Optional[tuple] = None) -> list[str]:
    """Register toyrl's clipping schemes in verl's policy-loss registry as ``toyrl_<name>``; [] without verl.

    Idempotent (the same function object stays registered). ``names`` defaults to every scheme.
    """
    core_algos = load_core_algos()
    if core_algos is None:
        return []
    out = []
    for name in names or tuple(CLIP_SCHEMES):
        key = f"toyrl_{name}"
        fn = _adapter(name)
        if core_algos.POLICY_LOSS_REGISTRY.get(key) is not fn:
            core_algos.register_policy_loss(key)(fn)
        out.append(key)
    return out


def get_policy_loss_fn(name: str):
    """verl ``get_policy_loss_fn``: the loss function registered under ``name``; ``toyrl_<scheme>`` gives the
    verl-signature adapter of a toyrl clipping scheme (as verl's registry does after ``register_with_verl``)."""
    if name not in POLICY_LOSS_REGISTRY:
        if name.startswith("toyrl_") and name[len("toyrl_"):] in CLIP_SCHEMES:
            return _adapter(name[len("toyrl_"):])
        toyrl = [f"toyrl_{k}" for k in CLIP_SCHEMES]
        raise ValueError(f"Unsupported loss mode: {name}. Supported modes are: {list(POLICY_LOSS_REGISTRY) + toyrl}")
    return POLICY_LOSS_REGISTRY[name]
