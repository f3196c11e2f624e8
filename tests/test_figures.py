"""Figures a room can read and sliders that answer (item 7): the ``slides`` style
(``toyrl.viz.style``), readable token strips with END as its own kind, shared colour scales for compared
heatmaps, every tested arm in a claim's figure (drawn from the stored series), the scorecard's colour map
per metric direction, and the widgets' cached numbers equal to the uncached ones.
"""
from __future__ import annotations

import io
import json
import shutil
import struct

import matplotlib
import matplotlib.pyplot  # noqa: F401  (matplotlib.pyplot.close)
import numpy as np
import pytest

from toyrl.credit import ESTIMATORS
from toyrl.viz import credit, credit_batch, plots, ratios, style, trajectory


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) in pixels of PNG bytes, read from the IHDR chunk."""
    return struct.unpack(">II", data[16:24])


def saved_png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


# ---- the style -------------------------------------------------------------------------------------
def test_slides_style_is_wide_and_large():
    """A figure drawn in "slides" saves to a PNG at least 1600 px wide, its text at the sizes the style sets
    (16 pt titles, 14.4 pt token labels); the same figure in "notebook" keeps 10 pt / 9 pt and its own width."""
    ro, core, _ = trajectory.sample_rollout("gridworld", n=4, seed=0)
    for name, px in (("notebook", 0), ("slides", 1600)):
        s = style.STYLES[name]
        for fig in (credit.credit_panel(style=name), trajectory.plot_flat_vs_turns(ro, 0, core, style=name)):
            w, _ = png_size(saved_png(fig))
            assert w >= max(px, 900), (name, w)
            assert fig.axes[0].title.get_fontsize() == pytest.approx(s.font_size)          # ROLES["title"] = 1.0
        cell_texts = fig.axes[0].texts                                                   # the flat strip's labels
        assert cell_texts and all(t.get_fontsize() == pytest.approx(0.9 * s.font_size) for t in cell_texts)
    with style.figure_style("slides") as s:
        assert matplotlib.rcParams["font.size"] == 16.0 and style.font_size("tick") == pytest.approx(12.8)
        assert style.figsize(8, 3) == (10.0, 3.75) and style.figure_dpi(10) == 160
    assert matplotlib.rcParams["font.size"] == 10.0 and style.get_style().name == "notebook"   # restored
    with pytest.raises(ValueError, match="style must be one of 'notebook', 'slides'"):
        credit.credit_panel(style="poster")
    with pytest.raises(ValueError, match="role must be one of"):
        style.font_size("huge")


def test_styled_adds_a_keyword_only_style_that_widgets_leave_out():
    import inspect
    p = inspect.signature(credit.credit_panel).parameters["style"]
    assert p.kind is p.KEYWORD_ONLY and p.default is None
    assert "style" not in inspect.signature(plots.bind(credit.credit_panel)).parameters


# ---- notebook 00's token strips ---------------------------------------------------------------------
@pytest.mark.parametrize("name", ["notebook", "slides"])
def test_token_labels_are_readable_and_fit_their_cells(name):
    """Token labels at >= 9 pt (the style's cell font), each inside its own cell, in both strip figures."""
    ro, core, _ = trajectory.sample_rollout("mock_search", n=4, seed=0, policy="expert")
    for fig in (trajectory.plot_flat_vs_turns(ro, 0, core, style=name),
                trajectory.plot_turn_strips(ro, core, max_turns=3, style=name)):
        fig.canvas.draw()
        r = fig.canvas.get_renderer()
        n = 0
        for ax in fig.axes:
            cell_px = ax.transData.transform((0.95, 0))[0] - ax.transData.transform((0, 0))[0]
            for t in ax.texts:
                x = t.get_position()[0]
                if not t.get_visible() or x > ax.get_xlim()[1]:                          # clipped past the edge
                    continue
                assert t.get_fontsize() >= 9.0
                assert t.get_window_extent(r).width <= cell_px, (t.get_text(), cell_px)
                n += 1
        assert n > 20


def test_end_is_its_own_kind_and_colour():
    ro, core, codec = trajectory.sample_rollout("gridworld", n=4, seed=0)
    view = trajectory.flat_view(ro, 0)
    is_end = view["tokens"] == codec.END
    assert is_end.any() and (view["kind"][is_end] == plots.KINDS.index("end")).all()
    assert plots.KIND_COLORS["end"] not in (plots.KIND_COLORS["think"], plots.KIND_COLORS["action"])
    fig = trajectory.plot_flat_vs_turns(ro, 0, core)
    end_cells = [p for p in fig.axes[0].patches
                 if matplotlib.colors.to_hex(p.get_facecolor()) == plots.KIND_COLORS["end"]]
    assert len(end_cells) == int(is_end.sum())
    assert [t.get_text() for t in fig.legends[0].get_texts()] == list(trajectory.LEGEND_KINDS)


# ---- notebook 01's heatmaps: one scale for compared panels --------------------------------------------
def test_credit_panel_shares_one_scale_and_a_colour_bar():
    fig = credit.credit_panel("gigpo", gamma=0.9, group_size=8)
    grpo, est = fig.axes[0].images[0], fig.axes[1].images[0]
    cb = credit_batch.make_credit_batch(group_size=8)
    adv = credit_batch.all_advantages(cb, ["grpo", "gigpo"], gamma=0.9)
    vmax = plots.shared_vmax(list(adv.values()), cb.mask)
    assert grpo.get_clim() == est.get_clim() == (-vmax, vmax)
    assert vmax == pytest.approx(max(np.abs(a[cb.mask]).max() for a in adv.values()))
    bars = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
    assert len(bars) == 2                                          # the shared bar, and the anchor map's counts
    assert any(b.get_ylabel() == "turn advantage (both panels)" for b in bars)


@pytest.mark.parametrize("shared", [True, False])
def test_plot_estimators_scale(shared):
    cb = credit_batch.make_credit_batch(group_size=4)
    adv = credit_batch.all_advantages(cb, ["grpo", "gigpo", "gae"])
    fig = credit.plot_estimators(adv, cb.mask, shared=shared)
    clims = [ax.images[0].get_clim() for ax in fig.axes if ax.images and ax.get_label() != "<colorbar>"]
    bars = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
    if shared:
        assert len(set(clims)) == 1 and clims[0][1] == pytest.approx(plots.shared_vmax(list(adv.values()), cb.mask))
        assert len(bars) == 1
    else:
        assert len(set(clims)) == 3 and len(bars) == 3


def test_shared_vmax_example():
    assert plots.shared_vmax([[[1.0, -3.0]], [[2.0, 0.5]]]) == 3.0
    assert plots.shared_vmax([np.zeros((2, 2))]) == 1.0
    mask = np.array([[True, False]])
    assert plots.shared_vmax([[[1.0, -3.0]]], mask) == 1.0


# ---- the claims' figures ------------------------------------------------------------------------------
def shipped_claims():
    from toyrl.lab.claims import CLAIMS, SHIPPED_DIR
    for name, claim in CLAIMS.items():
        path = SHIPPED_DIR / f"{name}.json"
        if path.exists() and "result" in json.loads(path.read_text()):
            yield claim


def test_every_tested_arm_is_in_its_claims_figure():
    """For every shipped claim: a panel per tested metric drawing exactly the arms its tests compare (the
    test's arm and its baseline), and every arm's curve in the left panel; drawn from the stored series."""
    from toyrl.lab.claims import SHIPPED_DIR
    from toyrl.lab.claims.report import claim_figure, load_series, tested_arms
    seen = 0
    for claim in shipped_claims():
        rec = json.loads((SHIPPED_DIR / f"{claim.name}.json").read_text())
        series = load_series(SHIPPED_DIR / f"{claim.name}.series.json.gz")
        fig = claim_figure(claim, series, rec)
        panels = tested_arms(claim)
        assert len(fig.axes) == 1 + len(panels), claim.name
        for ax, (metric, arms) in zip(fig.axes[1:], panels.items()):
            assert [t.get_text() for t in ax.get_xticklabels()] == arms, (claim.name, metric)
            for t in claim.tests:
                if t.metric == metric:
                    assert t.arm in arms and (t.baseline is None or t.baseline in arms), (claim.name, t.name)
        curves = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
        for arm in claim.arms:
            assert any(c == arm or c.startswith(f"{arm}: ") for c in curves), (claim.name, arm, curves)
        matplotlib.pyplot.close(fig)
        seen += 1
    assert seen >= 20


def test_tested_arms_names_the_missing_ones():
    """The two arms the old figures left out: turn_ratio's 32-token arm and clip_tolerance's SAPO."""
    from toyrl.lab.claims import CLAIMS
    from toyrl.lab.claims.report import tested_arms
    assert tested_arms(CLAIMS["turn_ratio"]) == {"log10_token_over_turn": ["think12", "think32"]}
    assert tested_arms(CLAIMS["clip_tolerance"]) == {"early_success": ["cispo", "sapo", "gspo"],
                                                     "peak_drop": ["cispo", "sapo", "gspo"]}


def test_claim_png_is_wide_with_readable_text_and_redraw_changes_only_it(tmp_path):
    """``redraw`` from a copy of a shipped record and series: a PNG >= 1600 px wide whose every label is
    >= 10 pt, and the record and series byte-identical."""
    from toyrl.lab.claims import CLAIMS, SHIPPED_DIR, redraw
    from toyrl.lab.claims.report import claim_figure, load_series
    name = "clip_tolerance"
    for suffix in (".json", ".series.json.gz"):
        shutil.copy(SHIPPED_DIR / f"{name}{suffix}", tmp_path / f"{name}{suffix}")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    png = redraw(name, tmp_path)
    assert png_size(png.read_bytes())[0] >= 1600
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p != png} == before
    rec = json.loads((tmp_path / f"{name}.json").read_text())
    with style.figure_style("slides"):
        fig = claim_figure(CLAIMS[name], load_series(tmp_path / f"{name}.series.json.gz"), rec)
    sizes = [t.get_fontsize() for t in fig.findobj(matplotlib.text.Text) if t.get_text().strip()]
    assert sizes and min(sizes) >= 10.0


