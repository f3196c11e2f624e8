"""Grade a student's run log against what its lesson expects: ``toyrl grade RUN.jsonl --lesson NN``.

A lesson that asks for a training run says here, as data (``LESSONS``), which run it is and what that run must
show. A lesson has one or more expected runs (``Expected``); each is a *setting* (the ``TrainConfig`` fields of the
run: an arm of a ledger claim, or notebook 02's shipped runs) and *criteria* on its outcome (``Criterion``: a metric,
``>=`` or ``<=``, a bound, the words, and where the bound comes from). Grading a log (``grade``):

1. the run's setting, read from the log's header, must equal one expected run's setting, field by field (every
   ``TrainConfig`` field but ``IGNORED``; a field an older log lacks counts as its default);
2. the run must be complete (as many rows as ``steps``): the metrics read the last steps;
3. each criterion is checked on the run's metrics (``outcome``): the ledger claim's own per-run metrics (the
   numbers its verdict is computed from, e.g. ``final_success`` = mean success rate over the last 20% of steps)
   plus ``toyrl.collapse.classify`` with the ledger's rule (``collapsed``, ``frozen``) and the peak of the 5-step
   mean reward (``peak_reward``). A criterion with ``required=False`` is a note: reported, never failed.

Where the bounds come from: for a ledger arm, the lowest (for ``>=``) or highest (for ``<=``) value of that metric
over the ledger's 20 seeds of the arm (``data/claims/NAME.series.json.gz``, seeds 0-9, and ``data/claims/heldout/``,
seeds 10-19), rounded outward (to two decimals; the KL bounds to their first significant digit), so that every
ledger run passes and a run outside the ledger's range does not; ``tests/test_grade.py`` recomputes each bound from those files. Lesson 02's come from the
ledger's rules (``toyrl.collapse.RULE``, the precursor rule of claim ``echo_trap``) and its 6 shipped runs
(``data/runs/echo_trap/grpo_s*.jsonl``). Each criterion's ``source`` says which.

    report = grade(RunLog.load("run.jsonl"), "13")
    report.passed             # every required criterion holds
    [v.line() for v in report.verdicts]   # ["PASS  setting: ...", "FAIL  final success rate ...", ...]
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import Optional

import numpy as np

from ..collapse import RULE, classify
from ..policies.toy import PRESETS
from ..train import TrainConfig
from ..train.defaults import resolve_rates
from ..train.runlog import encode
from .claims import CLAIMS
from .claims.spec import SERIES_KEYS, smooth
from .claims.stability import COLLAPSE_BASE

__all__ = ["Criterion", "Expected", "Lesson", "Verdict", "Report", "LESSONS", "IGNORED", "at_least", "at_most",
           "lesson", "setting_of", "mismatches", "pick", "outcome", "judge", "complete", "grade"]

IGNORED = ("seed", "progress", "device", "logger", "logger_dir")
"""config fields that do not change the setting: any seed, progress bar, device or run tracker grades the same"""


@dataclass(frozen=True)
class Criterion:
    """One thing a run's outcome must show: ``metric op bound`` on the run's metrics (``outcome``)."""

    metric: str
    """a key of ``outcome()``: the claim's per-run metrics, ``peak_reward``, ``collapsed`` or ``frozen``"""
    op: str
    """``">="`` or ``"<="``"""
    bound: float
    """the value the metric is compared with"""
    words: str
    """the criterion in plain words, e.g. "final success rate (last 20% of steps)" """
    source: str
    """where the bound comes from, e.g. "lowest of the ledger's 20 seeds: 0.965" """
    required: bool = True
    """False: a note, reported but never failing the run"""


def at_least(metric: str, bound: float, words: str, source: str, required: bool = True) -> Criterion:
    """``metric >= bound``. Example: at_least("final_success", 0.96, "final success rate", "ledger min 0.965")."""
    return Criterion(metric, ">=", bound, words, source, required)


def at_most(metric: str, bound: float, words: str, source: str, required: bool = True) -> Criterion:
    """``metric <= bound``. Example: at_most("collapsed", 0, "no collapse", "0 of 20 ledger seeds")."""
    return Criterion(metric, "<=", bound, words, source, required)


