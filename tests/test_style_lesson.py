"""The lesson style: ``use`` sets the default style across calls (a kernel's cells), ``arm_color`` is fixed per arm,
``projected_pt`` scales text to a 16:9 slide, and conftest's ``assert_projectable`` catches small text."""
import matplotlib.pyplot as plt
import pytest

from conftest import assert_projectable
from toyrl.viz import style


@pytest.fixture(autouse=True)
def _restore():
    yield
    style.use("notebook")


def test_use_sets_default_until_changed_and_blocks_still_override():
    assert style.get_style().name == "notebook"
    style.use("slides")
    assert style.get_style().name == "slides" and plt.rcParams["font.size"] == 16.0
    with style.figure_style("notebook"):
        assert style.get_style().name == "notebook"
    assert style.get_style().name == "slides"
    with pytest.raises(ValueError, match="style must be one of"):
        style.use("poster")


def test_arm_color_fixed_and_known():
    assert style.arm_color("grpo") == "#1f77b4"
    assert style.arm_color("my_arm") == style.arm_color("my_arm")
    assert style.arm_color("my_arm").startswith("#")


def test_projected_pt_scales_to_the_slide():
    fig = plt.figure(figsize=(10, 4))
    assert style.projected_pt(fig, 12) == pytest.approx(12 * 13.333 / 10)
    fig = plt.figure(figsize=(26.666, 7.5))
    assert style.projected_pt(fig, 12) == pytest.approx(6.0)


def test_assert_projectable_catches_small_text():
    style.use("slides")
    fig, ax = style.subplots(size=style.figsize(8, 3))
    ax.set_title("a title"); ax.set_xlabel("step"); ax.plot([0, 1], label="x"); ax.legend()
    assert_projectable(fig)
    ax.text(0.5, 0.5, "tiny", fontsize=5)
    with pytest.raises(AssertionError, match="tiny"):
        assert_projectable(fig)
