"""``toyrl export``: run logs already written, sent to TensorBoard or wandb (``toyrl.train.trackers.export``).

    toyrl export runs/grpo.jsonl runs/gigpo.jsonl --to tensorboard tb    # tb/grpo/, tb/gigpo/
    tensorboard --logdir tb
    toyrl export data/runs/echo_trap/*.jsonl --to wandb wb               # offline runs in wb/wandb/; wandb sync

Each log's header becomes the run's hyperparameters, each row a step, each per-turn list one series per turn
index. A missing or unreadable log, an unknown backend or one whose extra is not installed: one line, exit 2,
before anything is written.
"""
from __future__ import annotations

from .args import UsageError

EXPORT_TO = ("tensorboard", "wandb", "trackio")
"""the backends ``--to`` takes (toyrl.train.trackers.TRACKERS less none)"""


def cmd_export(args) -> int:
    """Export ``args.runs`` to ``args.to`` = [BACKEND] or [BACKEND, DIR]; prints one line per run."""
    if len(args.to) > 2:
        raise UsageError(f"--to takes a backend and at most one folder, got {' '.join(args.to)}")
    to, folder = args.to[0], (args.to[1] if len(args.to) == 2 else None)
    if to not in EXPORT_TO:
        raise UsageError(f"--to: unknown backend {to!r}; valid: {', '.join(EXPORT_TO)}")
    from ..train.trackers import export, tracker_folder
    try:
        names = export(args.runs, to, folder)
    except (ValueError, ImportError) as e:
        raise UsageError(str(e).splitlines()[0].removeprefix("paths: ")) from None
    where = tracker_folder(to, folder)
    for path, name in zip(args.runs, names):
        print(f"{path} -> {to} run {name!r} in {where}")
    return 0


def add_export(sub) -> None:
    """Register ``toyrl export`` on the subparsers ``sub``."""
    e = sub.add_parser("export", help="send run logs already written to TensorBoard or wandb (offline)",
                       description="Each run log's header becomes the run's hyperparameters, each row a step and "
                       "each per-turn list one series per turn index (toyrl.train.trackers); wandb runs are written "
                       "offline (wandb sync uploads them).")
    e.add_argument("runs", nargs="+", metavar="RUN.jsonl", help="run logs (toyrl train --out, toyrl sweep)")
    e.add_argument("--to", nargs="+", required=True, metavar=("BACKEND", "DIR"),
                   help=f"the backend ({', '.join(EXPORT_TO)}) and the folder it writes to (default: "
                        "runs/<backend>)")
    e.set_defaults(func=cmd_export)
