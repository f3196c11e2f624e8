"""The registry of clipping schemes: name -> (function, ratio level, default aggregation, hyperparameters).

Several names share one function and differ only in defaults or ratio level (``clip_higher`` is
``ppo`` with eps_high = 0.28, ``gspo`` is ``ppo`` on the sequence ratio with eps 3e-4 / 4e-4,
``turn_ppo`` is ``ppo`` on the turn ratio), so no variant is a copy of another.

| name        | function   | level      | agg (paper)          | defaults                                 | source |
|-------------|------------|------------|----------------------|------------------------------------------|--------|
| ppo         | ppo        | token      | token-mean           | eps 0.2 / 0.2                            | 1707.06347 |
| dual_clip   | dual_clip  | token      | token-mean           | eps 0.2 / 0.2, c 3                       | 1912.09729 |
| clip_higher | ppo        | token      | token-mean           | eps 0.2 / 0.28                           | 2503.14476, 2504.20073 |
| gspo        | ppo        | sequence   | seq-mean-token-mean  | eps 3e-4 / 4e-4                          | 2507.18071 |
| gmpo        | gmpo       | sequence   | seq-mean-token-mean  | eps 0.4 / 0.4 (log space)                | 2507.20673 |
| turn_ppo    | ppo        | turn       | token-mean           | eps 0.2 / 0.2                            | 2511.20718, 2512.17008 |
| sorl        | sorl       | turn       | token-mean           | eps 0.2, kappa 1, phi0 0 [S]             | 2511.20718 |
| cispo       | cispo      | token      | token-mean           | eps_low 1 (no bound), eps_high 0.28      | 2506.13585 |
| sapo        | sapo       | token      | seq-mean-token-mean  | tau 1.0 / 1.05                           | 2511.20347 |
| loop        | loop       | token      | seq-mean-token-mean  | bounds [1/(1+eps), 1+eps], eps 0.2       | 2502.01600 |
| a2tgpo      | a2tgpo     | turn       | token-mean           | eps 0.2, h(z) = 1 + 0.5 tanh z [S]       | 2605.06200 |
| tis         | tis        | token      | token-mean           | eps 0.2 / 0.2, C 2                       | Yao et al. 2025 |
| clip_cov    | clip_cov   | token      | token-mean           | ratio 2e-4, bounds (1, 5)                | 2505.22617 |
| kl_cov      | kl_cov     | token      | token-mean           | ratio 2e-4, coef 1                       | 2505.22617 |
| gpg         | gpg        | token      | token-mean           | (no ratio)                               | 2504.02546 |
| dppo_tv     | dppo_tv    | token      | token-mean           | delta 0.15 / 0.15, C 20                  | 2602.04879 (verl) |
| dppo_kl     | dppo_kl    | token      | token-mean           | delta 0.05 / 0.05, C 20                  | 2602.04879 (verl) |
| dro         | dro        | token      | token-mean           | beta 0.05                                | verl PR 7245, 2405.19107 |
| luspo       | ppo        | sequence   | seq-mean-token-sum   | eps 0.2 / 0.2                            | 2602.05261 (TRL) |
| vespo       | vespo      | trajectory | token-mean           | (k, lambda) 2, 3 / 3, 2                  | 2602.10693 (TRL) |

LOOP's bandit level is ``clip="loop", ratio="trajectory"``. Each entry names, explicitly, the
context fields its function reads (``LossContext``) and its hyperparameters with their defaults;
``policy_loss`` rejects any other keyword with a ``ValueError`` that lists these. ``needs`` names, in
the vocabulary of ``toyrl.credit.NEEDS``, what a trainer must provide: ``a2tgpo`` needs ``info_gain``
(its ``z`` is the turn-group z-score of the information gain, ``credit.a2tgpo_z``), ``tis`` needs
``rollout_logp`` (log-probs of a rollout engine that differs from the trainer).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

from ..credit.needs import check_needs
from .clipping import Clip, a2tgpo, dual_clip, gmpo, loop, ppo, sorl, tis
from .divergence import dppo_kl, dppo_tv
from .ratios import pool as _pool
from .weighting import cispo, clip_cov, dro, gpg, kl_cov, sapo, vespo

__all__ = ["Scheme", "CLIP_SCHEMES", "LossContext", "REQUIRED", "register_clip_scheme"]

REQUIRED = None
"""The default of a hyperparameter the caller must give (a2tgpo's z)."""


@dataclass(frozen=True)
class LossContext:
    """What ``policy_loss`` knows besides (ratio, adv): the inputs a scheme may read, by name."""

    mask: torch.Tensor
    """(B, T) bool loss mask"""
    turn_id: torch.Tensor
    """(B, T) long turn index, -1 padding"""
    logp: torch.Tensor
    """(B, T) current log-probs (with graph)"""
    old_logp: torch.Tensor
    """(B, T) behaviour log-probs"""
    rollout_logp: Optional[torch.Tensor]
    """(B, T) rollout-engine log-probs or None"""
    token_log_ratio: torch.Tensor
    """(B, T) d = logp - old_logp on the mask, 0 elsewhere (unclamped)"""
    log_clamp: tuple
    """bounds on the unit log-ratio before exp"""
    generator: Optional[torch.Generator]
    """randomness of schemes that sample tokens (clip_cov)"""
    level: str = "token"
    """the ratio level, the unit ``pool`` reduces over"""
    H: int = 1
    """number of turn indices"""

    def pool(self, x: torch.Tensor, how: str = "mean") -> torch.Tensor:
        """x reduced over each unit of the ratio level and broadcast back (``ratios.pool``)."""
        return _pool(x, self.mask, self.turn_id, self.level, how, self.H)


_EPS = {"eps_low": 0.2, "eps_high": 0.2}


@dataclass(frozen=True)
class Scheme:
    fn: Callable
    """the pure scheme function ``fn(ratio, adv, *, context..., hyperparameters...) -> Clip``"""
    level: str = "token"
    """the ratio level the scheme implies (an explicit ``ratio=`` overrides it)"""
    agg: str = "token-mean"
    """the paper's loss aggregation (an explicit ``agg=`` overrides it)"""
    hyper: dict = field(default_factory=lambda: dict(_EPS))
    """every tunable keyword with this scheme's default (``REQUIRED``: the caller must give it)"""
    context: tuple = ()
    """the ``LossContext`` fields ``fn`` takes as keywords"""
    needs: tuple = ()
    """inputs a trainer must provide, words of ``toyrl.credit.NEEDS`` (e.g. ("info_gain",))"""

    def __post_init__(self):
        object.__setattr__(self, "needs", check_needs(self.needs, f"clip scheme {self.fn.__name__!r}"))

    def hyperparameters(self) -> dict:
        """Every tunable keyword with its default for this scheme (None: required)."""
        return dict(self.hyper)

    def resolve(self, name: str, given: dict) -> dict:
        """The scheme's hyperparameters with ``given`` applied; ValueError names unknown keywords."""
        unknown = [k for k in given if k not in self.hyper]
        if unknown:
            raise ValueError(f"clip={name!r} does not take {unknown}; it takes {sorted(self.hyper)}")
        out = {**self.hyper, **given}
        return {k: v for k, v in out.items() if k in given or v is not REQUIRED}

    def __call__(self, ratio: torch.Tensor, adv: torch.Tensor, ctx: LossContext, **hyper) -> Clip:
        """Run ``fn`` on (ratio, adv) with the context fields it declares and ``hyper``."""
        return self.fn(ratio, adv, **{k: getattr(ctx, k) for k in self.context}, **hyper)


_TV = {"delta_low": 0.15, "delta_high": 0.15, "cap": 20.0}
_VESPO = {"k_pos": 2.0, "lambda_pos": 3.0, "k_neg": 3.0, "lambda_neg": 2.0}
_COV = {"clip_cov_ratio": 2e-4, "clip_cov_lb": 1.0, "clip_cov_ub": 5.0}

CLIP_SCHEMES: dict[str, Scheme] = {
    "ppo": Scheme(ppo),
    "dual_clip": Scheme(dual_clip, hyper={**_EPS, "c": 3.0}),
    "clip_higher": Scheme(ppo, hyper={**_EPS, "eps_high": 0.28}),
    "gspo": Scheme(ppo, "sequence", "seq-mean-token-mean", {"eps_low": 3e-4, "eps_high": 4e-4}),
    "gmpo": Scheme(gmpo, "sequence", "seq-mean-token-mean", {"eps_low": 0.4, "eps_high": 0.4},
                   ("token_log_ratio", "pool", "log_clamp")),
    "turn_ppo": Scheme(ppo, "turn"),
    "sorl": Scheme(sorl, "turn", hyper={**_EPS, "kappa": 1.0, "phi0": 0.0, "scope": "batch"}, context=("mask",)),
    "cispo": Scheme(cispo, hyper={"eps_low": 1.0, "eps_high": 0.28}, context=("logp",)),
    "sapo": Scheme(sapo, agg="seq-mean-token-mean", hyper={"tau_pos": 1.0, "tau_neg": 1.05}),
    "loop": Scheme(loop, agg="seq-mean-token-mean", hyper={"eps": 0.2}),
    "a2tgpo": Scheme(a2tgpo, "turn", hyper={"z": REQUIRED, "eps": 0.2, "kappa": 0.5}, context=("turn_id",),
                     needs=("info_gain",)),
    "tis": Scheme(tis, hyper={**_EPS, "cap": 2.0, "tis_level": "token"},
                  context=("old_logp", "rollout_logp", "mask", "turn_id"), needs=("rollout_logp",)),
    "clip_cov": Scheme(clip_cov, hyper={**_EPS, **_COV}, context=("logp", "mask", "generator")),
    "kl_cov": Scheme(kl_cov, hyper={"kl_cov_ratio": 2e-4, "ppo_kl_coef": 1.0},
                     context=("logp", "mask", "token_log_ratio")),
    "gpg": Scheme(gpg, hyper={}, context=("logp",)),
    "dppo_tv": Scheme(dppo_tv, hyper=dict(_TV), context=("logp", "old_logp")),
    "dppo_kl": Scheme(dppo_kl, hyper={**_TV, "delta_low": 0.05, "delta_high": 0.05}, context=("logp", "old_logp")),
    "dro": Scheme(dro, hyper={"beta": 0.05}, context=("logp", "token_log_ratio")),
    "luspo": Scheme(ppo, "sequence", "seq-mean-token-sum"),
    "vespo": Scheme(vespo, "trajectory", hyper=dict(_VESPO), context=("logp", "token_log_ratio", "pool")),
}


def register_clip_scheme(name: str, scheme: Scheme) -> Scheme:
    """Add ``scheme`` to ``CLIP_SCHEMES`` as ``name`` (registering a name again replaces it) and return it;
    ValueError when ``scheme`` is no ``Scheme``. Example: register_clip_scheme("tight_ppo", Scheme(ppo,
    hyper={"eps_low": 0.1, "eps_high": 0.1})) makes clip="tight_ppo" train."""
    if not isinstance(scheme, Scheme):
        raise ValueError(f"scheme must be a toyrl.objectives.Scheme, got {scheme!r}")
    CLIP_SCHEMES[name] = scheme
    return scheme
