"""Notebook 7's learning curves (toyrl.viz.trees): sparse evaluation columns read at their evaluated steps,
the final-value table, the two-panel figure (training rows vs fresh episodes) and the stored sweep's setting.
The tree drawing and budget helpers are tested in test_viz_more.py."""
from __future__ import annotations

from dataclasses import asdict

import numpy as np
import pytest
from conftest import assert_curves_drawn, assert_figure_standard, fake_sweep, line_data

from toyrl.lab.claims import CLAIMS
from toyrl.viz import trees
from toyrl.viz.plots import label
from toyrl.viz.prototype import RUNS_DIR, arm_curves, final_mean, load_sweep

nan = float("nan")
SPARSE = [[nan, 0.5, nan, 1.0], [nan, 0.25, nan, 0.5]]


def sparse_sweep(S: int = 2, N: int = 12, every: int = 5, seed: int = 0) -> dict:
    """``fake_sweep`` of ``tree_arms`` with ``EVAL_KEY`` logged as the trainer logs it: at steps every-1,
    2*every-1, ... and at the last step, NaN elsewhere."""
    sweep = fake_sweep(trees.tree_arms(), trees.KEYS, S=S, N=N, seed=seed)
    keep = [t for t in range(N) if (t + 1) % every == 0 or t == N - 1]
    for cols in sweep.values():
        cols[trees.EVAL_KEY] = [[v if t in keep else nan for t, v in enumerate(row)] for row in cols[trees.EVAL_KEY]]
    return sweep


def test_evaluated_steps_example():
    np.testing.assert_array_equal(trees.evaluated_steps(SPARSE), [1, 3])
    np.testing.assert_array_equal(trees.evaluated_steps([[0.0, 1.0, 2.0]]), [0, 1, 2])     # a per-step key
    np.testing.assert_array_equal(trees.evaluated_steps([[nan, 1.0], [2.0, nan]]), [0, 1])  # any seed counts


def test_last_evaluated_example():
    np.testing.assert_allclose(trees.last_evaluated(SPARSE), [0.75, 0.375])
    np.testing.assert_allclose(trees.last_evaluated(SPARSE, last=1), [1.0, 0.5])
    out = trees.last_evaluated([[nan, nan], [1.0, nan]])                                  # a seed with none: NaN
    assert np.isnan(out[0]) and out[1] == 1.0


def test_success_gap_example():
    cols = {"success_rate": [[0.5, 0.5, 0.5, 1.0], [0.0, 0.0, 1.0, 0.0]], trees.EVAL_KEY: SPARSE}
    np.testing.assert_allclose(trees.success_gap(cols), [(0.0 + 0.0) / 2, (-0.25 - 0.5) / 2])
    cols = {"success_rate": [[0.5, 0.5, 0.5, 1.0]], trees.EVAL_KEY: [[nan, 0.25, nan, 0.5]]}
    np.testing.assert_allclose(trees.success_gap(cols), [0.375])                            # the docstring's


def test_final_evaluated_example():
    assert trees.final_evaluated(SPARSE, last=1) == (0.75, 0.25)
    assert trees.final_evaluated(SPARSE, last=2) == (0.5625, 0.1875)
    assert trees.final_evaluated(SPARSE, last=5) == trees.final_evaluated(SPARSE, last=2)   # only 2 exist
    # a per-step column: the same as final_mean over the same number of last steps
    rows = [[0.0, 1.0, 1.0], [0.0, 0.0, 0.0]]
    assert trees.final_evaluated(rows, last=2) == final_mean(rows, last=2) == (0.5, 0.5)


def test_key_curves_sparse_and_dense():
    c = trees.key_curves({"a": {"e": [[nan, 0.5, nan, 1.0]]}}, "e", smooth_w=3)["a"]
    np.testing.assert_allclose(c["x"], [1, 3])
    np.testing.assert_allclose(c["mean"], [0.5, 1.0])                                   # not smoothed
    c = trees.key_curves({"a": {"e": SPARSE}}, "e")["a"]
    np.testing.assert_allclose(c["mean"], [0.375, 0.75])
    np.testing.assert_allclose(c["se"], [0.125 / np.sqrt(2), 0.25 / np.sqrt(2)])
    dense = {"a": {"r": [[0.0, 1.0, 2.0, 3.0]]}, "b": {"s": [[1.0]]}}
    d = trees.key_curves(dense, "r", smooth_w=2)
    assert list(d) == ["a"]                                                               # b did not log r
    np.testing.assert_allclose(d["a"]["mean"], [0.0, 0.5, 1.5, 2.5])                      # smoothed as arm_curves
    tok = {"a": {"e": SPARSE, "tokens_generated": [[10, 20, 30, 40], [10, 20, 30, 40]]}}
    np.testing.assert_allclose(trees.key_curves(tok, "e", x="tokens")["a"]["x"], [30, 100])   # cumulative tokens