def test_png_bytes_is_a_palette_png_of_the_same_picture():
    """``style.png_bytes``: a palette PNG of the figure's size, far fewer bytes than matplotlib's RGBA, every pixel
    within a few levels of its colour (a heatmap of 200 shades, text and lines: more than 256 colours)."""
    from PIL import Image
    with style.figure_style("slides"):
        fig, ax = style.subplots(size=style.figsize(10, 4))
    ax.imshow(np.linspace(-1, 1, 200).reshape(10, 20), cmap="RdBu_r")
    ax.plot([0, 19], [0, 9], "k-")
    ax.set_title("a heatmap with a line")
    fig.canvas.draw()
    raw, small = saved_png(fig), style.png_bytes(fig)
    assert png_size(small) == png_size(raw) and png_size(small)[0] >= 1600
    pal = Image.open(io.BytesIO(small))
    assert pal.mode == "P" and len(pal.getcolors(1 << 16)) <= 256 < len(Image.open(io.BytesIO(raw)).getcolors(1 << 24))
    assert len(small) < 0.6 * len(raw)
    diff = np.abs(np.asarray(pal.convert("RGB"), int) - np.asarray(Image.open(io.BytesIO(raw)).convert("RGB"), int))
    assert diff.mean() < 1.0 and diff.max() <= 24, (diff.mean(), diff.max())
    with pytest.raises(ValueError, match=r"colors must be an integer in \[2, 256\], got 300"):
        style.png_bytes(fig, colors=300)
    matplotlib.pyplot.close(fig)


