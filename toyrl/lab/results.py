"""Where a command's results go: the shipped ``data/`` tree is read-only unless asked, and a file is written whole.

``toyrl reproduce``, ``toyrl scorecard`` and ``toyrl precompute`` write under ``--out-dir D`` or, by default,
``./toyrl-results/<kind>/`` in the current directory (``out_dir``); only ``--update-shipped`` writes into the
checkout's ``data/`` tree (the shipped records, figures and runs), and then only there:

    out_dir("claims")                                   # -> ./toyrl-results/claims
    out_dir("claims", "mine")                           # -> mine
    out_dir("claims", update_shipped=True)              # -> <checkout>/data/claims
    out_dir("claims", "data/claims")                    # ValueError: inside the shipped tree, no --update-shipped

Every file goes through ``atomic_write``: the bytes go to a temp file in the target's folder, which is then
renamed over the target (``os.replace``, atomic on one filesystem), so an interrupted command leaves the previous
file as it was, never a half-written one. This module imports nothing heavy (the CLI uses it before any work).
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Optional

__all__ = ["REPO", "SHIPPED", "RESULTS", "shipped_dir", "out_dir", "atomic_write"]

REPO = Path(__file__).resolve().parents[2]
"""the checkout: its ``data/`` holds the shipped results, its ``README.md`` the claims table"""
SHIPPED = REPO / "data"
"""the shipped results tree (claims/, scorecard/, runs/<topic>/)"""
RESULTS = "toyrl-results"
"""the default results folder, relative to the current directory"""


def shipped_dir(kind: str) -> Path:
    """The shipped folder of a kind of result: "claims" -> <checkout>/data/claims."""
    return SHIPPED / kind


def _inside(path: Path, root: Path) -> bool:
    path, root = path.resolve(), root.resolve()
    return path == root or root in path.parents


def out_dir(kind: str, given=None, *, update_shipped: bool = False, flag: str = "--out-dir") -> Path:
    """The folder a command writes ``kind`` results to.

    ``given`` (the user's ``--out-dir``) if set, else ``shipped_dir(kind)`` under ``update_shipped``, else
    ``./toyrl-results/<kind>``. ValueError (naming ``flag``) if ``given`` lies inside the shipped ``data/`` tree
    without ``update_shipped``, or outside ``shipped_dir(kind)`` with it (the flag replaces shipped files only).
    Example: out_dir("scorecard") -> Path("toyrl-results/scorecard") (relative to the current directory).
    """
    if given is None:
        return shipped_dir(kind) if update_shipped else Path.cwd() / RESULTS / kind
    path = Path(given)
    if update_shipped and not _inside(path, shipped_dir(kind)):
        raise ValueError(f"{flag}: {given} is outside {shipped_dir(kind)}; --update-shipped replaces the shipped "
                         f"{kind} files only (drop it to write elsewhere)")
    if not update_shipped and _inside(path, SHIPPED):
        raise ValueError(f"{flag}: {given} is inside the shipped results ({SHIPPED}); add --update-shipped to "
                         "replace them, or name another folder")
    return path


def atomic_write(path, data: bytes, mode: Optional[int] = 0o644) -> Path:
    """Write ``data`` to ``path`` whole: a temp file in the same folder, flushed, then renamed over ``path``
    (creating the folder). On any error, Ctrl-C included, the temp file is removed and ``path`` is untouched."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path
