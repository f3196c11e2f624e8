"""verl 0.9.1 ``core_algos`` signatures over toyrl's implementations, for porting a prototype.

    from toyrl.port.verl import compute_grpo_outcome_advantage, compute_policy_loss, register_with_verl

Advantage estimators live in ``verl_credit``, policy losses / aggregation / KL in ``verl_policy``;
this module is the one import a port needs.
"""
from .verl_credit import *  # noqa: F401,F403
from .verl_credit import __all__ as _credit_all
from .verl_policy import *  # noqa: F401,F403
from .verl_policy import __all__ as _policy_all

__all__ = list(_credit_all) + list(_policy_all)
