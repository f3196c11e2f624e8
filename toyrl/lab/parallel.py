"""Run many independent jobs (one training run each) in this process, on spawn workers or on a Ray cluster.

    results = run_tasks(train_one, jobs, workers=2)                       # two spawn worker processes
    results = run_tasks(train_one, jobs, backend="ray")                   # a local Ray instance
    results = run_tasks(train_one, jobs, backend="ray", address="auto")   # an existing Ray cluster

Contract: ``fn`` is a top-level (importable) function of one job; each job carries everything its
result depends on, its seed included, so the same jobs give the same results on every backend and
in any completion order. Results come back in job order; ``on_result(i, result)`` is called as each
one finishes (in completion order), and ``iter_tasks`` yields ``(i, result)`` in that order, for
callers that write files as they go.

Ending early (``toyrl.lab.interrupts``): SIGINT (Ctrl-C) or SIGTERM, while the runs go on or while the caller
handles a result, stops the workers at once (within ``toyrl.lab.workers.GRACE_S`` plus a kill) and raises
``Stopped``, which counts the runs finished. A run that raises, or whose worker dies (SIGKILL, the out-of-memory
killer), raises ``RunFailed`` naming it (``labels[i]``) with its traceback, once the other workers are stopped;
with ``keep_going`` the other runs go on and ``RunFailed`` names every failed one at the end.

Backends:
- ``process`` (default): ``workers <= 1`` runs in this process, in order; otherwise spawn worker processes, one
  pipe each (``toyrl.lab.workers.Pool``: a fresh interpreter per worker, no forked torch state, a dead worker seen
  at once). Once every job is done each worker exits on its own and releases what it holds.
- ``ray``: each job is a Ray task asking for one CPU (Ray sets OMP_NUM_THREADS=1 in its workers).
  ``address=None`` starts a local instance with ``workers`` CPUs (shut down afterwards) unless one is
  already running in this process (then it is used and left running); an address (``"auto"``,
  ``"ray://host:10001"``) joins an existing cluster, whose size sets the parallelism. An early end cancels the
  job's tasks. Ray is an optional extra: ``pip install 'toyrl[ray]'``.

Torch threads: every job should call ``torch.set_num_threads(1)`` itself (the toy models gain
nothing from a second thread, and several workers on few cores slow each other down).
"""
from __future__ import annotations

import os
import pickle
import traceback
from collections import deque
from contextlib import closing
from typing import Callable, Iterator, Optional, Sequence

from .interrupts import Failure, RunFailed, StopOnSignal, Stopped, raised_why

__all__ = ["run_tasks", "iter_tasks", "BACKENDS", "default_workers", "Stopped", "RunFailed"]

BACKENDS = ("process", "ray")
"""the names ``backend`` takes"""


def _bar(total: int, progress: bool, desc: str, reused: int = 0):
    """A tqdm bar over ``total`` new jobs plus ``reused`` ones already done (counted from the start, named in the
    description: "reproduce (12 reused)")."""
    from tqdm.auto import tqdm
    return tqdm(total=total + reused, initial=reused, disable=not progress, smoothing=0.1,
                desc=f"{desc} ({reused} reused)" if reused else desc)


def _here(fn, jobs) -> Iterator:
    """Events (i, "done", result) or (i, "raised", traceback text) of the jobs run in this process, in order."""
    for i, job in enumerate(jobs):
        try:
            result = fn(job)
        except Exception:
            yield i, "raised", traceback.format_exc()
            continue
        yield i, "done", result


def _processes(fn, jobs, workers: int) -> Iterator:
    """Events (i, kind, value) of the jobs on spawn workers (``toyrl.lab.workers.Pool``), as they come: each idle
    worker takes the next job, a dead one is replaced while jobs remain. Closing the generator stops the pool."""
    from .workers import Pool
    pool = Pool(min(workers, len(jobs)))
    todo, events, finished = deque(range(len(jobs))), [], False
    try:
        while True:
            if todo:
                pool.fill()
            for w in pool.idle():
                if not todo:
                    pool.retire(w)
                    continue
                i = todo.popleft()
                try:
                    if not pool.submit(w, i, fn, jobs[i]):
                        todo.appendleft(i)                    # the worker was gone: another one takes the job
                except Exception:                             # the job cannot be pickled
                    events.append((i, "raised", traceback.format_exc()))
            yield from events                                 # the answers, once their workers have new jobs
            if not todo and not pool.busy():
                break
            events = pool.wait() if pool.busy() else []
        finished = True
    finally:
        pool.close() if finished else pool.stop()


def _call(fn, job):
    """fn(job) (a top-level function Ray can take, whatever ``fn`` is)."""
    return fn(job)


