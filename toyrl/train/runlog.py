"""The run log: a header line, then one row of metrics per step, as JSON lines on disk and a list of dicts in memory.

On disk (``toyrl train --out run.jsonl``)::

    {"config": {"env": "gridworld", ..., "seed": 0}, "toyrl": "0.1.0", "torch": "2.3.0",
     "started": "2025-01-01T12:00:00+00:00", "stats_over": "all minibatches x epochs, token-weighted ..."}
    {"step": 0, "reward_mean": 0.25, "grad_norm": "inf", ...}
    {"step": 1, ...}

The header holds the full ``TrainConfig`` (``asdict``), the toyrl and torch versions, the UTC start time and
``stats_over`` (how a row's loss statistics span the step's minibatches and epochs, ``diagnostics.STATS_OVER``;
logs written before it took the last minibatch's clip_frac, approx_kl and per-turn lists), so a log alone says
what produced it. A row is written whole and flushed at once, so a killed run leaves at most one
torn final line. JSON has no NaN or infinity: non-finite floats are written as the strings ``"nan"``, ``"inf"``,
``"-inf"`` and read back as floats (older logs wrote ``null``; it reads as NaN in ``column``).

Columns that a run's config fixes are not written as if measured; the header says so once:
- ``by_construction`` (``fixed_columns``): with one on-policy epoch (ppo_epochs = minibatches = 1, the exact
  engine, no staleness, matched recompute) every importance ratio is 1, so clip fractions are 0 and the PPO KL
  estimates 0 by construction; the rows leave them out (``ON_POLICY``) and keep ``onpolicy_ratio_err``, the
  largest |ratio - 1| measured, which is float rounding when the trainer's log-probs match the rollout's;
- ``undefined``: the template probe (template_entropy, template_mi and per turn) of a toy policy with
  think_max = 0, which writes no reasoning to take templates of.
``column(key)`` of such a column gives its constant (NaN for an undefined one), so readers need not know.

``RunLog.load(path)`` reads a log back (``.config``, ``.meta`` from the header; headerless logs load with empty
ones); a torn final line is skipped with a warning, any other bad line raises ``ValueError`` naming ``file:line``.
``column(key)`` is one metric as a float array; ``to_pandas()`` gives a DataFrame. A ``tracker``
(``toyrl.train.trackers``: TensorBoard, wandb, trackio) gets the header's config and each row as it is appended,
so a tracker shows what the file holds.
"""
from __future__ import annotations

import json
import math
import warnings
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

import numpy as np
import torch

__all__ = ["RunLog", "encode", "decode", "header", "fixed_columns", "ON_POLICY", "TEMPLATE_PROBE"]

NEG_INF = -math.inf
NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": NEG_INF}
"""the on-disk spelling of the non-finite floats -> the float; one object each, so rows holding NaN compare equal"""


ON_POLICY = {"clip_frac": 0.0, "clip_frac_low": 0.0, "clip_frac_high": 0.0, "ratio_max": 1.0, "ratio_min": 1.0,
             "ratio_mean": 1.0, "approx_kl": 0.0, "ppo_kl": 0.0, "clip_frac_turn": 0.0, "clip_frac_low_turn": 0.0,
             "ratio_max_turn": 1.0, "ratio_min_turn": 1.0, "ratio_mean_turn": 1.0, "approx_kl_turn": 0.0}
"""the loss statistics one on-policy epoch fixes -> their value (per turn index for the *_turn lists)"""
TEMPLATE_PROBE = ("template_entropy", "template_mi", "template_entropy_turn")
"""the columns of the template probe (``diagnostics.turn_template_ids`` over the reasoning tokens)"""
_ON_POLICY_WHY = ("ppo_epochs = minibatches = 1, engine exact, staleness 0, recompute matched: the update's "
                  "importance ratios are 1, its clip fractions 0 and its PPO KL 0 by construction, so the rows leave "
                  "them out; onpolicy_ratio_err is the largest |ratio - 1| measured (float rounding)")
