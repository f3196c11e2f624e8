"""setup.sh: the two Quickstart commands (`bash setup.sh demo`, `bash setup.sh test`) and CI share it.

The environment logic runs against a copy of setup.sh with a stub `python3` first on PATH (it logs each call and
makes a stub venv), so no test here installs anything."""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

STUB = r"""#!/bin/bash
# a stand-in python: logs who was called, with what, and whether CI was set; -m venv DIR makes DIR/bin/python (this
# stub again) unless STUB_NO_VENV is set (then it leaves a half-made DIR, as Debian's python3 without python3-venv)
echo "$0 CI=${CI-unset} $*" >> "$STUB_LOG"
echo "OMP_NUM_THREADS=${OMP_NUM_THREADS-unset}" >> "$STUB_LOG.omp"
if [ "$1 $2" = "-m venv" ]; then
  mkdir -p "$3/bin"
  if [ -n "${STUB_NO_VENV:-}" ]; then echo "Error: ensurepip is not available" >&2; exit 1; fi
  cp "$0" "$3/bin/python"
fi
case " $* " in *" -m pytest -n auto"*) exit "${STUB_PYTEST_RC:-0}" ;; esac
exit 0
"""


def test_unknown_job_is_one_line_and_exit_2():
    r = subprocess.run(["bash", str(ROOT / "setup.sh"), "bogus"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "setup.sh: unknown job 'bogus'; valid: install (default), demo, test, lab"]


def test_quickstart_is_exactly_the_two_commands_and_ci_runs_the_test_one():
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"## Quickstart\n+```bash\n(.*?)```", readme, re.S)[1]
    commands = [line.split("#")[0].strip() for line in block.strip().splitlines()]
    assert commands == ["bash setup.sh demo", "bash setup.sh test"]
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()
    assert ci[-1] == "bash setup.sh test"


def test_ci_builds_a_fresh_venv_outside_the_checkout():
    """CI must not see packages installed by hand: a new venv each run, no system site packages, not in the repo;
    setup.sh then uses that active venv (VIRTUAL_ENV is set by its activate script)."""
    ci = (ROOT / ".ci" / "run").read_text()
    assert "python3 -m venv" in ci and "--system-site-packages" not in ci
    assert 'mktemp -d "${TMPDIR:-/tmp}/' in ci and "source \"$VENV_ROOT/venv/bin/activate\"" in ci
    assert "pip install" not in ci.split("bash setup.sh test")[0].replace("apt-get install", "")


@pytest.fixture
def sandbox(tmp_path):
    """A copy of setup.sh and pyproject.toml, a stub python3 first on PATH, no environment active."""
    work = tmp_path / "checkout"
    work.mkdir()
    for name in ("setup.sh", "pyproject.toml"):
        (work / name).write_text((ROOT / name).read_text())
    (work / "tests").mkdir()
    for name in ("test_browser.py", "test_parallel.py"):                 # the tests that start servers
        (work / "tests" / name).write_text("")
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    (stubs / "python3").write_text(STUB)
    (stubs / "python3").chmod(0o755)
    log = tmp_path / "calls.log"
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "CONDA_PREFIX", "PYTHON", "CI", "PYTHONPATH", "OMP_NUM_THREADS")}
    env.update(PATH=f"{stubs}:/usr/bin:/bin", STUB_LOG=str(log), TOYRL_CHROMIUM=str(tmp_path / "no-chromium"))

    def run(*args, **extra):
        r = subprocess.run(["bash", str(work / "setup.sh"), *args], capture_output=True, text=True, timeout=60,
                           env={**env, **extra}, stdin=subprocess.DEVNULL)
        calls = log.read_text().replace(f"{work}/", "").splitlines() if log.exists() else []   # paths from work
        log.unlink(missing_ok=True)
        return r, calls

    return work, stubs, run


