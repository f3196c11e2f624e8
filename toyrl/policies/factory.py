"""Build the policy and the codec a run uses from one name (``TrainConfig.policy`` / ``--policy``).

- a toy preset ("tiny", "small", "base"): the toy transformer over ``ToyCodec`` tokens (thinking,
  action and observation tokens of the env's token view).
"""
from __future__ import annotations

from .toy import PRESETS

__all__ = ["build_policy", "policy_names", "is_policy_name"]


def policy_names() -> list[str]:
    """The valid values of ``--policy`` (patterns shown as such)."""
    return sorted(PRESETS)


def is_policy_name(name: str) -> bool:
    """True if ``build_policy`` knows ``name``."""
    return name in PRESETS


def build_policy(name: str, core, device, *, n_think: int = 2, think_max: int = 2, seed=None):
    """(policy, codec) for the policy ``name`` playing the env ``core``."""
    from ..rollout import ToyCodec
    from . import make_policy
    if name in PRESETS:
        codec = ToyCodec.for_core(core, n_think, think_max)
        return make_policy(name, codec.size, device, seed=seed), codec
    raise ValueError(f"unknown policy {name!r}; valid: {', '.join(policy_names())}")
