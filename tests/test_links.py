"""Every relative link of the front page and the docs points at something: README.md, docs/*.md and notebooks/*.md,
each link's file (and, for a ``#anchor`` into a markdown file, its heading) must exist. The README stays a front
page: at most about 200 lines, the two commands, one figure."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "notebooks").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
"""a markdown link or image: group 1 its target"""
WRITTEN_ELSEWHERE = ("docs/your_env.md", "docs/long_jobs.md", "docs/architecture.md", "examples/grpo_gridworld.py",
                     "examples/gigpo_gridworld.py")
"""pages other developers are writing at the same time: a link to one of these five passes while it does not exist
yet (and is checked like any other once it does); nothing else is skipped"""


def links(text: str) -> list:
    """The relative targets of a markdown text's links (web, mail and same-page anchors left out), code spans and
    fenced code blocks excluded. Example: "[a](docs/x.md#y) [b](https://e.org) `[c](z)`" -> ["docs/x.md#y"]."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:|#", t)]


def anchors(md: str) -> set:
    """The anchors of a markdown file's headings, as GitHub makes them: lower case, punctuation dropped, spaces to
    hyphens. Example: "## What replays exactly, and what holds" -> {"what-replays-exactly-and-what-holds"}."""
    out = set()
    for h in re.findall(r"^#+\s+(.*)$", md, re.M):
        slug = re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
        out.add(slug)
    return out


def test_the_link_and_anchor_rules_by_hand():
    assert links("[a](docs/x.md#y) [b](https://e.org) ![c](img.png) [d](#top) `[e](z.md)`\n```\n[f](g)\n```") == \
        ["docs/x.md#y", "img.png"]
    assert anchors("# Title\n## What replays exactly, and what holds\n") == {"title", "what-replays-exactly-and-what-holds"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    broken = []
    for target in links(page.read_text()):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve()
        rel = dest.relative_to(ROOT).as_posix() if dest.is_relative_to(ROOT) else str(dest)
        if not dest.exists():
            if rel not in WRITTEN_ELSEWHERE:
                broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)}: links to nothing: {broken}"


def test_every_docs_page_is_linked_from_the_front_page():
    text = (ROOT / "README.md").read_text()
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f"](docs/{page.name})" in text, f"README.md does not link docs/{page.name}"


def test_the_front_page_is_short():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    assert text.count("![") == 1                                               # one figure
    for moved in ("previous session", "target 3x", "missed", "## Claims ledger", "## Stability scorecard"):
        assert moved not in text, moved
