"""The lessons' prose speaks to a student about what the lesson computes, and nothing else.

- A result is printed from the run's numbers, never typed into markdown: a markdown cell holds no result-like
  number (a decimal, a percentage, "N of M", an "Nx" ratio) outside a ``code span`` or ``$math$``. Settings stay
  plain integers ("16 turns", "3 seeds") or go in code spans (``eps=0.2``).
- No project history or test machinery in prose (numbered issues, "an earlier" + " version", CI, SMOKE, ...).
- No SMOKE flag in code: what CI runs is what a student runs.
- Every lesson opens with a teacher's box (its second cell): goals, run-all time, prerequisites, the key figure.

``prose_findings`` is the pure scan (tested on hand-made cells below); the lesson test applies it to every lesson.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

LESSONS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("[0-9][0-9]_*.ipynb"))

RESULT = re.compile(r"(?<![\w.\-/])(\d+\.\d+|\d+(?:\.\d+)?\s?%|\d+ of \d+|\d+(?:\.\d+)?x)(?![\w.]*\d)(?![\w])")
"""a number that reads as a measured result: 0.72, 45%, 4 of 6, 2.5x (not 4x4, not v1.2.3)"""

HISTORY = re.compile(r"\bissue \d+|kept as history|an earlier[ ]version|has been lent|was lent|\bSMOKE\b|\bCI\b"
                     r"|\bsession\b|\bpreviously\b|\bused to\b|\bno GPU\b", re.I)
"""words about the project's past or its test runs, which a student has no use for"""

HIDE = re.compile(r"`[^`]*`|\$\$.*?\$\$|\$[^$]*\$|\]\([^)]*\)|arXiv[: ]\s*\d+\.\d+|<[^>]+>|^#+\s*[\d.]+"
                  r"|\b[Ee]xercise\s+\d+(?:\.\d+)*|\b95% (?:CI|confidence)", re.S | re.M)
"""what the scan ignores: code spans, math, link targets, arXiv ids, HTML tags, section and exercise numbers
("## 3.1", "Exercise 6.2") and the name of a 95% confidence interval"""

BOX_FIELDS = ("**Goals:**", "**Run-all:**", "**Prerequisites:**", "**The figure that carries the lesson:**")


def prose_findings(cells: list) -> list[str]:
    """Every result-like number and history word in the markdown ``cells`` (nbformat cell dicts), and every
    SMOKE flag in the code cells, as "cell N: 'text'" strings (cell numbers 0-based).

    Example: [{"cell_type": "markdown", "source": "GRPO ends at 0.41, kept as history."}]
    -> ["cell 0: '0.41'", "cell 0: 'kept as history'"].
    """
    found = []
    for i, c in enumerate(cells):
        src = "".join(c["source"])
        if c["cell_type"] == "markdown":
            bare = HIDE.sub(" ", src)
            found += [f"cell {i}: {m.group(0)!r}" for m in RESULT.finditer(bare)]
            found += [f"cell {i}: {m.group(0)!r}" for m in HISTORY.finditer(bare)]
        elif c["cell_type"] == "code":
            found += [f"cell {i}: {m.group(0)!r}" for m in re.finditer(r"\bSMOKE\b", src)]
    return found


def teacher_box_missing(cells: list) -> list[str]:
    """The fields of the teacher's box that the lesson's second cell lacks (all of them when it is not a box)."""
    if len(cells) < 2 or cells[1]["cell_type"] != "markdown":
        return list(BOX_FIELDS)
    src = "".join(cells[1]["source"])
    if not src.lstrip().startswith("> **Teacher's box**"):
        return list(BOX_FIELDS)
    return [f for f in BOX_FIELDS if f not in src]


def _md(text):
    return {"cell_type": "markdown", "source": text}


@pytest.mark.parametrize("text,hits", [
    ("GRPO ends at 0.41 while GiGPO ends higher.", ["'0.41'"]),
    ("it collapsed on 4 of 6 seeds", ["'4 of 6'"]),
    ("a 45% drop, 2.5x slower, 3x the tokens", ["'45%'", "'2.5x'", "'3x'"]),
    ("An earlier" " version kept as history (iss" "ue 12); in CI the SMOKE run", ["'An earlier" " version'",
                                                                           "'kept as history'", "'iss" "ue 12'",
                                                                           "'CI'", "'SMOKE'"]),
])
def test_scan_flags_results_and_history(text, hits):
    got = prose_findings([_md(text)])
    assert [h.split(": ", 1)[1] for h in got] == hits


@pytest.mark.parametrize("text", [
    "a GridWorld 4x4 with 16 turns and 3 seeds", "`eps=0.2` and `lr 3e-3`", "$\\rho = 0.5$ and $$x = 1.5$$",
    "RAGEN-2 (arXiv 2604.06268)", "[glossary](GLOSSARY.md#template-collapse)", "## 3. The ratio", "lessons 00, 01",
    "one of the seeds", "the 2 cores of a laptop", "### 6.1 Predict", "Exercise 6.2: compute", "a 95% CI over seeds",
])
def test_scan_allows_settings_code_math_and_citations(text):
    assert prose_findings([_md(text)]) == []


def test_scan_flags_smoke_in_code_and_teacher_box_fields():
    code = {"cell_type": "code", "source": "SMOKE = 'CI' in os.environ\n"}
    assert prose_findings([code]) == ["cell 0: 'SMOKE'"]
    box = _md("> **Teacher's box**\n> - **Goals:** (1) a\n> - **Run-all:** about 1 min\n"
              "> - **Prerequisites:** 00\n> - **The figure that carries the lesson:** the heatmap")
    assert teacher_box_missing([_md("# title"), box]) == []
    assert teacher_box_missing([_md("# title"), _md(box["source"].replace("> - **Run-all:** about 1 min\n", ""))]) \
        == ["**Run-all:**"]
    assert teacher_box_missing([_md("# title"), _md("some text")]) == list(BOX_FIELDS)


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_lesson_prose_has_no_results_history_or_smoke(path):
    cells = json.loads(path.read_text())["cells"]
    found = prose_findings(cells)
    assert not found, f"{path.name}: " + "; ".join(found)


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_lesson_opens_with_a_teachers_box(path):
    cells = json.loads(path.read_text())["cells"]
    assert teacher_box_missing(cells) == [], f"{path.name}: the second cell's teacher's box lacks {teacher_box_missing(cells)}"


def glossary_anchors(text: str) -> set[str]:
    """The anchors of a markdown file's level-2 headings, as GitHub and JupyterLab make them from a lowercase
    heading: spaces to hyphens. Example: "## template collapse" -> {"template-collapse"}."""
    return {h.strip().replace(" ", "-") for h in re.findall(r"^## (.+)$", text, flags=re.M)}


def test_glossary_anchors_from_headings():
    assert glossary_anchors("# Glossary\n## template collapse\ntext\n## grpo\n") == {"template-collapse", "grpo"}


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_every_glossary_link_has_its_entry(path):
    anchors = glossary_anchors((path.parent / "GLOSSARY.md").read_text())
    links = set(re.findall(r"GLOSSARY\.md#([\w\-]+)", path.read_text()))
    assert links <= anchors, f"{path.name} links to glossary entries that do not exist: {sorted(links - anchors)}"
