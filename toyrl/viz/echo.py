"""The Echo Trap (RAGEN, arXiv 2504.20073): within-group reward variance collapses before the reward.

Trajectory-level GRPO gives one advantage per trajectory, A_i = (R_i - mean_g R) / std_g R. When a
group's G rollouts all get the same reward, std_g R = 0 and the group contributes no gradient. A
policy whose reasoning and actions collapse onto one template per task makes every group uniform:
the zero-variance fraction rises and the mean within-group std falls while the mean reward can
still be high. From then on only a few groups carry signal, their normalized advantages are large,
and an aggressive update (high learning rate, several PPO epochs, no gradient clipping) can tip
the now near-deterministic policy into a failing template it can no longer leave: every group
fails identically, so the gradient is exactly zero. That is the trap.

Detection rule (``collapse_steps``), documented so it can be argued with:
  smooth reward_mean and reward_std with a trailing moving average of ``window`` steps; the
  *drop step* of a curve is the first step at which its smoothed value falls below ``frac`` times
  its running maximum, counted only once that running maximum has reached ``min_peak``
  (so a run that never learned has no drop). std uses frac 0.5, min_peak 0.15; mean frac 0.5,
  min_peak 0.3. A successful run that stays up has a std drop (variance also vanishes when every
  rollout succeeds) and no mean drop; a collapsed run has both.

Heavier runs are precomputed by ``precompute(out_dir)`` into ``data/runs/echo_trap/*.jsonl`` (a
few columns per step) and loaded by the notebook (``load_runs``).
"""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from ..lab.claims.stability import COLLAPSE_BASE
from ..lab.results import atomic_write
from ..train.runlog import RunLog, encode
from ..train import TrainConfig, train
from .plots import log_columns, mark_steps, smooth
from .style import arm_color, figsize, font_size, styled, subplots

__all__ = ["ECHO_BASE", "VARIANTS", "KEEP_KEYS", "echo_config", "collapse_steps", "drop_step", "freeze_step",
           "precompute", "load_runs", "summarize_runs", "plot_echo", "echo_panel", "variant_name", "ledger_tests",
           "DATA_DIR", "LEDGER_DIR", "SETTING_NAME", "REPLAY_KEYS", "REPLAY_STEPS", "replay_divergence",
           "POP_ROWS", "population_tables", "population_counts", "plot_population"]

DATA_DIR = Path(__file__).resolve().parents[2] / "data" / "runs" / "echo_trap"
LEDGER_DIR = Path(__file__).resolve().parents[2] / "data" / "claims"

#: the setting where the toy collapses: random 4x4 maps (the policy must read the map), an aggressive
#: optimizer (lr 3e-2, 4 PPO epochs, no gradient clipping), no KL, 2 thinking tokens, small groups;
#: the ledger's ``COLLAPSE_BASE`` (claim echo_collapse, one copy) run for 120 steps
ECHO_BASE = dict(COLLAPSE_BASE, steps=120)

SETTING_NAME = "aggressive GRPO on random 4x4 lakes"
"""ECHO_BASE in words, named in the widget figure's title"""

#: the runs the notebook's widget chooses between: name -> overrides of ECHO_BASE
VARIANTS = {
    "grpo": {},
    "starpo_s_p0.25": {"filters": ["starpo_s"], "filter_kwargs": {"starpo_s": {"p": 0.25}}},
    "starpo_s_p0.5": {"filters": ["starpo_s"], "filter_kwargs": {"starpo_s": {"p": 0.5}}},
    "critic": {"estimator": "gae"},
    "clip_higher": {"clip": "clip_higher"},
    "starpo_s_all": {"filters": ["starpo_s"], "filter_kwargs": {"starpo_s": {"p": 0.25}}, "estimator": "gae",
                     "clip": "clip_higher"},
}

#: run-log columns kept in the precomputed files
KEEP_KEYS = ("step", "reward_mean", "reward_std", "zero_var_frac", "success_rate", "template_entropy",
             "template_mi", "entropy", "grad_norm", "clip_frac", "turns_per_episode", "void_turn_rate", "kept_frac")


