"""Advantage estimators for multi-turn rollouts: one pure function per method, one module per family.

Dimension legend: B rollouts, T tokens, H turns.

    from toyrl.credit import ESTIMATORS, token_advantages
    adv = ESTIMATORS["gigpo"](batch)            # (B, H) for level "turn", (B, T) for level "token"
    adv_BT = token_advantages(batch, adv)       # what the policy loss consumes

Families: ``outcome`` (GRPO, Dr. GRPO, RLOO, REINFORCE++, ReMax, OPO, GPG, Pass@k), ``gae`` (token,
turn and bi-level GAE), ``gigpo``, ``turn_rewards`` (MT-GRPO), ``critics`` (ArCHer, SWEET-RL and the
learned models), ``tree`` (Tree-GRPO), ``reverse_turn`` (RTPO), ``progress`` (SPA-RL), ``entropy``
(EMPG), ``info_gain`` (A2TGPO), ``peers`` (GDPO, OTB). Each docstring gives the equation, arXiv id,
defaults and an example. Shared moves: ``base`` (shape checks, group normalization, turn placement)
and ``scan`` (pack the policy tokens, discounted scan, unpack).
``REFERENCE[name](batch, **kw)`` is the same estimator written as plain loops (``reference/``).
``ESTIMATORS[name].needs`` lists what an estimator reads besides rewards and group ids, in the
vocabulary of ``NEEDS`` (``needs.py``); ``fit.py`` holds the one-step fits of the learned models.
"""
from .needs import NEEDS, Need, check_needs
from .registry import ESTIMATORS, Estimator, register_estimator, token_advantages, warn_group_size, warn_zero_variance
from .outcome import dr_grpo, gpg, grpo, grpo_passk, opo, reinforce_pp, reinforce_pp_baseline, remax, rloo
from .gae import bilevel_gae, gae, gae_scan, turn_gae
from .gigpo import anchor_index, gigpo, similarity_keys
from .turn_rewards import mt_grpo
from .critics import (DoubleCritic, TurnCritic, archer, archer_losses, progress_loss, soft_update, sweet,
                      sweet_bt_loss, value_loss)
from .tree import tree_grpo
from .reverse_turn import rtpo
from .progress import spa, spa_rewards
from .entropy import empg
from .info_gain import a2tgpo, a2tgpo_z
from .peers import gdpo, optimal_token_baseline, tir_optimal_token_baseline
from .reference import REFERENCE

__all__ = [
    "ESTIMATORS", "Estimator", "register_estimator", "token_advantages", "REFERENCE", "warn_group_size",
    "warn_zero_variance", "NEEDS", "Need", "check_needs",
    "grpo", "dr_grpo", "rloo", "reinforce_pp", "reinforce_pp_baseline", "remax", "opo", "gpg",
    "grpo_passk",
    "gae", "gae_scan", "turn_gae", "bilevel_gae", "gigpo", "anchor_index", "similarity_keys", "mt_grpo",
    "TurnCritic", "DoubleCritic", "value_loss", "progress_loss", "sweet_bt_loss", "archer_losses",
    "soft_update", "archer", "sweet", "tree_grpo", "rtpo", "spa", "spa_rewards", "empg", "a2tgpo",
    "a2tgpo_z", "gdpo", "optimal_token_baseline", "tir_optimal_token_baseline",
]
