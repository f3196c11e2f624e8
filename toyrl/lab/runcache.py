"""A run cache: long jobs keep every finished run on disk, so a killed job resumes where it stopped.

``toyrl sweep``, ``toyrl reproduce`` and ``toyrl scorecard`` run many independent runs. Each finished run is
written at once, whole, to ``<out dir>/.runcache/`` (one gzipped JSON file per run, ``atomic_write``: a temp file
in the same folder renamed over the target), so a kill, SIGKILL included, loses at most the runs in flight.
Rerun with the same arguments, a job reuses every run whose spec and code stamp match and computes the rest:

    cache = RunCache(out / CACHE_DIR)                # RunCache(None): no cache (nothing read or written)
    for i, result, reused in cache.run(fn, jobs, specs, workers=2, desc="sweep"):
        ...                                          # reused runs first (job order), then the rest as they finish

A job that ends early (``toyrl.lab.interrupts``: ``Stopped`` by a signal, ``RunFailed``) says how many runs it
kept and where; rerun with the same arguments, it computes only the others. Before its first run, ``run`` checks
the folder's free space against the runs to do, sized as the entries already there (``check_room``).

A run's **spec** is a JSON-able dict naming everything its result depends on (its full config and seed, and what the
job adds, e.g. a claim's arm); its **code stamp** (``code_stamp``) the versions of toyrl, Python, torch and numpy
and a hash of the package's source and of the shipped inputs runs read (``data/checkpoints``, ``data/demos``,
``data/kb``). The file is ``<stamp id>-<spec hash>.json.gz``; an entry is used only if the spec and stamp it holds
equal the run's (a changed config or any edit to the code means a new run). A file that cannot be read (truncated,
corrupt: gzip's CRC catches a changed byte, or foreign) is named in one warning (``RunCacheWarning``) and its run
computed again, which replaces it; temp files (``.NAME.XXXX.tmp``, left by a kill during a write) are never read.
Two jobs that compute one run write the same file name, each whole. ``fresh=True`` (the CLI's ``--fresh`` /
``--no-resume``) reads nothing and rewrites every run's entry; ``prune()``, which each job calls once it is done,
removes the entries of other code stamps (runs that would be computed again anyway).

Lossless: JSON writes a float as its shortest round-trip repr (NaN and infinities too), and a computed run is
handed on in the form it was stored in (``put``: numpy values as plain numbers and lists, tuples as lists, dict
keys as strings), so a reused run and a computed one are the same values, float for float.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import platform
import warnings
import zlib
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

from .interrupts import RunFailed, Stopped
from .parallel import iter_tasks
from .results import SHIPPED, atomic_write, check_room

__all__ = ["CACHE_DIR", "FORMAT", "MISSING", "RunCache", "RunCacheWarning", "code_stamp", "tree_hash", "stamp_id",
           "spec_hash", "run_label"]

CACHE_DIR = ".runcache"
"""the cache folder's name inside a job's output folder"""
FORMAT = "toyrl-runcache-1"
"""the ``format`` field of every entry"""
INPUTS = ("checkpoints", "demos", "kb")
"""folders of the shipped ``data/`` tree that runs read (warm starts, demonstrations, the search KB)"""
MISSING = object()
"""what ``RunCache.get`` returns for a run with no usable entry"""


class RunCacheWarning(UserWarning):
    """An entry that cannot be read (its run is computed again); the CLI prints it in one line."""


def _canonical(obj) -> str:
    """One JSON text per value: sorted keys, no spaces (``{"b": 1, "a": [2]}`` -> ``{"a":[2],"b":1}``)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def _digest(obj, n: int) -> str:
    """The first ``n`` hex digits of the sha256 of ``obj``'s canonical JSON."""
    return hashlib.sha256(_canonical(obj).encode()).hexdigest()[:n]


