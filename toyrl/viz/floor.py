"""Notebook 02's pre-registered follow-ups in the blind T-maze: the floor rule with a warm critic, and what StarPO-S keeps.

Two ledger claims registered after blind_fixes, read from their stored runs (seeds 0-9 in ``data/claims/``, 10-19 in
``data/claims/heldout/``):

- ``critic_delay_warm``: GRPO, a critic from zero and a warm critic (fitted on the BC policy's episodes first), with
  collapse judged from the task's floor (``toyrl.lab.claims.echo.floor_collapsed``) beside the old rule;
  ``floor_counts`` counts, per block and arm, the runs each rule calls collapsed and those that forgot the cue.
- ``starpo_cue``: the template MI of the groups StarPO-S kept against a random keep of as many groups, per step;
  ``kept_curves`` averages them over seeds and ``plot_kept`` draws them.

    counts = floor_counts()                  # {"seeds 0-9": {"grpo": {"collapsed", "collapsed_floor", ...}}}
    fig = plot_kept(kept_curves())
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..lab.claims.echo import TMAZE_FLOOR, floor_view
from ..lab.claims.report import load_series
from .blind import BLOCKS, record, series_path
from .style import arm_color, figsize, font_size, styled, subplots

__all__ = ["BLOCKS", "record", "floor_counts", "kept_curves", "plot_kept"]

def floor_counts(claim: str = "critic_delay_warm", series: Optional[dict] = None) -> dict:
    """block -> arm -> ``floor_view`` of the stored runs (``series``: block -> arm -> seed -> run series, default
    the shipped files): {"seeds", "collapsed" (old rule), "collapsed_floor", "forgot", "final"}, floor
    ``TMAZE_FLOOR``."""
    if series is None:
        series = {label: load_series(series_path(claim, held)) for label, held in BLOCKS}
    return {label: floor_view(runs, TMAZE_FLOOR) for label, runs in series.items()}


def kept_curves(claim: str = "starpo_cue", series: Optional[dict] = None) -> dict:
    """block -> {"kept", "random": (steps,) template MI per step, mean over seeds (NaN-blind); "gap": (seeds,) each
    seed's mean over steps of kept - random} from ``starpo_cue``'s stored runs (``series`` as in ``floor_counts``,
    arm "starpo_s"). Example: one seed with kept [.2, .1] and random [.3, .3] -> kept [.2, .1], gap [-.15]."""
    if series is None:
        series = {label: load_series(series_path(claim, held)) for label, held in BLOCKS}
    out = {}
    for label, runs in series.items():
        seeds = runs["starpo_s"].values()
        kept = np.array([np.asarray(s["kept_template_mi"], float) for s in seeds])      # (seeds, steps)
        rand = np.array([np.asarray(s["random_template_mi"], float) for s in seeds])
        with np.errstate(all="ignore"):
            out[label] = {"kept": np.nanmean(kept, 0), "random": np.nanmean(rand, 0),
                          "gap": np.nanmean(kept - rand, 1)}
    return out


@styled
def plot_kept(curves: dict):
    """Template MI per RL step of the groups StarPO-S kept (solid) and of a random keep of as many groups (dashed),
    mean over seeds, one panel per block (``kept_curves``)."""
    fig, axes = subplots(1, len(curves), size=figsize(10, 4.4), sharey=True, layout="constrained", squeeze=False)
    c = arm_color("starpo_s")
    for ax, (label, cv) in zip(axes[0], curves.items()):
        x = np.arange(len(cv["kept"]))
        ax.plot(x, cv["kept"], color=c, label="kept by the filter (top quarter by reward std)")
        ax.plot(x, cv["random"], color="0.45", ls="--", label="a random keep of as many groups")
        ax.set_title(f"{label}: kept - random {np.nanmean(cv['gap']):+.3f} nats (seed mean)",
                     fontsize=font_size("title"))
        ax.set_xlabel("RL step", fontsize=font_size("label"))
        ax.tick_params(labelsize=font_size("tick"))
    axes[0, 0].set_ylabel("template MI (nats)", fontsize=font_size("label"))
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=2, fontsize=font_size("legend"))
    fig.suptitle("blind T-maze 5x5, StarPO-S (p 0.25), starpo_cue: what the filter keeps, mean over 10 seeds",
                 fontsize=font_size("suptitle"))
    return fig
