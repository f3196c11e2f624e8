"""The ``toyrl`` command line: ``toyrl envs | train | sweep | demo | bench NAME``.

Every subcommand is a thin layer over library functions (``TrainConfig`` / ``train``); an unknown
name prints one line listing the valid names and exits with code 2 (no traceback).
"""
from __future__ import annotations

import argparse
import importlib
import itertools
import json
import os
import sys
from pathlib import Path

BENCHES = {
    "envs": "toyrl.bench.envs",
    "credit": "toyrl.bench.credit",
    "train": "toyrl.bench.train",
}
ENV_NAMES = ("gridworld", "bandit_chain", "mock_search")


class UsageError(Exception):
    """A bad name or argument: reported in one line, exit code 2."""


def choose(kind: str, name: str, valid) -> str:
    """Return ``name`` if it is one of ``valid``, else raise a one-line UsageError listing them."""
    valid = list(valid)
    if name not in valid:
        raise UsageError(f"unknown {kind} {name!r}; valid {kind}s: {', '.join(valid)}")
    return name


def parse_kv(items, what: str) -> dict:
    """["gamma=0.9", "norm=mean", "fast=true"] -> {"gamma": 0.9, "norm": "mean", "fast": True}."""
    out = {}
    for item in items or []:
        if "=" not in item:
            raise UsageError(f"{what} takes KEY=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        try:
            out[k] = json.loads(v)
        except json.JSONDecodeError:
            out[k] = v
    return out


# ---- train flags, shared by train and sweep ---------------------------------------------------------
def add_train_flags(p: argparse.ArgumentParser, multi: bool = False) -> None:
    n = "+" if multi else None
    p.add_argument("--env", default=["gridworld"] if multi else "gridworld", nargs=n, help="|".join(ENV_NAMES))
    p.add_argument("--env-kw", action="append", metavar="KEY=VALUE", help="env argument, e.g. map_name=\"4x4\"")
    p.add_argument("--policy", default="tiny",
                   help="tiny | small | base (toy presets), tinylm[:PATH] (text policy), hf:PATH (local HF model)")
    p.add_argument("--autocast", default=None, choices=[None, "bf16"], help="bf16 autocast for tinylm / hf policies")
    p.add_argument("--estimator", default=["grpo"] if multi else "grpo", nargs=n)
    p.add_argument("--est-kw", action="append", metavar="KEY=VALUE", help="estimator hyperparameter")
    p.add_argument("--clip", default=["ppo"] if multi else "ppo", nargs=n)
    p.add_argument("--clip-kw", action="append", metavar="KEY=VALUE", help="clip-scheme hyperparameter")
    p.add_argument("--ratio", default=None, nargs=n, help="token|turn|sequence|trajectory")
    p.add_argument("--agg", default=None, help="loss aggregation")
    p.add_argument("--kl", default=None, help="KL estimator (k1|abs|k2|k3|...)")
    p.add_argument("--kl-coef", type=float, default=0.0)
    p.add_argument("--no-mask-env-tokens", action="store_true", help="train on observation tokens too")
    p.add_argument("--filter", action="append", default=[], help="filter name (repeatable)")
    p.add_argument("--filter-kw", action="append", metavar="FILTER.KEY=VALUE")
    p.add_argument("--context", default=["full"] if multi else "full", nargs=n, help="full|last_k|summary")
    p.add_argument("--context-k", type=int, default=2)
    p.add_argument("--recompute", default="matched", help="matched|flat")
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--prompts", type=int, default=8, help="tasks per step")
    p.add_argument("--epochs", type=int, default=1, help="PPO epochs per batch")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--max-turns", type=int, default=None)
    p.add_argument("--entropy-coef", type=float, default=0.0)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--staleness", type=int, default=0)
    p.add_argument("--bc-steps", type=int, default=0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--no-progress", action="store_true")


def config_from(args, **override):
    """A validated TrainConfig from parsed flags (``override`` replaces single fields)."""
    from .credit import ESTIMATORS
    from .objectives import CLIP_SCHEMES
    from .filters import FILTERS
    from .train import TrainConfig
    v = {**vars(args), **override}
    from .policies.factory import is_policy_name, policy_names
    choose("env", v["env"], ENV_NAMES)
    if not is_policy_name(v["policy"]):
        raise UsageError(f"unknown policy {v['policy']!r}; valid policies: {', '.join(policy_names())}")
    choose("estimator", v["estimator"], ESTIMATORS)
    choose("clip scheme", v["clip"], CLIP_SCHEMES)
    choose("context policy", v["context"], ("full", "last_k", "summary"))
    choose("recompute mode", v["recompute"], ("matched", "flat"))
    if v["ratio"] is not None:
        choose("ratio level", v["ratio"], ("token", "turn", "sequence", "trajectory"))
    for f in v["filter"]:
        choose("filter", f, FILTERS)
    fkw = {}
    for item in v.get("filter_kw") or []:
        name, _, rest = item.partition(".")
        fkw.setdefault(choose("filter", name, FILTERS), {}).update(parse_kv([rest], "--filter-kw"))
    cfg = TrainConfig(
        env=v["env"], env_kwargs=parse_kv(v["env_kw"], "--env-kw"), policy=v["policy"],
        autocast=v.get("autocast"), estimator=v["estimator"], estimator_kwargs=parse_kv(v["est_kw"], "--est-kw"), clip=v["clip"],
        clip_kwargs=parse_kv(v["clip_kw"], "--clip-kw"), ratio=v["ratio"], agg=v["agg"], kl=v["kl"],
        kl_coef=v["kl_coef"], mask_env_tokens=not v["no_mask_env_tokens"], filters=list(v["filter"]),
        filter_kwargs=fkw, context=v["context"], context_k=v["context_k"], recompute=v["recompute"],
        group_size=v["group_size"], prompts_per_step=v["prompts"], ppo_epochs=v["epochs"], lr=v["lr"],
        steps=v["steps"], max_turns=v["max_turns"], entropy_coef=v["entropy_coef"],
        temperature=v["temperature"], staleness=v["staleness"], bc_steps=v["bc_steps"],
        seed=v.get("seed", 0), device=v["device"], progress=False if v["no_progress"] else None)
    try:
        cfg.validate()
    except ValueError as e:
        raise UsageError(str(e)) from None
    return cfg


SUMMARY_KEYS = ("reward_mean", "success_rate", "reward_std", "zero_var_frac", "grad_norm", "clip_frac",
                "ratio_max", "void_turn_rate")


def summarize(rows, last: int = 10) -> dict:
    """Mean of the summary metrics over the last ``last`` rows."""
    tail = rows[-last:]
    return {k: sum(r.get(k) or 0.0 for r in tail) / max(len(tail), 1) for k in SUMMARY_KEYS}


def cmd_envs(args) -> int:
    import gymnasium as gym

    from .envs import ENVS
    for name, (gym_id, core_cls) in ENVS.items():
        env = gym.make(gym_id).unwrapped
        doc = (env.__doc__ or "").strip().splitlines()[0]
        print(f"{name:14s} {gym_id:22s} actions={env.action_space.n:<4d} {doc}")
    return 0


def cmd_train(args) -> int:
    from .train import train
    cfg = config_from(args)
    log = train(cfg, args.out)
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


def cmd_sweep(args) -> int:
    out_dir = Path(args.out_dir)
    jobs = []
    for env, est, clip, ratio, ctx, seed in itertools.product(args.env, args.estimator, args.clip,
                                                              args.ratio or [None], args.context, args.seeds):
        cfg = config_from(args, env=env, estimator=est, clip=clip, ratio=ratio, context=ctx, seed=seed,
                          no_progress=True)
        name = f"{env}__{est}__{clip}" + (f"__{ratio}" if ratio else "") + f"__{ctx}__seed{seed}.jsonl"
        jobs.append((cfg, str(out_dir / name)))
    print(f"sweep: {len(jobs)} runs on {args.workers} worker(s) -> {out_dir}/")
    if args.workers <= 1:
        results = [_sweep_one(j) for j in jobs]
    else:
        import multiprocessing as mp
        with mp.get_context("spawn").Pool(args.workers) as pool:
            results = pool.map(_sweep_one, jobs)
    for path, s in results:
        print(f"{Path(path).name:60s} reward={s['reward_mean']:.3f} success={s['success_rate']:.3f} "
              f"std={s['reward_std']:.3f}")
    return 0


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
    from .claims import run_claims
    return run_claims(args.claims, seeds=args.seeds, quick=args.quick, workers=args.workers, out_dir=args.out_dir,
                      update_readme=not args.no_readme)


# notebook data: NAME -> module whose precompute(out_dir=None) writes data/runs/NAME/
PRECOMPUTE = {
    "echo_trap": "toyrl.viz.echo",
    "void": "toyrl.viz.void",
    "context": "toyrl.viz.context",
    "critics": "toyrl.viz.critics",
    "trees": "toyrl.viz.trees",
    "aggregation": "toyrl.viz.aggregation",
    "prototype": "toyrl.viz.prototype",
}


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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="toyrl", description="Multi-turn agent RL, small enough to see.")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("envs", help="list the environments").set_defaults(func=cmd_envs)
    t = sub.add_parser("train", help="train one configuration, write a JSON-lines run log")
    add_train_flags(t)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--out", default=None, help="run log path (JSON lines)")
    t.set_defaults(func=cmd_train)
    s = sub.add_parser("sweep", help="configurations x seeds in parallel processes, one log each")
    add_train_flags(s, multi=True)
    s.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    s.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2)))
    s.add_argument("--out-dir", default="runs")
    s.set_defaults(func=cmd_sweep)
    d = sub.add_parser("demo", help="a short GRPO vs GiGPO run: summary table and a figure")
    d.add_argument("--steps", type=int, default=None)
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--out", default="toyrl_demo.png", help="figure path")
    d.set_defaults(func=cmd_demo)
    dm = sub.add_parser("demos", help="write the expert demonstrations shipped in data/demos/")
    dm.add_argument("--env", nargs="+", default=None)
    dm.add_argument("--n", type=int, default=None, help="episodes per env")
    dm.add_argument("--seed", type=int, default=0)
    dm.set_defaults(func=cmd_demos)
    r = sub.add_parser("reproduce", help="the claims ledger: test the source article's claims at toy scale")
    r.add_argument("claims", nargs="*", help="claim names (default: all)")
    r.add_argument("--seeds", type=int, default=5)
    r.add_argument("--quick", action="store_true", help="smaller runs (the whole ledger in minutes)")
    r.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2)))
    r.add_argument("--out-dir", default=None, help="where the JSON and figures go (default data/claims)")
    r.add_argument("--no-readme", action="store_true", help="do not regenerate the README claims table")
    r.set_defaults(func=cmd_reproduce)
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


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except UsageError as e:
        print(f"toyrl: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
