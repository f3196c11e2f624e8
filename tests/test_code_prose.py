"""The code speaks of itself only: no comment or docstring in toyrl/, tests/ or benchmarks/ tells the project's
history (numbered issues, an earlier state of the code, what a session measured before).

``history_findings`` is the pure scan (tested on a hand-made source below); the last test applies it to every file.
The two files whose subject is these words (the lessons' prose rule and this test) and the LLM claim module, which
is being rewritten, are left out.
"""
from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SKIP = {"tests/test_lesson_prose.py", "tests/test_code_prose.py", "toyrl/lab/claims/llm.py"}

HISTORY = re.compile(r"\bissue \d+|[(]issue\b|earlier[ ]version|kept as history|\bpreviously\b|previous session"
                     r"|this session", re.I)
"""words about the project's past, which a reader of the code has no use for"""


def prose(source: str) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring of a Python ``source``."""
    out = [(t.start[0], t.string) for t in tokenize.generate_tokens(io.StringIO(source).readline)
           if t.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None:
                out.append((node.body[0].lineno, doc))
    return out


def history_findings(source: str) -> list[str]:
    """"line N: 'words'" for every history phrase in the comments and docstrings of ``source``.

    Example: a comment "# fixed in iss" "ue 3" on line 2 -> ["line 2: 'iss" "ue 3'"].
    """
    return [f"line {n}: {m.group(0)!r}" for n, text in prose(source) for m in HISTORY.finditer(text)]


def test_scan_finds_history_in_comments_and_docstrings_only():
    src = ('"""Speeds it up (iss' 'ue 3)."""\n'
           'def f():\n    """An earlier' ' version summed twice."""\n'
           '    return "issue" " 4"  # kept as' ' history\n')
    assert history_findings(src) == ["line 4: 'kept as history'", "line 1: '(iss" "ue'", "line 3: 'earlier" " version'"]
    assert history_findings('x = "see iss' 'ue 9"  # the ratio\n') == []          # a string is not prose


def package_files() -> list[Path]:
    files = [p for d in ("toyrl", "tests", "benchmarks") for p in sorted((ROOT / d).rglob("*.py"))]
    return [p for p in files if str(p.relative_to(ROOT)) not in SKIP]


@pytest.mark.parametrize("path", package_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_code_tells_no_history(path):
    found = history_findings(path.read_text())
    assert not found, f"{path.relative_to(ROOT)}: " + "; ".join(found)