def test_claim_png_is_a_palette_png():
    """A claim's PNG as written (``write_figure``): a palette PNG >= 1600 px wide."""
    from PIL import Image
    from toyrl.lab.claims import SHIPPED_DIR
    for path in (SHIPPED_DIR / "env_mask.png", SHIPPED_DIR / "heldout" / "env_mask.png"):
        im = Image.open(path)
        assert im.mode == "P" and im.size[0] >= 1600, (path, im.mode, im.size)


def test_seed_band_line_and_band_share_one_legend_entry():
    import matplotlib.pyplot as plt
    from toyrl.lab.claims.report import seed_band
    fig, ax = plt.subplots()
    seed_band(ax, np.array([[0.0, 1.0], [1.0, 2.0]]), np.arange(2), "C0", "arm", ls="--", note=False)
    assert ax.get_lines()[0].get_label() == ax.collections[0].get_label() == "arm"
    assert ax.get_lines()[0].get_linestyle() == "--"
    np.testing.assert_allclose(ax.get_lines()[0].get_ydata(), [0.5, 1.5])


# ---- the widgets: cached numbers equal the uncached ones -----------------------------------------------
@pytest.mark.parametrize("gamma,omega", [(0.95, 1.0), (0.6, 0.25), (1.0, 2.0)])
def test_panel_advantage_equals_the_uncached_computation(gamma, omega):
    """Every estimator: the cached widget numbers equal ``all_advantages`` at the same sliders, although
    the cache keys leave out the sliders an estimator does not read; a second call is a cache hit."""
    cb = credit_batch.make_credit_batch(group_size=4, slip=0.2)
    ref = credit_batch.all_advantages(cb, gamma=gamma, omega=omega)
    for name in ESTIMATORS:
        got = credit.panel_advantage(name, gamma, omega, group_size=4, slip=0.2)
        np.testing.assert_allclose(got, ref[name], atol=1e-6, err_msg=name)
        assert not got.flags.writeable
    hits = credit._panel_advantage.cache_info().hits
    credit.panel_advantage("grpo", 0.5, 0.0, group_size=4, slip=0.2)          # GRPO reads neither slider
    assert credit._panel_advantage.cache_info().hits == hits + 1
    count, mean = credit.panel_anchor_map(4, 0.2, 0, gamma, 0)
    ref_count, ref_mean = credit.anchor_map(cb, 0, gamma)
    np.testing.assert_allclose(count, ref_count)
    np.testing.assert_allclose(mean, ref_mean)


