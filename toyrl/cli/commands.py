"""The ``toyrl`` command line: ``toyrl envs | train | sweep | scorecard | demo | demos | reproduce | plot | compare |
export | precompute | warmstart | doctor | grade | models | check-env | pretrain | bench``.

Every subcommand is a thin layer over library functions (``TrainConfig`` / ``train``). The flags of
``train`` and ``sweep`` are generated from the ``TrainConfig`` fields (``toyrl.cli.trainflags``): one flag per
field by its own name, its docstring as help; ``sweep`` takes several values for any field and runs
their product. An unknown name prints one line naming the flag and the valid names and exits with
code 2 (no traceback) before any work starts. ``sweep``, ``scorecard`` and ``reproduce`` run their per-run
jobs through ``toyrl.lab.runcache`` (each finished run kept, so a rerun resumes) over ``toyrl.lab.parallel``:
``--backend process`` (a spawn pool, the default) or ``--backend ray`` (``--ray-address`` joins an existing cluster; otherwise a local instance).
``reproduce``, ``scorecard`` and ``precompute`` write under ``--out-dir`` or ``./toyrl-results/``, never into the
shipped ``data/`` tree without ``--update-shipped`` (``toyrl.lab.results``).

Ending early: Ctrl-C (SIGINT) exits 130 and SIGTERM 143, each with one line saying what is kept and how to resume
(``toyrl.lab.interrupts``); a run that raised or whose worker died exits 1 with its traceback and one line naming
it (``--keep-going``: the other runs first); a results folder in use by another job, read-only or full exits 2 in
one line before any run.

The parser is quick to build: heavy modules (torch) are imported by the command that needs them, and the
``train`` / ``sweep`` flags, which need ``TrainConfig`` and the registries, are added only when that subcommand
is chosen (``LazyChoices``), so ``toyrl --help`` or a mistyped subcommand answers at once.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import signal
import sys
import warnings
from dataclasses import asdict, replace
from pathlib import Path

from .args import AtLeast, UsageError, choose, values
from .results import add_backend_flags, add_precompute, add_reproduce, add_resume_flag, add_scorecard, add_warmstart
from ..envs import ENVS
from .runplot import add_run_commands
from .doctor import add_doctor
from .export import add_export
from .models import add_models
from .check_env import add_check_env
from .imports import add_import_flag

BENCHES = {"envs": "toyrl.lab.bench.envs", "credit": "toyrl.lab.bench.credit", "train": "toyrl.lab.bench.train",
           "smollm2": "toyrl.lab.bench.smollm2"}
TRAINFLAGS = ("ALIASES", "REGISTRIES", "TRAIN_SYNTAX", "SWEEP_SYNTAX", "add_train_flags", "checked_trainer",
              "configs_from")
"""names of ``toyrl.cli.trainflags`` (torch) this module also offers, imported on first use (PEP 562)"""


def __getattr__(name):
    if name in TRAINFLAGS:
        from . import trainflags
        return getattr(trainflags, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


SUMMARY_KEYS = ("reward_mean", "success_rate", "reward_std", "zero_var_frac", "grad_norm", "clip_frac",
                "ratio_max", "void_turn_rate")


def summarize(rows, last: int = 10) -> dict:
    """Mean of the summary metrics over the last ``last`` rows (a metric no row logs, e.g. ratio_max where one
    on-policy epoch fixes it, is left out)."""
    tail = rows[-last:]
    return {k: sum(r.get(k) or 0.0 for r in tail) / max(len(tail), 1) for k in SUMMARY_KEYS
            if any(k in r for r in tail) or k in ("reward_mean", "success_rate", "reward_std")}


def cmd_envs(args) -> int:
    import gymnasium as gym

    for name, (gym_id, core_cls) in ENVS.items():
        env = gym.make(gym_id).unwrapped if gym_id is not None else core_cls
        doc = ((env.__doc__ or "").strip().splitlines() or [""])[0]
        n = env.action_space.n if gym_id is not None else core_cls(1).n_actions
        print(f"{name:14s} {gym_id or '(plug-in core)':22s} actions={n:<4d} {doc}")
    return 0


def cmd_train(args) -> int:
    from .trainflags import checked_trainer, configs_from
    cfg, = configs_from(args)
    log = checked_trainer(cfg, args.out).run()
    s = summarize(log.rows)
    print(f"{cfg.estimator}/{cfg.clip} on {cfg.env}, {cfg.steps} steps, seed {cfg.seed}: "
          + ", ".join(f"{k}={v:.3f}" for k, v in s.items()) + (f"  -> {args.out}" if args.out else ""))
    if "by_construction" in log.meta:                      # said once, not logged as if measured
        print("not logged: " + log.meta["by_construction"]["why"])
    return 0


def _sweep_one(job) -> dict:
    """One sweep run (a worker entry point): job = (config, log path) -> {"summary", "steps", "time_s", "log"},
    ``log`` the text of its run log (written to a private temp folder; the sweep writes it to the log path whole,
    and keeps it in the run cache, so a reused run restores its file)."""
    import tempfile
    import time
    import torch
    torch.set_num_threads(1)
    from ..train import train
    cfg, path = job
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="toyrl-sweep-") as tmp:
        log = train(cfg, Path(tmp) / Path(path).name)
        text = (Path(tmp) / Path(path).name).read_text()
    return {"summary": summarize(log.rows), "steps": len(log.rows), "time_s": time.perf_counter() - t0, "log": text}


def sweep_line(k: int, n: int, path, res: dict, reused: bool) -> str:
    """The line a finished sweep run prints: "[2/4] NAME.jsonl  2 steps  1.3 s  reward=... (reused)"."""
    s = res["summary"]
    return (f"[{k}/{n}] {Path(path).name:60s} {res['steps']:4d} steps {res['time_s']:7.1f} s  "
            f"reward={s['reward_mean']:.3f} success={s['success_rate']:.3f} std={s['reward_std']:.3f}"
            + ("  (reused)" if reused else ""))


def run_name(cfg, swept) -> str:
    """``env__estimator__clip`` + ``__field-value`` for each other swept field + ``__seedN``."""
    parts = [cfg.env, cfg.estimator, cfg.clip]
    for name in swept:
        if name not in ("env", "estimator", "clip", "seed"):
            text = json.dumps(getattr(cfg, name), separators=(",", ":")).strip('"')
            parts.append(f"{name}-" + "".join(c for c in text if c.isalnum() or c in "._-=,"))
    return "__".join(parts) + f"__seed{cfg.seed}"


def cmd_sweep(args) -> int:
    from ..train import TrainConfig
    from .trainflags import checked_trainer, configs_from
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
    from ..lab.results import atomic_write, hold
    from ..lab.runcache import CACHE_DIR, RunCache
    cache = RunCache(out_dir / CACHE_DIR, fresh=args.fresh)     # each finished run is kept: a rerun resumes
    specs = [{"job": "sweep", "config": asdict(cfg)} for cfg, _ in jobs]
    with hold(out_dir, "toyrl sweep"):                          # one job per folder; FolderError before any run
        n_reused = len(cache.reusable(specs))
        print(f"sweep: {len(jobs)} runs on {args.workers} worker(s), backend {args.backend} -> {out_dir}/"
              + (f"; {cache.describe(n_reused, len(jobs))}" if n_reused else ""), flush=True)
        runs = cache.run(_sweep_one, jobs, specs, [Path(path).stem for _, path in jobs], workers=args.workers,
                         backend=args.backend, address=args.ray_address, progress=False, desc="sweep",
                         keep_going=args.keep_going)
        for k, (i, res, reused) in enumerate(runs, 1):
            path = Path(jobs[i][1])
            if not path.is_file() or path.read_text() != res["log"]:
                atomic_write(path, res["log"].encode())             # the run's log, whole
            print(sweep_line(k, len(jobs), path, res, reused), flush=True)
        cache.prune()
    return 0


def cmd_demo(args) -> int:
    import torch
    torch.set_num_threads(1)                     # the toy model is too small to gain from a second thread
    from ..lab.demo import run_demo
    run_demo(out=args.out, steps=args.steps, seed=args.seed)
    return 0


def cmd_demos(args) -> int:
    from ..envs.experts import DEMO_CONFIGS, write_demos
    sizes = {"gridworld": 200, "bandit_chain": 20, "mock_search": 72}
    for env in args.env or list(DEMO_CONFIGS):
        choose("env", env, DEMO_CONFIGS)
        path = write_demos(env, args.n or sizes[env], seed=args.seed)
        print(f"{env}: {args.n or sizes[env]} expert episodes -> {path}")
    return 0


def cmd_pretrain(args) -> int:
    from ..train.pretrain import main as pretrain_main
    pretrain_main(args.rest)
    return 0


def cmd_bench(args) -> int:
    choose("benchmark", args.name, BENCHES)
    module = importlib.import_module(BENCHES[args.name])
    module.main(args.rest)
    return 0


class LazyChoices(dict):
    """Subcommand name -> its parser, for argparse's subparsers action; ``builders[name]`` adds a parser's
    arguments the first time argparse looks the name up (``parser = choices[name]``, when it is chosen), so
    building the top-level parser and ``toyrl --help`` import nothing a subcommand's flags need."""

    def __init__(self):
        super().__init__()
        self.builders = {}

    def __getitem__(self, name):
        parser = super().__getitem__(name)
        build = self.builders.pop(name, None)
        if build is not None:
            build(parser)
        return parser


