"""Lessons 00, 01, 02 and 13's figure functions at their defaults in the lessons' style ("slides"): every text
>= 12 pt on a 16:9 slide (``assert_projectable``), at most 10 in wide before the style's scale, and the figure
standard (a title naming the setting, labelled axes, every band in a legend)."""
from __future__ import annotations

import matplotlib
import numpy as np
import pytest
from conftest import assert_figure_standard, assert_projectable

from toyrl.viz import blind, credit, credit_batch, echo, horizon, style, trajectory


@pytest.fixture(autouse=True)
def slides():
    with style.figure_style("slides"):
        yield
    matplotlib.pyplot.close("all")


def assert_slide(fig, *setting):
    assert fig.get_size_inches()[0] <= style.figsize(10, 1)[0] + 1e-6, fig.get_size_inches()
    assert_projectable(fig)
    assert_figure_standard(fig, *setting)


def test_lesson00_figures():
    ro, core, _ = trajectory.sample_rollout("gridworld", n=4, seed=0)
    assert_slide(trajectory.plot_flat_vs_turns(ro, 3, core), "GridWorld 4x4", "row 3")
    ro, core, _ = trajectory.sample_rollout("mock_search", n=4, seed=1, policy="expert")
    assert_slide(trajectory.plot_turn_strips(ro, core, max_turns=3), "MockSearch", "rows 0, 1")
    assert_slide(trajectory.rollout_figure(row=3), "GridWorld 4x4", "untrained tiny policy")


def test_lesson01_figures():
    cb = credit_batch.make_credit_batch(group_size=8, n_groups=2, slip=0.0, seed=0)
    names = ["grpo", "rloo", "dr_grpo", "turn_gae", "spa", "gigpo"]
    adv = credit_batch.all_advantages(cb, names)
    fig = credit.plot_estimators(adv, cb.mask, names, success=cb.success, setting=cb.setting, shared=False)
    assert_slide(fig, cb.setting, "turn advantages per estimator")
    assert_slide(credit.plot_anchor_map(cb), cb.setting, "anchor states")
    assert_slide(credit.credit_panel(), cb.setting, "anchor states")


def test_lesson02_figures():
    runs = echo.load_runs()
    fig = echo.plot_echo(runs[("grpo", 0)], title="GRPO, aggressive setting, seed 0")
    assert_slide(fig, "GRPO", "seed 0")
    mi = fig.axes[2]                                      # the template MI on its own axis, not a 0-3 nat one
    y = mi.get_lines()[0].get_ydata()
    lo, hi = mi.get_ylim()
    assert (np.nanmax(y) - np.nanmin(y)) > 0.5 * (hi - lo)
    assert_slide(echo.echo_panel(), "grpo", "seed 0")
    assert_slide(blind.plot_claim_run("grpo", 0), "blind T-maze", "seed 0")
    assert_slide(blind.plot_claim_run("kl", 1), "blind T-maze", "kl")


def test_lesson13_figures():
    critic = horizon.ledger_series("turn_critic")
    fig = horizon.plot_arm_runs({a: list(r.values()) for a, r in critic.items()}, "success_rate", smooth_w=3,
                                title="snake 7x7 (30 turns), ledger turn_critic")
    assert_slide(fig, "snake 7x7")
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "turn_ppo (identical to turn_gae)" in labels                     # said, and drawn dashed
    dashed = [ln for ln in fig.axes[0].get_lines() if ln.get_label().startswith("turn_ppo")]
    assert dashed and dashed[0].get_linestyle() != "-"
    assert_slide(horizon.plot_horizon("s9", horizon.ledger_series()), "snake 9x9")


def test_blame_heatmaps_use_a_blame_scale_and_mark_the_fatal_turn():
    """Failed episodes of the snake's warm start: every GRPO and GiGPO advantage shown is negative, so the scale
    runs from the most negative value to 0 (not +-max, where GRPO's columns would be near white)."""
    import torch
    from toyrl.credit import ESTIMATORS
    from toyrl.train import Trainer
    batch = Trainer(horizon.horizon_config(7, steps=0, seed=0)).sample().batch
    advs = {name: ESTIMATORS[name](batch) for name in ("grpo", "gigpo")}
    fig = horizon.plot_blame(batch, advs, title="snake 7x7 from its warm start, seed 0")
    assert_slide(fig, "snake 7x7")
    failed = batch.outcome() <= 0
    lo = min(float(a[failed][batch.turn_mask[failed]].min()) for a in advs.values())
    for ax in fig.axes[:2]:
        im = ax.get_images()[0]
        assert im.get_clim() == (lo, 0.0) and im.get_cmap().name == "Blues_r"
        fatal = ax.collections[0].get_offsets()                                  # one outline per failed column
        assert len(fatal) == int(failed.sum()) and (fatal[:, 1] == batch.turn_mask[failed].sum(1) - 1).all()


def test_plot_arm_runs_keeps_distinct_arms_solid():
    a = [{"success_rate": np.array([0.1, 0.2, 0.3])}]
    b = [{"success_rate": np.array([0.1, 0.2, 0.4])}]
    fig = horizon.plot_arm_runs({"grpo": a, "gigpo": b, "copy": [dict(a[0])]}, title="toy")
    styles = {ln.get_label(): ln.get_linestyle() for ln in fig.axes[0].get_lines()}
    assert styles["grpo"] == styles["gigpo"] == "-" and styles["copy (identical to grpo)"] != "-"
    with pytest.raises(ValueError, match="logs_by_arm"):
        horizon.plot_arm_runs({}, title="none")
