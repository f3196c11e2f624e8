"""Open each lesson on a hosted Jupyter service in one click, once the repository has a public address: Colab and
Binder badges, and a first code cell that installs toyrl there (``notebooks/install_hosted.sh``, a CPU-only torch)
and does nothing on your own machine. Until the address is set there are no badges and no install cell (a badge to
nowhere is a dead link); the README says how to run the lessons locally or on any hosted Jupyter from an upload.

The address is set in one place: ``REPO`` below ("owner/name" on GitHub), or the environment variable ``TOYRL_REPO``
for one run of this script (it wins over ``REPO``). Then ``python notebooks/hosted.py`` (after changing it, or after
adding a lesson) rewrites, in place and idempotently, only

- the first line of each notebook's first markdown cell (the badges; lessons and their ``solutions/`` copies, so a
  solution copy stays its lesson with answers: ``sync_solutions.py``),
- the install cell (id ``hosted-install``), placed right before the notebook's first other code cell,
- the notebook column of the lesson tables in ``README.md`` and ``notebooks/README.md`` (a Colab badge per row).

With no address, the same command removes all three. Each file is re-read immediately before it is written, and left
untouched when nothing changes. ``python notebooks/hosted.py --check`` only lists the files that are out of date
(exit 1 if any; ``tests/test_hosted.py`` runs it).
"""
import json
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
REPO = ""
"""GitHub owner/name of the repository the badges open and the install cell clones; empty: not published yet (no
badges, no install cell). Set it when publishing, or pass TOYRL_REPO, then run this script."""
BRANCH = "main"
"""the branch the badges open"""
CELL_ID = "hosted-install"
"""the install cell's id (nbformat 4.5 cell ids): how a rerun finds it"""
BADGE_START = "[![Open in Colab]"
"""how the badge line of a first markdown cell starts: how a rerun finds it"""
ROW = re.compile(r"^\| (\d\d) \| `(\d\d_\w+)(\.ipynb)?`(?: \[!\[Open in Colab\]\([^)]*\)\]\([^)]*\))? \|", re.M)
"""a lesson row of a README table: | NN | `NN_name` [badge] | ... (the notebook cell, with or without a badge)"""
PLACEHOLDERS = ("owner", "user", "username", "your", "yourname", "your-name", "your_name", "you", "org", "name",
                "example", "xxx", "todo", "tbd")
"""owners that stand for "someone": a GitHub address with one of these is a placeholder, never a real repository"""
_REPO_FORM = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}$")


def is_placeholder(owner: str) -> bool:
    """Whether a GitHub owner is a stand-in ("OWNER", "<you>", "{user}", "YOUR_NAME", ...), not an account."""
    bare = owner.strip("<>{}[]$").lower()
    return bare in PLACEHOLDERS or bare.startswith("your") or owner != owner.strip("<>{}[]$")


def repo() -> str:
    """The repository's address: TOYRL_REPO if set, else REPO; "" while unpublished. Example: with
    ``TOYRL_REPO=ada/toyrl`` in the environment, ``repo() == "ada/toyrl"``; with ``TOYRL_REPO=OWNER/toyrl`` it raises.
    """
    value = os.environ.get("TOYRL_REPO", REPO).strip()
    if value and (not _REPO_FORM.match(value) or is_placeholder(value.split("/")[0])):
        raise ValueError(f"TOYRL_REPO / hosted.REPO must be a real GitHub owner/name such as 'ada/toyrl', "
                         f"got {value!r}")
    return value


def _address() -> str:
    """repo(), for the functions that write a link: a ValueError while no address is set."""
    value = repo()
    if not value:
        raise ValueError("no repository address: set REPO in notebooks/hosted.py or TOYRL_REPO=owner/name")
    return value


INSTALL = '''\
# Hosted Jupyter (Colab; elsewhere set TOYRL_HOSTED=1): fetch toyrl and install it with a CPU-only torch
# (notebooks/install_hosted.sh, a minute or two). On your own machine this cell does nothing.
import os, sys
if "google.colab" in sys.modules or os.environ.get("TOYRL_HOSTED"):
    hosted_src = os.path.abspath("toyrl")
    if not os.path.isdir(hosted_src):
        get_ipython().system(f"git clone -q --depth 1 https://github.com/{repo} {{hosted_src}}")
    get_ipython().system(f"PYTHON={{sys.executable}} bash {{hosted_src}}/notebooks/install_hosted.sh {{hosted_src}}")
    assert get_ipython().user_ns["_exit_code"] == 0, "the install failed: its output is above"
    sys.path.insert(0, hosted_src)   # this kernel started before the install: import toyrl from the clone'''


