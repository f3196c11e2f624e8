"""The pure functions behind notebooks 02-03 and the shared plot helpers: every widget callback over its slider
range, small sizes (notebooks 00 and 01: test_viz_trajectory.py, test_viz_credit.py).

Outputs must be finite and correctly shaped, and each figure must draw those outputs (the arrays behind
its lines, bars and images, the numbers its titles name); figures use the Agg backend (conftest).
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import assert_figure_standard, bar_heights, line_data

from toyrl.viz import echo, plots, ratios


# ---- plots -------------------------------------------------------------------------------------
def test_smooth_and_log_columns():
    np.testing.assert_allclose(plots.smooth([0, 2, 4], 2), [0.0, 1.0, 3.0])
    np.testing.assert_allclose(plots.smooth([1.0, np.nan, 3.0], 2), [1.0, 1.0, 3.0])
    cols = plots.log_columns([{"a": 1.0}, {"a": None}, {}], ["a"])
    assert np.isnan(cols["a"][1:]).all() and cols["a"][0] == 1.0
    fig = plots.plot_log([{"step": i, "a": float(i)} for i in range(5)], ["a"], window=2, marks={"x": 2, "y": None})
    ax, = fig.axes
    raw, smoothed = ax.get_lines()[:2]
    np.testing.assert_allclose(raw.get_ydata(), np.arange(5.0))
    np.testing.assert_allclose(smoothed.get_ydata(), plots.smooth(np.arange(5.0), 2))
    assert list(line_data(ax)) == ["x (step 2)"] and ax.get_title() == "a"   # y: None is not marked
    assert plots.label("success_rate") == "success rate" and plots.label("tokens_generated") == "tokens generated per step"


def test_legend_pairs_a_line_with_its_band():
    fig, axes = plots.new_figure(layout="constrained")
    ax = axes[0, 0]
    ax.plot([0, 1], [0, 1], label="a")
    ax.fill_between([0, 1], [0, 0], [1, 1], label="a")
    ax.plot([0, 1], [1, 0], label="b")
    tw = ax.twinx()
    tw.bar([0, 1], [1, 2], label="c")
    tw.set_ylabel("c")
    leg = plots.legend(ax, tw)
    assert [t.get_text() for t in leg.get_texts()] == ["a", "b", "c"]   # the band shares the line's entry
    ax.set(title="t", xlabel="x", ylabel="y")
    assert_figure_standard(fig, "t")


def test_compare_runs_labels_every_panel():
    logs = {"bc": [{"success_rate": 0.1 * i, "grad_norm": 1.0} for i in range(6)],
            "scratch": [{"success_rate": 0.0, "grad_norm": None} for _ in range(6)]}
    fig = plots.compare_runs(logs, ["success_rate", "grad_norm"], title="GridWorld 4x4, seed 0",
                             labels={"bc": "BC checkpoint"})
    left, right = fig.axes
    assert [a.get_title() for a in fig.axes] == ["success rate", "gradient norm"]
    assert list(line_data(left)) == ["BC checkpoint", "scratch"]
    np.testing.assert_allclose(line_data(left)["BC checkpoint"][1], 0.1 * np.arange(6))
    assert np.isnan(line_data(right)["scratch"][1]).all()
    assert_figure_standard(fig, "GridWorld 4x4", "seed 0")


# ---- echo (notebook 02) --------------------------------------------------------------------------
def test_drop_step_rule():
    assert echo.drop_step([0, .4, .4, .4, .1, .1, .1], window=1, frac=.5, min_peak=.3) == 4
    assert echo.drop_step([0, .1, .2, .1, 0], window=1, frac=.5, min_peak=.3) is None     # never learned
    assert echo.drop_step([0.2, 0.2, 0.2], window=3) is None
    rows = [{"step": 10 + i, "reward_mean": m, "reward_std": s}
            for i, (m, s) in enumerate(zip([.2, .6, .8, .8, .8, .2, 0, 0], [.3, .4, .1, .05, .05, 0, 0, 0]))]
    assert echo.collapse_steps(rows, window=1) == (12, 15)


def test_freeze_step():
    cols = {"step": [0, 1, 2], "zero_var_frac": [.2, .9, 1.], "reward_mean": [.1, .2, .6]}
    assert echo.freeze_step(cols, window=1) == 2                 # the docstring's example
    assert echo.freeze_step({**cols, "step": [5, 6, 7]}, window=1) == 7     # a step of the log, not an index
    assert echo.freeze_step({**cols, "reward_mean": [0, 0, 0]}, window=1) is None   # all fail: silent, not frozen
    assert echo.freeze_step({**cols, "zero_var_frac": [.2, .9, .89]}, window=1) is None
    # smoothed: the share averages to (.9 + 1) / 2 = .95 over the last two steps, the mean to .4
    assert echo.freeze_step(cols, window=2) == 2


def test_shipped_echo_runs_support_the_notebook():
    runs = echo.load_runs()
    assert {v for v, _ in runs} == set(echo.VARIANTS)
    summary = echo.summarize_runs({k: v for k, v in runs.items() if k[0] == "grpo"})
    frozen = [echo.freeze_step(runs[k]) for k in sorted(runs) if k[0] == "grpo"]
    assert sum(f is not None for f in frozen) >= 3                    # the notebook's freeze: most GRPO seeds
    assert all(s["final_mean"] > 0.5 * s["peak_mean"] for s in summary)   # ... and no run ends collapsed
    size = sum(p.stat().st_size for p in echo.DATA_DIR.glob("*.jsonl"))
    assert size < 1_000_000
    with open(next(echo.DATA_DIR.glob("grpo_s0.jsonl"))) as f:
        assert "config" in json.loads(f.readline())


def test_echo_setting_is_the_ledgers_and_the_stored_runs():
    """One copy of the collapse setting (claims.stability.COLLAPSE_BASE), with the values the stored runs record."""
    from toyrl.lab.claims import CLAIMS
    from toyrl.lab.claims.stability import COLLAPSE_BASE
    assert echo.ECHO_BASE == {**COLLAPSE_BASE, "steps": 120} and CLAIMS["echo_collapse"].base is COLLAPSE_BASE
    with open(echo.DATA_DIR / "grpo_s0.jsonl") as f:
        stored = json.loads(f.readline())["config"]
    assert {k: stored[k] for k in echo.ECHO_BASE} == echo.ECHO_BASE


def test_ledger_tests_reads_a_claim_file(tmp_path):
    test = {"name": "t", "outcome": "passed", "effect": {"mean": -0.2, "ci95": [-0.3, -0.1], "per_seed": [-0.2]}}
    (tmp_path / "x.json").write_text(json.dumps({"verdict": "reproduced", "result": {"tests": [test]}}))
    (tmp_path / "y.json").write_text(json.dumps({"verdict": "pending"}))
    assert echo.ledger_tests("x", tmp_path) == ("reproduced", {"t": {"mean": -0.2, "ci95": [-0.3, -0.1],
                                                                     "per_seed": [-0.2], "outcome": "passed"}})
    assert echo.ledger_tests("y", tmp_path) == ("pending", {})


@pytest.mark.parametrize("filter_on", [False, True])
@pytest.mark.parametrize("top_p", [0.25, 0.5])
@pytest.mark.parametrize("critic", [False, True])
@pytest.mark.parametrize("clip_higher", [False, True])
def test_echo_panel_range(filter_on, top_p, critic, clip_higher):
    v = echo.variant_name(filter_on, top_p, critic, clip_higher)
    assert v in echo.VARIANTS
    runs = echo.load_runs(variant=v)
    for seed in (0, 1, 2):
        fig = echo.echo_panel(filter_on, top_p, critic, clip_higher, seed)
        left, ent, mi = fig.axes                                      # three small multiples, the MI on its own axis
        log = runs[(v, seed)]
        s, m = echo.collapse_steps(log)
        f = echo.freeze_step(log)
        assert fig.texts[0].get_text() == (f"{v}, {echo.SETTING_NAME}, seed {seed}: std drop at {s}, mean drop at {m}, "
                                           f"freeze at {f}")
        assert_figure_standard(fig, v, f"seed {seed}")
        drawn = line_data(left)
        cols = plots.log_columns(log, ["reward_mean", "reward_std"])
        for k, name in (("reward_mean", "mean reward"), ("reward_std", "within-group std")):
            np.testing.assert_allclose(drawn[name][1], plots.smooth(cols[k], 5), equal_nan=True)
        marks = {lab: x[0] for lab, (x, _) in drawn.items() if "(step" in lab}
        assert marks == {f"{lab} (step {x})": x for lab, x in (("std drop", s), ("mean drop", m), ("freeze", f))
                         if x is not None}
        assert ("template_entropy" not in log.rows[0] or "H(z)" in line_data(ent)) and \
            ("template_mi" not in log.rows[0] or "I(z; x)" in line_data(mi))


def test_echo_precompute_and_live(tmp_path):
    paths = echo.precompute(tmp_path, variants=["grpo", "critic"], seeds=[1], grpo_seeds=[0], steps=2)
    runs = echo.load_runs(tmp_path)
    assert [p.name for p in paths] == ["grpo_s0.jsonl", "critic_s1.jsonl"]      # GRPO on its own seeds
    assert set(runs) == {("grpo", 0), ("critic", 1)} and len(runs[("grpo", 0)].rows) == 2
    assert set(runs[("grpo", 0)].rows[0]) == set(echo.KEEP_KEYS)
    fig = echo.echo_panel(seed=0, live=True, steps=2)
    assert len(fig.axes) == 3 and len(line_data(fig.axes[0])["mean reward"][1]) == 2   # the 2 steps just trained
    with pytest.raises(FileNotFoundError):
        echo.echo_panel(seed=9, data_dir=tmp_path)


def test_replay_divergence():
    stored = {"a": [.1, .2, .3, np.nan], "b": [1.0, 1.0, 1.0, 1.0]}
    keys = ("a", "b")
    assert echo.replay_divergence({"a": [.1, .2, .5, np.nan], "b": [1.0] * 4}, stored, keys=keys) == 2   # docstring
    assert echo.replay_divergence(stored, stored, keys=keys) is None                   # NaN equals NaN
    assert echo.replay_divergence({"a": [.1, .2, .3, .4], "b": [1.0] * 4}, stored, keys=keys) == 3   # NaN vs number
    assert echo.replay_divergence({"a": [.1, .2], "b": [1.0, 1.0005]}, stored, keys=keys) is None   # within atol
    assert echo.replay_divergence({"a": [.1, .2], "b": [1.0, 1.0005]}, stored, keys=keys, atol=1e-4) == 1
    assert echo.replay_divergence({"a": [.1, .2], "b": [1.002, 1.0]}, stored, keys=keys) == 0        # any column
    with pytest.raises(ValueError, match="atol"):
        echo.replay_divergence(stored, stored, keys=keys, atol=-1.0)
    with pytest.raises(ValueError, match="keys"):
        echo.replay_divergence(stored, stored, keys=())


# ---- ratios (notebook 03) ------------------------------------------------------------------------
def test_scaled_clip_kwargs():
    assert ratios.scaled_clip_kwargs("ppo", 2.0) == pytest.approx({"eps_low": 0.4, "eps_high": 0.4})
    assert ratios.scaled_clip_kwargs("sapo", 2.0) == pytest.approx({"tau_pos": 0.5, "tau_neg": 0.525})
    assert ratios.scaled_clip_kwargs("gpg", 3.0) == {}


@pytest.mark.parametrize("staleness", [0, 2, 4])
@pytest.mark.parametrize("mask_env", [True, False])
def test_ratio_stats_range(staleness, mask_env):
    levels, clips, scales = ("token", "turn", "sequence"), ("ppo", "clip_higher", "turn_ppo", "gspo", "cispo", "sapo"), \
        (0.25, 1.0, 4.0)
    combos = [(lv, "ppo", 1.0) for lv in levels] + [(levels[i % 3], c, scales[i % 3]) for i, c in enumerate(clips)]
    for level, clip, eps_scale in combos:           # every level, every scheme, both slider ends of eps_scale
        s = ratios.ratio_stats("mock_search", level, clip, eps_scale, staleness, mask_env, per_turn_grad=False)
        for k in ("grad_norm", "env_grad_share", "grad_token_frac", "clip_frac", "ratio_max", "ratio_min"):
            assert np.isfinite(s[k]), (level, clip, k)
        assert s["ratio"].shape == s["mask"].shape
        assert 0 <= s["grad_token_frac"] <= 1 and 0 <= s["env_grad_share"] <= 1
        if staleness == 0:
            assert abs(s["ratio_max"] - 1) < 1e-4 and abs(s["ratio_min"] - 1) < 1e-4
        if mask_env:
            assert s["env_grad_share"] == 0.0 and s["n_env_tokens"] == 0


def test_ratio_level_ordering_and_panel():
    st = {lv: ratios.ratio_stats(level=lv, staleness=2, per_turn_grad=False) for lv in ("token", "turn", "sequence")}
    assert st["token"]["ratio_max"] >= st["turn"]["ratio_max"] - 1e-5 >= st["sequence"]["ratio_max"] - 2e-5
    g = ratios.ratio_stats("gridworld", "token", "ppo", 1.0, 3, True)
    assert g["grad_norm_turn"].shape == g["ratio_max_turn"].shape and np.isfinite(g["grad_norm_turn"]).all()
    fig = ratios.ratio_panel("turn", "sapo", 2.0, 1, False)
    s = ratios.ratio_stats("mock_search", "turn", "sapo", 2.0, 1, False)
    hist, extremes, grads = fig.axes[:3]
    pol, env = bar_heights(hist)                                               # log-ratio histograms
    assert pol.sum() == (s["mask"] & s["policy"]).sum() and env.sum() == (s["mask"] & ~s["policy"]).sum()
    assert hist.get_title() == f"ratio in [{s['ratio_min']:.2f}, {s['ratio_max']:.2f}]"
    np.testing.assert_allclose(line_data(extremes)["max ratio"][1], s["ratio_max_turn"], rtol=1e-6)
    np.testing.assert_allclose(bar_heights(grads)[0], s["grad_norm_turn"], rtol=1e-6)
    assert grads.get_title() == f"grad norm (total {s['grad_norm']:.3f})"
    assert_figure_standard(fig, "MockSearch", "staleness 1", "turn ratio", "sapo", "env tokens in the loss")
    assert fig.axes[3].get_ylabel() == "clip fraction"                          # the twin axis is labelled
    names = ("ppo", "clip_higher", "turn_ppo", "gspo", "cispo", "sapo")         # the notebook's six
    stats = ratios.compare_schemes(names, staleness=1)
    fig = ratios.plot_schemes(stats, ratios.setting_name("mock_search", 1))
    frac, norm = fig.axes
    widths = [np.array([r.get_width() for r in c]) for c in frac.containers + norm.containers]   # barh: widths
    np.testing.assert_allclose(widths[0], [stats[n]["grad_token_frac"] for n in names])
    np.testing.assert_allclose(widths[1], [stats[n]["grad_norm"] for n in names])
    assert [t.get_text() for t in frac.get_yticklabels()] == list(names)
    assert_figure_standard(fig, "MockSearch", "staleness 1")
    m = ratios.compare_masking(2)
    assert m["unmasked"]["env_grad_share"] > 0.9
