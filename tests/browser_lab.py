"""Drive a lesson in JupyterLab in headless Chromium the way a student meets it (used by ``test_browser.py``).

``Lab`` serves copies of the notebooks from a temp dir (127.0.0.1, a free port, auth off, config / runtime /
settings / data dirs in the temp dir, every cell rendered, no autosave) and exposes the JupyterLab app to the page.
``check_notebook`` opens one notebook, clicks Run > Run All Cells, waits until the kernel has replied to every cell,
then changes every widget control once (a dropdown or select: another option; a slider: one step; a checkbox: toggle;
toggle / radio buttons: another choice; a button: click; a number box: one up) and returns a ``Report``: its times
and its findings, one line each naming the cell (0-based index in the .ipynb), the control and what failed.

Waits are on events, never on fixed sleeps: a listener in the page records every shell message the notebook sends
and the kernel's replies, idle statuses and outputs for it, so "done" means the kernel went idle for every message
sent since the action. A change is found wanting when its messages produce no image and no text ("draws nothing"),
a Figure's repr instead of the figure, stderr output, text matching ``Warning``, an error, a widget left "Loading
widget...", or when it takes longer than ``REDRAW_LIMIT_S`` (a control labelled "live", an opt-in re-run, may take up
to ``LIVE_LIMIT_S`` when it shows a progress bar).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
WIDTH = 1400
"""the browser window's width (px): the labels of every widget must fit at this width"""
REDRAW_LIMIT_S = 10.0
"""the longest a panel may take to redraw after one change of one control (s)"""
LIVE_LIMIT_S = 300.0
"""the longest an opt-in live re-run (a control labelled "live") may take, with a progress bar on screen (s)"""
SETTLE_S = 120.0
"""the longest the test waits for one redraw, to report how long a slow one takes (s)"""
RUN_ALL_LIMIT_S = float(os.environ.get("TOYRL_BROWSER_RUN_ALL_S", 360))
"""the longest one lesson's Run All may take before the test gives up on it (s)"""


def skip_reason() -> str | None:
    """Why the browser test cannot run here (None when it can)."""
    if not Path(CHROMIUM).exists():
        return f"{CHROMIUM} not found (apt-get install -y chromium)"
    for mod, what in (("playwright.sync_api", "python playwright (pip install playwright)"),
                      ("jupyterlab", "jupyterlab"), ("ipywidgets", "ipywidgets")):
        try:
            __import__(mod)
        except ImportError:
            return f"{what} not installed"
    return None


# ---- the server -------------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _settings(tmp: Path) -> None:
    def put(ext: str, plugin: str, value: dict) -> None:
        d = tmp / "settings" / "@jupyterlab" / ext
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{plugin}.jupyterlab-settings").write_text(json.dumps(value))
    put("notebook-extension", "tracker", {"windowingMode": "none"})        # every cell in the DOM
    put("docmanager-extension", "plugin", {"autosave": False})
    put("apputils-extension", "notification", {"fetchNews": "false", "checkForUpdates": False})


class Lab:
    """A JupyterLab server on copies of ``notebooks`` (paths) in ``tmp``; ``with Lab(...) as lab: lab.url``."""

    def __init__(self, tmp: Path, notebooks):
        self.tmp, self.root = tmp, tmp / "root"
        self.root.mkdir(parents=True, exist_ok=True)
        for path in notebooks:
            shutil.copy(path, self.root / Path(path).name)
        _settings(tmp)
        self.url, self.proc, self._log = "", None, None

    def __enter__(self) -> "Lab":
        t = self.tmp
        env = {**os.environ, "JUPYTER_CONFIG_DIR": str(t / "config"), "JUPYTER_RUNTIME_DIR": str(t / "runtime"),
               "JUPYTER_DATA_DIR": str(t / "data"), "JUPYTERLAB_SETTINGS_DIR": str(t / "settings"),
               "JUPYTERLAB_WORKSPACES_DIR": str(t / "ws"), "PYTHONPATH": os.environ.get("PYTHONPATH", str(ROOT))}
        env.pop("CI", None)                                   # the lessons run as a reader would run them
        port = _free_port()
        self._log = open(t / "lab.log", "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={port}", "--ServerApp.ip=127.0.0.1",
             "--ServerApp.token=", "--ServerApp.password=", "--ServerApp.disable_check_xsrf=True",
             f"--ServerApp.root_dir={self.root}", "--ServerApp.port_retries=0", "--LabApp.expose_app_in_browser=True"]
            + (["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []),
            stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=self.root, start_new_session=True)
        self.url = f"http://127.0.0.1:{port}"
        t0 = time.time()
        while True:                                           # poll until the REST API answers
            try:
                urllib.request.urlopen(self.url + "/api", timeout=2)
                return self
            except Exception:
                if self.proc.poll() is not None or time.time() - t0 > 90:
                    self.__exit__(None, None, None)
                    raise RuntimeError(f"jupyter lab did not start: {self.log()[-2000:]}")
                time.sleep(0.3)

    def log(self) -> str:
        return (self.tmp / "lab.log").read_text(errors="replace")

    def _api(self, method: str, path: str):
        req = urllib.request.Request(self.url + path, method=method)
        with urllib.request.urlopen(req, timeout=30) as r:
            body = r.read()
        return json.loads(body) if body else None

    def shutdown_kernels(self) -> None:
        """End every session (and its kernel): one lesson's memory is freed before the next opens."""
        for s in self._api("GET", "/api/sessions") or []:
            self._api("DELETE", f"/api/sessions/{s['id']}")

    def __exit__(self, *exc) -> None:
        if self.proc is None:
            return
        try:
            if self.proc.poll() is None:
                try:
                    self._api("POST", "/api/shutdown")           # a clean stop: kernels first, then the server
                except Exception:
                    self.proc.terminate()
                self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)             # the server's own process group (start_new_session)
            self.proc.wait(10)
        finally:
            self._log.close()
            self.proc = None


