"""Notebook 01's functions (``toyrl.viz.credit_batch``, ``toyrl.viz.credit``): every estimator on the noisy-expert
batch, the credit analyses, and figures that draw those numbers and meet the figure standard.
"""
from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_figure_standard, image_data

from toyrl.credit import ESTIMATORS
from toyrl.viz import credit, credit_batch


@pytest.mark.parametrize("group_size", [2, 4, 8, 16])
@pytest.mark.parametrize("slip", [0.0, 0.5])
def test_all_estimators_finite(group_size, slip):
    cb = credit_batch.make_credit_batch(group_size=group_size, slip=slip, seed=0)
    for values in ("mc", "zeros"):
        adv = credit_batch.all_advantages(cb, gamma=0.95, omega=1.0, values=values)
        assert set(adv) == set(ESTIMATORS)
        for name, a in adv.items():
            assert a.shape == (cb.batch.B, cb.batch.H), name
            assert np.isfinite(a).all(), name
            assert (a[~cb.mask] == 0).all(), name


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_grpo_flat_gigpo_separates(seed):
    cb = credit_batch.make_credit_batch(seed=seed)
    adv = credit_batch.all_advantages(cb, ["grpo", "gigpo"], gamma=0.95)
    assert credit.credit_spread(adv["grpo"], cb.mask).max() < 1e-5
    g = credit.wasted_vs_progress(cb, adv["grpo"])
    q = credit.wasted_vs_progress(cb, adv["gigpo"])
    assert len(g["paired_gaps"]) >= 3 and np.abs(g["paired_gaps"]).max() < 1e-5   # same credit, every trajectory
    assert q["progress_mean"] - q["wasted_mean"] > 0.5          # measured >= 0.52 on seeds 0-5
    assert q["paired_gaps"].mean() > 0.2                        # measured >= 0.41 on seeds 0-4
    q1 = credit.wasted_vs_progress(cb, credit_batch.all_advantages(cb, ["gigpo"], gamma=1.0)["gigpo"])
    assert abs(q1["progress_mean"] - q1["wasted_mean"]) < 0.1


def test_credit_spread_example():
    adv = np.array([[1.0, 1.0, 0.0], [2.0, -1.0, 5.0]])
    mask = np.array([[1, 1, 0], [1, 1, 1]], bool)
    np.testing.assert_allclose(credit.credit_spread(adv, mask), [0.0, 6.0])


def test_credit_batch_setting_names_its_arguments():
    cb = credit_batch.make_credit_batch(group_size=8, n_groups=2, seed=0)
    assert cb.setting == "GridWorld 4x4, noisy planner (eps 0.3, void 0.25), 2 groups x G=8, seed 0"
    cb = credit_batch.make_credit_batch(group_size=4, n_groups=3, slip=0.2, eps=0.5, p_void=0.0, seed=2)
    assert cb.setting == "GridWorld 4x4, slip 0.2, noisy planner (eps 0.5, void 0), 3 groups x G=4, seed 2"
    assert cb.batch.B == 12 and len(np.unique(cb.batch.group.numpy())) == 3


@pytest.mark.parametrize("gamma", [0.5, 0.75, 1.0])
@pytest.mark.parametrize("omega", [0.0, 1.0, 2.0])
def test_credit_panel_range(gamma, omega):
    cb = credit_batch.make_credit_batch(group_size=4, slip=0.2)
    for est in ("gigpo", "gae", "archer"):
        fig = credit.credit_panel(est, gamma=gamma, omega=omega, group_size=4, slip=0.2)
        adv = credit_batch.all_advantages(cb, ["grpo", est], gamma=gamma, omega=omega)
        for ax, name in zip(fig.axes[:2], ("grpo", est)):
            shown = image_data(ax)                                             # (H, B): turns x trajectories
            np.testing.assert_allclose(shown.filled(0), (adv[name] * cb.mask).T, atol=1e-6)
            assert (shown.mask == ~cb.mask.T).all()                           # padding turns left blank
        assert fig.axes[1].get_title() == f"{est}\n(gamma={gamma}, omega={omega})"
        count = image_data(fig.axes[2])
        np.testing.assert_allclose(count, credit.anchor_map(cb, 0, gamma)[0])  # the anchor-state counts
        assert fig._suptitle.get_text().startswith(f"{cb.setting}, values=mc: ")
    assert_figure_standard(fig, "GridWorld 4x4, slip 0.2", "G=4", "seed 0", "values=mc", f"gamma={gamma}")
    count, per_action = credit.anchor_map(cb, 0, gamma)
    assert count.shape == (4, 4) and per_action.shape == (4, 4, 5)
    assert count.sum() == cb.mask[cb.batch.group.numpy() == 0].sum()
    # A^S averages to 0 over each anchor state
    a_s = credit.step_advantage(cb, gamma)
    assert np.isfinite(a_s).all()


def test_plot_estimators_grid():
    cb = credit_batch.make_credit_batch(group_size=4)
    adv = credit_batch.all_advantages(cb)
    fig = credit.plot_estimators(adv, cb.mask, success=cb.success, setting=f"{cb.setting}, gamma=0.95", ncols=6)
    panels = [a for a in fig.axes if a.images]
    assert [a.get_title() for a in panels] == list(adv) and len(panels) == len(ESTIMATORS)
    for ax in panels:
        np.testing.assert_allclose(image_data(ax).filled(0), (adv[ax.get_title()] * cb.mask).T, atol=1e-6)
    ncols = 6                                                                  # labelled on the outer panels
    assert [ax.yaxis.get_visible() for ax in panels] == [i % ncols == 0 for i in range(len(panels))]
    assert [ax.xaxis.get_visible() for ax in panels] == [i + ncols >= len(panels) for i in range(len(panels))]
    for ax in panels[-ncols:]:                                                 # the bottom row: + / . per trajectory
        assert [t.get_text() for t in ax.get_xticklabels()] == ["+" if s else "." for s in cb.success]
    assert_figure_standard(fig, cb.setting, "gamma=0.95", "turn advantages per estimator")


@pytest.mark.parametrize("names", [["grpo", "gigpo"], ["grpo", "rloo", "gigpo", "gae", "spa", "archer", "empg"]])
def test_credit_estimators_grid_any_size_meets_the_standard(names):
    """A short grid (one row; or a last row with empty slots) labels its outer panels, its default title
    names the batch's shape, and a long setting wraps inside a narrow figure."""
    cb = credit_batch.make_credit_batch(group_size=4)
    adv = credit_batch.all_advantages(cb, names)
    fig = credit.plot_estimators(adv, cb.mask)
    assert_figure_standard(fig, f"{cb.batch.B} trajectories, up to {cb.batch.H} turns")
    fig = credit.plot_estimators(adv, cb.mask, names=names, success=cb.success, setting=cb.setting)
    assert_figure_standard(fig, "turn advantages per estimator")
    assert cb.setting.replace(" ", "") in fig._suptitle.get_text().replace("\n", "").replace(" ", "")


@pytest.mark.parametrize("slip", [0.0, 0.3])
def test_plot_anchor_map_credit_standard(slip):
    cb = credit_batch.make_credit_batch(group_size=8, slip=slip, seed=1)
    fig = credit.plot_anchor_map(cb, group=1, gamma=0.9)
    ax = fig.axes[0]
    np.testing.assert_allclose(image_data(ax), credit.anchor_map(cb, 1, 0.9)[0])
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("column", "row")
    assert_figure_standard(fig, cb.setting, "GiGPO anchor states", "group 1", "gamma=0.9")