def lazy_subparsers(p: argparse.ArgumentParser):
    """``p.add_subparsers`` whose parsers may be completed on first use (``LazyChoices``)."""
    sub = p.add_subparsers(dest="command", required=True)
    sub._name_parser_map = sub.choices = LazyChoices()     # where argparse looks a chosen subcommand up
    return sub


def build_train(t: argparse.ArgumentParser) -> None:
    """``toyrl train``: one flag per TrainConfig field (imports toyrl.cli.trainflags, and so torch)."""
    from .trainflags import TRAIN_SYNTAX, add_train_flags
    t.epilog = TRAIN_SYNTAX
    add_import_flag(t)                                     # before the fields: plug-ins' names are valid values
    add_train_flags(t)
    t.add_argument("--out", default=None, help="run log path (JSON lines)")


def build_sweep(s: argparse.ArgumentParser) -> None:
    """``toyrl sweep``: every TrainConfig field takes several values."""
    from .trainflags import SWEEP_SYNTAX, add_train_flags
    s.epilog = SWEEP_SYNTAX
    add_import_flag(s)
    add_train_flags(s, multi=True)
    s.add_argument("--workers", action=AtLeast, default=max(1, (os.cpu_count() or 2)))
    s.add_argument("--out-dir", default="runs")
    add_resume_flag(s)
    add_backend_flags(s)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="toyrl", description="Multi-turn agent RL, small enough to see.")
    sub = lazy_subparsers(p)
    e = sub.add_parser("envs", help="list the environments")
    add_import_flag(e)                                     # a plug-in's envs are listed too
    e.set_defaults(func=cmd_envs)
    sub.add_parser("train", help="train one configuration, write a JSON-lines run log",
                   description="One flag per TrainConfig field, by its own name.").set_defaults(func=cmd_train)
    sub.add_parser("sweep", help="configurations x seeds in parallel processes, one log each",
                   description="Every TrainConfig field takes several values; the sweep runs their product "
                   "(e.g. --estimator grpo gigpo --seed 0 1: four runs).").set_defaults(func=cmd_sweep)
    sub.choices.builders.update(train=build_train, sweep=build_sweep)
    add_scorecard(sub)
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
    add_run_commands(sub)                                  # plot, compare (toyrl.cli.runplot)
    add_export(sub)                                        # toyrl.cli.export
    importlib.import_module(".grade", __package__).add_grade(sub)   # toyrl grade (toyrl.cli.grade)
    add_precompute(sub)
    add_warmstart(sub)
    add_doctor(sub)                                        # toyrl.cli.doctor
    add_models(sub)                                        # toyrl models fetch | list (toyrl.cli.models)
    add_check_env(sub)                                     # toyrl check-env MODULE:CLASS (toyrl.cli.check_env)
    pt = sub.add_parser("pretrain", help="behaviour-clone TinyLM on data/demos/ -> data/checkpoints/tinylm.pt")
    pt.add_argument("rest", nargs=argparse.REMAINDER, help="arguments (see toyrl pretrain --help)")
    pt.set_defaults(func=cmd_pretrain)
    b = sub.add_parser("bench", help=f"run a benchmark ({', '.join(BENCHES)})")
    b.add_argument("name")
    b.add_argument("rest", nargs=argparse.REMAINDER, help="arguments for the benchmark")
    b.set_defaults(func=cmd_bench)
    return p


