"""Hosted notebooks: every lesson carries its Colab / Binder badges and the install cell (notebooks/hosted.py), the
cell does nothing on a local kernel and runs notebooks/install_hosted.sh on a hosted one, and that script installs
toyrl with a CPU-only torch into a fresh virtual environment (the slow test; it never downloads torch: it skips
where no local torch 2.13.0+cpu wheel is configured)."""
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def _hosted():
    spec = importlib.util.spec_from_file_location("hosted", ROOT / "notebooks" / "hosted.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_notebook_and_readme_is_up_to_date():
    """python notebooks/hosted.py --check: badges and install cell as the script writes them."""
    stale = _hosted().stale()
    assert stale == [], f"run python notebooks/hosted.py: {[str(p.relative_to(ROOT)) for p in stale]}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_the_install_cell_follows_the_badged_first_cell(path):
    hosted = _hosted()
    cells = json.loads(path.read_text())["cells"]
    first = next(i for i, c in enumerate(cells) if c["cell_type"] == "markdown")
    assert "".join(cells[first]["source"]).startswith(hosted.badges(path.name) + "\n\n")
    assert hosted.colab_url(path.name).endswith(f"/blob/main/notebooks/{path.name}")
    code = [c for c in cells if c["cell_type"] == "code"]
    assert code[0]["id"] == hosted.CELL_ID and cells[first + 1] is code[0]
    assert "".join(code[0]["source"]) == "".join(hosted.install_cell()["source"])


def test_with_hosted_is_idempotent_and_touches_only_the_first_cells():
    hosted = _hosted()
    nb = json.loads(NOTEBOOKS[2].read_text())
    bare = {**nb, "cells": [c for c in nb["cells"] if c.get("id") != hosted.CELL_ID]}
    bare["cells"][0] = {**bare["cells"][0], "source": ["# A title\n", "\n", "text"]}
    once = hosted.with_hosted(bare, "02_echo_trap.ipynb")
    assert hosted.with_hosted(once, "02_echo_trap.ipynb") == once
    assert once["cells"][2:] == bare["cells"][1:] and len(once["cells"]) == len(bare["cells"]) + 1
    assert "".join(once["cells"][0]["source"]) == hosted.badges("02_echo_trap.ipynb") + "\n\n# A title\n\ntext"


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
    assert _run_cell(monkeypatch, tmp_path, hosted_env=False) == ([], [])


def test_the_install_cell_clones_and_runs_the_install_script_when_hosted(monkeypatch, tmp_path):
    calls, added = _run_cell(monkeypatch, tmp_path, hosted_env=True)
    src = str(tmp_path / "toyrl")
    assert calls == [f"git clone -q --depth 1 https://github.com/{_hosted().REPO} {src}",
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
