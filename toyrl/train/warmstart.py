"""An LLM-like start for the toy: one behaviour-cloned policy per lesson task, shipped, that reasoning serves.

Agent RL does not start from noise: it starts from a pretrained, instruction-tuned model that already
writes plausible reasoning and mostly valid actions, and every RL seed starts from *that same* model.
A warm start here is the toy's version of it. An expert plays the task and writes, before each action,
what the task asks to remember (``toyrl.envs.experts.expert_memo``: a T-maze's cue, a chain's remaining
plan); ``bc_steps`` updates of behaviour cloning on those turns give a competent, imperfect policy. Its
weights and the BC optimizer's state are saved together, so RL can go on with that optimizer
(``TrainConfig.bc_optimizer="continue"``) instead of meeting the policy with a fresh AdamW. This module holds
the recipes, the checkpoint format and its loading (``TrainConfig(init=NAME)``); ``toyrl.lab.warmstart`` makes
the checkpoints and measures what their reasoning carries.

The lesson tasks (``WARMSTARTS``) read their history through a *blind* context: the prompt at turn 0 only,
then the policy's own last turn. What the prompt showed reaches later turns only through the reasoning,
so reasoning is necessary, and ``toyrl.lab.warmstart.reasoning_value`` measures by how much: success with the
reasoning intact and with every reasoning token scrambled before later turns read it.

    toyrl warmstart tmaze                       # -> ./toyrl-results/checkpoints/tmaze.pt
    toyrl warmstart tmaze --update-shipped      # -> data/checkpoints/tmaze.pt (what TrainConfig(init="tmaze") loads)
"""
from __future__ import annotations

import io
from pathlib import Path
from typing import Union

import torch

from ..envs.doors import instruction

__all__ = ["WARMSTARTS", "MATCH", "CHECKPOINT_DIR", "warmstart_bytes", "load_warmstart", "warmstart_path",
           "match_fields", "check_matches", "trained_state", "apply_warmstart"]

CHECKPOINT_DIR = Path(__file__).resolve().parents[2] / "data" / "checkpoints"
"""where the shipped warm starts live (``toyrl warmstart NAME --update-shipped`` writes there)"""

_BLIND = dict(policy="small", context="blind", context_k=1, n_think=4, prompts_per_step=8, group_size=8,
              bc_reasoning=True, bc_lr=3e-3)
_CREDIT = dict(env="gridworld", policy="small", context="full", n_think=2, think_max=0, prompts_per_step=8,
               group_size=8, bc_noise=0.05, bc_lr=3e-3, bc_steps=300)
WARMSTARTS = {
    # T-maze 5x5: the goal corner is the cue, seen at turn 0 only; 6 turns when solved; forgetting: 1/2 at best
    "tmaze": dict(_BLIND, env="gridworld", env_kwargs={"size": 5, "layout": "tmaze"}, think_max=2, bc_steps=60),
    # 4-stage chain, 4 arms, the plan in the prompt only, a wrong pull ends it; forgetting: (1/4)^3 at best.
    # Copying a shifted plan takes longer to clone: seed 0 at 60 steps still had loss 0.58 and success 0.008
    "plan_chain": dict(_BLIND, env="bandit_chain", env_kwargs={"stages": 4, "arms": 4, "on_wrong": "end",
                                                                 "show_layout": True}, think_max=4, bc_steps=120),
    # long-horizon credit tasks, the map in view: a clone of a teacher that errs 5% of the time, so each of
    # the L turns is a decision that can be fatal and success starts near (1 - 0.05 * 3/4)^L
    **{f"snake{n}": dict(_CREDIT, env_kwargs={"size": n, "layout": "snake"}) for n in (5, 7, 9)},
    "fork9": dict(_CREDIT, env_kwargs={"size": 9, "layout": "fork"}),
    # SmolLM2-135M with LoRA r 8 on Doors (2 rooms x 3 colours, 3 turns): a format-only warm start. Its teacher picks
    # a door at random (bc_noise 1), so the clone writes go[door] but has not learned which light opens which door:
    # RL must learn that. 3 turns for 2 rooms: searching the doors passes 1 in 3 episodes, reading the light all
    "doors_smollm2": dict(env="doors", env_kwargs={"rooms": 2, "colours": 3, "max_turns": 3}, policy="smollm2",
                          system=instruction(3),
                          reply_tokens=8, lora_r=8, context="full", prompts_per_step=2, group_size=8, bc_noise=1.0,
                          bc_steps=4),
}
"""the lesson tasks' warm-start settings (TrainConfig fields); ``bc_steps`` is the recipe's length"""

MATCH = ("env", "env_kwargs", "policy", "n_think", "think_max", "context", "context_k", "system", "reply_tokens",
         "lora_r")