def launch_browser(playwright):
    return playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                      args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                                            "--disable-background-networking", "--disable-component-update",
                                            "--disable-sync", "--no-first-run"])


# ---- the page ----------------------------------------------------------------------------------------
_TRACK = """async () => {
  const panel = window.jupyterapp.shell.currentWidget;
  await panel.context.ready;
  await panel.sessionContext.ready;
  const t = window.__toyrl = {sent: [], done: {}, reply: {}, out: {}};
  const text = c => c.text || c.evalue || (c.data && (c.data['text/plain'] || c.data['text/markdown']
                     || c.data['text/html'])) || '';
  const watch = kernel => kernel.anyMessage.connect((_, a) => {
    const m = a.msg, h = m.header, c = m.content || {};
    if (a.direction === 'send') {
      if (m.channel === 'shell')
        t.sent.push({id: h.msg_id, type: h.msg_type, t: performance.now(),
                     code: h.msg_type === 'execute_request' ? c.code : null});
      return;
    }
    const p = m.parent_header && m.parent_header.msg_id;
    if (!p) return;
    if (m.channel === 'shell' && h.msg_type.endsWith('_reply')) t.reply[p] = {t: performance.now(), status: c.status};
    else if (m.channel === 'iopub' && h.msg_type === 'status') {
      if (c.execution_state === 'idle') t.done[p] = performance.now();
    } else if (m.channel === 'iopub' && ['stream', 'display_data', 'execute_result', 'error',
                                          'update_display_data'].includes(h.msg_type)) {
      (t.out[p] = t.out[p] || []).push({type: h.msg_type, name: c.name || '', mimes: Object.keys(c.data || {}),
                                         text: String(text(c)).slice(0, 600), ename: c.ename || ''});
    }
  });
  watch(panel.sessionContext.session.kernel);
  panel.sessionContext.kernelChanged.connect((_, a) => a.newValue && watch(a.newValue));
}"""

_SETTLED = """since => {
  const t = window.__toyrl, s = t.sent.slice(since);
  const busy = [...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-InputPrompt')]
                 .some(e => e.textContent.includes('*'));
  const aborted = x => t.reply[x.id] && t.reply[x.id].status === 'aborted';   // queued after an error: no idle
  return !busy && s.length > 0 && s.every(x => (t.done[x.id] !== undefined || aborted(x))
                                                && (x.type !== 'execute_request' || t.reply[x.id]));
}"""

CONTROLS = (".widget-dropdown, .widget-select, .widget-slider, .widget-checkbox, .widget-toggle-buttons, "
            ".widget-radio, .widget-button, .widget-toggle-button, .widget-text")
