"""Rebuild each notebooks/solutions/NN_*.ipynb from its lesson: the lesson's cells, except that every
exercise cell (a code cell calling ``check("NN.id", ...)``) takes the solution copy's cell for the same
exercise id. Run after editing a lesson: ``python notebooks/sync_solutions.py [NN_name.ipynb ...]``;
``tests/test_notebooks_clean.py`` fails while a solution copy has drifted from its lesson."""
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent


def exercise_id(cell: dict):
    """The id of the exercise a code cell checks ("02.drop_step"), or None for any other cell."""
    if cell["cell_type"] != "code":
        return None
    found = re.findall(r"check\(\s*['\"](\d\d\.\w+)", "".join(cell["source"]))
    return found[0] if found else None


def synced(lesson: dict, solution: dict) -> dict:
    """``lesson`` with each exercise cell replaced by the solution's cell of the same id."""
    answers = {exercise_id(c): c for c in solution["cells"] if exercise_id(c)}
    missing = [exercise_id(c) for c in lesson["cells"] if exercise_id(c) and exercise_id(c) not in answers]
    if missing:
        raise ValueError(f"the solution copy has no answer for {missing}")
    cells = [answers[exercise_id(c)] if exercise_id(c) else c for c in lesson["cells"]]
    return {**lesson, "cells": cells}


if __name__ == "__main__":
    for name in sys.argv[1:] or sorted(p.name for p in ROOT.glob("[0-9][0-9]_*.ipynb")):
        lesson = json.loads((ROOT / name).read_text())
        path = ROOT / "solutions" / name
        path.write_text(json.dumps(synced(lesson, json.loads(path.read_text())), indent=1, ensure_ascii=False) + "\n")
        print(f"synced {path.relative_to(ROOT.parent)}")
