"""Lessons 03, 04, 05 and 12 for a projector: every figure function of their viz modules at its defaults in the
``slides`` style passes ``assert_projectable`` and ``assert_figure_standard``; the stored summaries these lessons show
are recomputed from the stored series and must match what the ledger's JSON holds (a drift test)."""
import numpy as np
import pytest
import torch
from conftest import assert_figure_standard, assert_projectable

from toyrl.viz import ratios
from toyrl.viz.style import figure_style


@pytest.fixture(autouse=True)
def _slides():
    with figure_style("slides"):
        yield


def _integer_ticks(ax, axis="x"):
    ticks = (ax.get_xticks() if axis == "x" else ax.get_yticks())
    lo, hi = ax.get_xlim() if axis == "x" else ax.get_ylim()
    shown = [t for t in ticks if lo <= t <= hi]
    assert shown and all(float(t).is_integer() for t in shown), shown


# ---- lesson 03 -------------------------------------------------------------------------------------
def test_ratio_panel_projectable_with_integer_turn_ticks():
    fig = ratios.ratio_panel(clip="ppo", staleness=2)
    assert_projectable(fig)
    assert_figure_standard(fig, "MockSearch", "staleness 2", "ppo")
    for ax in fig.axes[1:3]:
        _integer_ticks(ax)
    for ax in fig.axes[:2]:                                   # legends below the axes, outside the data
        leg = ax.get_legend()
        if leg is not None:
            fig.canvas.draw()
            assert leg.get_window_extent().y1 < ax.get_window_extent().y0


def test_ratio_panel_auto_level_is_the_schemes_own():
    assert ratios.resolve_level("auto", "gspo") == "sequence"
    assert ratios.resolve_level("auto", "ppo") == "token"
    assert ratios.resolve_level("turn", "gspo") == "turn"
    fig = ratios.ratio_panel(clip="gspo")
    assert "sequence ratio, gspo clip" in fig._suptitle.get_text()
    with pytest.raises(ValueError, match="level must be"):
        ratios.resolve_level("row", "ppo")
    with pytest.raises(ValueError, match="clip must be"):
        ratios.resolve_level("auto", "nope")


def test_plot_schemes_projectable_fixed_colours():
    from toyrl.viz.style import arm_color
    from matplotlib.colors import to_hex
    st = ratios.compare_schemes(("ppo", "gspo", "cispo"), staleness=1)
    fig = ratios.plot_schemes(st, ratios.setting_name("mock_search", 1))
    assert_projectable(fig)
    assert_figure_standard(fig, "staleness 1")
    bars = fig.axes[0].containers[0]
    assert [to_hex(b.get_facecolor()) for b in bars] == [arm_color(n) for n in ("ppo", "gspo", "cispo")]


def test_turn_ratio_effects_match_the_ledger_json():
    """The lesson recomputes each seed's effect from the stored gradient norms: it equals the ledger's test."""
    from toyrl.viz.echo import LEDGER_DIR, ledger_tests
    for d in (LEDGER_DIR, LEDGER_DIR / "heldout"):
        eff = ratios.turn_ratio_effects(d)
        _, tests = ledger_tests("turn_ratio", d)
        for arm, key in (("think12", "think_max 12: log10 token/turn > 0 (turn smaller)"),
                         ("think32", "think_max 32: log10 token/turn > 0 (turn smaller)")):
            np.testing.assert_allclose(eff[arm], tests[key]["per_seed"], atol=1e-3)


def test_ledger_sweep_shapes():
    sw = ratios.ledger_sweep("env_mask", ["success_rate"])
    assert set(sw) == {"masked", "unmasked"}
    assert len(sw["masked"]["success_rate"]) == 10 and len(sw["masked"]["success_rate"][0]) == 60


# ---- lesson 04 -------------------------------------------------------------------------------------
def _fake_void_gradients(seed=0, B=12, H=4):
    rng = np.random.default_rng(seed)
    void = rng.random(B) < 0.5
    return {"void": void, "score_norm": rng.random(B) * 8, "grad_turn": rng.random(H), "void_rate_turn": rng.random(H),
            "setting": "MockSearch 1-hop, 4 turns, seed 0"}