_ENUMERATE = """sel => {
  const nb = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
  const cells = [...nb.querySelectorAll('.jp-Notebook .jp-Cell')];
  const roots = [...nb.querySelectorAll('.jp-OutputArea-output')].flatMap(o => [...o.querySelectorAll(sel)])
    .filter(e => !e.parentElement.closest(sel));            // a toggle-buttons' own buttons belong to it
  const out = roots.map((e, i) => {
    e.setAttribute('data-toyrl-ctl', String(i));
    const kind = ['dropdown', 'select', 'slider', 'checkbox', 'toggle-buttons', 'radio', 'button', 'toggle-button',
                  'text'].find(k => e.classList.contains('widget-' + k));
    const lab = [...e.querySelectorAll('.widget-label-basic, .widget-label')]     // a checkbox: its own label
                  .find(l => l.textContent.replace(/\u200b/g, '').trim());
    const panel = e.closest('.widget-interact');
    const cell = e.closest('.jp-Cell');
    return {i, kind, cell: cells.indexOf(cell), has_panel: !!(panel || cell.querySelector('.widget-output')),
            label: ((lab && lab.textContent.trim()) || e.textContent.replace(/\u200b/g, '').trim()).slice(0, 40),
            panel: panel ? [...nb.querySelectorAll('.widget-interact')].indexOf(panel) : -1};
  });
  const loose = [...nb.querySelectorAll('.jp-OutputArea-output')].flatMap(o =>
      [...o.querySelectorAll('input, select, textarea, button')]).filter(e => !e.closest(sel))
    .map(e => `${e.tagName.toLowerCase()} in cell ${cells.indexOf(e.closest('.jp-Cell'))}`);
  return {controls: out, loose};
}"""


def _nb(page):
    return page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)").first


def open_notebook(browser, url: str, name: str):
    """A new page on ``name`` in a fresh workspace, its kernel idle, the message listener installed."""
    page = browser.new_page(viewport={"width": WIDTH, "height": 1000})
    page.set_default_timeout(120_000)
    page.goto(f"{url}/lab/tree/{name}?reset")
    page.locator(".jp-NotebookPanel .jp-Notebook").first.wait_for()
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell.currentWidget"
                           " && window.jupyterapp.shell.currentWidget.sessionContext"
                           " && window.jupyterapp.shell.currentWidget.sessionContext.session", timeout=120_000)
    page.evaluate(_TRACK)
    page.locator(".jp-StatusBar-TextItem", has_text="Idle").first.wait_for(timeout=120_000)
    return page


def _mark(page) -> int:
    return page.evaluate("() => window.__toyrl.sent.length")


def _since(page, since: int) -> dict:
    return page.evaluate("since => { const t = window.__toyrl; const s = t.sent.slice(since);"
                         " return {sent: s, done: Object.fromEntries(s.map(x => [x.id, t.done[x.id]])),"
                         " reply: Object.fromEntries(s.map(x => [x.id, t.reply[x.id]])),"
                         " out: Object.fromEntries(s.map(x => [x.id, t.out[x.id] || []]))}; }", since)


def _settle(page, since: int, limit_s: float) -> bool:
    """Wait until the kernel is idle after every message sent since ``since`` (False: not within ``limit_s``)."""
    try:
        page.wait_for_function(_SETTLED, arg=since, polling=100, timeout=limit_s * 1000)
        return True
    except Exception as e:                       # playwright's TimeoutError
        if "Timeout" not in type(e).__name__:
            raise
        return False


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def output_findings(outs: list) -> list[str]:
    """What is wrong in one message's outputs: errors, stderr, ``Warning`` text."""
    bad = []
    for o in outs:
        text = _ANSI.sub("", o["text"]).strip().replace("\n", " | ")[:300]
        if o["type"] == "error":
            bad.append(f"error {o['ename']}: {text}")
        elif o["type"] == "stream" and o["name"] == "stderr":
            bad.append(f"stderr output: {text}")
        elif re.search("Warning", text):
            bad.append(f"warning text: {text}")
    return bad


def _draws(outs: list) -> str | None:
    """None when the outputs show an image or text; else what the panel shows instead."""
    images = [o for o in outs if any(m.startswith("image/") for m in o["mimes"])]
    texts = [o for o in outs if (o["type"] == "stream" and o["name"] == "stdout" and o["text"].strip())
             or (o["mimes"] and not any(m.startswith("image/") or "widget" in m for m in o["mimes"]))]
    if images:
        return None
    if texts and all(o["text"].startswith("<Figure size") for o in texts):
        return f"shows a Figure's repr, not the figure: {texts[0]['text'][:80]}"
    return None if texts else "draws nothing (no image, no text)"


# ---- one notebook ------------------------------------------------------------------------------------
@dataclass
class Change:
    """One change of one control: where, what, how long the redraw took (s)."""
    cell: int
    kind: str
    label: str
    seconds: float


@dataclass
class Report:
    """A notebook's run in the browser: times (s) and findings (empty when it passed)."""
    name: str
    run_all_s: float = 0.0
    cell_s: dict = field(default_factory=dict)
    changes: list = field(default_factory=list)
    findings: list = field(default_factory=list)
    total_s: float = 0.0


