"""The lab: experiments run on top of the trainer, apart from the data path.

- ``claims``: the claims ledger (pre-registered comparisons over seeds, their verdicts and their table, docs/claims.md);
- ``scorecard``: the stability scorecard (which design choices collapse, over seeds) with ``mi`` and ``plot``;
- ``bench``: timings of the envs, the estimators and a training step;
- ``demo``: ``toyrl demo``, a collapse and its fix;
- ``parallel``: many runs in this process, on spawn workers (``workers``) or Ray; ``interrupts``: how a job ends
  early (a signal, a failed run); ``results``: where results are written, and a job's hold on its folder.

Imported by their full names; nothing here is imported by ``import toyrl``.
"""
