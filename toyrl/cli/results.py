"""The commands that write results: ``toyrl reproduce`` (the claims ledger), ``toyrl scorecard`` and
``toyrl precompute`` (the runs the notebooks load).

Each writes under ``--out-dir D`` (alias ``--out``) or, by default, ``./toyrl-results/<kind>/`` in the current
directory; the shipped results in the checkout's ``data/`` tree (and the claims table, ``docs/claims.md``) are replaced only
with ``--update-shipped`` (``toyrl.lab.results.out_dir``; a folder on the wrong side of ``data/`` is a one-line
usage error before any work):

    toyrl reproduce env_mask --quick --seeds 3                  # -> ./toyrl-results/claims/env_mask.{json,png,...}
    toyrl reproduce env_mask --update-shipped                   # -> data/claims/ and docs/claims.md's table
    toyrl precompute void --out-dir mine                        # -> mine/void/filter.json

A claim's, a card's or a run's files are written whole once its runs are done (``toyrl.lab.results.atomic_write``),
so Ctrl-C leaves the previous ones as they were. ``reproduce`` and ``scorecard`` (and ``sweep``) also keep each
finished run in ``<out dir>/.runcache/`` (``toyrl.lab.runcache``): rerun after a kill with the same arguments, they
reuse those runs and compute the rest; ``--fresh`` (alias ``--no-resume``) recomputes everything. While it runs a
job holds its folder (``toyrl.lab.results.hold``): a second job on it, a read-only folder or a full disk is a
one-line error, exit 2, before any run. Heavy modules are imported inside the commands.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

from .args import AtLeast, UsageError, choose

__all__ = ["PRECOMPUTE", "add_out_flags", "results_out", "add_backend_flags", "add_resume_flag", "add_scorecard",
           "add_reproduce",
           "add_precompute", "cmd_scorecard", "cmd_reproduce", "cmd_precompute"]

PRECOMPUTE = {"echo_trap": "toyrl.viz.echo", "void": "toyrl.viz.void", "context": "toyrl.viz.context",
              "critics": "toyrl.viz.critics", "trees": "toyrl.viz.trees", "aggregation": "toyrl.viz.aggregation",
              "prototype": "toyrl.viz.prototype"}
"""notebook data: NAME -> the module whose ``precompute(out_dir)`` writes it (by default the shipped data/runs/NAME/)"""


def add_out_flags(p: argparse.ArgumentParser, kind: str, what: str) -> None:
    """--out-dir (alias --out) and --update-shipped: where a command's results go (``toyrl.lab.results.out_dir``)."""
    p.add_argument("--out-dir", "--out", dest="out_dir", default=None,
                   help=f"where {what} go (default ./toyrl-results/{kind}/ in the current directory)")
    p.add_argument("--update-shipped", action="store_true",
                   help=f"replace the shipped results in the checkout's data/{kind}/ instead (maintainers)")


def results_out(args, kind: str) -> Path:
    """The folder of ``kind`` results from --out-dir / --update-shipped; a folder on the wrong side of the shipped
    tree is a one-line usage error, before any work."""
    from ..lab.results import out_dir
    try:
        return out_dir(kind, args.out_dir, update_shipped=args.update_shipped)
    except ValueError as e:
        raise UsageError(str(e)) from None


def add_backend_flags(p: argparse.ArgumentParser) -> None:
    """--backend, --ray-address and --keep-going (toyrl.lab.parallel.run_tasks)."""
    from ..lab.parallel import BACKENDS
    p.add_argument("--backend", choices=BACKENDS, default="process",
                   help="where the runs go: process (local worker processes, the default) or ray (Ray tasks)")
    p.add_argument("--ray-address", default=None,
                   help="address of an existing Ray cluster (e.g. auto, ray://host:10001); default: a local instance")
    p.add_argument("--keep-going", action="store_true",
                   help="a run that raises or whose worker dies does not stop the others; the job still exits 1 "
                        "at the end, naming it (a rerun retries it)")