_TEMPLATE_WHY = "think_max = 0: a toy policy writes no reasoning tokens, so the template probe has nothing to read"


def fixed_columns(config: dict) -> dict:
    """What the config fixes: {"by_construction": {"why", "columns"}} and {"undefined": {column: why}}, each only
    when it applies (an empty dict for a config that fixes nothing, or lacks the fields to tell).
    Example: fixed_columns(asdict(TrainConfig()))["by_construction"]["columns"]["ratio_max"] -> 1.0."""
    out = {}
    need = ("ppo_epochs", "minibatches", "engine", "staleness", "recompute")
    if all(k in config for k in need) and (config["ppo_epochs"], config["minibatches"], config["engine"],
                                           config["staleness"], config["recompute"]) == (1, 1, "exact", 0, "matched"):
        out["by_construction"] = {"why": _ON_POLICY_WHY, "columns": dict(ON_POLICY)}
    from ..policies.toy import PRESETS
    if config.get("think_max", None) == 0 and config.get("policy") in PRESETS:
        out["undefined"] = {k: _TEMPLATE_WHY for k in TEMPLATE_PROBE}
    return out


def _without_fixed(row: dict, fixed: dict) -> dict:
    """``row`` without the columns ``fixed`` names; with ``by_construction``, ``onpolicy_ratio_err`` added."""
    drop = set(fixed.get("by_construction", {}).get("columns", {})) | set(fixed.get("undefined", {}))
    out = {k: v for k, v in row.items() if k not in drop}
    if "by_construction" in fixed and "ratio_max" in row and "ratio_min" in row:
        out["onpolicy_ratio_err"] = max(abs(float(row["ratio_max"]) - 1), abs(1 - float(row["ratio_min"])))
    return out


class RunLog:
    """A header (``config``, ``meta``) and one row of metrics per step, appended to a JSON-lines file (flushed
    every row) and kept in memory. ``path``: the file it is written to or was read from; ``tracker``: an unopened
    ``toyrl.train.trackers`` tracker that gets the same rows, opened with the header's config at the first one."""

    def __init__(self, path: Optional[str] = None, config: Optional[dict] = None, tracker=None):
        self.rows: list[dict] = []
        self.config = config or {}
        self.meta: dict = {}
        self.path = Path(path) if path else None
        self._f, self.tracker = None, tracker
        self._unopened = dict(self.config) if tracker is not None else None   # the header's config, until row 1
        self.meta.update(fixed_columns(self.config))
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._f = open(self.path, "w")
            head = header(self.config)
            self.meta = {k: v for k, v in head.items() if k != "config"}
            self._write(head)

    def _write(self, obj: dict) -> None:
        self._f.write(json.dumps(encode(obj)) + "\n")      # one write per line: a crash never leaves half a row
        self._f.flush()

    def append(self, row: dict) -> None:
        row = {k: _plain(v) for k, v in _without_fixed(row, self.meta).items()}
        self.rows.append(row)
        if self._f:
            self._write(row)
        if self.tracker is not None:
            if self._unopened is not None:     # opened on the first row: a Trainer built only to check writes nothing
                self.tracker.open(self._unopened)
                self._unopened = None
            self.tracker.log(row.get("step", len(self.rows) - 1), row)

    def close(self) -> None:
        if self._f:
            self._f.close()
            self._f = None
        if self.tracker is not None:
            self.tracker.close()
            self.tracker = None

    def to_pandas(self):
        import pandas as pd
        return pd.DataFrame(self.rows)

    def keys(self) -> list:
        """Every key some row has, in first-seen order."""
        return list(dict.fromkeys(k for r in self.rows for k in r))

    def column(self, key: str, strict: bool = True) -> np.ndarray:
        """``key`` of every row as a float array (NaN where a row lacks it or holds null). A key no row has raises
        KeyError listing the columns there are (``strict=False``: all NaN, for a fixed key list over mixed runs),
        unless the header fixes it (``fixed_columns``): then its constant, or NaN for an undefined probe."""
        fixed = self.meta.get("by_construction", {}).get("columns", {})
        if (key in fixed or key in self.meta.get("undefined", {})) and not any(key in r for r in self.rows):
            return np.full(len(self.rows), float(fixed.get(key, np.nan)))    # the header's constant, or NaN
        if strict and self.rows and not any(key in r for r in self.rows):
            where = f" in {self.path}" if self.path else ""
            raise KeyError(f"no column {key!r}{where}; columns: {', '.join(self.keys())}")
        return np.array([np.nan if r.get(key) is None else r[key] for r in self.rows], dtype=float)

    @staticmethod
    def load(path) -> "RunLog":
        """Read a run log written by ``RunLog`` (header first) or an older headerless one.

        The first line is the header if it is an object with ``config`` and no ``step``. A final line without
        its newline that does not parse (a killed run) is skipped with a warning; any other line that is not
        a JSON object raises ValueError naming ``file:line``."""
        log = RunLog()
        log.path = Path(path)
        text = log.path.read_text()
        lines, first = text.split("\n"), True
        for i, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                obj = decode(json.loads(line))
                if not isinstance(obj, dict):
                    raise ValueError(f"a {type(obj).__name__}, not a JSON object")
            except ValueError as e:
                if i == len(lines) and not text.endswith("\n"):       # torn: the run died writing it
                    warnings.warn(f"{path}:{i}: skipped a torn final line (the run was cut off): {line[:40]!r}")
                    break
                raise ValueError(f"{path}:{i}: not a run-log row: {e}") from None
            if first and "config" in obj and "step" not in obj:
                log.config = obj["config"]
                log.meta = {k: v for k, v in obj.items() if k != "config"}
            else:
                log.rows.append(obj)
            first = False
        return log