def test_plot_void_gradients_projectable():
    from toyrl.viz.void import plot_void_gradients
    axes = plot_void_gradients(_fake_void_gradients())
    fig = axes[0].figure
    assert_projectable(fig)
    assert_figure_standard(fig, "MockSearch", "seed 0")
    _integer_ticks(axes[1])


def test_void_panel_one_legend_fixed_colours_whatever_is_ticked():
    from conftest import fake_sweep
    from matplotlib.colors import to_hex
    from toyrl.viz.style import arm_color
    from toyrl.viz.void import KEYS, void_panel
    sweep = fake_sweep(["GRPO", "GRPO + void filter", "GRPO + penalty 0.1"], KEYS, S=3, N=30)
    for flags in ((True, True, True), (False, True, True), (False, False, True)):
        fig = void_panel(sweep, grpo=flags[0], filtered=flags[1], penalty=flags[2])
        assert_projectable(fig)
        assert_figure_standard(fig, "MockSearch", "30 RL steps")
        assert fig.axes[0].get_legend() is None and fig.axes[1].get_legend() is not None
        for ax in fig.axes[:2]:
            _integer_ticks(ax)
            for ln in ax.get_lines():
                assert to_hex(ln.get_color()) == arm_color(ln.get_label())


# ---- lesson 05 -------------------------------------------------------------------------------------
def _fake_bias(H=16, seed=0):
    rng = np.random.default_rng(seed)
    flat = rng.random(H) * 0.2
    flat[:2] = 0
    return {"matched": np.zeros(H), "flat": flat, "turns": np.linspace(32, 4, H).round()}


def test_bias_figure_shares_its_axes_and_has_integer_turn_ticks():
    from toyrl.viz.context import bias_figure
    fig = bias_figure({"last_k": _fake_bias(seed=0), "summary": _fake_bias(seed=1)})
    assert_projectable(fig)
    assert_figure_standard(fig, "GridWorld 4x4", "seed 0")
    a, b, ta, tb = fig.axes                                          # the two bias panels, then their twins
    assert a.get_ylim() == b.get_ylim() and ta.get_ylim() == tb.get_ylim()
    _integer_ticks(a)
    assert any("0 on every turn" in t.get_text() for t in fig.legends[0].get_texts())


def test_bias_panel_projectable():
    from toyrl.viz.context import bias_panel, plot_ratio_bias
    ax = plot_ratio_bias(_fake_bias(), title="context=last_k, k=1")
    assert_projectable(ax.figure)
    assert_figure_standard(ax.figure, "context=last_k")
    _integer_ticks(ax)
    fig = bias_panel("last_k", 2, seed=1)                            # the widget's figure, one fresh batch
    assert_projectable(fig)
    assert_figure_standard(fig, "context=last_k, k=2", "seed 1")
    _integer_ticks(fig.axes[0])


def test_context_seeds_small_multiples_share_y_fixed_colours():
    from conftest import fake_sweep
    from matplotlib.colors import to_hex
    from toyrl.viz.context import ARM_COLORS, KEYS, context_seeds_panel
    sweep = fake_sweep(list(ARM_COLORS), KEYS, S=3, N=40)
    fig = context_seeds_panel(sweep, "success_rate", 5)
    assert_projectable(fig)
    assert_figure_standard(fig, "GridWorld 4x4", "one panel per seed")
    assert len({ax.get_ylim() for ax in fig.axes}) == 1
    assert len(set(ARM_COLORS.values())) == len(ARM_COLORS)
    for ax in fig.axes:
        _integer_ticks(ax)
        assert [to_hex(ln.get_color()) for ln in ax.get_lines()] == list(ARM_COLORS.values())


# ---- lesson 12 -------------------------------------------------------------------------------------
def _fake_logs(n_arms=("exact engine", "lag 2 engine", "lag 2 engine + seq_mis"), S=3, N=20, seed=0):
    rng = np.random.default_rng(seed)
    return {a: [{"success_rate": rng.random(N).tolist(), "engine_kl": rng.random(N).tolist()} for _ in range(S)]
            for a in n_arms}