def variant_name(filter_on: bool = False, top_p: float = 0.25, critic: bool = False, clip_higher: bool = False) -> str:
    """The VARIANTS key closest to a widget setting (top_p rounds to 0.25 or 0.5)."""
    if filter_on and critic and clip_higher:
        return "starpo_s_all"
    if filter_on:
        return "starpo_s_p0.25" if top_p < 0.375 else "starpo_s_p0.5"
    if critic:
        return "critic"
    if clip_higher:
        return "clip_higher"
    return "grpo"


def echo_config(variant: str = "grpo", seed: int = 0, steps: Optional[int] = None, **override) -> TrainConfig:
    """The TrainConfig of a named variant (``VARIANTS``) at a seed."""
    kw = {**ECHO_BASE, **VARIANTS[variant], "progress": False, **override, "seed": seed}
    if steps is not None:
        kw["steps"] = steps
    return TrainConfig(**kw)


def drop_step(x, *, window: int = 5, frac: float = 0.5, min_peak: float = 0.15) -> Optional[int]:
    """First index where the trailing ``window``-average of ``x`` is below ``frac`` x its running max,
    once that running max is >= ``min_peak``; None if it never happens.

    Example: drop_step([0, .4, .4, .4, .1, .1, .1], window=1, frac=.5, min_peak=.3) -> 4.
    """
    s = smooth(x, window)
    s = np.where(np.isfinite(s), s, 0.0)
    peak = np.maximum.accumulate(s) if len(s) else s
    hit = (peak >= min_peak) & (s < frac * peak)
    return int(np.argmax(hit)) if hit.any() else None


def collapse_steps(log, *, window: int = 5, std_frac: float = 0.5, std_min_peak: float = 0.15,
                   mean_frac: float = 0.5, mean_min_peak: float = 0.3) -> tuple[Optional[int], Optional[int]]:
    """(std_drop_step, mean_drop_step) of a run log (RunLog, rows or dict of columns); see the
    module docstring for the rule. Steps are the log's ``step`` values."""
    cols = log_columns(log, ["step", "reward_mean", "reward_std"])
    steps = cols["step"]
    s = drop_step(cols["reward_std"], window=window, frac=std_frac, min_peak=std_min_peak)
    m = drop_step(cols["reward_mean"], window=window, frac=mean_frac, min_peak=mean_min_peak)
    at = lambda i: None if i is None else int(steps[i]) if np.isfinite(steps[i]) else i   # noqa: E731
    return at(s), at(m)


def freeze_step(log, *, window: int = 5, zero_var: float = 0.9, mean_min: float = 0.4) -> Optional[int]:
    """The step at which a run *freezes*: the first step where the trailing ``window``-average zero-variance
    share reaches ``zero_var`` while the same average of the mean reward is still >= ``mean_min``. Nearly every
    group is silent (all G rollouts earn the same reward, so A = 0 and the gradient is zero), yet the reward is
    kept: the policy answers each task one way and nothing moves it. None if it never happens.

    Example (window 1): zero_var_frac [.2, .9, 1], reward_mean [.1, .2, .6] -> step 2 (at step 1 the mean is
    still below 0.4).
    """
    cols = log_columns(log, ["step", "zero_var_frac", "reward_mean"])
    z, m = smooth(cols["zero_var_frac"], window), smooth(cols["reward_mean"], window)
    hit = np.nan_to_num(z) >= zero_var
    hit &= np.nan_to_num(m) >= mean_min
    return int(cols["step"][np.argmax(hit)]) if hit.any() else None


def _slim(rows: list) -> list:
    return [{k: r.get(k) for k in KEEP_KEYS} for r in rows]


def precompute(out_dir=DATA_DIR, variants: Sequence[str] = tuple(VARIANTS), seeds: Sequence[int] = (0, 1, 2),
               steps: Optional[int] = None, grpo_seeds: Sequence[int] = (0, 1, 2, 3, 4, 5)) -> list[Path]:
    """Train every (variant, seed) and write ``out_dir/{variant}_s{seed}.jsonl`` (KEEP_KEYS only,
    the config on the first line as {"config": ...}); plain GRPO runs on ``grpo_seeds``, every other
    variant on ``seeds``. Returns the paths. ``python -m toyrl.viz.echo`` writes the shipped set. Each file is
    written whole once its run is done (``atomic_write``): an interrupted run leaves the previous file."""
    out_dir = Path(out_dir)
    paths = []
    for v in variants:
        for seed in (grpo_seeds if v == "grpo" else seeds):
            cfg = echo_config(v, seed, steps)
            log = train(cfg)
            head = {"config": {k: val for k, val in asdict(cfg).items() if k != "progress"}}
            text = "".join(json.dumps(encode(r)) + "\n" for r in [head, *_slim(log.rows)])
            paths.append(atomic_write(out_dir / f"{v}_s{seed}.jsonl", text.encode()))
    return paths


