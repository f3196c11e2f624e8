"""Real-browser test: every lesson in JupyterLab in headless Chromium, run all, every widget control changed once.

One test per lesson (``notebooks/NN_*.ipynb``): open it, Run All, wait for the kernel to reply to every cell, then
change each control once and fail, naming the lesson, the cell and the control, when a panel draws nothing, any
output holds stderr text, a ``Warning`` or an error, a widget is left "Loading widget..." or a label is cut off, or
a redraw takes more than 10 s (``browser_lab.REDRAW_LIMIT_S``). One JupyterLab server and one Chromium serve the
whole module (``browser_lab.Lab``: copies of the lessons in a temp dir); each lesson's kernel is shut down after it.
A time table (Run All, slowest cell, slowest redraw per lesson) is printed at the end, and written as JSON to
``$TOYRL_BROWSER_REPORT`` when set. ``TOYRL_BROWSER_LESSONS=01,02`` runs only those lessons; a screenshot of lesson 02
goes to ``docs/echo_trap.png`` when TOYRL_SAVE_SCREENSHOT=1. ``TOYRL_BROWSER_RUN_ALL_S`` (default 360) bounds one
Run All. Skips, with the reason, where Chromium, playwright or JupyterLab is missing; fails instead when
TOYRL_LESSONS_IN_BROWSER=1 says that the lessons are left to this test (nbval then does not run them).

``test_checks_can_fail`` runs a throwaway notebook whose panels fail each check once (blank, warning, error, slow,
a cut label) and asserts that each is reported, and that the good panel is not.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import pytest

from browser_lab import ROOT, Lab, check_notebook, launch_browser, skip_reason, time_table

LESSONS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
_ONLY = os.environ.get("TOYRL_BROWSER_LESSONS")
SELECTED = [p for p in LESSONS if not _ONLY or p.name[:2] in _ONLY.split(",")]

pytestmark = pytest.mark.slow

LONG = "a description far too long for the label box"
"""the description of the throwaway notebook's slider: ipywidgets cuts it off (an ellipsis)"""

SELF_TEST = [
    "import sys, time, warnings\nimport matplotlib.pyplot as plt\nfrom matplotlib.figure import Figure\n"
    "import ipywidgets as w\nfrom IPython.display import display",
    "def good(x=1):\n    fig, ax = plt.subplots(figsize=(3, 2)); ax.plot([0, x]); plt.show()\n"
    "w.interactive(good, x=(0, 3))",
    "def blank(x=1):\n    fig = Figure(); fig.add_subplot().plot([0, x]); return fig\n"
    "w.interactive(blank, x=(0, 3))",
    "def warn(x=1):\n    print(x)\n    if x != 1:\n        warnings.warn('toy caution')\nw.interactive(warn, x=(0, 3))",
    "def fail(x=1):\n    print(x)\n    if x != 1:\n        raise ValueError('toy failure')\n"
    "w.interactive(fail, x=(0, 3))",
    "def slow(x=1):\n    time.sleep(0 if x == 1 else 2.5)\n    print(x)\nw.interactive(slow, x=(0, 3))",
    f"w.VBox([w.IntSlider(description={LONG!r}), w.IntSlider(description='fits')])",
    "print('a note', file=sys.stderr)",
]
"""the throwaway notebook's cells: each panel fails one check when its slider moves (the good one none)"""


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    reason = skip_reason()
    if reason and os.environ.get("TOYRL_LESSONS_IN_BROWSER") == "1":
        pytest.fail(f"TOYRL_LESSONS_IN_BROWSER=1 (nbval leaves the lessons to this test) but {reason}")
    if reason:
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("lab")
    with Lab(tmp, SELECTED) as server:
        yield server


@pytest.fixture(scope="module")
def browser(lab):
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = launch_browser(p)
        yield b
        b.close()


@pytest.fixture(scope="module")
def times(request):
    """Collects each lesson's report (written to $TOYRL_BROWSER_REPORT after each lesson, when set); prints the
    time table at the end of the module."""
    reports = []
    yield reports
    if not reports:
        return
    lines = time_table(reports)
    plugins = request.config.pluginmanager
    tr, cap = plugins.getplugin("terminalreporter"), plugins.getplugin("capturemanager")
    if tr is not None and cap is not None:
        with cap.global_and_fixture_disabled():               # shown even when the tests pass
            for line in ["", "browser test, seconds per lesson:"] + lines:
                tr.write_line(line)


@pytest.mark.parametrize("lesson", SELECTED, ids=[p.stem for p in SELECTED])
def test_lesson_in_browser(lab, browser, times, lesson):
    shot = lab.tmp / f"{lesson.stem}.png"
    report = check_notebook(browser, lab, lab.root / lesson.name, shot=shot)
    times.append(report)
    out = os.environ.get("TOYRL_BROWSER_REPORT")
    if out:
        Path(out).write_text(json.dumps([dataclasses.asdict(r) for r in times], indent=1))
    if lesson.name.startswith("02_") and os.environ.get("TOYRL_SAVE_SCREENSHOT") == "1":
        (ROOT / "docs").mkdir(exist_ok=True)
        shutil.copy(shot, ROOT / "docs" / "echo_trap.png")
    assert not report.findings, f"{lesson.name}:\n  " + "\n  ".join(report.findings)


def test_checks_can_fail(lab, browser):
    """Each check fails where it should: a blank panel, a warning, an error, a slow redraw (limit 1.5 s for this
    test), a cut label and stderr output are each reported once, under their own cell; the good panel is not."""
    meta = json.loads(LESSONS[0].read_text())["metadata"]
    cells = [{"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {}, "outputs": [],
              "source": src} for i, src in enumerate(SELF_TEST)]
    path = lab.root / "checks_can_fail.ipynb"
    path.write_text(json.dumps({"cells": cells, "metadata": meta, "nbformat": 4, "nbformat_minor": 5}))
    report = check_notebook(browser, lab, path, redraw_limit_s=1.5)
    found = "\n".join(report.findings)
    expect = {"cell 2 slider 'x': draws nothing", "cell 3 slider 'x': stderr output: ", "UserWarning: toy caution",
              "cell 4 slider 'x': error ValueError: toy failure", "cell 5 slider 'x': redraw took",
              "cut off at 1400 px: ['" + LONG, "cell 7: stderr output: a note"}
    for e in expect:
        assert found.count(e) == 1, f"expected once: {e!r}\nfindings:\n{found}"
    assert "cell 1 " not in found, found
    assert len(report.findings) == 6, found                  # the warning is one finding, matched twice
    assert sorted(c.cell for c in report.changes) == [1, 2, 3, 4, 5, 6, 6], report.changes