def run_all(page, sources: list, report: Report, limit_s: float = RUN_ALL_LIMIT_S) -> bool:
    """Run > Run All Cells; wait for every cell's reply; record times and each cell's errors and warnings.
    False when it did not finish within ``limit_s``."""
    since = _mark(page)
    t0 = time.time()
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator('.lm-Menu-item[data-command="runmenu:run-all"]').click()
    finished = _settle(page, since, limit_s)
    report.run_all_s = time.time() - t0
    got = _since(page, since)
    if not finished:
        waiting = [sources.index(x["code"]) if x["code"] in sources else -1 for x in got["sent"]
                   if x["type"] == "execute_request" and not got["reply"][x["id"]]]
        report.findings.append(f"Run All did not finish in {limit_s:.0f} s (cell {waiting[0] if waiting else '?'}"
                               f" still running, {len(waiting)} cells without a reply)")
    prev = min([x["t"] for x in got["sent"]], default=0.0)
    for x in got["sent"]:
        if x["type"] != "execute_request":
            continue
        cell = sources.index(x["code"]) if x["code"] in sources else -1
        end = (got["reply"][x["id"]] or {}).get("t") or got["done"][x["id"]]
        if end is not None:
            report.cell_s[cell] = round((end - max(prev, x["t"])) / 1000, 2)
            prev = end
        report.findings += [f"cell {cell}: {f}" for f in output_findings(got["out"][x["id"]])]
    _check_page(page, report, "after Run All")
    return finished


def _check_page(page, report: Report, when: str, timeout_s: float = 60, labels: bool = True) -> None:
    """Every widget rendered (none left "Loading widget...", none failed) and (``labels``) no label cut off."""
    try:
        page.wait_for_function("() => !document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)')"
                               ".innerText.includes('Loading widget')", polling=200, timeout=timeout_s * 1000)
    except Exception:
        report.findings.append(f"{when}: a widget is left 'Loading widget...'")
    body = _nb(page).inner_text()
    if "Error displaying widget" in body:
        report.findings.append(f"{when}: 'Error displaying widget' on the page")
    cut = cut_labels(page) if labels else []
    if cut:
        report.findings.append(f"{when}: widget labels cut off at {WIDTH} px: {cut}")


def cut_labels(page) -> list:
    """'text (scrollWidth > clientWidth px)' of every visible widget label whose text overflows its box."""
    return _nb(page).locator(".widget-label, .widget-label-basic").evaluate_all(
        "els => els.filter(e => e.offsetParent !== null && e.textContent.trim()"
        " && e.scrollWidth > e.clientWidth + 1)"
        ".map(e => `${e.textContent.trim()} (${e.scrollWidth} > ${e.clientWidth} px)`)")


def _act(page, c: dict) -> str | None:
    """Change the control ``c`` once, as a user would; None, or why it could not be changed."""
    el = page.locator(f'[data-toyrl-ctl="{c["i"]}"]')
    kind = c["kind"]
    if kind in ("dropdown", "select"):
        sel = el.locator("select")
        n, cur = sel.evaluate("s => [s.options.length, s.selectedIndex]")
        if n < 2:
            return "only one option"
        sel.select_option(index=(cur + 1) % n)
    elif kind == "slider":
        h = el.locator(".noUi-handle").first
        now, top = h.get_attribute("aria-valuenow"), h.get_attribute("aria-valuemax")
        h.press("ArrowLeft" if now is not None and top is not None and float(now) >= float(top) else "ArrowRight")
    elif kind == "checkbox":
        el.locator("input").click()
    elif kind in ("toggle-buttons", "radio"):
        other = el.locator("button:not(.mod-active)" if kind == "toggle-buttons" else "input:not(:checked)")
        if not other.count():
            return "only one choice"
        other.first.click()
    elif kind in ("button", "toggle-button"):
        el.click()
    elif kind == "text":
        box = el.locator("input, textarea").first
        box.press("ArrowUp" if box.get_attribute("type") == "number" else "End")
        if box.get_attribute("type") != "number":
            box.type("x")
        box.press("Enter")
    else:
        return f"unknown kind of control {kind!r}"
    return None


