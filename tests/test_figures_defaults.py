"""Every figure function of ``toyrl.viz`` that can be called with no argument (the widget panels, at the defaults a
student first sees) draws a figure a room can read: in the lessons' style (``use("slides")``) every text is at least
12 pt on a 16:9 slide (conftest's ``assert_projectable``). Functions that need data are tested per lesson in
tests/test_figures_less*.py; this test finds the no-argument ones itself, so a new panel cannot be missed."""
import importlib
import inspect
import pkgutil

import matplotlib.pyplot as plt
import pytest

import toyrl.viz as viz
from conftest import assert_projectable
from toyrl.viz import style

SKIP = {"plots.new_figure", "style.figure_style"}
"""not figures of a lesson: an empty grid of axes and a context manager"""


def default_figure_functions() -> list[str]:
    """'module.function' for each public plotting function of toyrl.viz whose every parameter has a default
    (names with plot / panel / figure / draw; ``show_*`` wrappers display and return nothing)."""
    found = []
    for m in pkgutil.iter_modules(viz.__path__):
        mod = importlib.import_module(f"toyrl.viz.{m.name}")
        for name, fn in vars(mod).items():
            if name.startswith(("_", "show")) or not inspect.isfunction(fn) or fn.__module__ != mod.__name__:
                continue
            if not any(k in name for k in ("plot", "panel", "figure", "draw")):
                continue
            params = [p for p in inspect.signature(fn).parameters.values()
                      if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
            if all(p.default is not inspect.Parameter.empty for p in params) and f"{m.name}.{name}" not in SKIP:
                found.append(f"{m.name}.{name}")
    return sorted(found)


def test_the_panels_are_found():
    names = default_figure_functions()
    assert {"credit.credit_panel", "ratios.ratio_panel", "engine.engine_panel", "trees.tree_panel"} <= set(names)


@pytest.mark.parametrize("name", default_figure_functions())
def test_default_figure_reads_on_a_slide(name):
    mod, fn = name.split(".")
    style.use("slides")
    try:
        out = getattr(importlib.import_module(f"toyrl.viz.{mod}"), fn)()
        fig = out if hasattr(out, "savefig") else getattr(out, "figure", None) or plt.gcf()
        assert fig.axes, f"{name}() drew no axes"
        assert_projectable(fig)
    finally:
        style.use("notebook")