"""the TrainConfig fields a run must share with the warm start it loads"""


def match_fields(name: str) -> dict:
    """The ``MATCH`` fields the recipe ``name`` sets (a field it leaves out is the TrainConfig default): what a run
    from that warm start passes to ``TrainConfig``. Example: match_fields("tmaze")["context"] -> "blind"."""
    return {k: v for k, v in WARMSTARTS[name].items() if k in MATCH}


def warmstart_path(name_or_path: Union[str, Path]) -> Path:
    """A shipped warm start's file (``"tmaze"`` -> data/checkpoints/tmaze.pt), or the path itself."""
    if isinstance(name_or_path, str) and name_or_path in WARMSTARTS:
        return CHECKPOINT_DIR / f"{name_or_path}.pt"
    return Path(name_or_path)


def warmstart_bytes(ck: dict) -> bytes:
    """A checkpoint as the bytes of its file (the CLI writes them whole with ``toyrl.lab.results.atomic_write``)."""
    buf = io.BytesIO()
    torch.save(ck, buf)
    return buf.getvalue()


def load_warmstart(name_or_path) -> dict:
    """A warm start by shipped name or path; ValueError naming it and the command that makes it if missing."""
    path = warmstart_path(name_or_path)
    if not path.is_file():
        made = f"toyrl warmstart {name_or_path} --update-shipped" if name_or_path in WARMSTARTS else "toyrl warmstart"
        raise ValueError(f"init: no warm-start checkpoint at {path} (make it with `{made}`)")
    return torch.load(path, map_location="cpu", weights_only=True)


def check_matches(ck: dict, cfg) -> None:
    """ValueError naming every ``MATCH`` field in which ``cfg`` differs from the warm start's settings (a field the
    recipe leaves out is the TrainConfig default)."""
    import dataclasses
    default = {f.name: f.default for f in dataclasses.fields(cfg) if f.default is not dataclasses.MISSING}
    want = {k: ck["settings"].get(k, default.get(k)) for k in MATCH}
    bad = [f"{k}={getattr(cfg, k)!r} (warm start: {want[k]!r})" for k in MATCH if getattr(cfg, k) != want[k]]
    if bad:
        raise ValueError(f"init: warm start {ck.get('name')!r} was made for other settings: {'; '.join(bad)}")


def trained_state(policy: torch.nn.Module) -> dict:
    """The weights a warm start keeps: the whole ``state_dict`` when every parameter trains (the toy policies,
    TinyLM); only the trainable parameters when some are frozen (an hf policy's LoRA adapters: the frozen base is
    the fetched model itself, so a SmolLM2 warm start is megabytes, not half a gigabyte)."""
    params = dict(policy.named_parameters())
    if all(p.requires_grad for p in params.values()):
        return policy.state_dict()
    return {k: p.detach().clone() for k, p in params.items() if p.requires_grad}


def apply_warmstart(trainer, ck: dict) -> None:
    """Load the warm start into ``trainer``: the policy's weights (all of them, or, for a checkpoint of
    ``trained_state``'s trainable part, exactly the parameters that train here), and with
    ``bc_optimizer="continue"`` the BC optimizer's state (moments and step count; the lr stays the run's own ``lr``)."""
    check_matches(ck, trainer.cfg)
    state = trainer.policy.state_dict()
    have = {k: tuple(v.shape) for k, v in state.items()}
    bad = [f"{k} {tuple(v.shape)} (this run: {have.get(k)})" for k, v in ck["state_dict"].items()
           if have.get(k) != tuple(v.shape)]
    if bad:
        raise ValueError(f"init: warm start {ck.get('name')!r} does not fit this run's policy: {'; '.join(bad)}")
    keys = set(ck["state_dict"])
    trains = {k for k, p in trainer.policy.named_parameters() if p.requires_grad}
    whole = keys == set(state)
    if not whole and keys != trains:
        raise ValueError(f"init: warm start {ck.get('name')!r} holds neither the whole policy nor exactly its "
                         f"trainable parameters (e.g. missing {sorted(trains - keys)[:3]})")
    trainer.policy.load_state_dict(ck["state_dict"], strict=whole)
    if trainer.cfg.bc_optimizer == "continue":
        if "opt_state" not in ck:
            raise ValueError(f"init: warm start {ck.get('name')!r} keeps no optimizer state: use bc_optimizer='fresh'")
        trainer.opt.load_state_dict(ck["opt_state"])
        for g in trainer.opt.param_groups:
            g["lr"] = trainer.cfg.lr
    if trainer.cfg.staleness:
        trainer.behaviour.load_state_dict(ck["state_dict"], strict=whole)
