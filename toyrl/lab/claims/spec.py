"""What a claim is, how one (arm, seed) run is executed, and the per-run metrics claims share.

A ``Claim`` holds the sentence it tests, its source, a base ``TrainConfig`` (as a dict), arms as
overrides of that base, step counts for the full and the quick ledger, a function turning one run's
log into scalar metrics, and ``Test``s: an effect (one arm's metric, or the paired difference of
two arms) that must lie on a claimed side of a threshold. A claim whose experiment is a
measurement rather than training sets ``measure`` instead (a function of seed and quick).

The words of a claim (its sentence, source, metric, mechanism, faithfulness note, what a
reproduction would need, notes and the number of settings tried) live in ``claims.toml`` beside
this module, one table per claim; ``about(name)`` reads them into the ``Claim`` of that name, so
the Python modules hold the designs and the TOML file the prose.

Runs are plain data: ``run_job(job)`` takes (config dict, trainer seed, probe name) and returns the
series of the run log, so two claims that need the same run share it.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable, Optional

import numpy as np

if sys.version_info >= (3, 11):
    import tomllib
else:                                                     # Python 3.10: the same parser, as a package
    import tomli as tomllib

__all__ = ["Test", "Claim", "ROLES", "about", "run_job", "train_seed", "SERIES_KEYS", "PROBES", "smooth", "final", "early", "auc",
           "success_metrics", "peak_drop", "collapse_times", "log10_grad", "tokens_per_episode"]

SERIES_KEYS = ("reward_mean", "reward_std", "success_rate", "grad_norm", "turns_per_episode", "tokens_generated",
               "batch_size", "void_turn_rate", "void_traj_rate", "clip_frac", "ratio_max", "kept_frac", "entropy",
               "zero_var_frac", "template_mi", "obs_token_rate", "format_valid_rate", "eval_success_rate",
               "update_norm", "skipped_update", "engine_kl", "engine_ratio_max")
"""run-log columns kept for every run (metrics and figures read only these)"""


WORDS = Path(__file__).with_name("claims.toml")
"""the prose of every claim, one TOML table per claim name"""


@lru_cache(maxsize=None)
def _words() -> dict:
    with open(WORDS, "rb") as f:
        return tomllib.load(f)


def about(name: str) -> dict:
    """The words of claim ``name`` from ``claims.toml``: Claim fields claim, source, metric, mechanism,
    faithfulness, needed, notes, untested, follows, and settings_tried = its own ``settings_own`` plus the
    settings_tried of the claim it ``follows`` (so a re-registered question counts every setting looked at for it).
    Raises KeyError naming the file if it has no table."""
    if name not in _words():
        raise KeyError(f"claim {name!r} has no [{name}] table in {WORDS}")
    words = dict(_words()[name])
    own = words.pop("settings_own")
    words["settings_tried"] = own + (about(words["follows"])["settings_tried"] if words.get("follows") else 0)
    return words


@dataclass
class Test:
    """One verdict test: ``sign * effect`` must exceed ``sign * threshold`` over the whole 95% interval."""

    name: str
    """what the test says, e.g. "GiGPO - GRPO, final success" """
    metric: str
    """per-run metric key (from ``Claim.metrics``)"""
    arm: str
    """the arm whose metric is tested"""
    baseline: Optional[str] = None
    """effect = metric(arm) - metric(baseline), paired by seed; None: metric(arm) itself"""
    sign: int = 1
    """+1: the effect must be above threshold; -1: below it"""
    threshold: float = 0.0
    """the bound the interval must clear"""
    minus: Optional[tuple] = None
    """(arm, baseline): subtract that pair's paired difference too, effect = (arm - baseline) - (arm' - baseline'),
    a difference of differences (does a gap grow from one task to another); None: a plain effect"""
    role: str = ""
    """"" (evidence) | "manipulation" (checks that the intervention did what it does by construction) |
    "construction" (the task's design makes the outcome certain): a role other than "" cannot fail and is not
    evidence (``toyrl.lab.claims.judge``)"""
    why: str = ""
    """with a role: why the test cannot fail, in one line"""

    def compared(self) -> list:
        """Every arm the effect reads: arm, baseline and the ``minus`` pair."""
        return [a for a in (self.arm, self.baseline, *(self.minus or ())) if a]


ROLES = ("", "manipulation", "construction")
"""the roles a Test can declare"""


@dataclass
class Claim:
    """One row of the ledger."""

    name: str
    """short id, the file name under data/claims/ and the CLI argument"""
    claim: str
    """the claim in one sentence, in our words"""
    source: str
    """paper and arXiv id"""
    metric: str
    """what is measured, in words"""
    base: dict
    """TrainConfig fields shared by every arm"""
    arms: dict
    """arm name -> TrainConfig overrides"""
    tests: list
    """``Test``s; the verdict rule lives in ``toyrl.lab.claims.stats.verdict``"""
    metrics: Callable[[dict], dict]
    """series of one run (key -> list) -> {metric: float}"""
    steps: int = 100
    """RL steps per run in the full ledger"""
    quick_steps: int = 40
    """RL steps per run under --quick"""
    curve: object = "success_rate"
    """series key (or tuple of keys) plotted against steps in the figure"""
    probe: Optional[str] = None
    """name in ``PROBES`` of an extra measurement on fresh rollouts during training"""
    measure: Optional[Callable] = None
    """(arm, seed, quick) -> {"metrics": {...}, "series": {...}}: a measurement instead of training"""
    notes: str = ""
    """what was tried, what the toy can and cannot show, what a reproduction would need"""
    needed: str = ""
    """what a reproduction would need; added to the notes when the verdict is not 'reproduced'"""
    quick_overrides: dict = field(default_factory=dict)
    """TrainConfig fields changed under --quick (besides steps)"""
    mechanism: str = ""
    """what must happen in a run for the claim to hold, and through which channel"""
    faithfulness: str = ""
    """how the toy setting maps to the paper's, and what it cannot test"""
    settings_tried: int = 1
    """how many settings were run for this claim (pilots included), honestly counted"""
    check: bool = False
    """True: an identity that holds by construction (verdict 'check' when its tests pass)"""
    curve_label: str = ""
    """y-axis label of the figure's curves (default: the series keys)"""
    censored: tuple = ()
    """metrics whose value is the run's length in RL steps when the event never happens (``steps_to_halve``)"""
    untested: str = ""
    """a part of the claim's sentence that no test of this claim measures (said in the table)"""
    follows: str = ""
    """the earlier claim whose question this one re-registers in a new setting (its settings count here too)"""

    def config(self, arm: str, quick: bool) -> dict:
        cfg = {**self.base, **self.arms[arm], "steps": self.quick_steps if quick else self.steps}
        if quick:
            cfg.update(self.quick_overrides)
        return cfg


def train_seed(claim_name: str, seed: int) -> int:
    """The trainer seed of ``seed`` in claim ``claim_name``: crc32(name) mod 10^5 x 1000 + seed.

    Arms of one claim share it (paired by seed); two claims never do, so no run is shared between
    claims. Example: the seed block 0..9 of two claims gives two disjoint sets of trainer seeds.
    """
    import zlib
    return (zlib.crc32(claim_name.encode()) % 100_000) * 1000 + int(seed)


# ---- running one job ------------------------------------------------------------------------------
def _recurrence(trainer) -> dict:
    """GiGPO's anchor statistics on a fresh batch (``segments.anchor_recurrence``): share of anchor states
    visited >= 2 times in their group, and share of turns taken from such a state."""
    from ...segments import anchor_recurrence
    b = trainer.sample().batch
    r = anchor_recurrence(b.group, b.state_key, b.turn_mask)
    return {"recur_states": r["anchor_states_recur"], "recur_turns": r["anchor_share"]}


PROBES = {"recurrence": _recurrence}
PROBE_EVERY = 10


def run_job(job: tuple) -> dict:
    """Train one configuration (``job`` = (config dict, seed, probe name or None)) -> series dict.

    Runs in a worker process with one torch thread. Probes run every PROBE_EVERY steps on fresh
    rollouts that do not enter training (they use their own generator state, so they change the run
    only through the shared task RNG; both arms of a claim use the same probe).
    """
    import torch
    torch.set_num_threads(1)
    from ...train import Trainer, TrainConfig
    cfg_dict, seed, probe = job
    t0, c0 = time.perf_counter(), time.process_time()
    tr = Trainer(TrainConfig(**{**cfg_dict, "seed": seed, "progress": False}))
    if tr.cfg.bc_steps:
        tr.log.config["bc_losses"] = tr.behaviour_clone(tr.cfg.bc_steps)
    probes: dict = {}
    for s in range(tr.cfg.steps):
        if probe and s % PROBE_EVERY == 0:
            for k, v in PROBES[probe](tr).items():
                probes.setdefault(k, []).append(v)
        tr.step()
    series = {k: tr.log.column(k, strict=False).tolist() for k in SERIES_KEYS}
    series.update({f"probe_{k}": v for k, v in probes.items()})
    series["time_s"] = time.perf_counter() - t0
    series["cpu_s"] = time.process_time() - c0
    return series


# ---- per-run metrics --------------------------------------------------------------------------------
def smooth(x, w: int = 5) -> np.ndarray:
    """Trailing moving average (the first w - 1 points average what exists). [1, 3, 5], w 2 -> [1, 2, 4]."""
    x = np.nan_to_num(np.asarray(x, dtype=float))
    c = np.cumsum(np.insert(x, 0, 0.0))
    n = np.minimum(np.arange(1, len(x) + 1), w)
    return (c[1:] - c[np.maximum(np.arange(1, len(x) + 1) - w, 0)]) / n


def final(x, frac: float = 0.2) -> float:
    """Mean of the last ``frac`` of a series (at least 5 points)."""
    x = np.asarray(x, dtype=float)
    return float(np.nanmean(x[-max(5, int(len(x) * frac)):]))


def early(x, frac: float = 0.25) -> float:
    """Mean of the first ``frac`` of a series."""
    x = np.asarray(x, dtype=float)
    return float(np.nanmean(x[:max(1, int(len(x) * frac))]))


def auc(x) -> float:
    """Mean over the whole run: learning speed and final level in one number."""
    return float(np.nanmean(np.asarray(x, dtype=float)))


def peak_drop(x, w: int = 5) -> float:
    """Peak of the smoothed series minus its final level (>= 0 up to noise): how far a run fell."""
    s = smooth(x, w)
    return float(s.max() - final(x))


def success_metrics(s: dict) -> dict:
    """The success curve of a run summarized four ways: final, AUC, early level and peak-to-final drop."""
    x = s["success_rate"]
    return {"final_success": final(x), "auc_success": auc(x), "early_success": early(x), "peak_drop": peak_drop(x)}


def collapse_times(mean, std, *, w: int = 5, frac: float = 0.5, min_peak: float = 0.2):
    """(t_std_drop, t_mean_collapse) of one run, NaN when there is no collapse: the rule "collapse-v1".

    It recomputes results stored with it (the shipped scorecard, whose records name no rule); other results use
    ``toyrl.collapse.classify``, which differs in two cases: this rule counts a dip under a frozen policy (zero
    gradient) and misses a crash after a BC start when a later peak is higher.

    Mean collapse: the first step after the peak of the smoothed mean reward where it falls below
    ``frac`` x peak (peaks below ``min_peak`` never count). Std drop: the first step after the
    peak of the smoothed within-group std (taken before the collapse) where it falls below
    ``frac`` x that peak. Example: std [.5,.5,.1,.1,.1,.1], mean [.5,.6,.6,.5,.1,.1] (w=1) -> (2, 4).
    """
    m, s = smooth(mean, w), smooth(std, w)
    tp = int(np.argmax(m))
    if m[tp] < min_peak:
        return float("nan"), float("nan")
    below = np.flatnonzero(m[tp:] < frac * m[tp])
    if below.size == 0:
        return float("nan"), float("nan")
    tc = tp + int(below[0])
    ts_peak = int(np.argmax(s[:tc + 1]))
    drop = np.flatnonzero(s[ts_peak:tc + 1] < frac * s[ts_peak])
    ts = ts_peak + int(drop[0]) if drop.size else tc + 1          # no drop before the collapse: lead <= 0
    return float(ts), float(tc)


def log10_grad(x) -> float:
    """Mean log10 gradient norm over steps with a non-zero gradient (all-zero-advantage steps skipped)."""
    g = np.asarray(x, dtype=float)
    g = g[np.isfinite(g) & (g > 0)]
    return float(np.log10(g).mean()) if g.size else float("nan")


def tokens_per_episode(series: dict) -> np.ndarray:
    """Generated policy tokens per episode, per step."""
    return np.asarray(series["tokens_generated"], float) / np.maximum(np.asarray(series["batch_size"], float), 1)
