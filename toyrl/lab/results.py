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
file as it was, never a half-written one. A job holds its folder while it runs (``hold``: an exclusive ``flock`` on
``LOCK`` inside it, released by the kernel however the job ends), so a second job on the same folder fails at once
rather than mixing its files with the first one's; ``hold`` and ``check_room`` raise ``FolderError`` for a folder
that cannot be written (read-only, not a folder, a full disk) before any run starts. This module imports nothing
heavy (the CLI uses it before any work).

    with hold(out, "toyrl reproduce"):                  # FolderError: in use, read-only, or too little room
        ...
"""
from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

__all__ = ["REPO", "SHIPPED", "RESULTS", "LOCK", "MIN_FREE", "FolderError", "shipped_dir", "out_dir", "atomic_write",
           "hold", "check_room"]

REPO = Path(__file__).resolve().parents[2]
"""the checkout: its ``data/`` holds the shipped results, its ``docs/claims.md`` the claims table"""
SHIPPED = REPO / "data"
"""the shipped results tree (claims/, scorecard/, runs/<topic>/)"""
RESULTS = "toyrl-results"
"""the default results folder, relative to the current directory"""
LOCK = ".toyrl-lock"
"""the file a job locks in its results folder (it names the job holding it)"""
MIN_FREE = 16 * 2 ** 20
"""bytes a job needs free besides its runs' estimate: its records, series and figures"""


class FolderError(OSError):
    """A results folder a job cannot write: read-only, not a folder, too little free space, or held by another
    job. Its message is one line; the CLI prints it and exits 2."""


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


def check_room(folder, need: int = 0) -> None:
    """FolderError unless the filesystem of ``folder`` (or of its nearest existing parent) has ``need`` + ``MIN_FREE``
    bytes free. Example: 3 MiB free -> "out: 3.0 MiB free, about 16.0 MiB needed; free some space or write
    elsewhere (--out-dir)"."""
    folder = Path(folder)
    probe = next(p for p in [folder, *folder.absolute().parents] if p.exists())
    free = shutil.disk_usage(probe).free
    if free < need + MIN_FREE:
        raise FolderError(f"{folder}: {free / 2 ** 20:.1f} MiB free, about {(need + MIN_FREE) / 2 ** 20:.1f} MiB "
                          "needed; free some space or write elsewhere (--out-dir)")


def _lock(fd: int, folder: Path) -> None:
    """An exclusive flock on ``fd``, or FolderError naming the job that holds it (no lock where there is no fcntl)."""
    try:
        import fcntl
    except ImportError:                                       # Windows: one job per folder is up to the user
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.lseek(fd, 0, os.SEEK_SET)
        holder = os.read(fd, 4096).decode(errors="replace").strip() or "another process"
        raise FolderError(f"{folder} is in use by another job ({holder}); wait for it to finish, or write elsewhere "
                          "(--out-dir)") from None


@contextmanager
def hold(folder, what: str = "a toyrl job"):
    """Hold ``folder`` (created if needed) for one job: lock ``LOCK`` in it, write this job's pid and ``what``
    there, check ``check_room``; the lock goes when the block ends or the process dies. FolderError, in one line,
    for a folder in use by another job, one that cannot be written, or a full disk."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise FolderError(f"{folder} cannot be written ({e.strerror or type(e).__name__})") from None
    try:
        _lock(fd, folder)
        try:
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
            os.write(fd, f"pid {os.getpid()}, {what}\n".encode())
            os.fsync(fd)
        except OSError as e:
            raise FolderError(f"{folder} cannot be written ({e.strerror or type(e).__name__})") from None
        check_room(folder)
        yield folder
    finally:
        os.close(fd)