@dataclass(frozen=True)
class Expected:
    """One run a lesson asks for."""

    name: str
    """its name in the lesson (the ledger arm's)"""
    about: str
    """what the run is, in one line"""
    setting: dict
    """its TrainConfig fields (those that differ from the defaults)"""
    claim: Optional[str]
    """the ledger claim whose per-run metrics read it (``CLAIMS[claim].metrics``)"""
    criteria: tuple
    """its ``Criterion``s, in the order they are reported"""


@dataclass(frozen=True)
class Lesson:
    """A lesson with a run to grade."""

    number: str
    """two digits, as in the notebook's file name ("13")"""
    title: str
    """the notebook's subject"""
    runs: tuple
    """its ``Expected`` runs"""


def _arm(claim: str, arm: str, about: str, *criteria: Criterion) -> Expected:
    return Expected(arm, about, CLAIMS[claim].config(arm, quick=False), claim, criteria)


LEDGER = "of the ledger's 20 seeds"
NO_COLLAPSE = "the run does not collapse (toyrl.collapse, the ledger's rule)"
FINAL = "final success rate (last 20% of steps)"

LESSONS = {
    "02": Lesson("02", "the Echo Trap", (
        Expected("grpo", "notebook 02's aggressive GRPO on random 4x4 lakes (the shipped runs' setting)",
                 dict(COLLAPSE_BASE, steps=120), "echo_collapse", (
                     at_least("peak_reward", RULE["min_peak"], "the reward rose (peak of its 5-step mean)",
                              "toyrl.collapse.RULE's min_peak; the 6 shipped runs: 0.62-0.89"),
                     at_least("precursor", 1, "groups go silent while the reward is high",
                              "claim echo_trap's rule: zero-variance share >= 0.8 at >= 0.66 x peak reward; "
                              "4 of the 6 shipped runs, seeds 0, 2, 3, 5"),
                     at_least("frozen", 1, "a zero-gradient freeze", "4 of the 6 shipped runs", required=False),
                     at_least("collapsed", 1, "a collapse", "none of the 6 shipped runs", required=False))),
    )),
    "03": Lesson("03", "env tokens must be masked", (
        _arm("env_mask", "masked", "GRPO after BC, free sampling, env tokens masked (claim env_mask)",
             at_most("obs_token_rate", 0.05, "observation tokens the policy writes (final share)",
                     f"highest {LEDGER}: 0.045")),
        _arm("env_mask", "unmasked", "the same with env tokens in the loss (claim env_mask)",
             at_least("obs_token_rate", 0.02, "observation tokens the policy writes (final share)",
                      f"lowest {LEDGER}: 0.023"),
             at_least("void_turn_rate", 0.11, "void turns (final share)", f"lowest {LEDGER}: 0.117")),
    )),
    "04": Lesson("04", "void turns and format", (
        _arm("bc_format_kl", "bc_format", "GRPO after BC with the format penalty (claim bc_format_kl)",
             at_least("final_success", 0.27, FINAL, f"lowest {LEDGER}: 0.276"),
             at_most("void_turn_rate", 0.05, "void turns (final share)", f"highest {LEDGER}: 0.041"),
             at_most("collapsed", 0, NO_COLLAPSE, f"0 {LEDGER} collapse")),
    )),
    "12": Lesson("12", "the rollout engine is not the trainer", (
        _arm("engine_mismatch", "exact", "GRPO on the blind T-maze, an exact engine (claim engine_mismatch)",
             at_most("engine_kl", 0, "engine-trainer KL (mean over steps)", f"0 on all 20 {LEDGER[3:]}"),
             at_least("final_success", 0.54, FINAL, f"lowest {LEDGER}: 0.545"),
             at_most("collapsed", 0, NO_COLLAPSE, f"0 {LEDGER} collapse")),
        _arm("engine_mismatch", "int4", "the same with an int4 engine (claim engine_mismatch)",
             at_least("engine_kl", 0.0005, "engine-trainer KL (mean over steps)", f"lowest {LEDGER}: 0.00058"),
             at_least("engine_ratio_max", 2.8, "largest engine-trainer ratio", f"lowest {LEDGER}: 2.88")),
        _arm("engine_mismatch", "int4_tis", "the int4 engine with TIS (claim engine_mismatch)",
             at_least("engine_kl", 0.0006, "engine-trainer KL (mean over steps)", f"lowest {LEDGER}: 0.00062"),
             at_least("final_success", 0.44, FINAL, f"lowest {LEDGER}: 0.445")),
    )),
    "13": Lesson("13", "credit that pays off", (
        _arm("gigpo_horizon", "grpo_s5", "GRPO on the 5x5 snake from the snake5 warm start (claim gigpo_horizon)",
             at_least("final_success", 0.89, FINAL, f"lowest {LEDGER}: 0.896"),
             at_most("collapsed", 0, NO_COLLAPSE, f"0 {LEDGER} collapse")),
        _arm("gigpo_horizon", "gigpo_s5", "GiGPO on the 5x5 snake from the snake5 warm start (claim gigpo_horizon)",
             at_least("final_success", 0.96, FINAL,
                      f"lowest {LEDGER}: 0.965, above every GRPO seed's (highest 0.945)"),
             at_most("collapsed", 0, NO_COLLAPSE, f"0 {LEDGER} collapse")),
        _arm("gigpo_horizon", "gigpo_fork", "GiGPO on the fork from the fork9 warm start (claim gigpo_horizon)",
             at_least("final_success", 0.36, FINAL, f"lowest {LEDGER}: 0.363"),
             at_most("collapsed", 0, NO_COLLAPSE, f"0 {LEDGER} collapse")),
    )),
}
"""lesson number -> what its run must show; the lessons without a run to grade are not here"""


