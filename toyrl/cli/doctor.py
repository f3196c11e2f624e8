"""``toyrl doctor FILE.pt``: read another trainer's multi-turn batch and report what is wrong with it.

    toyrl doctor batch.pt                   # a torch.save-d dict of verl DataProto / TRL / toyrl fields
    toyrl doctor batch.pt --format trl --json
    toyrl doctor dataproto.pkl --trust      # a pickled verl DataProto (runs the file's code: trusted files only)

Exit code 0 when no check finds an error, 1 when one does, 2 with one line for a file it cannot read
(``toyrl.port.doctor``).
"""
from __future__ import annotations

import argparse
import json

from .args import UsageError

__all__ = ["add_doctor", "cmd_doctor"]


def cmd_doctor(args) -> int:
    from ..port.doctor import diagnose, load_batch, report
    try:
        view = load_batch(args.file, args.format, trust=args.trust)
    except ValueError as e:
        raise UsageError(str(e).splitlines()[0]) from None
    text, record = report(view, diagnose(view, logprob_tol=args.logprob_tol))
    print(json.dumps(record, indent=1) if args.json else text)
    return 1 if record["errors"] else 0


def add_doctor(sub) -> None:
    """The ``doctor`` subcommand: ``toyrl doctor FILE [--format auto|verl|trl|dict] [--json] [--trust]``."""
    d = sub.add_parser("doctor", help="check another trainer's multi-turn batch (verl, TRL, a dict of tensors) "
                                      "and say in plain words what is wrong with it",
                       description="Rebuilds the turns from the masks and runs the checks of toyrl.port.doctor_checks: "
                       "tool tokens in the policy mask, rewards off a turn's last token, mask / token lengths, "
                       "reward-to-go reset at tool tokens, dropped per-turn rewards, zero-variance groups, "
                       "rollout vs trainer log-prob gaps, holes in the attention mask, NaNs. Exit 1 on an error.",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    d.add_argument("file", help="a torch.save-d dict of fields (or, with --trust, a pickled verl DataProto)")
    d.add_argument("--format", choices=("auto", "verl", "trl", "dict"), default="auto",
                   help="field names: verl DataProto, TRL GRPOTrainer inputs, toyrl's names (default: from the keys)")
    d.add_argument("--json", action="store_true", help="print the report as JSON")
    d.add_argument("--trust", action="store_true", help="allow a full pickle (a DataProto); it runs code from the file")
    d.add_argument("--logprob-tol", type=float, default=0.5,
                   help="nats of rollout vs trainer log-prob gap above which a token counts as off (default 0.5)")
    d.set_defaults(func=cmd_doctor)