def add_resume_flag(p: argparse.ArgumentParser) -> None:
    """--fresh (alias --no-resume): recompute every run instead of reusing those in the out dir's run cache."""
    p.add_argument("--fresh", "--no-resume", dest="fresh", action="store_true",
                   help="recompute every run; by default runs finished before (kept in OUT/.runcache/, same config "
                        "and code) are reused, so a killed job resumes")


def cmd_scorecard(args) -> int:
    from ..lab.results import hold
    from ..lab.scorecard import SETTINGS, run_scorecard
    choose("scorecard env", args.env, SETTINGS)
    seeds = args.seeds if args.seeds is not None else (3 if args.quick else 10)
    out = results_out(args, "scorecard")
    print(f"scorecard: {args.env}, {seeds} seeds/cell, {'quick' if args.quick else 'full'}, {args.workers} "
          f"worker(s), backend {args.backend} -> {out}/", flush=True)
    with hold(out, "toyrl scorecard"):                   # one job per folder; FolderError before any run
        rec = run_scorecard(seeds=seeds, quick=args.quick, env=args.env, out_dir=out, workers=args.workers,
                            backend=args.backend, address=args.ray_address, cells=args.cells, steps=args.steps,
                            progress=sys.stderr.isatty(), fresh=args.fresh, keep_going=args.keep_going)
    for c in rec["cells"]:
        cr, fs = c["collapse_rate"], c["final_success"]
        print(f"{c['name']:42s} collapse {cr['mean']:.2f} [{cr['ci95'][0]:.2f}, {cr['ci95'][1]:.2f}]  final success "
              f"{fs['mean']:.2f} [{fs['ci95'][0]:.2f}, {fs['ci95'][1]:.2f}]  {c['regime']}")
    reused = rec["meta"].get("runs_reused", 0)
    print(f"scorecard: done in {rec['run_time_s']:.0f} s" + (f" ({reused} runs reused)" if reused else "")
          + f" -> {out}/scorecard.json, {out}/scorecard.png")
    return 0


def add_scorecard(sub) -> None:
    """The ``scorecard`` subcommand (``toyrl.lab.scorecard``)."""
    sc = sub.add_parser("scorecard", help="the stability scorecard: the four dials x seeds, collapse map and figure",
                        description="Estimator, clip, aggregation and filter levels, one factor at a time around "
                        "GRPO/PPO/token-mean/no filter, in the off-policy long-turn regime (toyrl.lab.scorecard).")
    sc.add_argument("--quick", action="store_true", help="fewer steps and 3 seeds per cell (minutes)")
    sc.add_argument("--seeds", action=AtLeast, default=None, help="seeds per cell (default 10, 3 under --quick)")
    sc.add_argument("--env", default="gridworld", help="gridworld (default) or bandit_chain")
    sc.add_argument("--cells", action=AtLeast, default=None, help="only the first N cells of the design")
    sc.add_argument("--steps", action=AtLeast, default=None, help="RL steps per run (default 50, 40 under --quick)")
    sc.add_argument("--workers", action=AtLeast, default=max(1, (os.cpu_count() or 2)))
    add_out_flags(sc, "scorecard", "scorecard.json / runs.json / scorecard.png")
    add_resume_flag(sc)
    add_backend_flags(sc)
    sc.set_defaults(func=cmd_scorecard)


def cmd_reproduce(args) -> int:
    out = results_out(args, "claims")
    if args.redraw:                                        # figures from the stored series, no runs
        from ..lab.claims import CLAIMS, SHIPPED_DIR, redraw
        for name in [choose("claim", name, CLAIMS) for name in args.claims or list(CLAIMS)]:
            src = out if (out / f"{name}.json").exists() else SHIPPED_DIR      # the out dir's record, else shipped
            print(redraw(name, out, src))
        return 0
    from ..lab.results import hold
    with hold(out, "toyrl reproduce"):                    # one job per folder; FolderError before any run
        from ..lab.claims import run_claims, write_table
        code = run_claims(args.claims, seeds=args.seeds, first_seed=args.first_seed, quick=args.quick,
                          workers=args.workers, out_dir=out, progress=not args.no_progress, backend=args.backend,
                          address=args.ray_address, fresh=args.fresh, keep_going=args.keep_going)
    if code == 0 and args.update_shipped and not args.no_table:
        write_table()                                      # the shipped table: data/claims (+ heldout/)
    return code


