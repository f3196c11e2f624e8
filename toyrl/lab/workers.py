"""Spawn worker processes, one pipe each: a job can stop them at once, and a dead one names the run it held.

    pool = Pool(2)                               # two fresh interpreters (multiprocessing's spawn context)
    pool.submit(pool.idle()[0], 0, fn, job)      # job 0 to an idle worker
    for i, kind, value in pool.wait(): ...       # as workers answer or die: ("done", result), ("raised",
                                                 # traceback text), ("died", why) or ("stopped", signum)
    pool.close()                                 # all done: each worker exits on its own
    pool.stop()                                  # an early end: SIGTERM, then SIGKILL after GRACE_S

Why not ``multiprocessing.Pool``: its workers share one task queue behind a lock, and a worker killed while it
holds that lock (a Ctrl-C that reaches every worker, the out-of-memory killer) leaves ``Pool.terminate`` waiting for
it forever, while the task the dead worker held is never reported. ``concurrent.futures.ProcessPoolExecutor`` sees a
dead worker, but as a broken pool that fails every pending task, and it cannot stop a running one. Here each worker
has its own pipe and the parent waits on the pipes and the processes' sentinels together
(``multiprocessing.connection.wait``): a death is seen at once, as the run that worker held, and stopping takes no
lock.

Stopping: in a worker SIGTERM becomes an exception, so its run unwinds and the process exits through its exit
handlers (the semaphores it made, e.g. tqdm's lock, released: no "leaked semaphore" warning); one still there
``GRACE_S`` later is killed. A worker that SIGTERM (or SIGINT) stops from outside answers ("stopped", signum): the
job stops as asked. Workers start with SIGINT ignored, since a terminal's Ctrl-C reaches the whole process group:
the parent alone decides, and stops them. On Linux a worker also gets SIGTERM when its parent dies
(``PR_SET_PDEATHSIG``), so none outlives a killed job by more than its own exit.
"""
from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import time
import traceback
from contextlib import contextmanager
from multiprocessing import connection, get_context
from multiprocessing.reduction import ForkingPickler

__all__ = ["Pool", "GRACE_S"]

GRACE_S = 2.0
"""seconds stopped workers have to exit on their own before SIGKILL"""


class _Terminated(BaseException):
    """SIGTERM in a worker (a BaseException, so a run's ``except Exception`` does not swallow it)."""


def _unwind(signum, frame):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)           # once: a second SIGTERM waits for this exit
    raise _Terminated(signum)


def _init_worker() -> None:
    """One torch thread per worker process, set before any job runs: torch imported later reads OMP_NUM_THREADS
    (a job that needs no torch does not load it); then the user's plug-in modules (``--import``, recorded in
    ``TOYRL_IMPORT``) are imported."""
    os.environ["OMP_NUM_THREADS"] = "1"
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)
    if os.environ.get("TOYRL_IMPORT"):
        from ..plugins import load_environment
        load_environment()


def _die_with_parent(parent: int) -> None:
    """Linux: have the kernel send this process SIGTERM when its parent dies; SIGTERM now if it already has."""
    if sys.platform.startswith("linux"):
        import ctypes
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))     # 1: PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGTERM)


def _answer(i: int, task: bytes) -> bytes:
    """The pickled answer to job ``i`` (``task``: the pickled (fn, job)): ("done", i, fn(job)), or ("raised", i,
    traceback text) when unpickling, the run or pickling its result raises."""
    try:
        fn, job = ForkingPickler.loads(task)
        return ForkingPickler.dumps(("done", i, fn(job)))
    except (Exception, SystemExit):
        return ForkingPickler.dumps(("raised", i, traceback.format_exc()))


_status = [1]
"""the exit status ``_exit_now`` gives a worker: 1 until ``_serve`` ends as planned"""


def _exit_now() -> None:
    """A worker's last exit handler (registered first, so run last): once multiprocessing's own exit handlers and
    the job's have run, the process ends without the interpreter's teardown of every module it imported, which is
    slow with torch loaded and would hold a stopping job up."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
    os._exit(_status[0])


def _serve(conn, parent: int) -> None:
    """A worker's life: answer each (i, task) it receives until None or a closed pipe; SIGTERM unwinds the run in
    progress, answers ("stopped", i, SIGTERM) and returns, so the process exits through its exit handlers."""
    signal.signal(signal.SIGTERM, _unwind)
    atexit.register(_exit_now)
    i = None
    try:
        _die_with_parent(parent)
        if hasattr(signal, "pthread_sigmask"):                # blocked while the parent started this process
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        _init_worker()
        while True:
            task = conn.recv()
            if task is None:
                break
            i = task[0]
            conn.send_bytes(_answer(*task))
            i = None
    except _Terminated:
        try:
            conn.send(("stopped", i, int(signal.SIGTERM)))
        except (OSError, ValueError):
            pass
    except (EOFError, OSError):                               # the parent is gone
        pass
    _status[0] = 0


@contextmanager
def _sigint_ignored_by_children():
    """Processes started inside start with SIGINT ignored (exec keeps an ignored disposition). Meanwhile SIGINT is
    blocked in this thread, so one that comes now is delivered afterwards rather than lost."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) is None:
        yield
        return
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}) if hasattr(signal, "pthread_sigmask") else None
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)