def lesson(number: str) -> Lesson:
    """The gradable lesson ``number`` ("13", or 13); ValueError naming the gradable ones otherwise."""
    key = f"{number:02d}" if isinstance(number, int) else str(number).zfill(2)
    if key not in LESSONS:
        raise ValueError(f"lesson {number!r} has no run to grade; gradable lessons: {', '.join(LESSONS)}")
    return LESSONS[key]


def _plain(v):
    """A config value as the header stores it (JSON: tuples are lists, non-finite floats strings)."""
    return json.loads(json.dumps(encode(v)))


def _resolved(config: dict) -> dict:
    """``config`` as the Trainer logs it: a toy policy's context None is written as "full" (``resolve_context``;
    logs written before that kept None, so both read the same)."""
    if config.get("lr", 0) is None or config.get("bc_lr", 0) is None:     # None: the policy's own rates, as logged
        own = resolve_rates(TrainConfig(policy=config.get("policy", "tiny"), lora_r=config.get("lora_r", 0),
                                        lr=config.get("lr"), bc_lr=config.get("bc_lr")))
        config = {**config, "lr": own.lr, "bc_lr": own.bc_lr}
    if config.get("context") is None and config.get("policy", "tiny") in PRESETS:
        return {**config, "context": "full"}
    return config


def setting_of(expected: Expected) -> dict:
    """Every TrainConfig field of the expected run but ``IGNORED``, as JSON values, as the Trainer logs them."""
    config = {k: _plain(v) for k, v in asdict(TrainConfig(**expected.setting)).items() if k not in IGNORED}
    return _resolved(config)


def mismatches(config: dict, setting: dict) -> list:
    """One line per field where a run's header ``config`` differs from ``setting`` (``setting_of``); a field the
    header lacks counts as its default. Example: config {"lr": 0.01, ...} for a setting with lr 0.001 ->
    ["--lr is 0.01 in the run; the lesson's run has 0.001"]."""
    defaults = {f.name: _plain(getattr(TrainConfig(), f.name)) for f in fields(TrainConfig)}
    config = _resolved({**defaults, **{k: _plain(v) for k, v in config.items()}})
    out = []
    for k, want in setting.items():
        got = config.get(k)
        if got != want:
            out.append(f"--{k.replace('_', '-')} is {json.dumps(got)} in the run; the lesson's run has "
                       f"{json.dumps(want)}")
    return out


def pick(lesson_: Lesson, config: dict) -> tuple:
    """(the expected run whose setting the config matches, or else the one with the fewest differences, and
    those differences)."""
    scored = [(mismatches(config, setting_of(e)), e) for e in lesson_.runs]
    diff, best = min(scored, key=lambda t: len(t[0]))
    return best, diff


