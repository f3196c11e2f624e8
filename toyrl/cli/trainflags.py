"""The flags of ``toyrl train`` and ``toyrl sweep``: one per ``TrainConfig`` field (``toyrl.cli.args``), their
names checked against the registries and the configs validated before any run, every error one line.

    args = build_parser().parse_args(["train", "--lr", "-1"])
    configs_from(args)     # UsageError: --lr: lr must be a number in (0, inf), got -1.0

``REGISTRIES`` is the one source of the valid names of a flag: ``check_names`` reports an unknown one and
the flag's help lists them. ``TrainConfig.validate`` does the rest (ranges, ``*_kwargs`` keys and types);
``field_error`` turns its ValueError into a UsageError naming the field's flag.
"""
from __future__ import annotations

import argparse

from .args import Given, add_fields, check_names, field_error, grid, values
from ..credit import ESTIMATORS
from ..envs import ENVS
from ..filters import FILTERS
from ..objectives import AGGREGATIONS, CLIP_SCHEMES, KL_ESTIMATORS, LEVELS
from ..train.build import policy_names
from ..policies.toy import PRESETS
from ..policies.zoo import ZOO
from ..rollout.play import CONTEXTS
from ..rollout.inference_engine import ENGINES
from ..objectives.rollout_correction import CORRECTIONS
from ..train import TrainConfig
from ..train.trackers import LOGGERS
from ..rollout.tree import STRATEGIES

__all__ = ["ALIASES", "REGISTRIES", "TRAIN_SYNTAX", "SWEEP_SYNTAX", "add_train_flags", "configs_from",
           "checked_trainer"]


def policy_form(name) -> bool:
    """True for a name of a policy's form (a preset, tinylm, tinylm:PATH, a zoo model, hf:PATH); whether PATH
    exists (or the zoo model is fetched) is ``TrainConfig.validate``'s check, with its own message ("policy 'hf:/x':
    path /x does not exist")."""
    prefix, _, path = name.partition(":") if isinstance(name, str) else ("", "", "")
    return name in PRESETS or name == "tinylm" or name in ZOO or (prefix in ("tinylm", "hf") and path != "")


ALIASES = {"env_kwargs": ["--env-kw"], "estimator_kwargs": ["--est-kw"], "clip_kwargs": ["--clip-kw"],
           "filters": ["--filter"], "filter_kwargs": ["--filter-kw"], "prompts_per_step": ["--prompts"],
           "ppo_epochs": ["--epochs"], "seed": ["--seeds"]}
"""short option strings for some fields (every field also has its own name)"""

REGISTRIES = {
    "env": ("env", ENVS), "policy": ("policy", policy_names(), policy_form),
    "estimator": ("estimator", ESTIMATORS), "clip": ("clip scheme", CLIP_SCHEMES), "ratio": ("ratio level", LEVELS),
    "agg": ("aggregation", AGGREGATIONS), "kl": ("KL estimator", KL_ESTIMATORS), "filters": ("filter", FILTERS),
    "filter_kwargs": ("filter", FILTERS), "context": ("context policy", CONTEXTS),
    "rollout": ("rollout", ("independent",) + STRATEGIES), "autocast": ("autocast", ("bf16", "fp16")),
    "engine": ("rollout engine", ENGINES), "correction": ("rollout correction", CORRECTIONS),
    "logger": ("logger", LOGGERS)}
"""field -> (what its values name, the registry[, is_valid]): the one source of the valid names of a flag (their
help lists them); autocast has no registry yet: the names policies.factory takes"""

TRAIN_SYNTAX = ("values: a bool is --x / --no-x (or --x false); an Optional field also takes none; a list is "
                "comma-separated or repeated (--filters a,b); a dict is a JSON object or KEY=VALUE tokens with JSON "
                "values (--env-kwargs map_name=4x4 slip=0.1; a.b=1 sets a nested key)")
SWEEP_SYNTAX = ("values: one per token (a list as one comma-separated token, none: empty); a dict sweeps each key "
                "given several values (--est-kw gamma=0.9 gamma=1.0: two runs); --seed defaults to 0 1 2")


def add_train_flags(p: argparse.ArgumentParser, multi: bool = False) -> None:
    """A flag per TrainConfig field (``multi``: each takes several values, for sweep)."""
    add_fields(p, TrainConfig, multi=multi, aliases=ALIASES, names=REGISTRIES,
               defaults={"seed": [0, 1, 2]} if multi else None)


def configs_from(args, multi: bool = False, **override) -> list:
    """Validated TrainConfigs from parsed flags: one, or (``multi``) the product of every field's values.
    Every name is checked before any run starts; ``override`` sets fields whose flags were not given."""
    v = values(args, TrainConfig, multi)
    for name, value in override.items():
        if not isinstance(getattr(args, name), Given):
            v[name] = [value] if multi else value
    check_names(v, REGISTRIES, multi)
    cfgs = [TrainConfig(**run) for run in (grid(v) if multi else [v])]
    for cfg in cfgs:
        try:
            cfg.validate()
        except ValueError as e:                            # "lr must be ..." -> "--lr: lr must be ..."
            raise field_error(e, v) from None
    return cfgs


def checked_trainer(cfg, log_path=None):
    """A Trainer for ``cfg``; a ValueError its construction raises before any rollout (e.g. episodes
    longer than a text policy's context) becomes a one-line usage error."""
    from ..train import Trainer
    try:
        return Trainer(cfg, log_path)
    except ValueError as e:
        raise field_error(e, vars(cfg)) from None