def interrupted(args, e=None) -> str:
    """The one line Ctrl-C (or SIGTERM: "terminated") prints: for a job of many runs, how many are kept and how to
    resume (``Stopped.progress``); for ``train --out``, where the log so far is and how many rows it holds."""
    from ..lab.interrupts import Stopped
    from ..train.runlog import RunLog
    word = "terminated" if getattr(e, "signum", None) == signal.SIGTERM else "interrupted"
    if isinstance(e, Stopped) and e.total:
        return f"toyrl: {word}; {e.progress()}"
    path = getattr(args, "out", None) if getattr(args, "command", None) == "train" else None
    try:
        with warnings.catch_warnings():                      # a torn last row is skipped, not news here
            warnings.simplefilter("ignore")
            return f"toyrl: {word}; the log so far is in {path} ({len(RunLog.load(path).rows)} rows)"
    except (OSError, TypeError, ValueError):                 # no --out, no file yet, or not a run log
        return f"toyrl: {word}"


def _one_line(show):
    """``warnings.showwarning`` that prints a run cache's warning as one line ("toyrl: warning: ..."), others
    as ``show`` does."""
    from ..lab.runcache import RunCacheWarning

    def showwarning(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, RunCacheWarning):
            print(f"toyrl: warning: {message}", file=sys.stderr)
        else:
            show(message, category, filename, lineno, file, line)
    return showwarning


