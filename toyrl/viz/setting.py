"""The setting a figure's title names (the figure standard), derived from the data it draws.

A figure a person looks at has a title naming its setting; these functions read that setting off the
objects themselves (a core's map, a rollout's groups, a run's config), so a title cannot drift from its data.

    env_setting(core)              # "GridWorld 4x4"
    rollout_setting(ro, core)      # "GridWorld 4x4, policy sampled at T=1, G=4 rollouts of one task"
    run_setting(log.config)        # "GridWorld 4x4, grpo, tiny policy, P=4 x G=8, lr 0.01, 30 steps, seed 0"
"""
from __future__ import annotations

from typing import Optional

import torch

from ..envs import BanditCore, GridCore, SearchCore, make_core

__all__ = ["env_setting", "rollout_setting", "run_setting"]


def env_setting(core) -> str:
    """The env a figure names, read from the core's own settings.

    Example: GridWorld on map "4x4" -> "GridWorld 4x4"; on layout "snake" of size 7 -> "GridWorld 7x7, snake maps"; MockSearch with hops (1, 2) -> "MockSearch 1/2-hop";
    BanditChain with 3 stages of 3 arms -> "BanditChain 3 stages x 3 arms".
    """
    if isinstance(core, GridCore):
        layout = getattr(core, "layout", "random")
        where = core.map_name or f"{core.size}x{core.size}, " + ("random maps" if layout == "random" else f"{layout} maps")
        return f"GridWorld {where}" + (f", slip {core.slip:g}" if core.slip else "")
    if isinstance(core, SearchCore):
        return f"MockSearch {'/'.join(map(str, core.hops))}-hop"
    if isinstance(core, BanditCore):
        return f"BanditChain {core.K} stages x {core.M} arms"
    return type(core).__name__


def rollout_setting(ro, core=None, played_by: Optional[str] = None) -> str:
    """The setting of a rollout figure: the env (``env_setting``), who played, and the groups, from the data.

    ``played_by`` None: "scripted play" when every policy token has log-prob 0 (a deterministic script),
    else "policy sampled at T=...". Example: "GridWorld 4x4, policy sampled at T=1, G=4 rollouts of one task".
    """
    b = ro.batch
    if played_by is None:
        scripted = bool((b.old_logp[b.policy_mask] == 0).all())
        played_by = "scripted play" if scripted else f"policy sampled at T={ro.temperature:g}"
    n_groups = len(torch.unique(b.group))
    groups = f"G={b.B} rollouts of one task" if n_groups == 1 else f"{n_groups} groups, B={b.B} rollouts"
    return ", ".join(([env_setting(core)] if core is not None else []) + [played_by, groups])


def run_setting(config: dict) -> str:
    """The setting of a training run from its config (``RunLog.config``, a ``TrainConfig`` as a dict).

    Example: "GridWorld 4x4, grpo, tiny policy, P=4 x G=8, lr 0.01, 30 steps, seed 0".
    """
    c = config
    env = env_setting(make_core(c["env"], 1, seed=0, **c.get("env_kwargs", {})))
    lr = "lr: the policy's own" if c.get("lr") is None else f"lr {c['lr']:g}"      # None: not yet resolved
    return (f"{env}, {c['estimator']}, {c['policy']} policy, P={c['prompts_per_step']} x G={c['group_size']}, "
            f"{lr}, {c['steps']} steps, seed {c['seed']}")