def _panel_shows(page, c: dict) -> str:
    """'image', 'text' or 'nothing': what the control's panel (its interact's Output) shows on the page."""
    return page.evaluate("""c => {
      const nb = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
      const el = nb.querySelector(`[data-toyrl-ctl="${c.i}"]`);
      const box = el.closest('.widget-interact') || el.closest('.jp-Cell');
      const outs = [...box.querySelectorAll('.widget-output')];
      if (outs.some(o => o.querySelector('img, svg, canvas'))) return 'image';
      return outs.some(o => o.innerText.trim()) ? 'text' : 'nothing';
    }""", c)


def change_controls(page, report: Report, redraw_limit_s: float = REDRAW_LIMIT_S) -> None:
    """Change every control once (live re-runs last); record each redraw's time and what is wrong with it."""
    found = page.evaluate(_ENUMERATE, CONTROLS)
    report.findings += [f"a control of unknown kind: {x}" for x in found["loose"]]
    live = lambda c: bool(re.search(r"\blive\b", c["label"], re.I))              # noqa: E731
    for c in sorted(found["controls"], key=live):
        where = f"cell {c['cell']} {c['kind']} '{c['label']}'"
        limit = LIVE_LIMIT_S if live(c) else max(SETTLE_S, redraw_limit_s)
        since = _mark(page)
        t0 = time.time()
        why = _act(page, c)
        if why:
            report.findings.append(f"{where}: not changed: {why}")
            continue
        settled = _settle(page, since, limit)
        seconds = time.time() - t0
        got = _since(page, since)
        outs = [o for x in got["sent"] for o in got["out"][x["id"]]]
        bad = output_findings(outs)
        if not got["sent"]:
            bad.append("the change sent nothing to the kernel")
        elif not settled:
            bad.append(f"redraw not done in {limit:.0f} s")
        elif seconds > redraw_limit_s and not (live(c) and any(
                "widget" in m for o in outs for m in o["mimes"])):
            bad.append(f"redraw took {seconds:.1f} s > {redraw_limit_s:g} s"
                       + (" with no progress bar" if live(c) else ""))
        if got["sent"] and settled and c["has_panel"]:
            draws = _draws(outs)
            if draws:
                bad.append(draws)
            elif _panel_shows(page, c) == "nothing":
                bad.append("the kernel sent output but the page shows nothing in the panel")
        report.changes.append(Change(c["cell"], c["kind"], c["label"], round(seconds, 2)))
        report.findings += [f"{where}: {b}" for b in bad]
    _check_page(page, report, "after the changes", timeout_s=30, labels=False)
    if not found["controls"] and report.name.endswith(".ipynb"):
        src = (ROOT / "notebooks" / report.name).read_text() if (ROOT / "notebooks" / report.name).exists() else ""
        if re.search(r"\binteract(ive)?\(", src):
            report.findings.append("the lesson builds widgets but the page shows no control")


def check_notebook(browser, lab: Lab, path: Path, redraw_limit_s: float = REDRAW_LIMIT_S,
                   shot: Path | None = None) -> Report:
    """Open ``path`` (served by ``lab``), Run All, change every control; the kernel is shut down after."""
    report = Report(path.name)
    t0 = time.time()
    sources = ["".join(c["source"]) if c["cell_type"] == "code" else None
               for c in json.loads(path.read_text())["cells"]]
    page = open_notebook(browser, lab.url, path.name)
    try:
        if run_all(page, sources, report):                   # a kernel still busy would answer no control
            change_controls(page, report, redraw_limit_s)
        if shot is not None:
            page.screenshot(path=str(shot), full_page=False)
    finally:
        page.close()
        lab.shutdown_kernels()
    report.total_s = round(time.time() - t0, 1)
    return report


def time_table(reports) -> list[str]:
    """One line per notebook: Run All, its slowest cell, the controls changed, the slowest redraw, the total (s)."""
    lines = [f"{'notebook':34s} {'run all':>8s} {'slowest cell':>14s} {'controls':>8s} {'slowest redraw':>26s}"
             f" {'total':>7s}"]
    for r in reports:
        cell = max(r.cell_s.items(), key=lambda kv: kv[1], default=(-1, 0.0))
        ch = max(r.changes, key=lambda c: c.seconds, default=None)
        slow = f"{ch.seconds:.1f} ({ch.label[:16]})" if ch else "-"
        lines.append(f"{r.name:34s} {r.run_all_s:8.1f} {cell[1]:8.1f} (c{cell[0]:02d}) {len(r.changes):8d}"
                     f" {slow:>26s} {r.total_s:7.1f}")
    lines.append(f"{'all':34s} {sum(r.run_all_s for r in reports):8.1f} {'':14s}"
                 f" {sum(len(r.changes) for r in reports):8d} {'':>26s} {sum(r.total_s for r in reports):7.1f}")
    return lines
