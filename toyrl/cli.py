"""The ``toyrl`` command line: ``toyrl envs | bench NAME``.

Every subcommand is a thin layer over library functions; an unknown name prints one line listing
the valid names and exits with code 2 (no traceback).
"""
from __future__ import annotations

import argparse
import importlib
import sys

BENCHES = {
    "envs": "toyrl.bench.envs",
    "credit": "toyrl.bench.credit",
}


class UsageError(Exception):
    """A bad name or argument: reported in one line, exit code 2."""


def choose(kind: str, name: str, valid) -> str:
    """Return ``name`` if it is one of ``valid``, else raise a one-line UsageError listing them."""
    valid = list(valid)
    if name not in valid:
        raise UsageError(f"unknown {kind} {name!r}; valid {kind}s: {', '.join(valid)}")
    return name


def cmd_envs(args) -> int:
    import gymnasium as gym

    from .envs import ENVS
    for name, (gym_id, core_cls) in ENVS.items():
        env = gym.make(gym_id).unwrapped
        doc = (env.__doc__ or "").strip().splitlines()[0]
        print(f"{name:14s} {gym_id:22s} actions={env.action_space}  obs={env.observation_space}  {doc}")
    return 0


def cmd_bench(args) -> int:
    choose("benchmark", args.name, BENCHES)
    module = importlib.import_module(BENCHES[args.name])
    module.main(args.rest)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="toyrl", description="Multi-turn agent RL, small enough to see.")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("envs", help="list the environments").set_defaults(func=cmd_envs)
    b = sub.add_parser("bench", help=f"run a benchmark ({', '.join(BENCHES)})")
    b.add_argument("name")
    b.add_argument("rest", nargs=argparse.REMAINDER, help="arguments for the benchmark")
    b.set_defaults(func=cmd_bench)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except UsageError as e:
        print(f"toyrl: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
