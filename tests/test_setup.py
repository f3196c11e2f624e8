"""setup.sh: the two Quickstart commands (`bash setup.sh demo`, `bash setup.sh test`) and CI share it."""
from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_unknown_job_is_one_line_and_exit_2():
    r = subprocess.run(["bash", str(ROOT / "setup.sh"), "bogus"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == ["setup.sh: unknown job 'bogus'; valid: install (default), demo, test"]


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()
    assert "bash setup.sh test" in readme and "bash setup.sh demo" in readme
    assert ci[-1] == "bash setup.sh test"


def test_ci_builds_a_fresh_venv_outside_the_checkout():
    """CI must not see packages installed by hand: a new venv each run, no system site packages, not in the repo."""
    ci = (ROOT / ".ci" / "run").read_text()
    assert "python3 -m venv" in ci and "--system-site-packages" not in ci
    assert 'mktemp -d "${TMPDIR:-/tmp}/' in ci and "source \"$VENV_ROOT/venv/bin/activate\"" in ci
    assert "pip install" not in ci.split("bash setup.sh test")[0].replace("apt-get install", "")