#: the columns a retrained run must share with its stored copy (continuous ones, which move with any code change)
REPLAY_KEYS = ("reward_mean", "reward_std", "zero_var_frac", "template_entropy", "entropy", "grad_norm")

#: how many first steps a replay check asks to agree (see replay_divergence for the measurements behind it)
REPLAY_STEPS = 2


def replay_divergence(log, stored, *, keys: Sequence[str] = REPLAY_KEYS, atol: float = 1e-3) -> Optional[int]:
    """The first step t at which a retrained run leaves its stored copy, max_k |log_k[t] - stored_k[t]| > atol
    over the columns ``keys`` and the steps both have; None if they agree on all of them (NaN equals NaN).

    Why a first step and not an exact match: float rounding differs between CPUs (vector width, thread count) by
    about 1e-7 at step 0; this setting's optimizer (lr 3e-2, 4 PPO epochs, no clipping) amplifies it about tenfold
    per step until a sampled token flips, and from then on the two runs are two samples of one process. Measured:
    the 21 stored runs, retrained on AVX2 (one and two threads) and on non-vectorized kernels
    (``ATEN_CPU_CAPABILITY=default``) against files made on another CPU, 63 replays: step 0 agreed in 63 (largest
    gap 2e-5), steps 0-1 in 62 (the other: 4e-3 at step 1), steps 0-2 in 56; 16 of 63 lasted all 8 steps tried.
    A changed lr (3e-2 -> 3.03e-2) or 3 PPO epochs instead of 4 left all 6 GRPO seeds by step 1 (gaps 2e-2 to 0.7).
    So notebook 02 asks step 0 of every GRPO run and steps 0 to REPLAY_STEPS - 1 of all but two (of 6) to agree.

    Example: reward_mean [.1, .2, .5] against stored [.1, .2, .3] (atol 1e-3) -> 2.
    """
    if not keys or atol < 0:
        raise ValueError(f"keys must name at least one column and atol must be >= 0, got {keys!r}, {atol}")
    a, b = log_columns(log, keys), log_columns(stored, keys)
    n = min(len(a[keys[0]]), len(b[keys[0]]))
    x = np.stack([a[k][:n] for k in keys])                                     # (K, n)
    y = np.stack([b[k][:n] for k in keys])                                     # (K, n)
    off = ~((np.abs(x - y) <= atol) | (np.isnan(x) & np.isnan(y))).all(0)      # (n,)
    return int(np.argmax(off)) if off.any() else None


def load_runs(data_dir=DATA_DIR, variant: Optional[str] = None) -> dict:
    """{(variant, seed): RunLog} of the precomputed files (optionally one variant)."""
    out = {}
    for path in sorted(Path(data_dir).glob("*_s*.jsonl")):
        v, _, s = path.stem.rpartition("_s")
        if variant is not None and v != variant:
            continue
        out[(v, int(s))] = RunLog.load(path)
    return out


def summarize_runs(runs: dict, **rule) -> list[dict]:
    """One dict per run: variant, seed, std / mean drop steps, peak and final mean reward (last 10 steps),
    and whether the std drop came first (``std_first``: both found and std step < mean step)."""
    rows = []
    for (v, seed), log in sorted(runs.items()):
        s, m = collapse_steps(log, **rule)
        mean = log_columns(log, ["reward_mean"])["reward_mean"]
        rows.append({"variant": v, "seed": seed, "std_drop": s, "mean_drop": m,
                     "peak_mean": float(np.nanmax(smooth(mean, 5))), "final_mean": float(np.nanmean(mean[-10:])),
                     "std_first": s is not None and m is not None and s < m})
    return rows