def header(config: dict) -> dict:
    """The first line of a run log: the config, the toyrl and torch versions, the start time (ISO 8601, UTC),
    how the rows' loss statistics pool a step's minibatches and epochs (``stats_over``) and the columns the
    config fixes (``fixed_columns``)."""
    import toyrl
    from ..diagnostics import STATS_OVER
    version = getattr(toyrl, "__version__", None)
    if version is None:
        from importlib.metadata import version as dist_version
        version = dist_version("toyrl")
    return {"config": config, "toyrl": version, "torch": torch.__version__,
            "started": datetime.now(timezone.utc).isoformat(timespec="seconds"), "stats_over": STATS_OVER,
            **fixed_columns(config)}


def encode(v):
    """JSON-ready copy of ``v``: non-finite floats (also in lists and dicts) become "nan" / "inf" / "-inf".
    Example: encode({"a": [1.0, float("inf")], "b": float("nan")}) -> {"a": [1.0, "inf"], "b": "nan"}."""
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else "inf" if v > 0 else "-inf"
    if isinstance(v, dict):
        return {k: encode(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [encode(x) for x in v]
    return v


def decode(v):
    """The inverse of ``encode``: the strings "nan" / "inf" / "-inf" become floats (also in lists and dicts)."""
    if isinstance(v, str):
        return NON_FINITE.get(v, v)
    if isinstance(v, dict):
        return {k: decode(x) for k, x in v.items()}
    if isinstance(v, list):
        return [decode(x) for x in v]
    return v


def _plain(v):
    """A row value as plain Python (tensors, numpy values unwrapped); non-finite floats as the NON_FINITE objects."""
    if isinstance(v, torch.Tensor):
        v = v.detach().cpu()
        v = v.item() if v.dim() == 0 else v.tolist()
    elif isinstance(v, np.ndarray):
        v = v.tolist()
    elif isinstance(v, (np.floating, np.integer)):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return decode(encode(v))
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v
