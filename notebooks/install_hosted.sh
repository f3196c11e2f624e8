#!/usr/bin/env bash
# Install toyrl from a checkout, with the CPU build of torch 2.13.0, into the Python that runs a lesson on a hosted
# Jupyter service. The one install command of the hosted notebooks: run it in a cell after uploading the checkout
# (README, "Running the lessons"); once the repository's address is set (notebooks/hosted.py), each lesson's first
# code cell runs it on Colab (or wherever TOYRL_HOSTED=1) and Binder after its build (binder/postBuild);
# tests/test_hosted.py runs it in a fresh virtual environment.
#
#   bash notebooks/install_hosted.sh [CHECKOUT]     CHECKOUT: the toyrl folder (default: the one this script is in)
#
# - torch: pinned as 2.13.0+cpu, the CPU build (the version the notebooks' asserted numbers were measured with);
#   the "+cpu" local version exists only on PyTorch's CPU index and in local wheel caches, so a CUDA build can never
#   be the one chosen. TOYRL_TORCH_INDEX: where pip looks for it besides its configured sources (default PyTorch's
#   CPU index; set it empty to use only pip's own configuration, e.g. a local wheel folder in PIP_FIND_LINKS).
# - toyrl: `pip install -e CHECKOUT` (editable: the lessons read data/ from the checkout), with its dependencies.
# - PYTHON: the interpreter to install into (default python3; a lesson passes its kernel's).
set -euo pipefail
SRC=${1:-"$(cd "$(dirname "$0")/.." && pwd)"}
PY=${PYTHON:-python3}
INDEX=${TOYRL_TORCH_INDEX-https://download.pytorch.org/whl/cpu}
[ -f "$SRC/pyproject.toml" ] || { echo "install_hosted.sh: $SRC is not a toyrl checkout (no pyproject.toml)" >&2; exit 2; }
"$PY" -m pip install -q "torch==2.13.0+cpu" ${INDEX:+--extra-index-url "$INDEX"}
"$PY" -m pip install -q -e "$SRC"
"$PY" -c "import torch, toyrl; assert torch.version.cuda is None, 'not a CPU build'; print('toyrl installed with torch', torch.__version__, '(CPU)')"
