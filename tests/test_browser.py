"""Real-browser test: JupyterLab + headless Chromium run notebooks 01 and 02 (and 09 with TOYRL_BROWSER_ALL=1)
and move their widgets.

JupyterLab runs on 127.0.0.1 (a free port) with auth off, its config / runtime / settings dirs and
its root dir (copies of the notebooks) in a temp dir. Python playwright drives Debian's Chromium
(``/usr/bin/chromium``; never ``playwright install``). For each notebook: wait for the kernel to be
Idle, Run All, wait for it to finish, check that no output holds a traceback and no widget is left
"Loading widget...", and no widget label is cut off in a 1400 px wide window, then change a widget and
check that what it draws changed. A screenshot
of notebook 02 goes to the temp dir, and to ``docs/echo_trap.png`` when TOYRL_SAVE_SCREENSHOT=1.
Skips with the reason when Chromium, playwright or JupyterLab is missing.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
NOTEBOOKS = ("01_per_turn_credit.ipynb", "02_echo_trap.ipynb", "09_small_llm.ipynb")
WIDTH = 1400
"""the browser window's width (px): the labels of every widget must fit at this width"""

pytestmark = pytest.mark.slow


def _skip_reason():
    if not Path(CHROMIUM).exists():
        return f"{CHROMIUM} not found (apt-get install -y chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "python playwright not installed (pip install playwright)"
    try:
        import jupyterlab  # noqa: F401
    except ImportError:
        return "jupyterlab not installed"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("lab")
    root = tmp / "root"
    root.mkdir()
    for name in NOTEBOOKS:
        shutil.copy(ROOT / "notebooks" / name, root / name)
    settings = tmp / "settings" / "@jupyterlab" / "notebook-extension"
    settings.mkdir(parents=True)
    # render every cell (no windowing) so every output can be checked
    (settings / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
    apps = tmp / "settings" / "@jupyterlab" / "apputils-extension"
    apps.mkdir(parents=True)
    (apps / "notification.jupyterlab-settings").write_text(json.dumps({"fetchNews": "false",
                                                                       "checkForUpdates": False}))
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(tmp / "config"), "JUPYTER_RUNTIME_DIR": str(tmp / "runtime"),
           "JUPYTERLAB_SETTINGS_DIR": str(tmp / "settings"), "JUPYTERLAB_WORKSPACES_DIR": str(tmp / "ws")}
    env.pop("CI", None)                                  # the notebooks run as a reader would run them
    port = _free_port()
    log = open(tmp / "lab.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={port}", "--ServerApp.ip=127.0.0.1",
         "--ServerApp.token=", "--ServerApp.password=", "--ServerApp.disable_check_xsrf=True",
         f"--ServerApp.root_dir={root}", "--ServerApp.port_retries=0"]
        + (["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []),
        stdout=log, stderr=subprocess.STDOUT, env=env, cwd=root)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(url + "/api", timeout=2)
                break
            except Exception:
                if proc.poll() is not None:
                    pytest.fail(f"jupyter lab exited: {(tmp / 'lab.log').read_text()[-2000:]}")
                time.sleep(0.5)
        else:
            pytest.fail("jupyter lab did not start in 60 s")
        yield url, tmp
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture(scope="module")
def browser(lab):
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                              args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                                    "--disable-component-update", "--disable-sync", "--no-first-run"])
        yield b
        b.close()


def _nb(page):
    """The notebook panel on screen (other tabs' panels stay in the DOM, hidden)."""
    return page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)").first


def _wait_idle(page, timeout_s: float) -> None:
    page.locator(".jp-StatusBar-TextItem", has_text="Idle").first.wait_for(timeout=timeout_s * 1000)


def _run_all(page, timeout_s: float = 240) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator('.lm-Menu-item[data-command="runmenu:run-all"]').click()
    t0 = time.time()
    time.sleep(1.0)
    while time.time() - t0 < timeout_s:           # every prompt has a number, none is [*]
        prompts = _nb(page).locator(".jp-CodeCell .jp-InputPrompt").all_inner_texts()
        busy = [p for p in prompts if "*" in p or p.strip() in ("[ ]:", "[ ]")]
        if prompts and not busy and page.locator(".jp-StatusBar-TextItem", has_text="Idle").count():
            return
        time.sleep(1.0)
    raise AssertionError(f"Run All did not finish in {timeout_s} s")


def _check_outputs(page, name: str) -> None:
    texts = _nb(page).locator(".jp-OutputArea-output").all_inner_texts()
    bad = [t[:300] for t in texts if "Traceback" in t or "Error" in t.split("\n", 1)[0]]
    assert not bad, f"{name}: error output: {bad}"
    body = _nb(page).locator(".jp-Notebook").inner_text()
    assert "Loading widget" not in body, f"{name}: a widget never rendered"
    assert "Error displaying widget" not in body, f"{name}: a widget failed to render"
    _check_labels(page, name)


def _check_labels(page, name: str) -> None:
    """No widget's description label is cut off (its text wider than its box: an ellipsis on screen).
    ``test_label_check_catches_a_cut_label`` shows this check fails on a label that is cut off."""
    cut = _cut_labels(page)
    assert not cut, f"{name}: widget labels cut off at {WIDTH} px: {cut}"


