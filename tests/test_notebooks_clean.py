"""Notebook hygiene (the notebooks themselves run under nbval): outputs stripped, a kernelspec, no SMOKE flag
(what CI runs is what a student runs), the projector style for every figure, exercises at the end with a solution copy, and imports only from toyrl and the plotting stack."""
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(ROOT.glob("[0-9][0-9]_*.ipynb"))
ALLOWED = {"toyrl", "numpy", "matplotlib", "ipywidgets", "IPython", "os", "math", "json", "pathlib", "time",
           "itertools", "collections", "dataclasses", "functools", "textwrap", "torch", "pandas", "warnings", "random",
           "tempfile", "sys", "copy", "tqdm"}


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
    assert "SMOKE" not in src and "os.environ" not in src, "no short CI version: the defaults are what runs"
    assert re.search(r"(?:^|;)\s*use\(\s*[\"']slides[\"']\s*\)", src, flags=re.M), "use(\"slides\") before the first figure"
    assert "assert " in src, "claims are checked by asserts"
    assert len(re.findall(r"check\(\s*[\"']\d\d\.", src)) >= 2, "2-3 exercises checked by toyrl.exercises.check"
    assert (ROOT / "solutions" / path.name).exists(), "a solution copy"
    for mod in re.findall(r"^\s*(?:from|import)\s+([A-Za-z_]\w*)", src, flags=re.M):
        assert mod in ALLOWED, f"{path.name} imports {mod}"


def _sync_module():
    import importlib.util
    spec = importlib.util.spec_from_file_location("sync_solutions", ROOT / "sync_solutions.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_solution_copy_is_the_lesson_with_answers(path):
    """The solution copy differs from its lesson only in its exercise cells (python notebooks/sync_solutions.py)."""
    sync = _sync_module()
    lesson, solution = json.loads(path.read_text()), json.loads((ROOT / "solutions" / path.name).read_text())
    src = lambda nb: ["".join(c["source"]) for c in nb["cells"]]                       # noqa: E731
    assert src(solution) == src(sync.synced(lesson, solution)), \
        f"solutions/{path.name} has drifted from its lesson: run python notebooks/sync_solutions.py {path.name}"
    ids = lambda nb: [sync.exercise_id(c) for c in nb["cells"] if sync.exercise_id(c)]   # noqa: E731
    assert ids(solution) == ids(lesson) and len(ids(lesson)) >= 2


def test_sync_refuses_a_missing_answer():
    sync = _sync_module()
    ex = {"cell_type": "code", "source": ["answer = ...\n", "check('02.drop_step', answer)"]}
    with pytest.raises(ValueError, match="02.drop_step"):
        sync.synced({"cells": [ex]}, {"cells": []})
    other = {"cell_type": "code", "source": ["x = 1"]}
    assert sync.exercise_id(other) is None and sync.exercise_id(ex) == "02.drop_step"