class _Worker:
    """One worker process, the parent's end of its pipe, and the job it holds (None: idle)."""

    def __init__(self, proc, conn):
        self.proc, self.conn, self.task = proc, conn, None


def _end(w: _Worker) -> tuple:
    """The event of a worker that died holding job ``w.task``, once reaped: ("stopped", SIGTERM or SIGINT) when
    one of those ended it, else ("died", "died: its worker (pid P) was killed by SIGKILL ..." or "... exited with
    status N")."""
    w.proc.join(GRACE_S)
    code = w.proc.exitcode
    if code is None:                                         # its pipe closed, the process hangs on: killed
        w.proc.kill()
        w.proc.join(GRACE_S)
        return w.task, "died", f"died: its worker (pid {w.proc.pid}) closed its pipe and was killed"
    if -code in (signal.SIGINT, signal.SIGTERM):
        return w.task, "stopped", -code
    if code < 0:
        how = f"was killed by {signal.Signals(-code).name}" + (" (as the out-of-memory killer does)"
                                                                if -code == signal.SIGKILL else "")
    else:
        how = f"exited with status {code}"
    return w.task, "died", f"died: its worker (pid {w.proc.pid}) {how}"


class Pool:
    """``size`` spawn workers, each running one job at a time (see the module docstring)."""

    def __init__(self, size: int):
        self.size = size
        self.ctx = get_context("spawn")
        self.workers: list = []
        self.retired: list = []
        self.fill()

    def fill(self) -> None:
        """Start workers until ``size`` are live (after deaths)."""
        while len(self.workers) < self.size:
            parent_end, child_end = self.ctx.Pipe()
            proc = self.ctx.Process(target=_serve, args=(child_end, os.getpid()), daemon=True)
            with _sigint_ignored_by_children():
                proc.start()
            child_end.close()
            self.workers.append(_Worker(proc, parent_end))

    def idle(self) -> list:
        return [w for w in self.workers if w.task is None]

    def busy(self) -> list:
        return [w for w in self.workers if w.task is not None]

    def submit(self, w: _Worker, i: int, fn, job) -> bool:
        """Send job ``i`` to idle worker ``w``; False (``w`` dropped) if it was gone. Raises what pickling raises."""
        task = (i, bytes(ForkingPickler.dumps((fn, job))))
        try:
            w.conn.send(task)
        except OSError:
            self._drop(w)
            return False
        w.task = i
        return True

    def retire(self, w: _Worker) -> None:
        """Let idle worker ``w`` go: it exits on its own."""
        try:
            w.conn.send(None)
        except OSError:
            pass
        self.workers.remove(w)
        self.retired.append(w)

    def wait(self) -> list:
        """Block until a busy worker answers or dies; the events (job, kind, value) of every one that did."""
        busy = self.busy()
        ready = set(connection.wait([w.conn for w in busy] + [w.proc.sentinel for w in busy]))
        events = []
        for w in busy:
            if w.conn not in ready and w.proc.sentinel not in ready:
                continue
            try:
                kind, i, value = w.conn.recv()
            except (EOFError, OSError):                      # the pipe closed: the worker is dead
                events.append(_end(w))
                self._drop(w)
                continue
            except Exception:                                # an answer this process cannot unpickle
                kind, i, value = "raised", w.task, traceback.format_exc()
            w.task = None
            events.append((i, kind, value))
        return events

    def _drop(self, w: _Worker) -> None:
        w.proc.join(GRACE_S)
        if w.proc.exitcode is None:
            w.proc.kill()
            w.proc.join(GRACE_S)
        w.conn.close()
        self.workers.remove(w)

    def close(self) -> None:
        """The normal end: every worker is told to go and exits on its own (``stop`` takes those still there after
        ``GRACE_S``)."""
        for w in list(self.workers):
            self.retire(w)
        deadline = time.monotonic() + GRACE_S
        for w in self.retired:
            w.proc.join(max(0.0, deadline - time.monotonic()))
        self.stop()

    def stop(self) -> None:
        """An early end: SIGTERM to every worker, SIGKILL to those still there ``GRACE_S`` later; all reaped.
        Safe to call twice."""
        everyone = [w for w in self.workers + self.retired if w.proc.pid is not None]
        self.workers, self.retired = [], []
        for w in everyone:
            if w.proc.exitcode is None:
                w.proc.terminate()
        deadline = time.monotonic() + GRACE_S
        for w in everyone:
            w.proc.join(max(0.0, deadline - time.monotonic()))
        for w in everyone:
            if w.proc.exitcode is None:
                w.proc.kill()
                w.proc.join(GRACE_S)
            w.conn.close()