def _cut_labels(page) -> list:
    """'text (scrollWidth > clientWidth px)' of every visible widget label whose text overflows its box."""
    return _nb(page).locator(".widget-label, .widget-label-basic").evaluate_all(
        "els => els.filter(e => e.offsetParent !== null && e.textContent.trim()"
        " && e.scrollWidth > e.clientWidth + 1).map(e => `${e.textContent.trim()} (${e.scrollWidth} > ${e.clientWidth} px)`)")


def _widget_image(page, first: bool = False) -> str:
    """The figure of the notebook's last interactive panel (``first``: its first one)."""
    panels = _nb(page).locator(".widget-interact")
    img = (panels.first if first else panels.last).locator(".widget-output img").last
    img.wait_for(timeout=60_000)
    return img.get_attribute("src") or ""


def _wait_changed(page, before: str, timeout_s: float = 90, first: bool = False) -> str:
    t0 = time.time()
    while time.time() - t0 < timeout_s:
        try:
            now = _widget_image(page, first)
        except Exception:
            now = ""
        if now and now != before:
            return now
        time.sleep(0.5)
    raise AssertionError("the widget's figure did not change")


def _open(browser, url: str, name: str):
    page = browser.new_page(viewport={"width": WIDTH, "height": 1000})
    page.set_default_timeout(120_000)
    page.goto(f"{url}/lab/tree/{name}?reset")          # a fresh workspace: only this notebook
    page.locator(".jp-Notebook").first.wait_for()
    _wait_idle(page, 120)
    return page


LONG = "a description far too long for the label box"
"""the description of the throwaway notebook's slider: ipywidgets cuts it off (an ellipsis)"""


def test_label_check_catches_a_cut_label(lab, browser):
    """The label check can fail: a throwaway notebook shows a slider whose description is cut off and one
    whose description fits; ``_check_labels`` names the first and only the first."""
    url, tmp = lab
    cell = {"cell_type": "code", "execution_count": None, "id": "cut", "metadata": {}, "outputs": [],
            "source": ["import ipywidgets as w\n", f"w.VBox([w.IntSlider(description={LONG!r}), "
                       "w.IntSlider(description='fits')])"]}
    meta = json.loads((ROOT / "notebooks" / NOTEBOOKS[0]).read_text())["metadata"]
    nb = {"cells": [cell], "metadata": meta, "nbformat": 4, "nbformat_minor": 5}
    (tmp / "root" / "cut_label.ipynb").write_text(json.dumps(nb))
    page = _open(browser, url, "cut_label.ipynb")
    _run_all(page, timeout_s=60)
    _nb(page).locator(".widget-slider").last.wait_for(timeout=30_000)
    cut = _cut_labels(page)
    assert len(cut) == 1 and cut[0].startswith(LONG), cut
    with pytest.raises(AssertionError, match="widget labels cut off"):
        _check_labels(page, "cut_label.ipynb")
    page.close()


def test_notebook_01_runs_and_slider_moves(lab, browser):
    url, _ = lab
    page = _open(browser, url, NOTEBOOKS[0])
    _run_all(page)
    _check_outputs(page, NOTEBOOKS[0])
    before = _widget_image(page)
    handle = _nb(page).locator(".widget-interact .widget-slider .noUi-handle").first   # gamma
    handle.focus()
    for _ in range(3):
        handle.press("ArrowLeft")
    _wait_changed(page, before)
    _check_outputs(page, NOTEBOOKS[0])
    page.close()


def test_notebook_02_runs_and_checkbox_moves(lab, browser):
    url, tmp = lab
    page = _open(browser, url, NOTEBOOKS[1])
    _run_all(page)
    _check_outputs(page, NOTEBOOKS[1])
    _nb(page).locator(".jp-OutputArea-output img").first.scroll_into_view_if_needed()   # the collapse figure
    shot = tmp / "echo_trap.png"
    page.screenshot(path=str(shot))
    assert shot.stat().st_size > 10_000
    if os.environ.get("TOYRL_SAVE_SCREENSHOT") == "1":
        (ROOT / "docs").mkdir(exist_ok=True)
        shutil.copy(shot, ROOT / "docs" / "echo_trap.png")
    before = _widget_image(page, first=True)                  # the stabilizers panel (Part 2 has a second one)
    _nb(page).locator(".widget-interact .widget-checkbox input").first.check()            # StarPO-S filter on
    _wait_changed(page, before, first=True)
    _check_outputs(page, NOTEBOOKS[1])
    page.close()


@pytest.mark.skipif(os.environ.get("TOYRL_BROWSER_ALL") != "1",
                    reason="notebook 09 takes the test past 3 minutes (4 min in all on 2 cores); TOYRL_BROWSER_ALL=1 runs it")
def test_notebook_09_runs_and_slider_moves(lab, browser):
    url, _ = lab
    page = _open(browser, url, NOTEBOOKS[2])
    _run_all(page, timeout_s=300)
    _check_outputs(page, NOTEBOOKS[2])
    out = _nb(page).locator(".widget-interact .widget-output").last                  # the reply panel prints
    before = out.inner_text()
    handle = _nb(page).locator(".widget-interact .widget-slider .noUi-handle").last    # temperature
    handle.focus()
    for _ in range(4):
        handle.press("ArrowRight")
    t0 = time.time()
    while out.inner_text() == before and time.time() - t0 < 90:
        time.sleep(0.5)
    assert out.inner_text() != before, "the reply panel did not change"
    _check_outputs(page, NOTEBOOKS[2])
    page.close()
