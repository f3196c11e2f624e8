"""Run trackers: the run log's rows, also sent to TensorBoard, Weights & Biases or trackio.

    cfg = TrainConfig(env="bandit_chain", steps=20, logger="tensorboard")
    train(cfg, "runs/grpo.jsonl")        # runs/grpo.jsonl, and runs/tensorboard/grpo/events.out.tfevents.*
    # then: tensorboard --logdir runs/tensorboard

The JSON-lines run log (``toyrl.train.runlog``) stays the record of a run; a tracker is a view of it. ``RunLog``
hands its tracker the same rows it writes, as it writes them, so the two never disagree (it opens the tracker at
the first row, so a Trainer built only to check a config writes nothing). Every backend is one small class with
the same three methods:

    open(config)       the run's config (the run log's header) as the run's hyperparameters
    log(step, row)     one run-log row: each number is a series (``scalars``)
    close()

A per-turn list in a row (``clip_frac_turn``: one value per turn index) becomes one series per turn index
(``clip_frac/turn_0``, ``clip_frac/turn_1``, ...); other lists of numbers (``engine_gap_by_prob``, one value per
probability bin) become ``engine_gap_by_prob/0``, ...; text (``sample_replies``) is left to the run log.

Each backend is an optional extra, imported only when a run opens it (``pip install 'toyrl[tensorboard]'``,
``'toyrl[wandb]'``, ``'toyrl[trackio]'``). Where each writes (``folder``: ``TrainConfig.logger_dir``, by default
``<the run log's folder>/<logger>``, or ``runs/<logger>`` for a run without a log file):

- tensorboard: ``<folder>/<run name>/events.out.tfevents.*``, through ``torch.utils.tensorboard``; the
  hyperparameters in the HParams tab and as a ``config`` text. A rerun under the same name replaces the earlier
  event files, as the rerun replaces its run log.
- wandb: ``<folder>/wandb/<run>/``, project ``$WANDB_PROJECT`` or ``toyrl``, in wandb's own mode (``WANDB_MODE``:
  ``offline`` needs no account and no network; ``wandb sync`` uploads later).
- trackio: ``<folder>/<project>.db`` (trackio's local store), project ``$TRACKIO_PROJECT`` or ``toyrl``. trackio
  has no folder argument: it reads ``$TRACKIO_DIR`` once, when first imported, so the tracker sets ``$TRACKIO_DIR``
  to the folder just before that import (and leaves it set); one Python process therefore writes one trackio folder,
  and a tracker for another folder is a ValueError. ``TRACKIO_DIR=<folder> trackio show`` opens it.

``export(paths, "tensorboard", "tb")`` sends logs already written (``toyrl export RUN.jsonl --to tensorboard tb``;
without a folder, ``runs/<backend>``). The run name is the log file's name without ``.jsonl`` (``run_names``).
"""
from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Optional

__all__ = ["TRACKERS", "LOGGERS", "scalars", "hparams", "check_logger", "tracker_folder", "make_tracker",
           "open_tracker", "run_names", "export", "trackio_dir", "TensorBoardTracker", "WandbTracker", "TrackioTracker"]

HPARAM_METRICS = ("reward_mean", "success_rate", "eval_success_rate")
"""the series TensorBoard's HParams tab lists beside each run's hyperparameters"""


def scalars(row: dict) -> dict:
    """The series of one run-log row, name -> float: every number (bools as 0 / 1, non-finite floats kept), a list
    ending in ``_turn`` as one series per turn index, any other list of numbers as one per position, a dict as one
    per key; ``step`` (the x axis), text and ``None`` are left out.

    Example: scalars({"step": 3, "loss": 0.5, "clip_frac_turn": [0.1, 0.2], "sample_replies": ["left"]})
    -> {"loss": 0.5, "clip_frac/turn_0": 0.1, "clip_frac/turn_1": 0.2}."""
    out: dict = {}

    def add(name, v):
        if isinstance(v, (bool, int, float)):
            out[name] = float(v)
        elif isinstance(v, dict):
            for k, x in v.items():
                add(f"{name}/{k}", x)
        elif isinstance(v, (list, tuple)):
            stem, prefix = (name[:-len("_turn")], "turn_") if name.endswith("_turn") else (name, "")
            for i, x in enumerate(v):
                if isinstance(x, (bool, int, float)):
                    out[f"{stem}/{prefix}{i}"] = float(x)

    for key, value in row.items():
        if key != "step":
            add(key, value)
    return out


