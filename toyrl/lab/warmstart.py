"""Making the shipped warm starts (``toyrl warmstart NAME``) and measuring what their reasoning carries.

The recipes, the checkpoint format and ``TrainConfig(init=NAME)`` live in ``toyrl.train.warmstart``; here a
recipe is run (behaviour cloning through the ``Trainer``, the expert writing what the task asks to remember) and
the result is measured: success with the reasoning intact and with it scrambled, on the same fresh tasks.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from ..train.warmstart import WARMSTARTS, trained_state

__all__ = ["make_warmstart", "reasoning_value"]


@torch.no_grad()
def reasoning_value(policy, codec, cfg, *, episodes: int = 256, seed: int = 0) -> dict:
    """Success of ``policy`` on ``episodes`` fresh tasks of ``cfg``'s env, with its reasoning intact and with
    every reasoning token scrambled (``Sampling.scramble_reasoning``) before later turns read it; the same
    tasks and sampling seed for both. ``ratio`` = scrambled / intact: near 1, the reasoning carries nothing;
    at most 1/2 on a task built so that forgetting halves success."""
    from ..envs import make_core
    from ..rollout.play import Sampling, rollout
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    core = make_core(cfg.env, episodes, seed=seed, **cfg.env_kwargs)
    tasks = core.sample_tasks(np.random.default_rng([seed, 9]), episodes)
    out = {}
    for key, scramble in (("intact", False), ("scrambled", True)):
        s = Sampling(context=cfg.context, context_k=cfg.context_k, scramble_reasoning=scramble,
                     generator=torch.Generator(device=policy.device).manual_seed(seed))
        ro = rollout(policy, core, tasks, np.arange(episodes), codec=codec, sampling=s)
        out[key] = ro.success.float().mean().item()
    out["ratio"] = out["scrambled"] / out["intact"] if out["intact"] > 0 else float("nan")
    return out


def make_warmstart(name: str, *, bc_steps: Optional[int] = None, seed: int = 0, episodes: int = 256) -> dict:
    """Behaviour-clone the warm start ``name`` (``WARMSTARTS``; ``bc_steps`` overrides the recipe) and return the
    checkpoint: settings, weights (``trained_state``), the BC optimizer's state, its losses and ``reasoning_value``
    (None for a recipe whose expert writes no reasoning). A warm start of adapters over a frozen base (LoRA on a
    fetched model) keeps the adapters in bf16 and no optimizer state (5 MB for SmolLM2's rank 8, not 30): its RL
    starts a fresh AdamW."""
    from ..train.config import TrainConfig
    from ..train.trainer import Trainer
    if name not in WARMSTARTS:
        raise ValueError(f"name must be one of {', '.join(WARMSTARTS)}, got {name!r}")
    settings = dict(WARMSTARTS[name], **({} if bc_steps is None else {"bc_steps": int(bc_steps)}))
    cfg = TrainConfig(**settings, steps=0, seed=seed, bc_optimizer="continue", progress=False)
    tr = Trainer(cfg)
    losses = tr.behaviour_clone(cfg.bc_steps)
    tr.policy.eval()
    state = trained_state(tr.policy)
    if not all(p.requires_grad for p in tr.policy.parameters()):  # adapters over a frozen base: bf16, no optimizer
        return {"name": name, "settings": settings, "seed": seed, "bc_losses": losses,
                "state_dict": {k: v.to(torch.bfloat16) for k, v in state.items()}, "reasoning": None}
    return {"name": name, "settings": settings, "seed": seed, "bc_losses": losses,
            "state_dict": state, "opt_state": tr.opt.state_dict(),
            "reasoning": (reasoning_value(tr.policy, tr.codec, cfg, episodes=episodes, seed=seed + 1)
                          if cfg.bc_reasoning else None)}
