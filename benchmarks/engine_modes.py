"""Every rollout engine mode at its default strength, with and without each rollout correction.

One setting, fixed before any run and not tuned: GRPO on notebook 12's BanditChain (3 stages x 4 arms, one fixed
layout, P=4 x G=8, lr 1e-2; ``toyrl.viz.engine.engine_config``), ``--steps`` RL steps, seeds 0..n-1, one torch
thread per run. Per (engine mode, correction) it reports, with 95% t-intervals over seeds:

- ``kl``: the per-step KL(engine || trainer) (k3 on the policy tokens), averaged over the run;
- ``ratio_max``: the largest rho = pi_old / pi_engine of any token in the run;
- ``final``: the training success over the last 5 steps (episodes sampled by the engine);
- ``eval``: the trainer's own weights on 64 fresh episodes, exact sampling, after the last step.

    python benchmarks/engine_modes.py                        # 5 seeds x 20 steps, 2 workers
    python benchmarks/engine_modes.py --seeds 3 --corrections none tis --out /tmp/engine_modes.json

Writes JSON (every run's numbers, the command, the thread count and the wall time) and prints a markdown table.
"""
import argparse
import json
import os
import sys
import time
import warnings
from multiprocessing import Pool

import numpy as np



def run(job: tuple) -> dict:
    """One (engine mode, correction, seed, steps) run -> its summary numbers."""
    import torch
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    from toyrl.train import train
    from toyrl.viz.engine import engine_config
    mode, corr, seed, steps = job
    t0 = time.perf_counter()
    log = train(engine_config(mode, None, corr, steps=steps, seed=seed, eval_every=steps, eval_episodes=64))
    col = lambda k: np.asarray(log.column(k, strict=False), dtype=float)          # noqa: E731
    return {"engine": mode, "correction": corr, "seed": seed, "kl": float(np.nanmean(col("engine_kl"))),
            "ratio_max": float(np.nanmax(col("engine_ratio_max"))), "final": float(np.nanmean(col("success_rate")[-5:])),
            "eval": float(log.rows[-1]["eval_success_rate"]), "time_s": time.perf_counter() - t0}


def table(runs: list) -> str:
    """The markdown table: one row per (engine, correction), mean [95% interval] over seeds."""
    from toyrl.lab.claims.stats import t_interval
    keys = list(dict.fromkeys((r["engine"], r["correction"]) for r in runs))            # in the order they ran
    fmt = lambda x, nd: "{:.{n}f} [{:.{n}f}, {:.{n}f}]".format(*t_interval(x), n=nd)   # noqa: E731
    lines = ["| engine | correction | KL(engine \\|\\| trainer) per token | largest rho | final success | "
             "trainer's eval success |", "| --- | --- | --- | --- | --- | --- |"]
    for e, c in keys:
        rs = [r for r in runs if r["engine"] == e and r["correction"] == c]
        lines.append(f"| {e} | {c} | {fmt([r['kl'] for r in rs], 4)} | {max(r['ratio_max'] for r in rs):.3g} | "
                     f"{fmt([r['final'] for r in rs], 2)} | {fmt([r['eval'] for r in rs], 2)} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    from toyrl.objectives.rollout_correction import CORRECTIONS
    from toyrl.rollout.inference_engine import ENGINES
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--engines", nargs="+", default=list(ENGINES))
    p.add_argument("--corrections", nargs="+", default=list(CORRECTIONS))
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--out", default="data/engine_modes.json")
    a = p.parse_args(argv)
    jobs = [(e, c, s, a.steps) for e in a.engines for c in a.corrections for s in range(a.seeds)
            if not (e == "exact" and c != "none")]            # the exact engine: every correction is the identity
    t0 = time.perf_counter()
    with Pool(a.workers) as pool:
        runs = pool.map(run, jobs)
    out = {"command": "python " + " ".join(sys.argv), "threads_per_run": 1, "workers": a.workers,
           "load": os.getloadavg(), "wall_s": time.perf_counter() - t0, "setting": "toyrl.viz.engine.engine_config",
           "steps": a.steps, "seeds": a.seeds, "runs": runs}
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    print(table(runs))
    print(f"\n{len(runs)} runs, {out['wall_s']:.0f} s wall on {a.workers} workers x 1 thread; load {out['load']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
