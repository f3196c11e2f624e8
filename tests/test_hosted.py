"""Hosted notebooks: no address in any notebook or README is a placeholder; once the repository's address is set
(notebooks/hosted.py's REPO or TOYRL_REPO) every lesson carries its Colab / Binder badges and the install cell, and
until then none does; the cell does nothing on a local kernel and runs notebooks/install_hosted.sh on a hosted one,
and that script installs toyrl with a CPU-only torch into a fresh virtual environment (the slow test; it never
downloads torch: it skips where no local torch 2.13.0+cpu wheel is configured)."""
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
SOLUTIONS = sorted((ROOT / "notebooks" / "solutions").glob("[0-9][0-9]_*.ipynb"))
PUBLIC_TEXTS = [ROOT / "README.md", ROOT / "notebooks" / "README.md", *NOTEBOOKS, *SOLUTIONS]
"""what a reader clicks in: both READMEs, every lesson and its solutions copy"""
REPO_LINK = re.compile(r"(?:github\.com|githubusercontent\.com|colab\.research\.google\.com/github|"
                       r"mybinder\.org/v2/gh)/([^/\s)\]\"'`]+)/([^/\s)\]\"'`?#]+)", re.I)
"""a link to a GitHub repository (directly, via Colab or via Binder): group 1 the owner, group 2 the name"""