def tree_hash(roots) -> str:
    """sha256 (hex) over every file under the folders ``roots``: each file's path from its root's parent and its
    bytes, in sorted order (``__pycache__`` skipped). Any edit, added or removed file changes it; a copy of the
    same tree elsewhere does not."""
    h = hashlib.sha256()
    for root in map(Path, roots):
        for p in sorted(q for q in root.rglob("*") if q.is_file() and "__pycache__" not in q.parts):
            h.update(p.relative_to(root.parent).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def _version(dist: str) -> Optional[str]:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


@lru_cache(maxsize=1)
def code_stamp() -> dict:
    """The code a run is computed with: toyrl, Python, torch and numpy versions and ``source``, the first 16 hex
    digits of a hash of the package's files and the shipped inputs (``INPUTS``). Computed once per process.
    Example: {"toyrl": "0.1.0", "python": "3.11.7", "torch": "2.3.0", "numpy": "1.26.4", "source": "3f9c..."}."""
    import toyrl
    package = Path(toyrl.__file__).resolve().parent
    roots = [package] + [SHIPPED / d for d in INPUTS if (SHIPPED / d).is_dir()]
    return {"toyrl": toyrl.__version__, "python": platform.python_version(), "torch": _version("torch"),
            "numpy": _version("numpy"), "source": tree_hash(roots)[:16]}


def stamp_id(stamp: dict) -> str:
    """12 hex digits naming a code stamp (the prefix of its entries' file names)."""
    return _digest(stamp, 12)


def spec_hash(spec: dict) -> str:
    """32 hex digits naming a run's spec: equal specs (as JSON, key order aside) give equal hashes."""
    return _digest(spec, 32)


def run_label(spec: dict) -> str:
    """What a run is, from its spec's plain values (its job's name aside), for messages.
    Example: {"job": "reproduce", "claim": "c", "arm": "a", "seed": 3} -> "claim c, arm a, seed 3"."""
    return ", ".join(f"{k} {v}" for k, v in spec.items() if k != "job" and isinstance(v, (str, int, float))) or "run"


def _plain(obj):
    """JSON's fallback for a value it has no syntax for: numpy scalars and arrays (and tensors) by ``tolist()``
    (exact: a float64 or float32 becomes the Python float of the same value); anything else is a TypeError."""
    tolist = getattr(obj, "tolist", None)
    if callable(tolist):
        return tolist()
    raise TypeError(f"{type(obj).__name__} is not JSON")


class RunCache:
    """The finished runs of a job in ``folder`` (None: a cache that holds nothing and writes nothing).

    ``fresh``: read no entry (every run is computed) but write each one; ``stamp``: the code stamp (default
    ``code_stamp()``; tests pass their own)."""

    def __init__(self, folder, *, fresh: bool = False, stamp: Optional[dict] = None):
        self.folder = None if folder is None else Path(folder)
        self.fresh = fresh
        self.stamp = dict(stamp) if stamp is not None else (code_stamp() if folder is not None else {})
        self._read: dict = {}

    def path(self, spec: dict) -> Path:
        """The entry file of the run ``spec``: ``<folder>/<stamp id>-<spec hash>.json.gz``."""
        return self.folder / f"{stamp_id(self.stamp)}-{spec_hash(spec)}.json.gz"

    def get(self, spec: dict):
        """The stored result of run ``spec``, or ``MISSING`` (no cache, ``fresh``, no file, an unreadable file,
        or one whose spec or stamp differ)."""
        if self.folder is None or self.fresh:
            return MISSING
        path = self.path(spec)
        if path not in self._read:
            self._read[path] = self._load(path, spec)
        return self._read[path]

    def _load(self, path: Path, spec: dict):
        if not path.is_file():
            return MISSING
        try:
            entry = json.loads(gzip.decompress(path.read_bytes()))
        except (OSError, EOFError, ValueError, zlib.error) as e:     # truncated, corrupt or foreign: computed again
            warnings.warn(f"run cache: ignoring unreadable {path} ({type(e).__name__}); its run is computed again",
                          RunCacheWarning, stacklevel=3)
            return MISSING
        if (not isinstance(entry, dict) or entry.get("format") != FORMAT or "result" not in entry
                or entry.get("code") != self.stamp or _canonical(entry.get("spec")) != _canonical(spec)):
            return MISSING
        return entry["result"]

    def put(self, spec: dict, result):
        """Write run ``spec``'s result whole (``atomic_write``; nothing without a folder) and return it as stored:
        plain JSON values (numpy scalars and arrays as numbers and lists, tuples as lists, dict keys as str), every
        float exact. ``run`` hands this stored form on, so a computed run and a reused one are the same values.
        TypeError, writing nothing, for a value JSON cannot hold. Example: {"x": np.float32(0.5), "t": (1, 2)} ->
        {"x": 0.5, "t": [1, 2]}."""
        entry = {"format": FORMAT, "code": self.stamp, "spec": json.loads(_canonical(spec)), "result": result}
        try:
            text = json.dumps(entry, separators=(",", ":"), default=_plain)
        except (TypeError, ValueError) as e:                  # an object, a numpy dict key, a cycle
            raise TypeError(f"run cache: a run's result must be JSON-able ({e})") from None
        if self.folder is not None:
            path = self.path(spec)
            atomic_write(path, gzip.compress(text.encode(), compresslevel=6, mtime=0))
            self._read.pop(path, None)
        return json.loads(text)["result"]

    def reusable(self, specs: Sequence[dict]) -> list:
        """Indices of the specs with a usable entry."""
        return [i for i, spec in enumerate(specs) if self.get(spec) is not MISSING]

    def run(self, fn: Callable, jobs: Sequence, specs: Sequence[dict], labels: Optional[Sequence[str]] = None,
            **kw) -> Iterator:
        """Yield ``(i, result, reused)`` for every job: first the reused ones (job order), then ``fn(jobs[i])`` for
        the others as they finish (``toyrl.lab.parallel.iter_tasks`` with ``kw``; its bar counts the reused), each
        stored before it is yielded, in its stored form (``put``). ``specs[i]`` names job ``i``'s run, ``labels[i]``
        what it is in messages (default ``run_label(specs[i])``). ``Stopped`` and ``RunFailed`` count the runs kept
        here (reused ones included) and name the folder; ``FolderError`` (before any run) for too little room."""
        jobs, specs = list(jobs), list(specs)
        if len(jobs) != len(specs):
            raise ValueError(f"specs: one per job expected, got {len(specs)} for {len(jobs)} jobs")
        labels = [run_label(spec) for spec in specs] if labels is None else list(labels)
        done = self.reusable(specs)
        for i in done:
            yield i, self.get(specs[i]), True
        todo = sorted(set(range(len(jobs))) - set(done))
        if todo and self.folder is not None:
            check_room(self.folder.parent, self.estimate(len(todo)))
        kept = len(done)
        try:
            for j, result in iter_tasks(fn, [jobs[i] for i in todo], reused=len(done), kept=self.folder,
                                        labels=[labels[i] for i in todo], **kw):
                stored = self.put(specs[todo[j]], result)
                kept += 1
                yield todo[j], stored, False
        except (Stopped, RunFailed) as e:                     # where it was: count what is on disk
            e.done, e.total, e.kept = kept, len(jobs), self.folder
            if isinstance(e, RunFailed):
                e.failures = [f._replace(index=todo[f.index]) for f in e.failures]
            raise

    def estimate(self, n: int) -> int:
        """Bytes ``n`` more entries take, sized as the mean entry in the folder (0 with none there yet)."""
        sizes = [p.stat().st_size for p in self.folder.glob("*.json.gz")] if self.folder.is_dir() else []
        return n * sum(sizes) // len(sizes) if sizes else 0

    def prune(self) -> int:
        """Remove the entries of other code stamps (their runs would be computed again anyway); the count."""
        if self.folder is None or not self.folder.is_dir():
            return 0
        mine = stamp_id(self.stamp) + "-"
        stale = [p for p in self.folder.glob("*.json.gz") if not p.name.startswith(mine)]
        for p in stale:
            p.unlink(missing_ok=True)
        return len(stale)

    def describe(self, n_reused: int, n_total: int) -> str:
        """One line for a job's header: "3 of 8 runs reused from D/.runcache (--fresh recomputes them)", or ""."""
        if not n_reused:
            return ""
        return f"{n_reused} of {n_total} runs reused from {self.folder} (--fresh recomputes them)"