def test_final_table_example():
    sweep = {"independent (GRPO)": {"tokens_generated": [[10, 10]], "batch_size": [[32, 32]],
                                    "success_rate": [[0.0, 0.5]], trees.EVAL_KEY: [[nan, 0.25]]},
             "tree": {"tokens_generated": [[12, 12]], "batch_size": [[40, 48]],
                      "success_rate": [[0.5, 1.0]], trees.EVAL_KEY: [[nan, 0.5]]}}
    t = trees.final_table(sweep, last_steps=1, last_evals=1)
    assert t["independent (GRPO)"] == {"tokens_ratio": 1.0, "rows": 32.0, "train": (0.5, 0.0),
                                       "fresh": (0.25, 0.0), "gap": (0.25, 0.0)}
    assert t["tree"] == {"tokens_ratio": 1.2, "rows": 44.0, "train": (1.0, 0.0), "fresh": (0.5, 0.0),
                         "gap": (0.5, 0.0)}
    assert trees.final_table(sweep, last_steps=2)["tree"]["train"] == (0.75, 0.0)


@pytest.mark.parametrize("key,x", [(k, x) for k in ("success_rate", "tokens_generated", trees.EVAL_KEY)
                                   for x in ("step", "tokens")])
def test_plot_tree_panel_figure(key, x):
    sweep = sparse_sweep()
    fig = trees.plot_tree_panel(sweep, key=key, x=x, smooth_w=3)
    left, right = fig.axes
    other = "success_rate" if key == trees.EVAL_KEY else trees.EVAL_KEY
    assert_curves_drawn(left, trees.key_curves(sweep, key, smooth_w=3, x=x))
    assert_curves_drawn(right, trees.key_curves(sweep, other, smooth_w=3, x=x))
    fresh = right if key != trees.EVAL_KEY else left
    steps = trees.evaluated_steps(sweep["Tree-GRPO"][trees.EVAL_KEY])
    np.testing.assert_array_equal(steps, [4, 9, 11])                                     # every 5, and the last
    if x == "step":
        for xs, _ in line_data(fresh).values():
            np.testing.assert_allclose(xs, steps)                                         # evaluated steps only
    assert "fresh episodes" in fresh.get_title() and fresh.get_ylabel() == "fresh-episode success rate"
    for ax in fig.axes:
        assert ax.get_xlabel() == ("RL step" if x == "step" else "tokens generated (cumulative)")
        assert len(ax.collections) == len(sweep)                                          # one band per arm
    assert left.get_legend() is None                                                      # the same arms: one legend
    assert [t.get_text() for t in right.get_legend().get_texts()] == list(sweep)        # one entry per arm and band
    if key != "tokens_generated":
        assert left.get_ylim() == right.get_ylim()                                        # one success scale
    assert_figure_standard(fig, trees.SETTING, label(key), "training rows", "fresh episodes",
                           f"{trees.EVAL_EPISODES} held-out tasks")
    assert_curves_drawn(trees.tree_curve_panel(sweep, key, x, 3).axes[0], trees.key_curves(sweep, key, smooth_w=3, x=x))


def test_dense_eval_column_is_smoothed_like_arm_curves():
    sweep = fake_sweep(trees.tree_arms(), trees.KEYS)                                    # eval logged every step
    np.testing.assert_allclose(trees.key_curves(sweep, trees.EVAL_KEY, smooth_w=4)["ARPO"]["mean"],
                               arm_curves(sweep, trees.EVAL_KEY, smooth_w=4)["ARPO"]["mean"])


def test_grid_config_is_the_ledger_setting():
    """The sweep's arms play the ledger's tree_rollout setting; only the evaluation interval differs."""
    claim = CLAIMS["tree_rollout"]
    arms = trees.tree_arms()
    for arm, name in (("independent", "independent (GRPO)"), ("tree", "Tree-GRPO")):
        want, got = claim.config(arm, quick=False), asdict(arms[name])
        for k, v in want.items():
            assert got[k] == (trees.EVAL_EVERY if k == "eval_every" else v), (arm, k)
        assert got["group_size"] == 8
    for cfg in arms.values():
        assert cfg.eval_every == trees.EVAL_EVERY and cfg.eval_episodes == trees.EVAL_EPISODES
        assert cfg.env_kwargs == {"size": 4, "max_turns": 12} and cfg.steps == trees.STEPS


def test_shipped_sweep_has_fresh_episode_success():
    sweep, meta = load_sweep(RUNS_DIR / "trees" / "curves.json")
    assert meta == {"seeds": [0, 1, 2], "steps": trees.STEPS, "command": "python -m toyrl.viz.trees"}
    want = np.arange(trees.EVAL_EVERY - 1, trees.STEPS, trees.EVAL_EVERY)
    for a, cols in sweep.items():
        assert set(cols) == set(trees.KEYS), a
        assert np.asarray(cols["success_rate"]).shape == (3, trees.STEPS)
        np.testing.assert_array_equal(trees.evaluated_steps(cols[trees.EVAL_KEY]), want)
        ev = np.asarray(cols[trees.EVAL_KEY])[:, want]
        k = ev * trees.EVAL_EPISODES                                                      # successes of 32
        assert np.all((ev >= 0) & (ev <= 1)) and np.allclose(k, np.round(k))
