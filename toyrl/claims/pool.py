"""A process pool with a progress bar for the claims ledger (one torch thread per worker).

``run_tasks(fn, jobs, workers=W)`` yields ``fn(job)`` for every job as it finishes (any order), in
``workers`` spawned processes (1: in this process, in order). Same call shape as the planned
``toyrl.parallel.run_tasks``, so the ledger can move to it without other changes.
"""
from __future__ import annotations

import os
from typing import Callable, Iterator, Sequence

__all__ = ["run_tasks"]


def _init_worker() -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch
    torch.set_num_threads(1)


def run_tasks(fn: Callable, jobs: Sequence, *, workers: int = 1, progress: bool = True, desc: str = "runs") -> Iterator:
    """Yield fn(job) for each job as it completes; a tqdm bar on stderr counts finished jobs."""
    from tqdm.auto import tqdm
    jobs = list(jobs)
    bar = tqdm(total=len(jobs), desc=desc, disable=not progress, mininterval=1.0)
    if workers <= 1 or len(jobs) <= 1:
        _init_worker()
        try:
            for j in jobs:
                yield fn(j)
                bar.update(1)
        finally:
            bar.close()
        return
    import multiprocessing as mp
    pool = mp.get_context("spawn").Pool(min(workers, len(jobs)), initializer=_init_worker)
    try:
        for res in pool.imap_unordered(fn, jobs):
            bar.update(1)
            yield res
    finally:
        bar.close()
        pool.terminate()
        pool.join()
