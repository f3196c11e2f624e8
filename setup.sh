#!/usr/bin/env bash
# Install toyrl and its dev tools into the current Python environment.
# - torch is installed first only where it is missing, as the CPU build torch==2.13.0
#   (on the project's machines that wheel is on local disk; anywhere else pip fetches it);
# - verl 0.9.1 is installed without its heavy dependencies, only for the parity tests of
#   toyrl.port.verl (they skip if it is absent). Set TOYRL_NO_VERL=1 to leave it out.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
if ! "$PY" -c "import torch" 2>/dev/null; then
  "$PY" -m pip install "torch==2.13.0"
fi
"$PY" -m pip install -e ".[dev]"
if [ -z "${TOYRL_NO_VERL:-}" ]; then
  "$PY" -m pip install --no-deps "verl==0.9.1" "tensordict==0.10.0" \
    || echo "setup.sh: verl not installed; verl parity tests will skip"
fi
