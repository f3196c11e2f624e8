"""Notebook hygiene (the notebooks themselves run under nbval): outputs stripped, a kernelspec, the SMOKE
flag, exercises at the end with a solution copy, and imports only from toyrl and the plotting stack."""
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(ROOT.glob("[0-9][0-9]_*.ipynb"))
ALLOWED = {"toyrl", "numpy", "matplotlib", "ipywidgets", "IPython", "os", "math", "json", "pathlib", "time",
           "itertools", "collections", "dataclasses", "functools", "textwrap", "torch", "pandas", "warnings", "random",
           "tempfile", "sys", "copy"}


def cells(path):
    return json.loads(path.read_text())["cells"]


def code(path):
    return ["".join(c["source"]) for c in cells(path) if c["cell_type"] == "code"]


@pytest.mark.parametrize("path", NOTEBOOKS + sorted((ROOT / "solutions").glob("*.ipynb")), ids=lambda p: p.name)
def test_outputs_stripped_and_kernelspec(path):
    nb = json.loads(path.read_text())
    assert nb["metadata"].get("kernelspec", {}).get("name") == "python3"
    for c in nb["cells"]:
        if c["cell_type"] == "code":
            assert not c.get("outputs") and c.get("execution_count") is None, f"{path.name}: stored outputs"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_structure(path):
    src = "\n".join(code(path))
    assert 'SMOKE = "CI" in os.environ' in src or "SMOKE = 'CI' in os.environ" in src
    assert "assert " in src, "claims are checked by asserts"
    assert len(re.findall(r"check\(\s*[\"']\d\d\.", src)) >= 2, "2-3 exercises checked by toyrl.exercises.check"
    assert (ROOT / "solutions" / path.name).exists(), "a solution copy"
    for mod in re.findall(r"^\s*(?:from|import)\s+([A-Za-z_]\w*)", src, flags=re.M):
        assert mod in ALLOWED, f"{path.name} imports {mod}"
