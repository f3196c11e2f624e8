"""The lab: experiments run on top of the trainer, apart from the data path.

- ``claims``: the claims ledger (pre-registered comparisons over seeds, their verdicts and README table);
- ``scorecard``: the stability scorecard (which design choices collapse, over seeds) with ``mi`` and ``plot``;
- ``bench``: timings of the envs, the estimators and a training step;
- ``demo``: ``toyrl demo``, a collapse and its fix;
- ``parallel``: many runs on a process pool or Ray; ``results``: where results are written.

Imported by their full names; nothing here is imported by ``import toyrl``.
"""
