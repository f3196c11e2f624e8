"""The registry of clipping schemes: name -> (function, implied ratio level, default aggregation, defaults).

Several names share one function and differ only in defaults or ratio level (``clip_higher`` is
``ppo`` with eps_high = 0.28, ``gspo`` is ``ppo`` on the sequence ratio with eps 3e-4 / 4e-4,
``turn_ppo`` is ``ppo`` on the turn ratio), so no variant is a copy of another.

| name        | function   | level    | agg (paper)          | defaults                                   | source |
|-------------|------------|----------|----------------------|--------------------------------------------|--------|
| ppo         | ppo        | token    | token-mean           | eps 0.2 / 0.2                              | 1707.06347 |
| dual_clip   | dual_clip  | token    | token-mean           | eps 0.2 / 0.2, c 3                         | 1912.09729 |
| clip_higher | ppo        | token    | token-mean           | eps 0.2 / 0.28                             | 2503.14476, 2504.20073 |
| gspo        | ppo        | sequence | seq-mean-token-mean  | eps 3e-4 / 4e-4                            | 2507.18071 |
| gmpo        | gmpo       | sequence | seq-mean-token-mean  | eps 0.4 / 0.4 (log space)                  | 2507.20673 |
| turn_ppo    | ppo        | turn     | token-mean           | eps 0.2 / 0.2                              | 2511.20718, 2512.17008 |
| sorl        | sorl       | turn     | token-mean           | eps 0.2, kappa 1, phi0 0 [S]               | 2511.20718 |
| cispo       | cispo      | token    | token-mean           | eps_low 1 (no bound), eps_high 0.28        | 2506.13585 |
| sapo        | sapo       | token    | seq-mean-token-mean  | tau 1.0 / 1.05                             | 2511.20347 |
| loop        | loop       | token    | seq-mean-token-mean  | bounds [1/(1+eps), 1+eps], eps 0.2         | 2502.01600 |
| a2tgpo      | a2tgpo     | turn     | token-mean           | eps 0.2, h(z) = 1 + 0.5 tanh z [S]         | 2605.06200 |
| tis         | tis        | token    | token-mean           | eps 0.2 / 0.2, C 2                         | Yao et al. 2025 |
| clip_cov    | clip_cov   | token    | token-mean           | ratio 2e-4, bounds (1, 5)                  | 2505.22617 |
| kl_cov      | kl_cov     | token    | token-mean           | ratio 2e-4, coef 1                         | 2505.22617 |
| gpg         | gpg        | token    | token-mean           | (no ratio)                                 | 2504.02546 |

LOOP's bandit level is ``clip="loop", ratio="trajectory"``.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Callable

from .clipping import a2tgpo, dual_clip, gmpo, loop, ppo, sorl, tis
from .weighting import cispo, clip_cov, gpg, kl_cov, sapo

__all__ = ["Scheme", "CLIP_SCHEMES", "CONTEXT_ARGS"]

CONTEXT_ARGS = ("mask", "turn_id", "logp", "old_logp", "rollout_logp", "token_log_ratio", "pool", "log_clamp", "generator")
"""Arguments ``policy_loss`` fills in from its inputs when a scheme's signature names them."""


@dataclass(frozen=True)
class Scheme:
    fn: Callable
    """the pure scheme function ``fn(ratio, adv, *, context..., hyperparameters...) -> Clip``"""
    level: str = "token"
    """the ratio level the scheme implies (an explicit ``ratio=`` overrides it)"""
    agg: str = "token-mean"
    """the paper's loss aggregation (an explicit ``agg=`` overrides it)"""
    defaults: dict = field(default_factory=dict)
    """hyperparameters that differ from ``fn``'s own keyword defaults"""

    def hyperparameters(self) -> dict:
        """Every tunable keyword with its default for this scheme (context arguments excluded)."""
        sig = inspect.signature(self.fn).parameters
        out = {k: p.default for k, p in sig.items()
               if p.kind is p.KEYWORD_ONLY and k not in CONTEXT_ARGS and p.default is not p.empty}
        out.update(self.defaults)
        out.update({k: None for k, p in sig.items() if p.kind is p.KEYWORD_ONLY and k not in CONTEXT_ARGS
                    and p.default is p.empty})                      # required (e.g. a2tgpo's z)
        return out


CLIP_SCHEMES: dict[str, Scheme] = {
    "ppo": Scheme(ppo),
    "dual_clip": Scheme(dual_clip),
    "clip_higher": Scheme(ppo, defaults={"eps_high": 0.28}),
    "gspo": Scheme(ppo, "sequence", "seq-mean-token-mean", {"eps_low": 3e-4, "eps_high": 4e-4}),
    "gmpo": Scheme(gmpo, "sequence", "seq-mean-token-mean"),
    "turn_ppo": Scheme(ppo, "turn"),
    "sorl": Scheme(sorl, "turn"),
    "cispo": Scheme(cispo),
    "sapo": Scheme(sapo, agg="seq-mean-token-mean"),
    "loop": Scheme(loop, agg="seq-mean-token-mean"),
    "a2tgpo": Scheme(a2tgpo, "turn"),
    "tis": Scheme(tis),
    "clip_cov": Scheme(clip_cov),
    "kl_cov": Scheme(kl_cov),
    "gpg": Scheme(gpg),
}
