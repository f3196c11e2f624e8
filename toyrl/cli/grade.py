"""``toyrl grade RUN.jsonl --lesson NN``: does a student's run log show what its lesson expects?

One line per check, PASS / FAIL (and ``note`` for what is reported but not required), then a summary line; exit 0
when every check passes, 1 when one fails, 2 (one line on stderr) for bad input: a lesson with no run to grade
(the message lists the gradable ones), a missing or unreadable log, a log without its config header. Without
RUN it prints the runs the lesson grades, each with the ``toyrl train`` command that makes it and what it must
show. The expectations and where their bounds come from live in ``toyrl.lab.grade``.

    $ toyrl grade run.jsonl --lesson 13
    lesson 13 (credit that pays off): run.jsonl read as the gigpo_s5 run (GiGPO on the 5x5 snake ...)
    PASS  setting: the lesson's gigpo_s5 run
    PASS  the run is complete: 40 of 40 steps logged
    PASS  final success rate (last 20% of steps): 0.973 (needs >= 0.96; lowest of the ledger's 20 seeds: 0.965...)
    PASS  the run does not collapse (toyrl.collapse, the ledger's rule): no collapse (0 of the ledger's 20 seeds ...)
    passed: 4 of 4 checks
"""
from __future__ import annotations

import shlex

from .args import UsageError, to_argv

__all__ = ["add_grade", "cmd_grade", "train_command"]


def train_command(expected) -> str:
    """The shell command that makes an expected run (``toyrl.lab.grade.Expected``), quoted for a POSIX shell."""
    from ..train import TrainConfig
    return shlex.join(["toyrl", "train", *to_argv(TrainConfig(**expected.setting)), "--out", "run.jsonl"])


def _needs(c) -> str:
    return c.words if c.metric in ("collapsed", "frozen", "precursor") else f"{c.words} {c.op} {c.bound:g}"


def _show_lesson(les) -> int:
    print(f"lesson {les.number} ({les.title}) grades one of these runs (any seed):")
    for e in les.runs:
        print(f"  {e.name}: {e.about}\n    {train_command(e)}")
        print("    must show: " + "; ".join(_needs(c) for c in e.criteria if c.required))
    return 0


def cmd_grade(args) -> int:
    from ..lab.grade import grade, lesson
    from .runplot import read_runs
    try:
        les = lesson(args.lesson)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if args.run is None:
        return _show_lesson(les)
    log, = read_runs([args.run])
    try:
        report = grade(log, les.number)
    except ValueError as e:
        raise UsageError(str(e)) from None
    print(f"lesson {les.number} ({les.title}): {args.run} read as the {report.expected.name} run "
          f"({report.expected.about})")
    for v in report.verdicts:
        print(v.line())
    checks = [v for v in report.verdicts if v.passed is not None]
    failed = [v for v in checks if not v.passed]
    print(f"passed: {len(checks)} of {len(checks)} checks" if not failed else
          f"failed: {len(failed)} of {len(checks)} checks")
    return 0 if report.passed else 1


def add_grade(sub) -> None:
    """The ``grade`` subcommand."""
    g = sub.add_parser("grade", help="check a run log against its lesson's expected outcome (exit 0 pass, 1 fail)",
                       description="Checks the run's setting (from its header), that it is complete, and each "
                       "outcome the lesson expects; without RUN, shows the runs the lesson grades.")
    g.add_argument("run", nargs="?", default=None, help="run log (JSON lines, from toyrl train --out)")
    g.add_argument("--lesson", required=True, help="the lesson's two-digit number (e.g. 13)")
    g.set_defaults(func=cmd_grade)