def hparams(config: dict) -> dict:
    """A run's config as flat hyperparameters (each a number, a bool or a string): nested dicts flattened with
    ".", lists and empty dicts as compact JSON, ``None`` as "none".

    Example: hparams({"lr": 0.1, "env_kwargs": {"size": 4}, "filters": ["starpo_s"], "kl": None, "clip_kwargs": {}})
    -> {"lr": 0.1, "env_kwargs.size": 4, "filters": '["starpo_s"]', "kl": "none", "clip_kwargs": "{}"}."""
    out: dict = {}
    for key, v in config.items():
        if isinstance(v, dict) and v:
            out.update({f"{key}.{k}": x for k, x in hparams(v).items()})
        elif v is None:
            out[key] = "none"
        elif isinstance(v, (bool, int, float, str)):
            out[key] = v
        else:
            out[key] = json.dumps(v, separators=(",", ":"), default=str)
    return out


def _missing(extra: str, package: str) -> ImportError:
    return ImportError(f"logger {extra!r} needs {package}: pip install 'toyrl[{extra}]'")


class TensorBoardTracker:
    """TensorBoard event files in ``<folder>/<name>/`` (``torch.utils.tensorboard``; needs the tensorboard package)."""

    extra, package = "tensorboard", "tensorboard"

    def __init__(self, folder, name: str):
        self.path, self.writer = Path(folder) / name, None

    def open(self, config: dict) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
            from torch.utils.tensorboard.summary import hparams as hparams_summaries
        except ImportError:
            raise _missing(self.extra, self.package) from None
        for old in self.path.glob("events.out.tfevents.*"):    # a rerun replaces its events, as it does its log
            old.unlink()
        self.writer = SummaryWriter(str(self.path))
        hp = {k: str(v).lower() if isinstance(v, bool) else v for k, v in hparams(config).items()}  # torch's
        if hp:                                                 # hparams() would write a bool as the number 1.0
            for summary in hparams_summaries(hp, dict.fromkeys(HPARAM_METRICS, 0.0)):
                self.writer.file_writer.add_summary(summary)
            self.writer.add_text("config", "    " + json.dumps(config, indent=1, default=str).replace("\n", "\n    "))

    def log(self, step: int, row: dict) -> None:
        for name, v in scalars(row).items():
            self.writer.add_scalar(name, v, step)
        self.writer.flush()                                     # as the run log: a killed run keeps its rows

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


class WandbTracker:
    """A Weights & Biases run in ``<folder>/wandb/`` (``mode``: None, wandb's own, e.g. ``WANDB_MODE``). ``close``
    finishes the run and stops wandb's service process, which may otherwise still be writing the run file."""

    extra, package = "wandb", "wandb"

    def __init__(self, folder, name: str, mode: Optional[str] = None):
        self.folder, self.name, self.mode, self.run = Path(folder), name, mode, None

    def open(self, config: dict) -> None:
        try:
            import wandb
        except ImportError:
            raise _missing(self.extra, self.package) from None
        self.folder.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "toyrl"), name=self.name,
                              dir=str(self.folder), config=config, mode=self.mode)

    def log(self, step: int, row: dict) -> None:
        self.run.log(scalars(row), step=step)

    def close(self) -> None:
        if self.run is not None:
            import wandb
            self.run.finish()
            wandb.teardown()                                   # waits for the offline run file to be complete
            self.run = None


def trackio_dir() -> Optional[Path]:
    """The folder trackio writes to in this process, fixed when trackio was first imported (None: not imported yet,
    or a trackio that does not say). Example: after TRACKIO_DIR=tr python -c "import trackio" -> Path("tr")."""
    utils = sys.modules.get("trackio.utils")
    where = getattr(utils, "TRACKIO_DIR", None)
    return None if where is None else Path(where)


def _check_trackio_dir(folder: Path) -> None:
    where = trackio_dir()
    if where is not None and where.resolve() != folder:
        raise ValueError(f"logger_dir: trackio already writes to {where} in this process (it reads $TRACKIO_DIR once, "
                         f"at import), so it cannot also write to {folder}; use one trackio folder per process")


class TrackioTracker:
    """A trackio run in ``<folder>/<project>.db``: ``$TRACKIO_DIR`` is set to ``folder`` before trackio is first
    imported (trackio's only way to choose its folder); a ``folder`` other than the one trackio was imported with
    is a ValueError, when the tracker is made and again when it opens."""

    extra, package = "trackio", "trackio"

    def __init__(self, folder, name: str):
        self.folder, self.name, self.trackio = Path(folder).resolve(), name, None
        _check_trackio_dir(self.folder)

    def open(self, config: dict) -> None:
        _check_trackio_dir(self.folder)
        os.environ["TRACKIO_DIR"] = str(self.folder)          # read by trackio.utils when first imported
        try:
            import trackio
        except ImportError:
            raise _missing(self.extra, self.package) from None
        self.trackio = trackio
        trackio.init(project=os.environ.get("TRACKIO_PROJECT", "toyrl"), name=self.name, config=config)

    def log(self, step: int, row: dict) -> None:
        self.trackio.log(scalars(row), step=step)

    def close(self) -> None:
        if self.trackio is not None:
            self.trackio.finish()
            self.trackio = None


