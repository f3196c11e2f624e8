"""How a long job ends early: a signal asks it to stop (``Stopped``), or a run fails (``RunFailed``).

``toyrl.lab.parallel.iter_tasks`` holds ``StopOnSignal`` while its runs go on: SIGINT (Ctrl-C) or SIGTERM, in the
runner or in the caller's loop over its results, runs the job's stop actions at once (its workers are sent away,
its bar closed), puts the previous handlers back and raises ``Stopped`` where the job was. A run that raises, or
whose worker dies, is a ``Failure``; ``RunFailed`` names each one with its traceback (once) and the runs kept:

    try:
        for i, result in iter_tasks(fn, jobs, workers=2): ...
    except Stopped as e:          # a KeyboardInterrupt: e.signum, e.exit_status (130 for SIGINT, 143 for SIGTERM)
        print(e.progress())       # "3 of 8 runs finished and are kept in out/.runcache; rerun with the same ..."
    except RunFailed as e:
        print(e)                  # each failed run's traceback, then one line naming the runs and what is kept

Both carry ``done`` of ``total`` runs finished and ``kept``, the folder that keeps them (None: nothing does);
``toyrl.lab.runcache.RunCache.run`` fills these in for its cache.
"""
from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Callable, NamedTuple, Optional

__all__ = ["Stopped", "RunFailed", "Failure", "StopOnSignal", "progress", "raised_why", "sigterm_raises", "end_process",
           "SIGNALS"]

SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""the signals that stop a job"""


def progress(done: int, total: int, kept=None) -> str:
    """What an ended job leaves, in one clause. Example: (3, 8, "out/.runcache") -> "3 of 8 runs finished and are
    kept in out/.runcache; rerun with the same arguments to resume from them"; (3, 8) -> "3 of 8 runs had finished
    (nothing keeps them)"."""
    if kept is None:
        return f"{done} of {total} runs had finished (nothing keeps them)"
    return f"{done} of {total} runs finished and are kept in {kept}; rerun with the same arguments to resume from them"


class Stopped(KeyboardInterrupt):
    """A job stopped by signal ``signum`` once its workers were gone: ``done`` of ``total`` runs had finished,
    ``kept`` is where they are kept (None: nowhere). ``exit_status``: 128 + signum (130 for SIGINT, 143 for
    SIGTERM), what a shell reports for a command the signal ended."""

    def __init__(self, signum: int = signal.SIGINT, done: int = 0, total: int = 0, kept=None):
        super().__init__(signum)
        self.signum, self.done, self.total, self.kept = int(signum), done, total, kept

    @property
    def exit_status(self) -> int:
        return 128 + self.signum

    def progress(self) -> str:
        return progress(self.done, self.total, self.kept)

    def __str__(self) -> str:
        return f"stopped by {signal.Signals(self.signum).name}" + (f"; {self.progress()}" if self.total else "")


class Failure(NamedTuple):
    """One run that did not finish: job ``index``, its ``label`` (what it is: "claim c, arm a, seed 3"), ``why``
    ("raised ValueError: bad", "died: its worker (pid 812) was killed by SIGKILL") and ``traceback`` (text, or
    None when its worker died)."""

    index: int
    label: str
    why: str
    traceback: Optional[str] = None


class RunFailed(RuntimeError):
    """Runs that raised or whose worker died (``failures``, a list of ``Failure``); ``done`` of ``total`` runs had
    finished, ``kept`` is where they are kept. ``summary()`` is one line; ``str()`` is ``tracebacks()``, then it."""

    def __init__(self, failures, done: int = 0, total: int = 0, kept=None):
        super().__init__()
        self.failures, self.done, self.total, self.kept = list(failures), done, total, kept

    def summary(self) -> str:
        """Example: "run claim c, arm a, seed 3 died: its worker (pid 812) was killed by SIGKILL; 5 of 8 runs ..."."""
        runs = "; ".join(f"run {f.label} {f.why}" for f in self.failures)
        head = runs if len(self.failures) == 1 else f"{len(self.failures)} runs failed: {runs}"
        return f"{head}; {progress(self.done, self.total, self.kept)}"

    def tracebacks(self) -> str:
        """The traceback of each run that raised, one after the other ("" when every failure is a death)."""
        return "".join(f.traceback.rstrip() + "\n" for f in self.failures if f.traceback)

    def __str__(self) -> str:
        return self.tracebacks() + self.summary()