def ledger_tests(name: str, ledger_dir=LEDGER_DIR) -> tuple[str, dict]:
    """(verdict, {test name: {"mean", "ci95", "per_seed", "outcome"}}) of ledger claim ``name`` as stored in
    ``ledger_dir/<name>.json`` (written by ``toyrl reproduce``); a pending claim has no tests yet."""
    rec = json.loads((Path(ledger_dir) / f"{name}.json").read_text())
    tests = rec.get("result", {}).get("tests", [])
    return rec["verdict"], {t["name"]: {**{k: t["effect"][k] for k in ("mean", "ci95", "per_seed")},
                                        "outcome": t["outcome"]} for t in tests}


ECHO_KEYS = ("reward_mean", "reward_std", "zero_var_frac", "template_entropy", "template_mi")


@styled
def plot_echo(log, *, window: int = 5, title: str = "", keys: Sequence[str] = ECHO_KEYS, **rule):
    """The Echo Trap's signals as three small multiples on one step axis, each on its own scale: the reward,
    its within-group std and the zero-variance share (0 to 1); the template entropy H(z) (nats); the
    template-task mutual information I(z; x) (nats, its own axis: it is a tenth of the entropy, and falls under
    template collapse). The std-drop and mean-drop steps of ``collapse_steps`` and the ``freeze_step`` are
    dashed (each only where it is found); legends sit below the panels."""
    from matplotlib.ticker import MaxNLocator
    s, m = collapse_steps(log, window=window, **rule)
    marks = {"std drop": s, "mean drop": m, "freeze": freeze_step(log, window=window)}
    cols = log_columns(log, ["step", *keys])
    step = cols["step"]
    fig, axes = subplots(1, 3, size=figsize(10, 4.4), sharex=True, layout="constrained")
    colors = {"reward_mean": "#1d3557", "reward_std": "#e63946", "zero_var_frac": "#8d99ae",
              "template_entropy": "#f4a261", "template_mi": "#2a9d8f"}
    names = {"reward_mean": "mean reward", "reward_std": "within-group std", "zero_var_frac": "zero-var share",
             "template_entropy": "H(z)", "template_mi": "I(z; x)"}
    panels = [(("reward_mean", "reward_std", "zero_var_frac"), "reward, std, share", "reward and spread"),
              (("template_entropy",), "H(z) (nats)", "template entropy"),
              (("template_mi",), "I(z; x) (nats)", "template MI")]
    for ax, (ks, ylabel, head) in zip(axes, panels):
        for k in ks:
            if k in keys:
                ax.plot(step, smooth(cols[k], window), label=names[k], color=colors[k])
        mark_steps(ax, marks)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, nbins=4))
        ax.set_xlabel("step", fontsize=font_size("label"))
        ax.set_ylabel(ylabel, fontsize=font_size("label"))
        ax.set_title(head, fontsize=font_size("title"))
        ax.tick_params(labelsize=font_size("tick"))
    axes[0].set_ylim(0, 1.02)
    handles = {h.get_label(): h for ax in axes for h in ax.get_legend_handles_labels()[0]}
    fig.legend(list(handles.values()), list(handles), loc="outside lower center", ncol=4,
               fontsize=font_size("legend"), title=f"{window}-step means; dashed: the rule's steps",
               title_fontsize=font_size("legend"))
    if title:
        fig.suptitle(title, fontsize=font_size("suptitle"), wrap=True)
    return fig


def echo_panel(filter_on: bool = False, top_p: float = 0.25, critic: bool = False, clip_higher: bool = False,
               seed: int = 0, *, live: bool = False, data_dir=DATA_DIR, steps: Optional[int] = None):
    """The widget figure: the run of the chosen stabilizer setting at ``seed`` (precomputed, or
    trained now with ``live=True``), drawn by ``plot_echo``."""
    v = variant_name(filter_on, top_p, critic, clip_higher)
    if live:
        log = train(echo_config(v, seed, steps, progress=True))
    else:
        runs = load_runs(data_dir, v)
        if (v, seed) not in runs:
            raise FileNotFoundError(f"no precomputed run {v}_s{seed} in {data_dir}; pass live=True")
        log = runs[(v, seed)]
    s, m = collapse_steps(log)
    return plot_echo(log, title=f"{v}, {SETTING_NAME}, seed {seed}: std drop at {s}, mean drop at {m}, "
                                f"freeze at {freeze_step(log)}")


