"""The run log: one row of metrics per step, as JSON lines on disk and a list of dicts in memory.

A row is written whole and flushed at once, so a crash never leaves half a row; non-finite floats
are stored as null. ``RunLog.load(path)`` reads a log back; ``to_pandas()`` gives a DataFrame.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Optional

import numpy as np
import torch

__all__ = ["RunLog"]


class RunLog:
    """One row of metrics per step, appended to a JSON-lines file (flushed every row) and kept in memory."""

    def __init__(self, path: Optional[str] = None, config: Optional[dict] = None):
        self.rows: list[dict] = []
        self.config = config or {}
        self.path = Path(path) if path else None
        self._f = None
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._f = open(self.path, "w")

    def append(self, row: dict) -> None:
        row = {k: _plain(v) for k, v in row.items()}
        self.rows.append(row)
        if self._f:
            self._f.write(json.dumps(row) + "\n")      # one write per row: a crash never leaves half a row
            self._f.flush()

    def close(self) -> None:
        if self._f:
            self._f.close()
            self._f = None

    def to_pandas(self):
        import pandas as pd
        return pd.DataFrame(self.rows)

    def column(self, key: str) -> np.ndarray:
        return np.array([r.get(key, np.nan) for r in self.rows], dtype=float)

    @staticmethod
    def load(path) -> "RunLog":
        log = RunLog()
        with open(path) as f:
            log.rows = [json.loads(line) for line in f if line.strip()]
        return log


def _plain(v):
    if isinstance(v, torch.Tensor):
        v = v.detach().cpu()
        return v.item() if v.dim() == 0 else v.tolist()
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, (np.floating, np.integer)):
        return v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v