def raised_why(traceback_text: str) -> str:
    """"raised ValueError: bad" from a traceback's last line ("ValueError: bad")."""
    lines = traceback_text.strip().splitlines()
    return f"raised {lines[-1].strip()}" if lines else "raised"


class StopOnSignal:
    """While a job runs, SIGINT and SIGTERM stop it at once: ``actions`` (added with ``add``, run last first) send
    its workers away, then the previous handlers are put back and ``Stopped(signum, *count())`` is raised where the
    job was. A signal whose previous disposition was the default action (SIGTERM outside the CLI) is then delivered
    again, so it ends the process as it would have, with the workers already gone. A signal the process ignores
    stays ignored; outside the main thread (where Python runs handlers) nothing is installed.

    ``count()`` -> (done, total, kept): what ``Stopped`` says was finished, asked when the signal comes; ``signum``:
    the signal that stopped the job (None while none has)."""

    def __init__(self, count: Callable[[], tuple] = lambda: (0, 0, None)):
        self.count = count
        self.actions: list = []
        self._saved: dict = {}
        self._stopping = False
        self.signum: Optional[int] = None

    def add(self, action: Callable[[], None]) -> None:
        """Run ``action()`` when a signal stops the job (each action must be safe to run twice)."""
        self.actions.append(action)

    def install(self) -> "StopOnSignal":
        """Handle SIGNALS (again, after a library that set its own handler: Ray's init sets SIGTERM's)."""
        if threading.current_thread() is not threading.main_thread():
            return self
        for signum in SIGNALS:
            if signum not in self._saved:
                previous = signal.getsignal(signum)
                if previous is signal.SIG_IGN or previous is None:     # ignored, or set outside Python: left so
                    continue
                self._saved[signum] = previous
            signal.signal(signum, self._handle)
        return self

    def restore(self) -> None:
        """Put the previous handlers back (where a handler is still this one's)."""
        if threading.current_thread() is threading.main_thread():
            for signum, previous in self._saved.items():
                if signal.getsignal(signum) == self._handle:
                    signal.signal(signum, previous)
        self._saved.clear()

    def _handle(self, signum, frame) -> None:
        if self._stopping:                                    # a second Ctrl-C while the workers go: already on it
            return
        self._stopping, self.signum = True, signum
        for action in reversed(self.actions):
            try:
                action()
            except Exception:                                 # e.g. closing the generator the signal landed in:
                pass                                          # Stopped unwinds it instead
        previous = self._saved.get(signum)
        self.restore()
        if previous is signal.SIG_DFL:
            signal.raise_signal(signum)
        raise Stopped(signum, *self.count())

    def __enter__(self) -> "StopOnSignal":
        return self.install()

    def __exit__(self, *exc) -> None:
        self.restore()


def _raise_stopped(signum, frame):
    raise Stopped(signum)


@contextmanager
def sigterm_raises():
    """While the block runs, SIGTERM raises ``Stopped(SIGTERM)`` as SIGINT raises KeyboardInterrupt (its default
    would end the process with no cleanup, no message). Where SIGTERM already has a handler, or outside the main
    thread, nothing changes."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield
        return
    signal.signal(signal.SIGTERM, _raise_stopped)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGTERM) == _raise_stopped:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def end_process(status: int) -> None:
    """End this process with ``status`` once its exit handlers have run (multiprocessing's, Ray's, the job's), and
    its output is flushed, skipping the interpreter's teardown of every module it imported: slow with torch loaded,
    it would keep a stopped job's prompt waiting."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
    os._exit(status)