POP_ROWS = (("blind_echo", "grpo", "GRPO (blind_echo)"), ("blind_echo", "kl", "KL to the BC start"),
            ("blind_echo", "skip_zero_adv", "skip zero-adv. steps"), ("blind_fixes", "grpo", "GRPO (blind_fixes)"),
            ("blind_fixes", "starpo_s", "StarPO-S filter"), ("blind_fixes", "critic", "critic (GAE)"),
            ("blind_fixes", "entropy", "entropy bonus"), ("blind_fixes", "clip_higher", "clip-higher"))
"""the population figure's rows: (ledger claim, arm, label); each claim keeps its own GRPO arm (paired by seed)"""


def population_tables() -> dict:
    """block -> claim -> ``toyrl.viz.blind.claim_table`` of the stored blind_echo / blind_fixes runs, every run
    judged now (seeds 0-9 in ``data/claims``, seeds 10-19 in ``data/claims/heldout``)."""
    from .blind import BLOCKS, claim_table, load_series, series_path
    return {block: {c: claim_table(load_series(series_path(c, heldout))) for c in ("blind_echo", "blind_fixes")}
            for block, heldout in BLOCKS}


def population_counts(tables: dict, rows=POP_ROWS) -> dict:
    """block -> row label -> {"arm", "seeds", "forgot", "collapsed"} from ``population_tables``' shape.

    Example: {"b": {"blind_echo": {"grpo": {"seeds": 10, "forgot": 5, "collapsed": 3, ...}}}} with the row
    ("blind_echo", "grpo", "GRPO") -> {"b": {"GRPO": {"arm": "grpo", "seeds": 10, "forgot": 5, "collapsed": 3}}}.
    """
    out = {}
    for block, t in tables.items():
        miss = [(c, a) for c, a, _ in rows if a not in t.get(c, {})]
        if miss:
            raise ValueError(f"tables[{block!r}] lacks the (claim, arm) rows {miss}")
        out[block] = {label: {"arm": a, **{k: int(t[c][a][k]) for k in ("seeds", "forgot", "collapsed")}}
                      for c, a, label in rows}
    return out


@styled
def plot_population(counts: Optional[dict] = None):
    """How many seeds of each arm forget the cue (final success <= ``FORGOT_AT``) and collapse by the ledger's
    rule, one panel per block of 10 seeds (shared axes), one row per arm in its fixed colour: solid bars forgot,
    hatched bars collapsed (a run can do both). ``counts``: ``population_counts`` (default: the stored runs)."""
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator
    from ..lab.claims.echo import FORGOT_AT
    counts = population_counts(population_tables()) if counts is None else counts
    fig, axes = subplots(1, len(counts), size=figsize(10, 5.2), sharex=True, sharey=True, layout="constrained",
                         squeeze=False)
    for ax, (block, rows) in zip(axes[0], counts.items()):
        y = np.arange(len(rows))[::-1]                                          # first row on top
        for yi, (label, r) in zip(y, rows.items()):
            c = arm_color(r["arm"])
            ax.barh(yi + 0.2, r["forgot"], height=0.38, color=c)
            ax.barh(yi - 0.2, r["collapsed"], height=0.38, color="white", edgecolor=c, hatch="///")
        ax.set_yticks(y, list(rows), fontsize=font_size("tick"))
        ax.set_ylabel("arm", fontsize=font_size("label")) if ax is axes[0, 0] else ax.yaxis.set_visible(False)
        n = max(r["seeds"] for r in rows.values())
        ax.set_xlim(0, n)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel(f"seeds (of {n})", fontsize=font_size("label"))
        ax.set_title(block, fontsize=font_size("title"))
        ax.tick_params(labelsize=font_size("tick"))
    handles = [Patch(color="0.4", label=f"forgot the cue (final success <= {FORGOT_AT})"),
               Patch(facecolor="white", edgecolor="0.4", hatch="///", label="collapsed (the ledger's rule)")]
    fig.legend(handles=handles, loc="outside lower center", ncol=2, fontsize=font_size("legend"))
    fig.suptitle("blind T-maze 5x5 (blind_echo, blind_fixes): seeds per arm", fontsize=font_size("suptitle"))
    return fig


if __name__ == "__main__":
    print(precompute())