def cmd_precompute(args) -> int:
    names = [choose("precompute target", name, PRECOMPUTE) for name in args.names or list(PRECOMPUTE)]
    root = results_out(args, "runs")
    for name in names:                          # --update-shipped alone: the module's own (shipped) default
        module = importlib.import_module(PRECOMPUTE[name])
        kw = {} if args.update_shipped and args.out_dir is None else {"out_dir": root / name}
        print(f"{name}: {module.precompute(**kw)}")
    return 0


def add_reproduce(sub) -> None:
    """The ``reproduce`` subcommand: ``toyrl reproduce CLAIM... --seeds N --first-seed S --out-dir D --workers W``."""
    r = sub.add_parser("reproduce", help="the claims ledger: test the source article's claims at toy scale")
    r.add_argument("claims", nargs="*", help="claim names (default: all)")
    r.add_argument("--seeds", action=AtLeast, default=10, help="seeds per arm (N: seeds S..S+N-1)")
    r.add_argument("--first-seed", action=AtLeast, minimum=0, default=0, help="first seed S of the block")
    r.add_argument("--quick", action="store_true", help="shorter runs (the whole ledger in under 8 minutes)")
    r.add_argument("--workers", action=AtLeast, default=max(1, (os.cpu_count() or 2)), help="worker processes")
    add_out_flags(r, "claims", "the JSON records, series and figures")
    r.add_argument("--no-table", action="store_true",
                   help="with --update-shipped: do not regenerate the claims table (docs/claims.md)")
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_resume_flag(r)
    r.add_argument("--redraw", action="store_true", help="redraw the figures from the stored series (no runs) "
                   "into the out dir, from its records or else the shipped ones")
    add_backend_flags(r)
    r.set_defaults(func=cmd_reproduce)


def add_precompute(sub) -> None:
    """The ``precompute`` subcommand: ``toyrl precompute [NAME ...] --out-dir D``."""
    pc = sub.add_parser("precompute", help="recompute the runs the notebooks load (shipped in data/runs/)")
    pc.add_argument("names", nargs="*", help=f"targets (default: all): {', '.join(PRECOMPUTE)}")
    add_out_flags(pc, "runs", "the runs, one folder per target (NAME/)")
    pc.set_defaults(func=cmd_precompute)



def cmd_warmstart(args) -> int:
    from ..lab.results import atomic_write
    from ..lab.warmstart import make_warmstart
    from ..train.warmstart import warmstart_bytes
    name = choose("warm start", args.name, WARMSTART_NAMES)
    path = results_out(args, "checkpoints") / f"{name}.pt"
    ck = make_warmstart(name, bc_steps=args.bc_steps, seed=args.seed)
    atomic_write(path, warmstart_bytes(ck))
    r = ck["reasoning"]
    said = (f"success {r['intact']:.3f} with its reasoning, {r['scrambled']:.3f} with it scrambled" if r is not None
            else "no reasoning to measure")
    print(f"{name}: {path} (BC {len(ck['bc_losses'])} steps, final loss {ck['bc_losses'][-1]:.4f}; {said})")
    return 0


WARMSTART_NAMES = ("tmaze", "plan_chain", "snake5", "snake7", "snake9", "fork9", "doors_smollm2")
"""``toyrl.train.warmstart.WARMSTARTS``'s names (spelled here so the parser needs no torch; a test checks)"""


def add_warmstart(sub) -> None:
    """The ``warmstart`` subcommand: ``toyrl warmstart NAME [--bc-steps N] [--seed S] [--out-dir D]``."""
    w = sub.add_parser("warmstart", help="behaviour-clone a lesson task's warm start (an LLM-like start whose "
                                         "reasoning carries what the task needs) -> NAME.pt")
    w.add_argument("name", help=f"the task: {', '.join(WARMSTART_NAMES)}")
    w.add_argument("--bc-steps", action=AtLeast, default=None, help="BC updates (default: the recipe's)")
    w.add_argument("--seed", action=AtLeast, minimum=0, default=0)
    add_out_flags(w, "checkpoints", "the checkpoint")
    w.set_defaults(func=cmd_warmstart)