def _ray(fn, jobs, workers: int, address: Optional[str], stopper: StopOnSignal) -> Iterator:
    """Events (i, kind, value) as Ray tasks finish; starts (and stops) a local instance when none is running, and
    cancels the tasks left when closed early."""
    try:
        import ray
    except ImportError:
        raise RuntimeError("backend 'ray' needs Ray: pip install 'toyrl[ray]' (or pip install ray)") from None
    started = not ray.is_initialized()
    if started:
        kw = {"num_cpus": max(1, workers)} if address is None else {}
        ray.init(address=address, include_dashboard=False, logging_level="ERROR", log_to_driver=False, **kw)
    stopper.install()                                         # ray.init sets a SIGTERM handler of its own
    pending: dict = {}
    try:
        remote = ray.remote(num_cpus=1)(_call)
        pending = {remote.remote(fn, job): i for i, job in enumerate(jobs)}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            i = pending.pop(done[0])
            try:
                event = (i, "done", ray.get(done[0]))
            except ray.exceptions.RayTaskError as e:          # the task raised: its traceback
                event = (i, "raised", str(e))
            except ray.exceptions.RayError as e:              # its worker died (after Ray's own retries)
                event = (i, "died", f"died: {type(e).__name__}: {str(e).strip().splitlines()[0]}")
            yield event
    finally:
        try:
            for ref in pending:
                ray.cancel(ref, force=True)
        finally:
            if started:
                ray.shutdown()


def _check(fn, jobs: list, workers: int, backend: str, address, labels) -> None:
    """ValueError for arguments no run can start with."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; valid backends: {', '.join(BACKENDS)}")
    if address is not None and backend != "ray":
        raise ValueError("address (a Ray cluster) needs backend='ray'")
    if labels is not None and len(labels) != len(jobs):
        raise ValueError(f"labels: one per job expected, got {len(labels)} for {len(jobs)} jobs")
    if backend == "process" and workers > 1 and len(jobs) > 1:
        try:
            pickle.dumps(fn)
        except Exception as e:
            raise ValueError(f"fn: {fn!r} cannot be sent to a spawn worker ({type(e).__name__}); pass a top-level "
                             "function of an importable module") from None


def iter_tasks(fn: Callable, jobs: Sequence, *, workers: int = 1, backend: str = "process", progress: bool = True,
               address: Optional[str] = None, desc: str = "runs", reused: int = 0, labels: Optional[Sequence] = None,
               keep_going: bool = False, kept=None) -> Iterator:
    """Yield ``(i, fn(jobs[i]))`` as each job finishes (completion order), with a tqdm bar; the arguments are those
    of ``run_tasks``, and ``reused``: runs done before (a run cache's), which the bar and ``Stopped`` count as done,
    ``kept``: where finished runs are kept (named by ``Stopped`` and ``RunFailed``). Stopping early (a signal, a
    failed run, the caller closing the generator) stops the workers or cancels the Ray tasks."""
    jobs = list(jobs)
    _check(fn, jobs, workers, backend, address, labels)
    labels = [f"job {i}" for i in range(len(jobs))] if labels is None else list(labels)
    done, total, failures = reused, reused + len(jobs), []
    with StopOnSignal(lambda: (done, total, kept)) as stopper, _bar(len(jobs), progress, desc, reused) as bar:
        stopper.add(bar.close)
        if backend == "ray":
            events = _ray(fn, jobs, workers, address, stopper)
        else:
            events = _here(fn, jobs) if workers <= 1 or len(jobs) <= 1 else _processes(fn, jobs, workers)
        stopper.add(events.close)                             # a signal in the caller's loop: the workers go at once
        with closing(events):
            for i, kind, value in events:
                if kind == "done":
                    done += 1
                    bar.update(1)
                    yield i, value
                elif kind == "stopped":                       # a worker was sent SIGTERM: the job stops as asked
                    raise Stopped(value, done, total, kept)
                else:
                    failures.append(Failure(i, labels[i], raised_why(value) if kind == "raised" else value,
                                            value if kind == "raised" else None))
                    if not keep_going:
                        raise RunFailed(failures, done, total, kept)
        if stopper.signum is not None:                        # resumed after a signal stopped the job in the caller
            raise Stopped(stopper.signum, done, total, kept)
    if failures:
        raise RunFailed(failures, done, total, kept)


def run_tasks(fn: Callable, jobs: Sequence, *, workers: int = 1, backend: str = "process", progress: bool = True,
              address: Optional[str] = None, on_result: Optional[Callable] = None, desc: str = "runs",
              labels: Optional[Sequence] = None, keep_going: bool = False) -> list:
    """``[fn(job) for job in jobs]``, computed on ``backend`` with up to ``workers`` parallel jobs.

    ``progress``: a tqdm bar (one tick per finished job). ``address``: a Ray cluster to join
    (backend "ray" only). ``on_result(i, result)``: called as job ``i`` finishes. ``labels[i]``: what job ``i`` is,
    in a failure's message (default "job i"). ``keep_going``: a failed run does not stop the others (``RunFailed``
    at the end still names it). Raises ValueError for an unknown backend (or labels not one per job, or an ``fn``
    a worker cannot import), RuntimeError for "ray" without Ray installed, ``Stopped`` on SIGINT or SIGTERM,
    ``RunFailed`` for a run that raised or whose worker died.

    Example: run_tasks(abs, [-1, 2, -3], workers=2) -> [1, 2, 3].
    """
    jobs = list(jobs)
    results: list = [None] * len(jobs)
    for i, res in iter_tasks(fn, jobs, workers=workers, backend=backend, progress=progress, address=address,
                             desc=desc, labels=labels, keep_going=keep_going):
        results[i] = res
        if on_result is not None:
            on_result(i, res)
    return results


def default_workers() -> int:
    """The CPUs this process may use (the affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:                                   # macOS, Windows
        return max(1, os.cpu_count() or 1)
