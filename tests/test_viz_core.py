"""The pure functions behind notebooks 00-03: every widget callback over its slider range, small sizes.

Outputs must be finite and correctly shaped, and each figure must draw those outputs (the arrays behind
its lines, bars and images, the numbers its titles name); figures use the Agg backend (conftest).
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import assert_figure_standard, assert_no_overlap, bar_heights, image_data, line_data

from toyrl.credit import ESTIMATORS
from toyrl.viz import credit, echo, plots, ratios, trajectory


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


# ---- trajectory (notebook 00) --------------------------------------------------------------------
@pytest.mark.parametrize("env", ["gridworld", "mock_search", "bandit_chain"])
@pytest.mark.parametrize("policy", ["tiny", "expert"])
def test_rollout_views_agree(env, policy):
    ro, core, codec = trajectory.sample_rollout(env, n=4, seed=1, policy=policy)
    b = ro.batch
    for row in range(b.B):
        view = trajectory.flat_view(ro, row)
        table = trajectory.turns_table(ro, row, core)
        first = int(np.argmax(view["policy_mask"]))
        assert first + sum(r["n_policy"] + r["n_env"] for r in table) == len(view["tokens"])
        assert sum(r["n_policy"] for r in table) == int(b.policy_mask[row].sum())
        assert len(table) == int(b.turn_mask[row].sum())
        kinds = view["kind"]
        assert set(np.unique(kinds)) <= set(range(1, len(plots.KINDS)))
        assert (kinds[view["policy_mask"]] >= 2).all() and (kinds[view["policy_mask"]] <= 4).all()
        texts = trajectory.episode_texts(env, ro.tasks[row], trajectory.turn_actions(ro, row))
        assert 1 <= len(texts) <= len(table) + 1 and all(isinstance(t, str) and t for t in texts)


@pytest.mark.parametrize("row", [0, 3])
@pytest.mark.parametrize("seed", [0, 5])
def test_rollout_figure_range(row, seed):
    for env in ("gridworld", "mock_search"):
        policy = "expert" if seed else "tiny"
        top, bot = trajectory.rollout_figure(env, row=row, seed=seed, policy=policy).axes
        ro, _, _ = trajectory.sample_rollout(env, n=4, seed=seed, policy=policy)
        view = trajectory.flat_view(ro, min(row, ro.batch.B - 1))
        shown = min(len(view["tokens"]), 80)
        assert len(top.patches) == shown                                       # one coloured cell per token
        assert len(bot.patches) == shown                                       # the same tokens, by turn
        assert top.get_title() == (f"flat view: row {min(row, ro.batch.B - 1)}, {len(view['tokens'])} tokens "
                                   f"({int(view['policy_mask'].sum())} policy, {int((view['kind'] == 5).sum())} env)")
    ro, core, _ = trajectory.sample_rollout("gridworld", n=4, seed=seed)
    axes = trajectory.plot_turn_strips(ro, core).axes
    assert [ax.get_title() for ax in axes] == [f"row {r}: R={float(ro.batch.outcome()[r]):.0f}" for r in range(4)]
    for r, ax in enumerate(axes):
        view = trajectory.flat_view(ro, r)
        first = int(np.argmax(view["policy_mask"]))
        in_turns = (view["turn_id"] >= 0) & (view["turn_id"] < 8) & (np.arange(len(view["turn_id"])) >= first)
        assert len(ax.patches) == int(in_turns.sum())                        # the tokens of the first 8 turns


def test_plot_training_on_rows():
    rows = [{"step": i, "reward_mean": i / 10, "success_rate": 0.5, "reward_std": 0.1, "entropy": 1.0,
             "turns_per_episode": 4.0, "void_turn_rate": 0.0} for i in range(8)]
    axes = trajectory.plot_training(rows).axes
    keys = ("reward_mean", "success_rate", "reward_std", "entropy", "turns_per_episode", "void_turn_rate")
    assert [ax.get_title() for ax in axes] == [plots.label(k) for k in keys]
    assert [ax.get_ylabel() for ax in axes] == [plots.label(k) for k in keys]
    assert_no_overlap(axes[0].figure)
    for ax, k in zip(axes, keys):
        raw = ax.get_lines()[0]
        np.testing.assert_allclose(raw.get_xdata(), np.arange(8))
        np.testing.assert_allclose(raw.get_ydata(), [r[k] for r in rows])
    np.testing.assert_allclose(axes[0].get_lines()[1].get_ydata(), plots.smooth(np.arange(8) / 10, 5))


# ---- credit (notebook 01) ------------------------------------------------------------------------
@pytest.mark.parametrize("group_size", [2, 4, 8, 16])
@pytest.mark.parametrize("slip", [0.0, 0.5])
def test_all_estimators_finite(group_size, slip):
    cb = credit.make_credit_batch(group_size=group_size, slip=slip, seed=0)
    for values in ("mc", "zeros"):
        adv = credit.all_advantages(cb, gamma=0.95, omega=1.0, values=values)
        assert set(adv) == set(ESTIMATORS)
        for name, a in adv.items():
            assert a.shape == (cb.batch.B, cb.batch.H), name
            assert np.isfinite(a).all(), name
            assert (a[~cb.mask] == 0).all(), name


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_grpo_flat_gigpo_separates(seed):
    cb = credit.make_credit_batch(seed=seed)
    adv = credit.all_advantages(cb, ["grpo", "gigpo"], gamma=0.95)
    assert credit.credit_spread(adv["grpo"], cb.mask).max() < 1e-5
    g = credit.wasted_vs_progress(cb, adv["grpo"])
    q = credit.wasted_vs_progress(cb, adv["gigpo"])
    assert len(g["paired_gaps"]) >= 3 and np.abs(g["paired_gaps"]).max() < 1e-5   # same credit, every trajectory
    assert q["progress_mean"] - q["wasted_mean"] > 0.5          # measured >= 0.52 on seeds 0-5
    assert q["paired_gaps"].mean() > 0.2                        # measured >= 0.41 on seeds 0-4
    q1 = credit.wasted_vs_progress(cb, credit.all_advantages(cb, ["gigpo"], gamma=1.0)["gigpo"])
    assert abs(q1["progress_mean"] - q1["wasted_mean"]) < 0.1


def test_credit_spread_example():
    adv = np.array([[1.0, 1.0, 0.0], [2.0, -1.0, 5.0]])
    mask = np.array([[1, 1, 0], [1, 1, 1]], bool)
    np.testing.assert_allclose(credit.credit_spread(adv, mask), [0.0, 6.0])


@pytest.mark.parametrize("gamma", [0.5, 0.75, 1.0])
@pytest.mark.parametrize("omega", [0.0, 1.0, 2.0])
def test_credit_panel_range(gamma, omega):
    cb = credit.make_credit_batch(group_size=4, slip=0.2)
    for est in ("gigpo", "gae", "archer"):
        fig = credit.credit_panel(est, gamma=gamma, omega=omega, group_size=4, slip=0.2)
        adv = credit.all_advantages(cb, ["grpo", est], gamma=gamma, omega=omega)
        for ax, name in zip(fig.axes[:2], ("grpo", est)):
            shown = image_data(ax)                                             # (H, B): turns x trajectories
            np.testing.assert_allclose(shown.filled(0), (adv[name] * cb.mask).T, atol=1e-6)
            assert (shown.mask == ~cb.mask.T).all()                           # padding turns left blank
        assert fig.axes[1].get_title() == f"{est} (gamma={gamma}, omega={omega})"
        count = image_data(fig.axes[2])
        np.testing.assert_allclose(count, credit.anchor_map(cb, 0, gamma)[0])  # the anchor-state counts
    count, per_action = credit.anchor_map(cb, 0, gamma)
    assert count.shape == (4, 4) and per_action.shape == (4, 4, 5)
    assert count.sum() == cb.mask[cb.batch.group.numpy() == 0].sum()
    # A^S averages to 0 over each anchor state
    a_s = credit.step_advantage(cb, gamma)
    assert np.isfinite(a_s).all()


def test_plot_estimators_grid():
    cb = credit.make_credit_batch(group_size=4)
    adv = credit.all_advantages(cb)
    fig = credit.plot_estimators(adv, cb.mask, success=cb.success)
    panels = [a for a in fig.axes if a.images]
    assert [a.get_title() for a in panels] == list(adv) and len(panels) == len(ESTIMATORS)
    for ax in panels:
        np.testing.assert_allclose(image_data(ax).filled(0), (adv[ax.get_title()] * cb.mask).T, atol=1e-6)
        assert [t.get_text() for t in ax.get_xticklabels()] == ["+" if s else "." for s in cb.success]


# ---- echo (notebook 02) --------------------------------------------------------------------------
def test_drop_step_rule():
    assert echo.drop_step([0, .4, .4, .4, .1, .1, .1], window=1, frac=.5, min_peak=.3) == 4
    assert echo.drop_step([0, .1, .2, .1, 0], window=1, frac=.5, min_peak=.3) is None     # never learned
    assert echo.drop_step([0.2, 0.2, 0.2], window=3) is None
    rows = [{"step": 10 + i, "reward_mean": m, "reward_std": s}
            for i, (m, s) in enumerate(zip([.2, .6, .8, .8, .8, .2, 0, 0], [.3, .4, .1, .05, .05, 0, 0, 0]))]
    assert echo.collapse_steps(rows, window=1) == (12, 15)


def test_shipped_echo_runs_support_the_notebook():
    runs = echo.load_runs()
    assert {v for v, _ in runs} == set(echo.VARIANTS)
    summary = echo.summarize_runs({k: v for k, v in runs.items() if k[0] == "grpo"})
    collapsed = [s for s in summary if s["mean_drop"] is not None]
    assert len(collapsed) >= 3 and all(s["std_first"] for s in collapsed)
    size = sum(p.stat().st_size for p in echo.DATA_DIR.glob("*.jsonl"))
    assert size < 1_000_000
    with open(next(echo.DATA_DIR.glob("grpo_s0.jsonl"))) as f:
        assert "config" in json.loads(f.readline())


def test_echo_setting_is_the_ledgers_and_the_stored_runs():
    """One copy of the collapse setting (claims.stability.COLLAPSE_BASE), with the values the stored runs record."""
    from toyrl.claims import CLAIMS
    from toyrl.claims.stability import COLLAPSE_BASE
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
    for seed in (0, 1):
        left, right = echo.echo_panel(filter_on, top_p, critic, clip_higher, seed).axes
        log = runs[(v, seed)]
        s, m = echo.collapse_steps(log)
        assert left.figure.texts[0].get_text() == f"{v}, seed {seed}: std drop at {s}, mean drop at {m}"
        drawn = line_data(left)
        cols = plots.log_columns(log, ["reward_mean", "reward_std"])
        for k in ("reward_mean", "reward_std"):
            np.testing.assert_allclose(drawn[k][1], plots.smooth(cols[k], 5), equal_nan=True)
        marks = {lab: x[0] for lab, (x, _) in drawn.items() if "(step" in lab}
        assert marks == {f"{lab} (step {x})": x for lab, x in (("std drop", s), ("mean drop", m)) if x is not None}
        assert set(line_data(right)) >= {f"{k} (nats)" for k in ("template_entropy", "template_mi")
                                         if k in log.rows[0]}


def test_echo_precompute_and_live(tmp_path):
    paths = echo.precompute(tmp_path, variants=["grpo"], seeds=[0], steps=2)
    runs = echo.load_runs(tmp_path)
    assert len(paths) == 1 and len(runs[("grpo", 0)].rows) == 2
    assert set(runs[("grpo", 0)].rows[0]) == set(echo.KEEP_KEYS)
    fig = echo.echo_panel(seed=0, live=True, steps=2)
    assert len(fig.axes) == 2 and len(line_data(fig.axes[0])["reward_mean"][1]) == 2   # the 2 steps just trained
    with pytest.raises(FileNotFoundError):
        echo.echo_panel(seed=9, data_dir=tmp_path)


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
    assert hist.get_title() == f"staleness 1: ratio in [{s['ratio_min']:.2f}, {s['ratio_max']:.2f}]"
    np.testing.assert_allclose(line_data(extremes)["max ratio"][1], s["ratio_max_turn"], rtol=1e-6)
    np.testing.assert_allclose(bar_heights(grads)[0], s["grad_norm_turn"], rtol=1e-6)
    assert grads.get_title() == f"grad norm per turn (total {s['grad_norm']:.3f})"
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
