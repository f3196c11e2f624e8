"""``toyrl demo``: a collapse and the fix that prevents it, over 3 seeds, in about a minute on 2 cores.

The setting is the claims ledger's ``env_mask`` (Search-R1, arXiv 2503.09516): a policy that samples
from its whole vocabulary (``constrain=False``), behaviour-cloned on the planner demonstrations,
then trained with GRPO on random 4x4 lakes. Two arms differ in one flag:

- ``unmasked`` (``mask_env_tokens=False``): the loss also raises the likelihood of the observation
  tokens the environment wrote, with the trajectory's advantage. The policy starts writing
  observation tokens in its own turns (``obs_token_rate`` jumps) and its success collapses.
- ``masked`` (``mask_env_tokens=True``, the fix): only policy tokens are trained; success keeps rising.

Each arm runs ``seeds`` seeds (paired); the figure draws the mean over seeds with the min..max band.
Measured: 3 seeds x 2 arms x 30 steps take about 22 s wall (37 CPU-s) with 2 workers.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

__all__ = ["DEMO_BASE", "demo_configs", "run_demo", "summarize"]

DEMO_BASE = dict(env="gridworld", env_kwargs={"size": 4, "max_turns": 12}, estimator="grpo", prompts_per_step=4,
                 constrain=False, bc_steps=60, kl="k3", kl_coef=0.01)
"""the ledger's env_mask setting (free sampling after 60 behaviour-cloning steps, k3 KL 0.01)"""
ARMS = {"unmasked": {"mask_env_tokens": False}, "masked": {"mask_env_tokens": True}}
"""arm -> TrainConfig overrides"""


def demo_configs(steps: int = 30) -> dict:
    """arm -> TrainConfig fields (without the seed)."""
    return {arm: {**DEMO_BASE, **over, "steps": steps} for arm, over in ARMS.items()}


def _run(job: tuple) -> tuple:
    """Worker: (arm, config dict, seed) -> (arm, seed, series) (run_job sets one torch thread)."""
    from .claims.spec import run_job
    arm, cfg, seed = job
    return arm, seed, run_job((cfg, seed, None))


def summarize(series: dict) -> dict:
    """arm -> {"final_success", "min_success", "peak_obs_token_rate"} over seeds (means of per-seed values).

    final: mean of the last 5 steps; min: lowest 5-step mean after step 5; peak: highest 5-step mean.
    """
    from .claims.spec import smooth
    out = {}
    for arm, runs in series.items():
        succ = [smooth(r["success_rate"]) for r in runs.values()]
        obs = [smooth(r["obs_token_rate"]) for r in runs.values()]
        out[arm] = {"final_success": float(np.mean([s[-5:].mean() for s in succ])),
                    "min_success": float(np.mean([s[5:].min() if s.size > 5 else s.min() for s in succ])),
                    "peak_obs_token_rate": float(np.mean([o.max() for o in obs]))}
    return out


PANELS = (("success_rate", "success rate", "success rate (5-step mean)"),
          ("obs_token_rate", "observation tokens the policy writes", "observation-token rate (5-step mean)"))
"""(series key, panel title, y label) of the figure's panels"""


def _figure(series: dict, out: str, steps: int):
    """Save (and return) the figure: per panel the mean over seeds and its min..max band, per arm.

    ``series``: arm -> seed -> {"success_rate": (steps,), "obs_token_rate": (steps,)} (``run_job``'s series).
    """
    import io
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from .claims.report import seed_band
    from .results import atomic_write
    from .claims.spec import smooth
    from ..viz.plots import legend
    fig, axes = plt.subplots(1, 2, figsize=(10.0, 3.8), layout="constrained")
    for j, arm in enumerate(series):
        name = f"{arm}{', the fix' if ARMS[arm]['mask_env_tokens'] else ''}"
        for ax, (key, _, _) in zip(axes, PANELS):
            Y = np.stack([smooth(r[key]) for r in series[arm].values()])              # (S, steps)
            seed_band(ax, Y, np.arange(Y.shape[1]), f"C{j}", name, kind="range")
            ax.collections[-1].set_label(ax.get_lines()[-1].get_label())          # the band shares the line's entry
    for ax, (_, title, ylabel) in zip(axes, PANELS):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("RL step")
        ax.set_ylabel(ylabel, fontsize=9)
        legend(ax, fontsize=7, frameon=False)
    seeds = sorted({s for runs in series.values() for s in runs})
    fig.suptitle("Training on environment tokens collapses a free-sampling policy; masking them prevents it\n"
                 f"GridWorld 4x4 random maps, GRPO after {DEMO_BASE['bc_steps']} BC steps, {steps} steps, "
                 f"{len(seeds)} seeds ({seeds[0]}..{seeds[-1]})\n"
                 "tiny policy sampling its whole vocabulary: env tokens masked vs unmasked in the loss", fontsize=9)
    buf = io.BytesIO()
    fig.savefig(buf, format=Path(out).suffix.lstrip(".") or "png", dpi=110)
    atomic_write(out, buf.getvalue())                   # whole: Ctrl-C leaves the previous figure
    plt.close(fig)
    return fig


def run_demo(out: Optional[str] = "toyrl_demo.png", steps: Optional[int] = None, seed: int = 0, seeds: int = 3,
             workers: int = 2, progress: bool = True) -> dict:
    """Run both arms on seeds seed .. seed + seeds - 1, print a summary table, save the figure to ``out``."""
    steps = steps or 30
    cfgs = demo_configs(steps)
    jobs = [(arm, cfg, s) for arm, cfg in cfgs.items() for s in range(seed, seed + seeds)]
    from .parallel import iter_tasks
    series: dict = {arm: {} for arm in cfgs}
    for _, (arm, s, ser) in iter_tasks(_run, jobs, workers=workers, progress=progress, desc="demo runs"):
        series[arm][s] = ser
    summary = summarize(series)
    print(f"GridWorld 4x4 random maps, free sampling after 60 BC steps, GRPO, {steps} steps, seeds "
          f"{seed}..{seed + seeds - 1}")
    print(f"{'arm':10s} {'final success':>14s} {'lowest success':>15s} {'peak obs-token rate':>20s}")
    for arm, s in summary.items():
        print(f"{arm:10s} {s['final_success']:14.2f} {s['min_success']:15.2f} {s['peak_obs_token_rate']:20.2f}")
    if out:
        _figure(series, out, steps)
        print(f"figure -> {out}")
    return summary