def colab_url(name: str) -> str:
    return f"https://colab.research.google.com/github/{_address()}/blob/{BRANCH}/notebooks/{name}"


def binder_url(name: str) -> str:
    return f"https://mybinder.org/v2/gh/{_address()}/{BRANCH}?labpath=notebooks%2F{name}"


def colab_badge(name: str) -> str:
    return f"[![Open in Colab](https://colab.research.google.com/assets/colab-badge.svg)]({colab_url(name)})"


def badges(name: str) -> str:
    """The badge line of lesson ``name`` ("00_start_here.ipynb"): Colab, then Binder."""
    return f"{colab_badge(name)} [![Binder](https://mybinder.org/badge_logo.svg)]({binder_url(name)})"


def install_cell() -> dict:
    """The first code cell of every lesson once the address is set (outputs stripped)."""
    lines = INSTALL.format(repo=_address()).splitlines(keepends=True)
    return {"cell_type": "code", "execution_count": None, "id": CELL_ID, "metadata": {}, "outputs": [],
            "source": lines}


def with_hosted(nb: dict, name: str) -> dict:
    """``nb`` with the badge line atop its first markdown cell and the install cell right before its first other code
    cell, when the address is set; without both when it is not. Idempotent: a second call returns an equal
    notebook."""
    cells = [c for c in nb["cells"] if c.get("id") != CELL_ID]
    first = next(i for i, c in enumerate(cells) if c["cell_type"] == "markdown")
    text = "".join(cells[first]["source"])
    if text.startswith(BADGE_START):
        text = text.split("\n", 2)[2] if text.count("\n") >= 2 else ""
    if repo():
        text = badges(name) + "\n\n" + text
    cells[first] = {**cells[first], "source": text.splitlines(keepends=True)}
    if repo():
        code = next((i for i, c in enumerate(cells) if c["cell_type"] == "code"), len(cells))
        cells.insert(code, install_cell())
    return {**nb, "cells": cells}


def with_badged_rows(text: str) -> str:
    """A README's lesson rows with a Colab badge in their notebook cell, after the name, when the address is set:
    "| 00 | `00_start_here` | ..." -> "| 00 | `00_start_here` [![Open in Colab](...)](...) | ..."; without one when
    it is not."""
    badge = (lambda m: " " + colab_badge(m[2] + ".ipynb")) if repo() else (lambda m: "")
    return ROW.sub(lambda m: f"| {m[1]} | `{m[2]}{m[3] or ''}`{badge(m)} |", text)


def targets() -> list:
    """(path, transform) for every file this script keeps."""
    out = []
    for path in sorted(ROOT.glob("[0-9][0-9]_*.ipynb")) + sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb")):
        out.append((path, lambda text, name=path.name: json.dumps(with_hosted(json.loads(text), name), indent=1,
                                                                   ensure_ascii=False) + "\n"))
    out.append((ROOT.parent / "README.md", with_badged_rows))
    out.append((ROOT / "README.md", with_badged_rows))
    return out


def stale() -> list:
    """The files whose badges or install cell are not what this script writes."""
    return [p for p, f in targets() if f(p.read_text()) != p.read_text()]


def apply() -> list:
    """Rewrite every stale file (each re-read just before it is written); returns the rewritten paths."""
    done = []
    for path, transform in targets():
        text = path.read_text()
        new = transform(text)
        if new != text:
            path.write_text(new)
            done.append(path)
    return done


if __name__ == "__main__":
    if sys.argv[1:] == ["--check"]:
        bad = stale()
        print("\n".join(f"out of date: {p.relative_to(ROOT.parent)}" for p in bad) or "hosted notebooks: up to date")
        sys.exit(1 if bad else 0)
    for p in apply():
        print(f"wrote {p.relative_to(ROOT.parent)}")
