"""``--import MODULE``: a user's plug-ins (envs, estimators, clip schemes) loaded as the flag is read.

    toyrl train --import my_env --env keydoor          # my_env.py calls toyrl.envs.register_env("keydoor", ...)
    toyrl sweep --import my_env --env keydoor --workers 2
    toyrl check-env my_env:KeyDoorCore

The module is imported before any name is checked (``toyrl.plugins.import_module``), and recorded for the
sweep's worker processes, which import it before their first job.
"""
from __future__ import annotations

import argparse

from .args import UsageError

__all__ = ["ImportModule", "add_import_flag"]


class ImportModule(argparse.Action):
    """``--import MODULE`` (repeatable): import a module (or a .py file) of plug-ins as the flag is read, so the
    envs, estimators and clip schemes it registers are valid names (``toyrl.plugins.import_module``). A module
    that cannot be found or raises on import is a one-line UsageError naming it."""

    def __call__(self, parser, namespace, value, option_string=None):
        from ..plugins import import_module
        try:
            import_module(value)
        except ValueError as e:
            raise UsageError(f"--import: {e}") from None
        except Exception as e:                                 # the module's own error, in one line
            raise UsageError(f"--import {value}: importing it raised {type(e).__name__}: {e}") from None
        setattr(namespace, self.dest, [*(getattr(namespace, self.dest, None) or []), value])


def add_import_flag(p: argparse.ArgumentParser) -> None:
    """The ``--import MODULE`` flag (``ImportModule``) on a subcommand's parser."""
    p.add_argument("--import", dest="imports", action=ImportModule, metavar="MODULE", default=[],
                   help="import a module (a name found from the current directory, or a .py path) that registers "
                        "envs, estimators or clip schemes (toyrl.envs.register_env, toyrl.credit.register_estimator, "
                        "toyrl.objectives.register_clip_scheme); repeatable")
