"""Every figure function of lessons 06-08 (viz.critics, viz.trees, viz.aggregation) and the shared curve figures,
drawn in the lessons' "slides" style at their defaults: readable on a projector (``assert_projectable``), titled with
their setting, labelled, every band in a legend and no label over another (``assert_figure_standard``), at most
10 in wide before the style's scale, a fixed colour per arm, and no warning on the way."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from conftest import assert_figure_standard, assert_projectable, fake_sweep, line_data

from toyrl.viz import aggregation, critics, prototype, style, trees
from toyrl.viz.plots import label, shown
from toyrl.viz.prototype import RUNS_DIR, load_sweep


@pytest.fixture(autouse=True)
def _slides():
    style.use("slides")
    with warnings.catch_warnings():
        warnings.simplefilter("error")                          # a warning is a failure here
        yield
    style.use("notebook")


def assert_slide_figure(fig, *setting):
    w, _ = fig.get_size_inches()
    assert w <= 10 * style.get_style("slides").scale + 1e-6, f"{w} in wide"
    assert_projectable(fig)
    assert_figure_standard(fig, *setting)


def _colors(ax) -> dict:
    return {name: ln.get_color() for name, ln in zip(line_data(ax), [l for l in ax.get_lines()
                                                                     if not l.get_label().startswith("_")])}


# ---- lesson 06 --------------------------------------------------------------------------------------
def test_value_fit_and_panel():
    fig = critics.value_panel(p_expert=0.9, n_train=16, steps=20, n_test=16)
    assert_slide_figure(fig, critics.data_setting(0.9, 16, 16))
    assert fig.axes[0].get_yscale() == "log"


def test_td_losses():
    arch = critics.fit_archer(critics.collect_grid(16, seed=0, max_turns=5), steps=5)
    ax = critics.plot_td_losses(arch, f"{critics.SETTING}, p_expert 0.5, 16 episodes")
    assert_slide_figure(ax.figure, "ArCHer", "p_expert 0.5")


def test_critic_panel_stored_sweep():
    sweep, _ = load_sweep(RUNS_DIR / "critics" / "curves.json")
    fig = critics.plot_critic_panel(sweep)
    assert_slide_figure(fig, critics.CURVES_SETTING)
    top, bottom = fig.axes
    assert bottom.get_yscale() == "log" and label("grad_norm") in bottom.get_title()
    assert _colors(top) == _colors(bottom) == {a: critics.COLORS[a] for a in sweep}


def test_curve_panel_leaves_out_an_arm_without_the_metric():
    """GRPO logs no critic_loss: no legend entry without a curve, and no 'Mean of empty slice' warning."""
    sweep, _ = load_sweep(RUNS_DIR / "critics" / "curves.json")
    fig = prototype.curve_panel(sweep, "critic_loss", setting=critics.CURVES_SETTING, colors=critics.COLORS)
    assert_slide_figure(fig, critics.CURVES_SETTING)
    assert list(line_data(fig.axes[0])) == ["Turn-PPO (turn_gae)"]
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["Turn-PPO (turn_gae)"]


def test_shown_draws_and_returns_none(monkeypatch):
    import matplotlib.pyplot as plt
    calls = []
    monkeypatch.setattr(plt, "show", lambda *a, **k: calls.append(1))
    cb = shown(critics.value_panel)
    assert cb.__name__ == "value_panel" and list(__import__("inspect").signature(cb).parameters)[:2] == [
        "p_expert", "n_train"]
    assert cb(p_expert=1.0, n_train=16, steps=20, n_test=16) is None and calls == [1]


# ---- lesson 07 --------------------------------------------------------------------------------------
@pytest.mark.parametrize("strategy", ["tree", "arpo", "patr"])
def test_tree_panel(strategy):
    fig = trees.tree_panel(strategy, seed=0, task=1)
    assert_slide_figure(fig, "GridWorld 4x4", strategy, "task 1", "whole batch (2 tasks)")


def test_draw_tree_default_title_counts_the_drawn_rows():
    node, mask, R, _ = trees.sample_tree("tree", seed=0)
    ax = trees.draw_tree(node, mask, R)
    assert_slide_figure(ax.figure, trees.TREE_SETTING, f"{node.shape[0]} leaves")


@pytest.mark.parametrize("x", ["step", "tokens"])
def test_tree_curve_panel_stored_sweep(x):
    sweep, _ = load_sweep(RUNS_DIR / "trees" / "curves.json")
    fig = trees.tree_curve_panel(sweep, "success_rate", x, 5)
    assert_slide_figure(fig, trees.SETTING)
    left, right = fig.axes
    assert left.get_ylim() == right.get_ylim()                               # compared panels share the y range
    assert left.get_legend() is None and right.get_legend() is not None      # one legend, outside the data
    assert _colors(left) == _colors(right) == trees.COLORS
    assert len(set(trees.COLORS.values())) == len(trees.COLORS)              # five arms, five colours


# ---- lesson 08 --------------------------------------------------------------------------------------
@pytest.mark.parametrize("short,long,G", [(3, 24, 8), (1, 48, 16), (12, 12, 2)])
def test_weights_panel(short, long, G):
    fig = aggregation.weights_panel(short, long, G)
    assert_slide_figure(fig, f"G = {G}", f"lengths {short}")
    assert fig.axes[0].get_yscale() == "log"


def test_agg_panel_stored_sweeps():
    length, loop = (load_sweep(RUNS_DIR / "aggregation" / f"{name}.json")[0] for name in ("length", "loop"))
    sweeps = aggregation.panel_sweeps(length, loop)
    settings = (aggregation.SETTING, aggregation.SETTING, aggregation.RANDOM_SETTING)
    for sweep, setting in zip(sweeps.values(), settings):
        for metric in ("turns_per_episode", "success_rate", "clip_frac"):
            fig = aggregation.plot_agg_panel(sweep, metric)
            assert_slide_figure(fig, setting, label(metric))
            assert _colors(fig.axes[0]) == {a: aggregation.COLORS[a] for a in sweep}


def test_plot_compare_in_slides_style():
    sweep = fake_sweep(["grpo", "gigpo"], ["success_rate"], S=3, N=12)
    ax = prototype.plot_compare(sweep, "success_rate")
    assert_slide_figure(ax.figure, "BanditChain")


def test_curve_stats_all_nan_column_is_nan_without_a_warning():
    m, se = prototype.curve_stats([[np.nan, 1.0], [np.nan, 3.0]], 2)
    assert np.isnan(m[0]) and np.isnan(se[0]) and m[1] == 2.0
    assert np.isnan(prototype.smooth([np.nan, np.nan, 1.0], 2)[1])
