"""The figures of lessons 09-11 for a projector: each figure function at its lesson's defaults, in the slides
style, passes ``assert_projectable`` (text >= 12 pt on a 16:9 slide) and ``assert_figure_standard``; the
scorecard's panel callback displays its figure (a widget draws only what is displayed)."""
import matplotlib
import numpy as np
import pytest
from conftest import assert_figure_standard, assert_projectable

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def card():
    from toyrl.lab.scorecard import REPO, rejudge
    return rejudge(REPO / "data" / "scorecard")


def test_scorecard_figure_is_projectable_with_one_colour_scale(card):
    from toyrl.lab.scorecard.plot import HEATMAP_METRICS, goodness, heatmap_data, write_figure
    record, _ = card
    fig = write_figure(record, style="slides")
    assert fig.get_size_inches()[0] <= 12.5 + 1e-9                       # 10 in before the slides scale
    assert_projectable(fig)
    st = record["setting"]
    assert_figure_standard(fig, st["env"], f"{st['steps']} steps", f"{len(record['seeds'])} seeds/cell")
    bars = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
    assert len(bars) == 1                                                 # one colour bar, not one per direction
    heat = fig.axes[0]
    assert {im.get_cmap().name for im in heat.images} == {"RdYlGn", "Purples"}
    assert "spike_rate" not in HEATMAP_METRICS and "format_valid" not in HEATMAP_METRICS   # constant columns
    # a good collapse rate (0) and a good final success (1) get the same colour
    assert goodness(0.0, "collapse_rate") == goodness(1.0, "final_success") == 1.0
    names, metrics, values = heatmap_data(record)
    shown = np.ma.getdata(heat.images[0].get_array())
    j = metrics.index("collapse_rate")
    np.testing.assert_allclose(shown[:, j], 1 - values[:, j])
    # the heatmap's H(Z|X) column and the regime rule read one scale: a regime of low entropy <=> column < 0.5
    h = values[:, metrics.index("reasoning_entropy")]
    low = np.array([c["regime"] in ("low-entropy collapse", "compressed") for c in record["cells"]])
    assert ((h < 0.5) == low).all()


@pytest.mark.parametrize("name,key", [("grpo/sapo/token-mean/none", "success_rate"),
                                      ("grpo/ppo/token-mean/none", "grad_norm")])
def test_scorecard_cell_figure_is_projectable(card, name, key):
    from toyrl.lab.scorecard.plot import plot_cell
    record, runs = card
    fig = plot_cell(record, runs, name, key, style="slides")
    assert fig.get_size_inches()[0] <= 12.5 + 1e-9
    assert_projectable(fig)
    st = record["setting"]
    assert_figure_standard(fig, name, st["env"], f"{st['steps']} steps", "staleness")
    leg = fig.axes[2].get_legend()
    assert leg is not None and leg.get_bbox_to_anchor().x0 >= fig.axes[2].get_window_extent().x1 - 1   # outside


def test_scorecard_panel_callback_displays_a_figure_for_every_choice(card, monkeypatch):
    """What interactive shows is what the callback displays: every cell x curve draws one figure."""
    import IPython.display
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure
    from toyrl.lab.scorecard.plot import cell_names, show_cell
    record, runs = card
    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda obj: shown.append(obj))
    curves = ["success_rate", "reward_mean", "grad_norm", "clip_frac", "ratio_max", "zero_var_frac"]
    names = cell_names(record)
    for name in names:
        show_cell(record, runs, name, "success_rate")
    for key in curves:
        show_cell(record, runs, "grpo/sapo/token-mean/none", key)
    assert len(shown) == len(names) + len(curves) and all(isinstance(f, Figure) for f in shown)
    assert not plt.get_fignums()                                          # each closed after display
    with pytest.raises(ValueError, match="name must be a cell"):
        show_cell(record, runs, "grpo/nope/token-mean/none")


# ---- lesson 10: the verl advantage panel ----------------------------------------------------------------------
@pytest.mark.parametrize("gamma,seed", [(0.5, 0), (1.0, 3)])
def test_verl_advantage_panel_is_projectable(gamma, seed):
    from toyrl.viz.prototype import verl_advantage_panel
    fig = _in_slides(verl_advantage_panel, "loo_turn", gamma, seed)
    assert fig.get_size_inches()[0] <= 12.5 + 1e-9
    assert_projectable(fig)
    assert_figure_standard(fig, "toy verl batch", f"seed {seed}", f"gamma={gamma:.2f}")
    left, right = fig.axes[:2]
    assert left.get_ylim() == right.get_ylim()                             # compared panels share their rows


def _in_slides(fn, *args):
    from toyrl.viz.style import figure_style
    with figure_style("slides"):
        return fn(*args)


def test_verl_advantage_callback_displays_its_figure(monkeypatch):
    import IPython.display
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure
    from toyrl.viz.prototype import show_verl_advantage_panel
    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda obj: shown.append(obj))
    for gamma in (0.0, 0.5, 1.0):
        show_verl_advantage_panel("loo_turn", gamma, 0)
    assert len(shown) == 3 and all(isinstance(f, Figure) for f in shown) and not plt.get_fignums()
