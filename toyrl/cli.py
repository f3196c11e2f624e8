"""The ``toyrl`` command line: ``toyrl envs | train | sweep | scorecard | demo | demos | reproduce | plot | compare |
precompute | pretrain | bench``.

Every subcommand is a thin layer over library functions (``TrainConfig`` / ``train``). The flags of
``train`` and ``sweep`` are generated from the ``TrainConfig`` fields (``toyrl.trainflags``): one flag per
field by its own name, its docstring as help; ``sweep`` takes several values for any field and runs
their product. An unknown name prints one line naming the flag and the valid names and exits with
code 2 (no traceback) before any work starts. ``sweep`` and ``scorecard`` run their per-run jobs
through ``toyrl.parallel.run_tasks``: ``--backend process`` (a spawn pool, the default) or
``--backend ray`` (``--ray-address`` joins an existing cluster; otherwise a local instance).
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import warnings
from dataclasses import asdict, replace
from pathlib import Path

from .cliargs import AtLeast, UsageError, values
from .envs import ENVS
from .runplot import add_run_commands
from .train import TrainConfig
from .trainflags import ALIASES, REGISTRIES, SWEEP_SYNTAX, TRAIN_SYNTAX, add_train_flags, checked_trainer, configs_from

BENCHES = {"envs": "toyrl.bench.envs", "credit": "toyrl.bench.credit", "train": "toyrl.bench.train"}


def choose(kind: str, name: str, valid) -> str:
    """Return ``name`` if it is one of ``valid``, else raise a one-line UsageError listing them."""
    valid = list(valid)
    if name not in valid:
        raise UsageError(f"unknown {kind} {name!r}; valid {kind}s: {', '.join(valid)}")
    return name


SUMMARY_KEYS = ("reward_mean", "success_rate", "reward_std", "zero_var_frac", "grad_norm", "clip_frac",
                "ratio_max", "void_turn_rate")


def summarize(rows, last: int = 10) -> dict:
    """Mean of the summary metrics over the last ``last`` rows."""
    tail = rows[-last:]
    return {k: sum(r.get(k) or 0.0 for r in tail) / max(len(tail), 1) for k in SUMMARY_KEYS}


def cmd_envs(args) -> int:
    import gymnasium as gym

    for name, (gym_id, core_cls) in ENVS.items():
        env = gym.make(gym_id).unwrapped
        doc = (env.__doc__ or "").strip().splitlines()[0]
        print(f"{name:14s} {gym_id:22s} actions={env.action_space.n:<4d} {doc}")
    return 0


def cmd_train(args) -> int:
    cfg, = configs_from(args)
    log = checked_trainer(cfg, args.out).run()
    s = summarize(log.rows)
    print(f"{cfg.estimator}/{cfg.clip} on {cfg.env}, {cfg.steps} steps, seed {cfg.seed}: "
          + ", ".join(f"{k}={v:.3f}" for k, v in s.items()) + (f"  -> {args.out}" if args.out else ""))
    return 0


def _sweep_one(job):
    import torch
    torch.set_num_threads(1)
    from .train import train
    cfg, path = job
    log = train(cfg, path)
    return path, summarize(log.rows)


def run_name(cfg, swept) -> str:
    """``env__estimator__clip`` + ``__field-value`` for each other swept field + ``__seedN``."""
    parts = [cfg.env, cfg.estimator, cfg.clip]
    for name in swept:
        if name not in ("env", "estimator", "clip", "seed"):
            text = json.dumps(getattr(cfg, name), separators=(",", ":")).strip('"')
            parts.append(f"{name}-" + "".join(c for c in text if c.isalnum() or c in "._-=,"))
    return "__".join(parts) + f"__seed{cfg.seed}"


def cmd_sweep(args) -> int:
    out_dir = Path(args.out_dir)
    swept = [name for name, alts in values(args, TrainConfig, multi=True).items() if len(alts) > 1]
    jobs, seen = [], {}
    for cfg in configs_from(args, multi=True, progress=False):
        name = run_name(cfg, swept)
        seen[name] = seen.get(name, -1) + 1                  # equal values twice: name the repeats __1, __2
        jobs.append((cfg, str(out_dir / (name + (f"__{seen[name]}" if seen[name] else "") + ".jsonl"))))
    checked = set()
    for cfg, _ in jobs:                                       # every run can start (before any work); what the
        key = json.dumps(asdict(replace(cfg, seed=0)), sort_keys=True, default=str)   # Trainer checks does
        if key not in checked:                                # not depend on the seed: one Trainer per config
            checked.add(key)
            checked_trainer(cfg)
    print(f"sweep: {len(jobs)} runs on {args.workers} worker(s), backend {args.backend} -> {out_dir}/")
    from .parallel import run_tasks
    results = run_tasks(_sweep_one, jobs, workers=args.workers, backend=args.backend, address=args.ray_address,
                        progress=sys.stderr.isatty(), desc="sweep")
    for path, s in results:
        print(f"{Path(path).name:60s} reward={s['reward_mean']:.3f} success={s['success_rate']:.3f} "
              f"std={s['reward_std']:.3f}")
    return 0


def cmd_scorecard(args) -> int:
    from .scorecard import SETTINGS, run_scorecard
    choose("scorecard env", args.env, SETTINGS)
    seeds = args.seeds if args.seeds is not None else (3 if args.quick else 10)
    out = args.out_dir or "data/scorecard"
    print(f"scorecard: {args.env}, {seeds} seeds/cell, {'quick' if args.quick else 'full'}, {args.workers} "
          f"worker(s), backend {args.backend} -> {out}/", flush=True)
    rec = run_scorecard(seeds=seeds, quick=args.quick, env=args.env, out_dir=out, workers=args.workers,
                        backend=args.backend, address=args.ray_address, cells=args.cells, steps=args.steps,
                        progress=sys.stderr.isatty())
    for c in rec["cells"]:
        cr, fs = c["collapse_rate"], c["final_success"]
        print(f"{c['name']:42s} collapse {cr['mean']:.2f} [{cr['ci95'][0]:.2f}, {cr['ci95'][1]:.2f}]  final success "
              f"{fs['mean']:.2f} [{fs['ci95'][0]:.2f}, {fs['ci95'][1]:.2f}]  {c['regime']}")
    print(f"scorecard: done in {rec['run_time_s']:.0f} s -> {out}/scorecard.json, {out}/scorecard.png")
    return 0


def add_backend_flags(p: argparse.ArgumentParser) -> None:
    """--backend and --ray-address (toyrl.parallel.run_tasks)."""
    from .parallel import BACKENDS
    p.add_argument("--backend", choices=BACKENDS, default="process",
                   help="where the runs go: process (a local process pool, the default) or ray (Ray tasks)")
    p.add_argument("--ray-address", default=None,
                   help="address of an existing Ray cluster (e.g. auto, ray://host:10001); default: a local instance")


def cmd_demo(args) -> int:
    import torch
    torch.set_num_threads(1)                     # the toy model is too small to gain from a second thread
    from .demo import run_demo
    run_demo(out=args.out, steps=args.steps, seed=args.seed)
    return 0


def cmd_demos(args) -> int:
    from .demos import DEMO_CONFIGS, write_demos
    sizes = {"gridworld": 200, "bandit_chain": 20, "mock_search": 72}
    for env in args.env or list(DEMO_CONFIGS):
        choose("env", env, DEMO_CONFIGS)
        path = write_demos(env, args.n or sizes[env], seed=args.seed)
        print(f"{env}: {args.n or sizes[env]} expert episodes -> {path}")
    return 0


def cmd_reproduce(args) -> int:
    from .claims import redraw, run_claims
    if args.redraw:                                        # figures from the stored series, no runs
        from .claims import CLAIMS
        for name in args.claims or list(CLAIMS):
            print(redraw(choose("claim", name, CLAIMS), args.out_dir))
        return 0
    return run_claims(args.claims, seeds=args.seeds, first_seed=args.first_seed, quick=args.quick,
                      workers=args.workers, out_dir=args.out_dir, update_readme=not args.no_readme,
                      progress=not args.no_progress, backend=args.backend, address=args.ray_address)


# notebook data: NAME -> module whose precompute(out_dir=None) writes data/runs/NAME/
PRECOMPUTE = {"echo_trap": "toyrl.viz.echo", "void": "toyrl.viz.void", "context": "toyrl.viz.context",
              "critics": "toyrl.viz.critics", "trees": "toyrl.viz.trees", "aggregation": "toyrl.viz.aggregation",
              "prototype": "toyrl.viz.prototype"}


def cmd_precompute(args) -> int:
    for name in args.names or list(PRECOMPUTE):
        choose("precompute target", name, PRECOMPUTE)
        module = importlib.import_module(PRECOMPUTE[name])
        kw = {"out_dir": args.out_dir} if args.out_dir else {}
        print(f"{name}: {module.precompute(**kw)}")
    return 0


def cmd_pretrain(args) -> int:
    from .policies.tinylm import main as pretrain_main
    pretrain_main(args.rest)
    return 0


def cmd_bench(args) -> int:
    choose("benchmark", args.name, BENCHES)
    module = importlib.import_module(BENCHES[args.name])
    module.main(args.rest)
    return 0


def add_reproduce(sub) -> None:
    """The ``reproduce`` subcommand: ``toyrl reproduce CLAIM... --seeds N --first-seed S --out-dir D --workers W``."""
    r = sub.add_parser("reproduce", help="the claims ledger: test the source article's claims at toy scale")
    r.add_argument("claims", nargs="*", help="claim names (default: all)")
    r.add_argument("--seeds", action=AtLeast, default=10, help="seeds per arm (N: seeds S..S+N-1)")
    r.add_argument("--first-seed", action=AtLeast, minimum=0, default=0, help="first seed S of the block")
    r.add_argument("--quick", action="store_true", help="shorter runs (the whole ledger in under 8 minutes)")
    r.add_argument("--workers", action=AtLeast, default=max(1, (os.cpu_count() or 2)), help="worker processes")
    r.add_argument("--out-dir", default=None, help="where the JSON, series and figures go (default data/claims)")
    r.add_argument("--no-readme", action="store_true", help="do not regenerate the README claims table")
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    r.add_argument("--redraw", action="store_true", help="redraw the figures from the stored series (no runs)")
    add_backend_flags(r)
    r.set_defaults(func=cmd_reproduce)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="toyrl", description="Multi-turn agent RL, small enough to see.")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("envs", help="list the environments").set_defaults(func=cmd_envs)
    t = sub.add_parser("train", help="train one configuration, write a JSON-lines run log", epilog=TRAIN_SYNTAX,
                       description="One flag per TrainConfig field, by its own name.")
    add_train_flags(t)
    t.add_argument("--out", default=None, help="run log path (JSON lines)")
    t.set_defaults(func=cmd_train)
    s = sub.add_parser("sweep", help="configurations x seeds in parallel processes, one log each",
                       epilog=SWEEP_SYNTAX, description="Every TrainConfig field takes several values; the sweep "
                       "runs their product (e.g. --estimator grpo gigpo --seed 0 1: four runs).")
    add_train_flags(s, multi=True)
    s.add_argument("--workers", action=AtLeast, default=max(1, (os.cpu_count() or 2)))
    s.add_argument("--out-dir", default="runs")
    add_backend_flags(s)
    s.set_defaults(func=cmd_sweep)
    sc = sub.add_parser("scorecard", help="the stability scorecard: the four dials x seeds, collapse map and figure",
                        description="Estimator, clip, aggregation and filter levels, one factor at a time around "
                        "GRPO/PPO/token-mean/no filter, in the off-policy long-turn regime (toyrl.scorecard).")
    sc.add_argument("--quick", action="store_true", help="fewer steps and 3 seeds per cell (minutes)")
    sc.add_argument("--seeds", action=AtLeast, default=None, help="seeds per cell (default 10, 3 under --quick)")
    sc.add_argument("--env", default="gridworld", help="gridworld (default) or bandit_chain")
    sc.add_argument("--cells", action=AtLeast, default=None, help="only the first N cells of the design")
    sc.add_argument("--steps", action=AtLeast, default=None, help="RL steps per run (default 50, 40 under --quick)")
    sc.add_argument("--workers", action=AtLeast, default=max(1, (os.cpu_count() or 2)))
    sc.add_argument("--out-dir", default=None, help="where scorecard.json / runs.json / scorecard.png go "
                    "(default data/scorecard)")
    add_backend_flags(sc)
    sc.set_defaults(func=cmd_scorecard)
    d = sub.add_parser("demo", help="training on env tokens collapses a free-sampling policy, masking them "
                                      "prevents it (3 seeds): summary table and a figure")
    d.add_argument("--steps", action=AtLeast, default=None, help="RL steps per run")
    d.add_argument("--seed", action=AtLeast, minimum=0, default=0)
    d.add_argument("--out", default="toyrl_demo.png", help="figure path")
    d.set_defaults(func=cmd_demo)
    dm = sub.add_parser("demos", help="write the expert demonstrations shipped in data/demos/")
    dm.add_argument("--env", nargs="+", default=None)
    dm.add_argument("--n", action=AtLeast, default=None, help="episodes per env")
    dm.add_argument("--seed", action=AtLeast, minimum=0, default=0)
    dm.set_defaults(func=cmd_demos)
    add_reproduce(sub)
    add_run_commands(sub)                                  # plot, compare (toyrl.runplot)
    pc = sub.add_parser("precompute", help="recompute the runs the notebooks load from data/runs/")
    pc.add_argument("names", nargs="*", help=f"targets (default: all): {', '.join(PRECOMPUTE)}")
    pc.add_argument("--out-dir", default=None)
    pc.set_defaults(func=cmd_precompute)
    pt = sub.add_parser("pretrain", help="behaviour-clone TinyLM on data/demos/ -> data/checkpoints/tinylm.pt")
    pt.add_argument("rest", nargs=argparse.REMAINDER, help="arguments (see toyrl pretrain -- --help)")
    pt.set_defaults(func=cmd_pretrain)
    b = sub.add_parser("bench", help=f"run a benchmark ({', '.join(BENCHES)})")
    b.add_argument("name")
    b.add_argument("rest", nargs=argparse.REMAINDER, help="arguments for the benchmark")
    b.set_defaults(func=cmd_bench)
    return p


def interrupted(args) -> str:
    """The one line Ctrl-C prints: for ``train --out``, where the log so far is and how many rows it holds."""
    from .runlog import RunLog
    path = getattr(args, "out", None) if getattr(args, "command", None) == "train" else None
    try:
        with warnings.catch_warnings():                      # a torn last row is skipped, not news here
            warnings.simplefilter("ignore")
            return f"toyrl: interrupted; the log so far is in {path} ({len(RunLog.load(path).rows)} rows)"
    except (OSError, TypeError, ValueError):                 # no --out, no file yet, or not a run log
        return "toyrl: interrupted"


def main(argv=None) -> int:
    """Run a subcommand: 0 on success, 2 with one line for a bad name or value, 130 with one line on Ctrl-C."""
    args = None
    try:
        args = build_parser().parse_args(argv)
        return args.func(args)
    except UsageError as e:
        print(f"toyrl: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(interrupted(args), file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
