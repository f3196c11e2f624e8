"""``toyrl check-env MODULE:CLASS``: run the env contract on your env core and name each missing piece.

    toyrl check-env keydoor:KeyDoorCore                  # ./keydoor.py, class KeyDoorCore
    toyrl check-env my_pkg.envs:KeyDoorCore --env-kwargs rooms=5
    toyrl check-env keydoor --import keydoor             # a registered env name (a plug-in's)

Each piece of ``toyrl.rollout.contract.CONTRACT`` gets one line (ok / MISSING / BROKEN / absent for an optional
one), then GiGPO's anchor share from a few random episodes. Exit code 0 when the contract holds, 1 when a
required piece is missing or broken, 2 with one line when MODULE:CLASS cannot be loaded.
"""
from __future__ import annotations

import json

from .args import UsageError
from .imports import add_import_flag

__all__ = ["add_check_env", "cmd_check_env", "load_core_class"]


def load_core_class(target: str):
    """The class ``MODULE:CLASS`` names (MODULE found from the current directory, or a .py path), or the core
    class of the registered env ``target`` -> the class. UsageError in one line when neither is found."""
    from ..envs import ENVS
    from ..plugins import import_module, load_entry_points
    if ":" not in target:
        if target not in ENVS:
            load_entry_points()
        if target not in ENVS:
            raise UsageError(f"check-env: {target!r} is no MODULE:CLASS and no registered env (valid: "
                             f"{', '.join(ENVS)})")
        return ENVS[target][1]
    module, _, name = target.rpartition(":")
    try:
        mod = import_module(module)
    except ValueError as e:
        raise UsageError(f"check-env: {e}") from None
    except Exception as e:                                     # the module's own error, in one line
        raise UsageError(f"check-env: importing {module!r} raised {type(e).__name__}: {e}") from None
    if not hasattr(mod, name):
        raise UsageError(f"check-env: module {module!r} has no {name!r}")
    return getattr(mod, name)


def cmd_check_env(args) -> int:
    from ..rollout.contract import check_env
    cls = load_core_class(args.target)
    report = check_env(cls, args.env_kwargs, tasks=args.tasks, group_size=args.group_size, seed=args.seed)
    print(json.dumps({"ok": report.ok, "missing": report.missing, "anchor": report.anchor}, indent=1)
          if args.json else report.text())
    return 0 if report.ok else 1


def _kwargs(tokens) -> dict:
    """KEY=VALUE tokens (VALUE is JSON, else a string) -> a dict."""
    out = {}
    for tok in tokens:
        if "=" not in tok:
            raise UsageError(f"--env-kwargs: expected KEY=VALUE, got {tok!r}")
        k, v = tok.split("=", 1)
        try:
            out[k] = json.loads(v)
        except json.JSONDecodeError:
            out[k] = v
    return out


def add_check_env(sub) -> None:
    """The ``check-env`` subcommand: ``toyrl check-env MODULE:CLASS [--env-kwargs K=V ...] [--import M] [--json]``."""
    c = sub.add_parser("check-env", help="run the env contract (docs/your_env.md) on your env core and name each "
                                         "missing piece; reports GiGPO's anchor share from random episodes",
                       description="MODULE:CLASS names a BatchedCore subclass (MODULE importable from here, or a "
                       ".py path); a registered env name works too. Exit 1 when a required piece is missing.")
    c.add_argument("target", help="MODULE:CLASS, or a registered env name")
    add_import_flag(c)
    c.add_argument("--env-kwargs", nargs="*", default=[], type=str, help="KEY=VALUE arguments of the core")
    c.add_argument("--tasks", type=int, default=4, help="tasks (groups) of random episodes (default 4)")
    c.add_argument("--group-size", type=int, default=4, help="random episodes per task (default 4)")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--json", action="store_true", help="print ok, the missing pieces and the anchor statistics")

    def run(args):
        args.env_kwargs = _kwargs(args.env_kwargs)
        if args.tasks < 1 or args.group_size < 1:
            raise UsageError(f"--tasks and --group-size must be >= 1, got {args.tasks} and {args.group_size}")
        return cmd_check_env(args)

    c.set_defaults(func=run)