def test_no_env_active_creates_dot_venv_and_runs_the_demo_there(sandbox):
    work, _, run = sandbox
    r, calls = run("demo")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == ("setup.sh: no virtual or conda environment active: created .venv, "
                                        "installing and running there (source .venv/bin/activate to use it yourself)")
    venv_py = ".venv/bin/python"
    assert calls[0].endswith("python3 CI=unset -m venv .venv")
    assert any(c.startswith(venv_py) and c.endswith("-m pip install -q -e .[dev]") for c in calls)
    assert calls[-1] == f"{venv_py} CI=unset -m toyrl demo"
    assert all(c.startswith(venv_py) for c in calls[1:]), calls       # everything after the venv runs inside it
    r, calls = run("test")                                              # a second run finds the venv
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0].startswith("setup.sh: no virtual or conda environment active: using .venv")
    assert not any("-m venv" in c or "pip install -q -e" in c for c in calls)   # nothing new to install
    # the lessons run at their defaults: the test job sets no CI flag; the suite runs in parallel by file, then the
    # tests that start servers (JupyterLab + Chromium, Ray) one at a time
    assert calls[-2:] == [f"{venv_py} CI=unset -m pytest -n auto --dist loadfile --ignore=tests/test_browser.py "
                          "--ignore=tests/test_parallel.py",
                          f"{venv_py} CI=unset -m pytest tests/test_browser.py tests/test_parallel.py"]
    omp = (work.parent / "calls.log.omp").read_text().splitlines()
    assert omp[-2:] == ["OMP_NUM_THREADS=1"] * 2                        # one torch thread per worker
    r, calls = run("test", STUB_PYTEST_RC="1")                          # the parallel part fails: the rest still runs
    assert r.returncode == 1 and calls[-1].endswith("-m pytest tests/test_browser.py tests/test_parallel.py")
    r, calls = run("test", "tests/test_setup.py", CI="true")            # arguments: one run, as given
    assert calls[-1] == f"{venv_py} CI=true -m pytest -n auto --dist loadfile tests/test_setup.py"
    r, calls = run("lab")
    root = " --allow-root" if os.getuid() == 0 else ""                  # JupyterLab refuses root without it
    assert calls[-1] == f"{venv_py} CI=unset -m jupyterlab notebooks/00_start_here.ipynb{root}"


def test_no_venv_module_is_one_line_naming_the_package(sandbox):
    work, _, run = sandbox
    r, calls = run("demo", STUB_NO_VENV="1")
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [
        "setup.sh: python3 -m venv is unavailable: install the python3-venv package (e.g. apt-get install "
        "python3-venv), or activate an environment of your own"]
    assert not (work / ".venv").exists()                                # no half-made venv left for the next run
    assert len(calls) == 1


@pytest.mark.parametrize("var", ["VIRTUAL_ENV", "CONDA_PREFIX"])
def test_an_active_environment_is_used_as_it_is(sandbox, var, tmp_path):
    work, stubs, run = sandbox
    r, calls = run("demo", **{var: str(tmp_path / "someenv")})
    assert r.returncode == 0, r.stderr
    assert not (work / ".venv").exists() and "setup.sh:" not in r.stdout
    assert calls and all(c.startswith(f"{stubs}/python3 ") for c in calls)
    assert not any("-m venv" in c for c in calls) and calls[-1].endswith("-m toyrl demo")


def test_with_chromium_the_lessons_run_in_the_browser_and_nbval_runs_their_solutions(sandbox, tmp_path):
    work, _, run = sandbox
    chromium = tmp_path / "chromium"
    chromium.write_text("#!/bin/sh\n")
    chromium.chmod(0o755)
    run("test", TOYRL_CHROMIUM=str(chromium))                            # makes the venv
    r, calls = run("test", TOYRL_CHROMIUM=str(chromium))
    assert r.returncode == 0, r.stderr
    assert "setup.sh: lessons run in the browser test (Chromium), their solution copies under nbval" in r.stdout
    assert calls[-2].endswith("-m pytest -n auto --dist loadfile --ignore=tests/test_browser.py "
                              "--ignore=tests/test_parallel.py --ignore-glob=notebooks/[0-9][0-9]_*.ipynb")
    assert calls[-1].endswith("-m pytest tests/test_browser.py tests/test_parallel.py")
