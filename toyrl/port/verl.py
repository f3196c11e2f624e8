"""verl 0.9.1 ``core_algos`` signatures over toyrl's implementations, for porting a prototype.

    from toyrl.port.verl import compute_grpo_outcome_advantage, compute_policy_loss, register_with_verl

Advantage estimators live in ``verl_credit``, policy losses / aggregation / KL in ``verl_policy``,
toyrl's clipping schemes behind verl's policy-loss signature in ``verl_losses``; this module is the
one import a port needs.
"""
from .verl_credit import *  # noqa: F401,F403
from .verl_credit import __all__ as _credit_all
from .verl_advantage import patch_compute_advantage
from .verl_advantage import register_with_verl as register_estimators_with_verl
from .verl_losses import get_policy_loss_fn, register_policy_losses, turn_ids_from_mask, verl_policy_loss
from .verl_policy import *  # noqa: F401,F403
from .verl_policy import __all__ as _policy_all

__all__ = list(_credit_all) + list(_policy_all) + ["get_policy_loss_fn", "patch_compute_advantage",
                                                   "register_estimators_with_verl",
                                                   "register_policy_losses", "turn_ids_from_mask", "verl_policy_loss"]


def register_with_verl(names=None, losses=None, requires=None) -> list[str]:
    """Register toyrl in verl's registries, only what is asked; returns the keys ([] where verl is absent).

    Advantage estimators go to ``ADV_ESTIMATOR_REGISTRY`` as ``toyrl_<estimator>`` (``names``) and clipping
    schemes to ``POLICY_LOSS_REGISTRY`` as ``toyrl_<scheme>`` (``losses``), so ``get_policy_loss_fn("toyrl_sorl")``
    works. With neither given: the multi-turn estimators and every scheme; with one given, only that one
    (``register_with_verl(("gigpo",))`` registers one estimator and no loss). ``requires``: see
    ``verl_advantage.register_with_verl``.
    """
    if names is None and losses is None:
        return register_estimators_with_verl(None, requires) + register_policy_losses(None)
    return (register_estimators_with_verl(names, requires) if names is not None else []) + \
        (register_policy_losses(losses) if losses is not None else [])