def outcome(series: dict, claim: Optional[str]) -> dict:
    """The run's metrics: ``CLAIMS[claim].metrics(series)`` plus ``peak_reward`` (peak of the 5-step mean reward),
    ``collapsed`` / ``t_collapse`` / ``frozen`` / ``t_freeze`` / ``freeze_len`` (``classify`` with ``RULE``).
    ``series``: SERIES_KEYS -> one value per step. Example: a run whose reward never leaves 0 -> peak_reward 0,
    collapsed 0, frozen 0."""
    c = classify(series["reward_mean"], series["reward_std"], series["grad_norm"], **RULE)
    mean = np.nan_to_num(np.asarray(series["reward_mean"], dtype=float))
    out = {"peak_reward": float(smooth(mean, 5).max()) if len(mean) else float("nan"),
           "collapsed": float(c["collapsed"]), "t_collapse": c["t_collapse"], "frozen": float(c["frozen"]),
           "t_freeze": c["t_freeze"], "freeze_len": c["freeze_len"]}
    if claim is not None:
        out = {**CLAIMS[claim].metrics(series), **out}
    return out


@dataclass(frozen=True)
class Verdict:
    """One line of a grade: ``passed`` True / False, or None for a note."""

    passed: Optional[bool]
    text: str

    def line(self) -> str:
        return {True: "PASS", False: "FAIL", None: "note"}[self.passed] + "  " + self.text


def _shown(metric: str, value: float, metrics: dict) -> str:
    """A metric's value in words: yes/no (with the step) for the events, 3 significant digits otherwise."""
    if metric == "collapsed":
        return f"collapses at step {metrics['t_collapse']}" if value else "no collapse"
    if metric == "frozen":
        return f"frozen from step {metrics['t_freeze']} for {metrics['freeze_len']} steps" if value else "no freeze"
    if metric == "precursor":
        return "yes" if value == 1 else "no" if value == 0 else "no (the reward never rose)"
    return f"{value:.3g}"


def judge(c: Criterion, metrics: dict) -> Verdict:
    """Check one criterion on a run's metrics. A missing or NaN metric fails (it was not measured).
    Example: at_least("final_success", 0.9, "final success", "x") on {"final_success": 0.95} ->
    Verdict(True, "final success: 0.95 (needs >= 0.9; x)")."""
    value = metrics.get(c.metric)
    if value is None or not np.isfinite(value):
        shown, ok = _shown(c.metric, value, metrics) if c.metric == "precursor" else "not measured in this log", False
    else:
        ok = value >= c.bound if c.op == ">=" else value <= c.bound
        shown = _shown(c.metric, value, metrics)
    need = "" if c.metric in ("collapsed", "frozen", "precursor") else f"needs {c.op} {c.bound:g}; "
    return Verdict(ok if c.required else None, f"{c.words}: {shown} ({need}{c.source})")


def complete(rows: int, steps: int) -> Verdict:
    """The run logged all its steps (a cut-off run's "final" would be read mid-run).
    Example: complete(40, 40) -> PASS "the run is complete: 40 of 40 steps logged"."""
    return Verdict(rows >= steps, f"the run is complete: {rows} of {steps} steps logged")


@dataclass(frozen=True)
class Report:
    """A graded run: which expected run it was read as, and one verdict per check."""

    lesson: Lesson
    expected: Expected
    verdicts: tuple

    @property
    def passed(self) -> bool:
        return all(v.passed is not False for v in self.verdicts)


def grade(log, number) -> Report:
    """Grade a RunLog against lesson ``number``: the setting, completeness, then each criterion (module docstring).
    ValueError for a lesson with no run to grade, or a log without a config header or without rows."""
    les = lesson(number)
    if not log.config:
        raise ValueError(f"{log.path or 'the log'}: no config header (write it with `toyrl train --out`); "
                         "grading needs the run's setting")
    if not log.rows:
        raise ValueError(f"{log.path or 'the log'}: a header and no steps; the run wrote nothing to grade")
    expected, diff = pick(les, log.config)
    where = f"the lesson's {expected.name} run"
    first = Verdict(not diff, f"setting: {where}" if not diff else f"setting: not {where}: " + "; ".join(diff))
    steps = int(log.config.get("steps", TrainConfig().steps))
    series = {}
    for k in SERIES_KEYS:
        try:
            series[k] = log.column(k, strict=False)                     # (steps,)
        except (TypeError, ValueError):
            raise ValueError(f"{log.path or 'the log'}: column {k!r} holds something that is not a number") from None
    metrics = outcome(series, expected.claim)
    return Report(les, expected, (first, complete(len(log.rows), steps))
                  + tuple(judge(c, metrics) for c in expected.criteria))
