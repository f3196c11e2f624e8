#!/usr/bin/env bash
# Install toyrl and its dev tools into the current Python environment.
# torch is installed first only where it is missing, as the CPU build torch==2.13.0
# (on the project's machines that wheel is on local disk; anywhere else pip fetches it).
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
if ! "$PY" -c "import torch" 2>/dev/null; then
  "$PY" -m pip install "torch==2.13.0"
fi
"$PY" -m pip install -e ".[dev]"
