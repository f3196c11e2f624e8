"""verl 0.9.1 ``core_algos`` signatures over toyrl's implementations, for porting a prototype.

    from toyrl.port.verl import compute_grpo_outcome_advantage, compute_policy_loss, register_with_verl

Advantage estimators live in ``verl_credit``, policy losses / aggregation / KL in ``verl_policy``,
toyrl's clipping schemes behind verl's policy-loss signature in ``verl_losses``; this module is the
one import a port needs.
"""
from .verl_credit import *  # noqa: F401,F403
from .verl_credit import __all__ as _credit_all
from .verl_credit import register_with_verl as register_estimators_with_verl
from .verl_losses import get_policy_loss_fn, register_policy_losses, turn_ids_from_mask, verl_policy_loss
from .verl_policy import *  # noqa: F401,F403
from .verl_policy import __all__ as _policy_all

__all__ = list(_credit_all) + list(_policy_all) + ["get_policy_loss_fn", "register_estimators_with_verl",
                                                   "register_policy_losses", "turn_ids_from_mask", "verl_policy_loss"]


def register_with_verl(names=None, losses=None) -> list[str]:
    """Register toyrl in verl's registries; returns the keys ([] where verl is absent).

    Advantage estimators go to ``ADV_ESTIMATOR_REGISTRY`` as ``toyrl_<estimator>`` (``names``,
    default the multi-turn ones) and clipping schemes to ``POLICY_LOSS_REGISTRY`` as
    ``toyrl_<scheme>`` (``losses``, default all), so ``get_policy_loss_fn("toyrl_sorl")`` works.
    """
    return register_estimators_with_verl(names) + register_policy_losses(losses)