def test_plot_ratio_vs_prob_magnitude_on_its_own_log_axis_and_none_draws_nothing():
    from toyrl.viz.engine import plot_ratio_vs_prob
    g = torch.Generator().manual_seed(0)
    old = -torch.rand(4, 30, generator=g, dtype=torch.float64) * 6
    rollout = old + torch.randn(old.shape, generator=g, dtype=torch.float64) * 0.3
    mask = torch.ones(4, 30, dtype=torch.bool)
    fig = plot_ratio_vs_prob(old, rollout, mask, title="BanditChain, noise engine", weights=torch.ones_like(old),
                             keep=mask, correction="none")
    assert_projectable(fig)
    assert_figure_standard(fig, "BanditChain", "noise engine", "KL")
    signed, mag = fig.axes[:2]
    assert mag.get_yscale() == "log" and (mag.get_lines()[0].get_ydata() > 0).all()
    assert len(signed.collections) == 1                             # "none": no dots at log weight 0, no crosses


def test_plot_engine_runs_projectable_fixed_colours_legend_outside():
    from matplotlib.colors import to_hex
    from toyrl.viz.engine import engine_color, plot_engine_runs
    logs = _fake_logs()
    fig = plot_engine_runs(logs, "success_rate", title="BanditChain 3 stages x 4 arms", smooth_w=2)
    assert_projectable(fig)
    assert_figure_standard(fig, "BanditChain")
    ax = fig.axes[0]
    assert [to_hex(ln.get_color()) for ln in ax.get_lines()] == [engine_color(a) for a in logs]
    fig.canvas.draw()
    assert ax.get_legend().get_window_extent().x0 > ax.get_window_extent().x1     # right of the axes
    _integer_ticks(ax)


def test_plot_engine_arms_small_multiples_share_y_with_the_reference_dashed():
    from toyrl.viz.engine import ENGINE_COLORS, plot_engine_arms
    logs = _fake_logs(tuple(ENGINE_COLORS)[:6])
    fig = plot_engine_arms(logs, "success_rate", title="BanditChain 3 stages x 4 arms, seeds 100-102",
                           reference="exact engine", smooth_w=3)
    assert_projectable(fig)
    assert_figure_standard(fig, "BanditChain", "seeds 100-102")
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in shown] == [a for a in logs if a != "exact engine"]
    assert len({ax.get_ylim() for ax in shown}) == 1
    for ax in shown:
        assert any(ln.get_linestyle() == "--" and ln.get_label() == "exact engine: mean" for ln in ax.get_lines())
        _integer_ticks(ax)
    with pytest.raises(ValueError, match="reference"):
        plot_engine_arms(logs, title="x", reference="nope")


def test_engine_panel_projectable_and_none_draws_only_the_tokens(capsys):
    from toyrl.viz.engine import preset_panel
    fig = preset_panel("noise sigma 1", "none", 0, train_steps=2, prompts_per_step=2)
    assert_projectable(fig)
    assert_figure_standard(fig, "noise 1 engine", "seed 0")
    assert len(fig.axes[0].collections) == 1
    fig = preset_panel("noise sigma 1", "mis", 0, train_steps=2, prompts_per_step=2)
    assert_projectable(fig)
    assert_figure_standard(fig, "noise 1 engine")
    assert "engine_kl=" in capsys.readouterr().out


def test_stored_engine_runs_match_their_setting():
    """The stored lesson-12 runs hold every arm of ``lesson_arms`` on the pilot seeds at the fixed step count."""
    from toyrl.viz.engine import LESSON_SEEDS, LESSON_STEPS, RUN_KEYS, lesson_arms
    from toyrl.viz.prototype import RUNS_DIR, load_sweep
    sweep, meta = load_sweep(RUNS_DIR / "engine" / "lesson.json")
    assert meta["seeds"] == list(LESSON_SEEDS) and meta["steps"] == LESSON_STEPS
    assert all(100 <= s <= 109 for s in meta["seeds"])               # pilot seeds only
    assert list(sweep) == list(lesson_arms())
    for arm, cols in sweep.items():
        assert set(cols) == set(RUN_KEYS)
        assert np.asarray(cols["success_rate"]).shape == (len(LESSON_SEEDS), LESSON_STEPS)