def _hosted():
    spec = importlib.util.spec_from_file_location("hosted", ROOT / "notebooks" / "hosted.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_notebook_and_readme_is_up_to_date():
    """python notebooks/hosted.py --check: badges and install cell as the script writes them."""
    stale = _hosted().stale()
    assert stale == [], f"run python notebooks/hosted.py: {[str(p.relative_to(ROOT)) for p in stale]}"


@pytest.mark.parametrize("path", PUBLIC_TEXTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_placeholder_address(path):
    """A dead link: an address with a stand-in owner ("OWNER/toyrl", "<you>/toyrl"), anywhere in the file's text
    (a notebook's sources and outputs alike); and no Colab / Binder link at all while no address is set."""
    hosted = _hosted()
    text = path.read_text()
    assert "OWNER/toyrl" not in text
    bad = [m[0] for m in REPO_LINK.finditer(text) if hosted.is_placeholder(m[1])]
    assert bad == [], f"{path.relative_to(ROOT)}: placeholder address(es) {bad}; set the address and run " \
                      "python notebooks/hosted.py"
    if not hosted.repo():
        assert "colab.research.google.com" not in text and "mybinder.org" not in text, \
            f"{path.relative_to(ROOT)}: a hosted link with no repository address set (python notebooks/hosted.py)"


def test_the_placeholder_check_catches_stand_ins():
    hosted = _hosted()
    found = [m[1] for m in REPO_LINK.finditer(
        "[x](https://colab.research.google.com/github/OWNER/toyrl/blob/main/a.ipynb) "
        "https://github.com/<you>/toyrl https://mybinder.org/v2/gh/YOUR_NAME/toyrl/main https://github.com/ada/toyrl")]
    assert found == ["OWNER", "<you>", "YOUR_NAME", "ada"]
    assert [hosted.is_placeholder(o) for o in found] == [True, True, True, False]


@pytest.mark.parametrize("value", ["OWNER/toyrl", "<you>/toyrl", "toyrl", "your-name/toyrl", "a b/toyrl"])
def test_a_placeholder_or_malformed_address_is_refused(monkeypatch, value):
    monkeypatch.setenv("TOYRL_REPO", value)
    with pytest.raises(ValueError, match="TOYRL_REPO"):
        _hosted().repo()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_badges_and_install_cell_only_with_an_address(path):
    """As committed: badges atop the first markdown cell and the install cell as the first code cell when the address
    is set; neither when it is not."""
    hosted = _hosted()
    cells = json.loads(path.read_text())["cells"]
    first = next(i for i, c in enumerate(cells) if c["cell_type"] == "markdown")
    code = [c for c in cells if c["cell_type"] == "code"]
    if not hosted.repo():
        assert not "".join(cells[first]["source"]).startswith(hosted.BADGE_START)
        assert all(c.get("id") != hosted.CELL_ID for c in cells)
        return
    assert "".join(cells[first]["source"]).startswith(hosted.badges(path.name) + "\n\n")
    assert hosted.colab_url(path.name).endswith(f"/blob/main/notebooks/{path.name}")
    assert code[0]["id"] == hosted.CELL_ID
    assert "".join(code[0]["source"]) == "".join(hosted.install_cell()["source"])


def test_with_hosted_adds_and_removes_idempotently_touching_only_the_first_cells(monkeypatch):
    hosted = _hosted()
    nb = json.loads(NOTEBOOKS[2].read_text())
    bare = {**nb, "cells": [c for c in nb["cells"] if c.get("id") != hosted.CELL_ID]}
    bare["cells"][0] = {**bare["cells"][0], "source": ["# A title\n", "\n", "text"]}
    code = next(i for i, c in enumerate(bare["cells"]) if c["cell_type"] == "code")
    monkeypatch.setenv("TOYRL_REPO", "ada/toyrl")
    once = hosted.with_hosted(bare, "02_echo_trap.ipynb")
    assert hosted.with_hosted(once, "02_echo_trap.ipynb") == once
    assert len(once["cells"]) == len(bare["cells"]) + 1 and once["cells"][code]["id"] == hosted.CELL_ID
    assert once["cells"][1:code] == bare["cells"][1:code] and once["cells"][code + 1:] == bare["cells"][code:]
    assert "".join(once["cells"][0]["source"]) == hosted.badges("02_echo_trap.ipynb") + "\n\n# A title\n\ntext"
    assert "https://github.com/ada/toyrl" in "".join(once["cells"][code]["source"])
    row = "| 02 | `02_echo_trap` | the Echo Trap |"
    badged = hosted.with_badged_rows(row)
    assert badged == f"| 02 | `02_echo_trap` {hosted.colab_badge('02_echo_trap.ipynb')} | the Echo Trap |"
    monkeypatch.delenv("TOYRL_REPO")
    monkeypatch.setattr(hosted, "REPO", "")
    assert hosted.with_hosted(once, "02_echo_trap.ipynb") == bare                 # no address: both come out again
    assert hosted.with_badged_rows(badged) == row
    with pytest.raises(ValueError, match="no repository address"):
        hosted.install_cell()


def _run_cell(monkeypatch, tmp_path, hosted_env: bool):
    """Run the install cell's source as a kernel would; returns the shell commands it asked IPython to run."""
    calls = []

    class Shell:
        user_ns = {"_exit_code": 0}                          # where IPython leaves a shell command's exit code

        def system(self, cmd):
            calls.append(cmd)

    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    if hosted_env:
        monkeypatch.setenv("TOYRL_HOSTED", "1")
    else:
        monkeypatch.delenv("TOYRL_HOSTED", raising=False)
    path = list(sys.path)
    source = "".join(_hosted().install_cell()["source"])
    exec(compile(source, "install-cell", "exec"), {"get_ipython": Shell})
    added = [p for p in sys.path if p not in path]
    sys.path[:] = path
    return calls, added


def test_the_install_cell_does_nothing_locally(monkeypatch, tmp_path):
    monkeypatch.setenv("TOYRL_REPO", "ada/toyrl")
    assert _run_cell(monkeypatch, tmp_path, hosted_env=False) == ([], [])


def test_the_install_cell_clones_and_runs_the_install_script_when_hosted(monkeypatch, tmp_path):
    monkeypatch.setenv("TOYRL_REPO", "ada/toyrl")
    calls, added = _run_cell(monkeypatch, tmp_path, hosted_env=True)
    src = str(tmp_path / "toyrl")
    assert calls == [f"git clone -q --depth 1 https://github.com/ada/toyrl {src}",
                     f"PYTHON={sys.executable} bash {src}/notebooks/install_hosted.sh {src}"]
    assert added == [src]


def _local_cpu_wheel():
    """A folder pip is configured to find links in that holds the torch 2.13.0+cpu wheel, or None."""
    dirs = os.environ.get("PIP_FIND_LINKS", "").split()
    out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    dirs += [v.strip("'\"") for line in out.splitlines() if "find-links" in line for v in line.split("=", 1)[1:]]
    return next((d for d in dirs if list(Path(d).glob("torch-2.13.0+cpu-*.whl"))), None)


@pytest.mark.slow
def test_install_command_in_a_fresh_venv(tmp_path):
    """bash notebooks/install_hosted.sh in a new venv (no system site packages) against a copy of this checkout:
    torch is the CPU build 2.13.0, no CUDA package comes with it, toyrl imports from the copy and lists its envs."""
    if _local_cpu_wheel() is None:
        pytest.skip("no local torch-2.13.0+cpu wheel in pip's find-links; this test never downloads torch")
    src = tmp_path / "toyrl-src"
    shutil.copytree(ROOT / "toyrl", src / "toyrl", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "notebooks/install_hosted.sh"):
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, src / name)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "venv")], check=True)
    py = str(tmp_path / "venv" / "bin" / "python")
    t0 = time.perf_counter()
    done = subprocess.run(["bash", str(src / "notebooks" / "install_hosted.sh")], capture_output=True, text=True,
                          env={**env, "PYTHON": py, "TOYRL_TORCH_INDEX": ""}, stdin=subprocess.DEVNULL, timeout=900)
    seconds = time.perf_counter() - t0
    assert done.returncode == 0, done.stderr[-2000:]
    assert "toyrl installed with torch 2.13.0+cpu (CPU)" in done.stdout
    probe = ("import torch, toyrl, importlib.metadata as m; print(torch.__version__, torch.version.cuda, "
             "toyrl.__file__, sorted(d.metadata['Name'] for d in m.distributions() "
             "if d.metadata['Name'].lower().startswith(('nvidia', 'triton'))))")
    out = subprocess.run([py, "-c", probe], capture_output=True, text=True, env=env, cwd=tmp_path, check=True)
    version, cuda, where, cuda_pkgs = out.stdout.split(" ", 3)
    assert (version, cuda, cuda_pkgs.strip()) == ("2.13.0+cpu", "None", "[]")
    assert where == str(src / "toyrl" / "__init__.py")
    envs = subprocess.run([py, "-m", "toyrl", "envs"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert envs.returncode == 0 and "gridworld" in envs.stdout
    print(f"install_hosted.sh in a fresh venv: {seconds:.0f} s")


def test_binder_builds_with_the_same_install_command():
    """binder/ replaces the root environment.yml on Binder (whose dev extra would bring a CUDA torch)."""
    post = (ROOT / "binder" / "postBuild").read_text()
    assert 'bash notebooks/install_hosted.sh "$PWD"' in post.splitlines()
    assert os.access(ROOT / "binder" / "postBuild", os.X_OK)
    assert (ROOT / "binder" / "runtime.txt").read_text().strip() == "python-3.11"
