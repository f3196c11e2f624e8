"""Lessons 03, 04, 05 and 12 for a projector: every figure function of their viz modules at its defaults in the
``slides`` style passes ``assert_projectable`` and ``assert_figure_standard``; the stored summaries these lessons show
are recomputed from the stored series and must match what the ledger's JSON holds (a drift test)."""
import numpy as np
import pytest
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
    from toyrl.viz import context
    from toyrl.viz.context import plot_ratio_bias
    ax = plot_ratio_bias(_fake_bias(), title="context=last_k, k=1")
    assert_projectable(ax.figure)
    assert_figure_standard(ax.figure, "context=last_k")
    _integer_ticks(ax)
    assert context.bias_panel.__doc__


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
