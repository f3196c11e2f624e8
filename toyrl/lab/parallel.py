"""Run many independent jobs (one training run each) on a process pool or a Ray cluster.

    results = run_tasks(train_one, jobs, workers=2)                       # a spawn pool of 2 processes
    results = run_tasks(train_one, jobs, backend="ray")                   # a local Ray instance
    results = run_tasks(train_one, jobs, backend="ray", address="auto")   # an existing Ray cluster

Contract: ``fn`` is a top-level (importable) function of one job; each job carries everything its
result depends on, its seed included, so the same jobs give the same results on every backend and
in any completion order. Results come back in job order; ``on_result(i, result)`` is called as each
one finishes (in completion order), and ``iter_tasks`` yields ``(i, result)`` in that order, for
callers that write files as they go.

Backends:
- ``process`` (default): ``workers <= 1`` runs in this process, in order; otherwise a ``spawn``
  multiprocessing pool (a fresh interpreter per worker, no forked torch state). Once every job is done the
  pool is closed and joined, so each worker exits on its own and releases what it holds (terminating busy
  workers is for an early stop only: a killed worker leaves its semaphores to the "leaked semaphore" warning).
- ``ray``: each job is a Ray task asking for one CPU (Ray sets OMP_NUM_THREADS=1 in its workers).
  ``address=None`` starts a local instance with ``workers`` CPUs (shut down afterwards) unless one is
  already running in this process (then it is used and left running); an address (``"auto"``,
  ``"ray://host:10001"``) joins an existing cluster, whose size sets the parallelism. Ray is an
  optional extra: ``pip install 'toyrl[ray]'``.

Torch threads: every job should call ``torch.set_num_threads(1)`` itself (the toy models gain
nothing from a second thread, and several workers on few cores slow each other down).
"""
from __future__ import annotations

import os
from typing import Callable, Iterator, Optional, Sequence

__all__ = ["run_tasks", "iter_tasks", "BACKENDS", "default_workers"]

BACKENDS = ("process", "ray")
"""the names ``backend`` takes"""


def _indexed(task: tuple):
    """(fn, i, job) -> (i, fn(job)): top level, so the spawn pool can import it."""
    fn, i, job = task
    return i, fn(job)


def _bar(total: int, progress: bool, desc: str, reused: int = 0):
    """A tqdm bar over ``total`` new jobs plus ``reused`` ones already done (counted from the start, named in the
    description: "reproduce (12 reused)")."""
    from tqdm.auto import tqdm
    return tqdm(total=total + reused, initial=reused, disable=not progress, smoothing=0.1,
                desc=f"{desc} ({reused} reused)" if reused else desc)


def _init_worker() -> None:
    """One torch thread per worker process, and the user's plug-in modules (``--import``, recorded in
    ``TOYRL_IMPORT``) imported, before any job runs."""
    os.environ["OMP_NUM_THREADS"] = "1"
    if os.environ.get("TOYRL_IMPORT"):
        from ..plugins import load_environment
        load_environment()
    try:
        import torch
        torch.set_num_threads(1)
    except ImportError:                                       # a job that needs no torch
        pass


def _process(fn, jobs, workers: int):
    """Yield (i, result) as jobs finish on a spawn pool (in order, in-process, when workers <= 1)."""
    tasks = [(fn, i, job) for i, job in enumerate(jobs)]
    if workers <= 1 or len(tasks) <= 1:
        yield from map(_indexed, tasks)
        return
    import multiprocessing as mp
    with mp.get_context("spawn").Pool(min(workers, len(tasks)), initializer=_init_worker) as pool:
        yield from pool.imap_unordered(_indexed, tasks)
        pool.close()             # all done: the workers exit on their own, running their exit handlers (a worker
        pool.join()              # killed by terminate() leaves its semaphores, e.g. tqdm's lock, to the tracker)


def _ray(fn, jobs, workers: int, address: Optional[str]):
    """Yield (i, result) as Ray tasks finish; starts (and stops) a local instance when none is running."""
    try:
        import ray
    except ImportError:
        raise RuntimeError("backend 'ray' needs Ray: pip install 'toyrl[ray]' (or pip install ray)") from None
    started = not ray.is_initialized()
    if started:
        kw = {"num_cpus": max(1, workers)} if address is None else {}
        ray.init(address=address, include_dashboard=False, logging_level="ERROR", log_to_driver=False, **kw)
    try:
        remote = ray.remote(num_cpus=1)(_indexed)
        pending = [remote.remote((fn, i, job)) for i, job in enumerate(jobs)]
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            yield ray.get(done[0])
    finally:
        if started:
            ray.shutdown()


def iter_tasks(fn: Callable, jobs: Sequence, *, workers: int = 1, backend: str = "process", progress: bool = True,
               address: Optional[str] = None, desc: str = "runs", reused: int = 0) -> Iterator:
    """Yield ``(i, fn(jobs[i]))`` as each job finishes (completion order), with a tqdm bar; the
    arguments are those of ``run_tasks``, and ``reused``: runs done before (a run cache's), which the bar counts
    as done and names. Stopping early shuts the pool (or a local Ray) down; finishing closes and joins it."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; valid backends: {', '.join(BACKENDS)}")
    if address is not None and backend != "ray":
        raise ValueError("address (a Ray cluster) needs backend='ray'")
    jobs = list(jobs)
    it = _process(fn, jobs, workers) if backend == "process" else _ray(fn, jobs, workers, address)
    with _bar(len(jobs), progress, desc, reused) as bar:
        for item in it:
            bar.update(1)
            yield item


def run_tasks(fn: Callable, jobs: Sequence, *, workers: int = 1, backend: str = "process", progress: bool = True,
              address: Optional[str] = None, on_result: Optional[Callable] = None, desc: str = "runs") -> list:
    """``[fn(job) for job in jobs]``, computed on ``backend`` with up to ``workers`` parallel jobs.

    ``progress``: a tqdm bar (one tick per finished job). ``address``: a Ray cluster to join
    (backend "ray" only). ``on_result(i, result)``: called as job ``i`` finishes. Raises ValueError
    for an unknown backend, RuntimeError for "ray" without Ray installed.

    Example: run_tasks(abs, [-1, 2, -3], workers=2) -> [1, 2, 3].
    """
    jobs = list(jobs)
    results: list = [None] * len(jobs)
    for i, res in iter_tasks(fn, jobs, workers=workers, backend=backend, progress=progress, address=address,
                             desc=desc):
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