TRACKERS = {"none": None, "tensorboard": TensorBoardTracker, "wandb": WandbTracker, "trackio": TrackioTracker}
"""logger name -> its tracker class (none: the run log alone)"""
LOGGERS = tuple(TRACKERS)
"""the values of ``TrainConfig.logger``"""


def check_logger(name) -> None:
    """ValueError unless ``name`` is a logger (``LOGGERS``) whose package is installed (found, not imported).
    Example: check_logger("tensorbord") -> ValueError("logger must be one of none, tensorboard, wandb, trackio,
    got 'tensorbord'")."""
    if name not in TRACKERS:
        raise ValueError(f"logger must be one of {', '.join(LOGGERS)}, got {name!r}")
    cls = TRACKERS[name]
    if cls is not None and importlib.util.find_spec(cls.package) is None:
        raise ValueError(f"logger {name!r} needs the {cls.package} package: pip install 'toyrl[{cls.extra}]'")


def tracker_folder(logger: str, logger_dir=None, log_path=None) -> Path:
    """Where ``logger`` writes: ``logger_dir`` if given, else ``<log_path's folder>/<logger>``, else
    ``runs/<logger>``. Example: tracker_folder("tensorboard", None, "out/grpo.jsonl") -> Path("out/tensorboard")."""
    if logger_dir is not None:
        return Path(logger_dir)
    return (Path(log_path).parent if log_path else Path("runs")) / logger


def make_tracker(logger: str, folder, name: str, **kw):
    """An unopened tracker of ``logger`` writing run ``name`` under ``folder`` (None for "none"); ``kw`` goes to its
    class (wandb: ``mode``)."""
    check_logger(logger)
    cls = TRACKERS[logger]
    return None if cls is None else cls(folder, name, **kw)


def open_tracker(cfg, log_path=None):
    """The unopened tracker a ``TrainConfig`` asks for (None for logger "none"), named after ``log_path``
    (``out/grpo.jsonl`` -> ``grpo``) or, without one, ``<estimator>_<clip>_<env>_seed<seed>``. ``RunLog`` opens it."""
    if cfg.logger == "none":
        return None
    name = Path(log_path).stem if log_path else f"{cfg.estimator}_{cfg.clip}_{cfg.env}_seed{cfg.seed}"
    return make_tracker(cfg.logger, tracker_folder(cfg.logger, cfg.logger_dir, log_path), name)


def run_names(paths) -> list:
    """One distinct run name per run log: its file name without ``.jsonl``, or ``<folder>/<file>`` where two logs
    share a file name. Example: run_names(["a/run.jsonl", "b/run.jsonl", "c/x.jsonl"]) -> ["a/run", "b/run", "x"]."""
    paths = [Path(p) for p in paths]
    stems = [p.stem for p in paths]
    names = [s if stems.count(s) == 1 else f"{p.parent.name}/{s}" for p, s in zip(paths, stems)]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"paths: two run logs would have the same run name {twice[0]!r}; rename one")
    return names


def export(paths, to: str, folder=None) -> list:
    """Send run logs already written to tracker ``to``: each log's header as hyperparameters, each row at its
    ``step``; wandb runs are written offline. ``folder``: as ``logger_dir`` (None: ``runs/<to>`` in the current
    folder, so a shipped log's export never lands in data/). Every log is read before anything is written; a
    missing or bad one raises ValueError naming it. Returns the run names.
    Example: export(["runs/grpo.jsonl"], "tensorboard", "tb") -> ["grpo"] (tb/grpo/events.out.tfevents.*)."""
    from .runlog import RunLog
    if to not in TRACKERS or to == "none":
        raise ValueError(f"to must be one of {', '.join(LOGGERS[1:])}, got {to!r}")
    check_logger(to)
    paths = [Path(p) for p in paths]
    if not paths:
        raise ValueError("paths: no run log given")
    logs = []
    for p in paths:
        if not p.is_file():
            raise ValueError(f"paths: no run log at {p}")
        log = RunLog.load(p)                                   # ValueError "file:line: not a run-log row"
        if not log.rows:
            raise ValueError(f"paths: {p} holds no rows")
        if not all(isinstance(r.get("step"), int) for r in log.rows):     # e.g. a figure's data, not a run log
            raise ValueError(f"paths: {p} is not a run log (a row without an integer step)")
        logs.append(log)
    names = run_names(paths)
    folder = tracker_folder(to, folder)
    for log, name in zip(logs, names):
        tracker = make_tracker(to, folder, name, **({"mode": "offline"} if to == "wandb" else {}))
        tracker.open(log.config)
        for row in log.rows:
            tracker.log(row["step"], row)
        tracker.close()
    return names