def test_slider_args_example():
    assert credit.slider_args("grpo", 0.9, 1.0, "mc") == (None, None, None)
    assert credit.slider_args("gigpo", 0.9, 1.0, "mc") == (0.9, 1.0, None)
    assert credit.slider_args("gae", 0.9, 1.0, "zeros") == (0.9, None, "zeros")


def test_ratio_stats_cache_equals_the_uncached_computation():
    args = ("mock_search", "turn", "sapo", 2.0, 1, False)
    cached = ratios.ratio_stats(*args)
    fresh = ratios.compute_ratio_stats(*args)
    assert set(cached) == set(fresh)
    for k, v in fresh.items():
        np.testing.assert_allclose(cached[k], v, rtol=1e-6, err_msg=k)
    cached["ratio"][:] = -1.0                                                # a caller's copy: the cache keeps its own
    hits = ratios._cached_ratio_stats.cache_info().hits
    again = ratios.ratio_stats(*args)
    assert ratios._cached_ratio_stats.cache_info().hits == hits + 1
    np.testing.assert_allclose(again["ratio"], fresh["ratio"], rtol=1e-6)


@pytest.mark.parametrize("notebook", ["01_per_turn_credit.ipynb", "03_ratio_blowups.ipynb"])
def test_widget_sliders_redraw_on_release(notebook):
    """Each slider of the notebook's widget sets continuous_update=False: a drag is one recompute, not one
    per value the handle passes."""
    import re
    from pathlib import Path
    nb = json.loads((Path(__file__).resolve().parents[1] / "notebooks" / notebook).read_text())
    cell = next("".join(c["source"]) for c in nb["cells"] if "interactive(" in "".join(c["source"]))
    sliders = re.findall(r"(?:Float|Int)Slider\(([^)]*)\)", cell)
    assert len(sliders) >= 2 and all("continuous_update=False" in s for s in sliders), sliders