def main(argv=None) -> int:
    """Run a subcommand: 0 on success, 2 with one line for a bad name or value (or a results folder that cannot be
    written), 1 for a failed run, 130 with one line on Ctrl-C and 143 on SIGTERM. As the process's entry point
    (``argv`` None: the ``toyrl`` command, ``python -m toyrl``), a job that ended early ends the process at once
    (``toyrl.lab.interrupts.end_process``)."""
    from ..lab.interrupts import RunFailed, end_process, sigterm_raises
    from ..lab.results import FolderError
    args, entry = None, argv is None
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["pretrain"]:                # its flags are pretrain's own: `toyrl pretrain --steps 10` as written
        return cmd_pretrain(argparse.Namespace(rest=argv[1:]))
    with sigterm_raises(), warnings.catch_warnings():
        warnings.showwarning = _one_line(warnings.showwarning)
        try:
            args = build_parser().parse_args(argv)
            return args.func(args)
        except (UsageError, FolderError) as e:
            print(f"toyrl: error: {e}", file=sys.stderr)
            return 2
        except RunFailed as e:
            print(f"{e.tracebacks()}toyrl: error: {e.summary()}", file=sys.stderr)
            status = 1
        except KeyboardInterrupt as e:
            print(interrupted(args, e), file=sys.stderr)
            status = getattr(e, "exit_status", 130)
    if entry:
        end_process(status)
    return status

if __name__ == "__main__":
    sys.exit(main())
