"""The Echo Trap where reasoning matters: a blind T-maze, a shipped warm start, and the momentum trap.

Notebook 02's second half. The task (``toyrl.envs.layouts.tmaze_map``) shows the goal's side at turn 0 only; a
blind context (``context="blind"``) lets later turns read only their own last turn, so the side survives only in
the reasoning tokens each turn rewrites. Three pure functions feed the notebook's cells and its widget:

- ``reasoning_check``: the shipped warm start's success with its reasoning intact and scrambled (live, seconds);
- ``momentum_trap``: AdamW moves the weights on steps whose gradient is exactly zero; ``skip_zero_adv`` stops it;
- ``claim_table`` / ``plot_claim_run``: the ledger's ``blind_echo`` and ``blind_fixes`` runs (per arm and seed)
  judged again, live, by ``toyrl.collapse.classify``, and one run drawn with its std drop, collapse and freeze
  marked, beside the same seed's plain GRPO run of the same claim (paired: same BC start, same first tasks).
  ``FIXES`` maps each fix the notebook's widget offers to the claim and arm that ran it.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import numpy as np

from ..collapse import RULE, classify
from ..lab.claims.echo import FORGOT_AT
from ..lab.claims.report import load_series
from ..lab.claims.spec import early, final
from .plots import mark_steps
from .style import figsize, font_size, subplots

__all__ = ["CLAIM", "SERIES_PATH", "FIXES", "FORGOT_AT", "BLOCKS", "series_path", "record", "reasoning_check",
           "momentum_trap", "claim_table", "collapsed_seeds", "plot_claim_run"]

CLAIM = "blind_echo"
"""the ledger claim whose stored runs the notebook reads first"""
LEDGER = Path(__file__).resolve().parents[2] / "data" / "claims"
SERIES_PATH = LEDGER / f"{CLAIM}.series.json.gz"
FIXES = {"none (GRPO)": ("blind_echo", "grpo"), "KL to the BC start": ("blind_echo", "kl"),
         "skip zero-advantage steps": ("blind_echo", "skip_zero_adv"), "StarPO-S filter": ("blind_fixes", "starpo_s"),
         "critic (GAE)": ("blind_fixes", "critic"), "entropy bonus": ("blind_fixes", "entropy"),
         "clip-higher": ("blind_fixes", "clip_higher")}
"""the widget's fixes -> (ledger claim, arm); each claim has its own plain GRPO arm, paired with its fixes by seed"""


BLOCKS = (("seeds 0-9", False), ("seeds 10-19", True))
"""(label, held-out?) of the two seed blocks every verdict runs on (``series_path`` / ``record``'s ``heldout``)"""


def series_path(claim: str = CLAIM, heldout: bool = False) -> Path:
    """Where claim ``claim``'s stored runs are: seeds 0-9 in ``data/claims/``, 10-19 in ``data/claims/heldout/``."""
    return (LEDGER / "heldout" if heldout else LEDGER) / f"{claim}.series.json.gz"


def record(claim: str, heldout: bool = False) -> dict:
    """The stored ledger record of ``claim`` (its verdict, tests and per-seed metrics) for one block."""
    path = (LEDGER / "heldout" if heldout else LEDGER) / f"{claim}.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: run `toyrl reproduce {claim} --update-shipped` first")
    return json.loads(path.read_text())


def reasoning_check(name: str = "tmaze", *, episodes: int = 128, seed: int = 0) -> dict:
    """{"intact", "scrambled", "ratio"}: the shipped warm start ``name``'s success on ``episodes`` fresh tasks, with
    its reasoning as written and with every reasoning token redrawn before later turns read it (same tasks, same
    sampling seed). Near 1, the reasoning carries nothing; on the T-maze it should be near 1/2."""
    from ..lab.warmstart import reasoning_value
    from ..train import TrainConfig
    from ..train.trainer import Trainer
    from ..train.warmstart import WARMSTARTS, match_fields
    if name not in WARMSTARTS:
        raise ValueError(f"name must be one of {', '.join(WARMSTARTS)}, got {name!r}")
    cfg = TrainConfig(**match_fields(name), init=name, prompts_per_step=1, group_size=2,
                      steps=0, progress=False)
    tr = Trainer(cfg)
    return reasoning_value(tr.policy, tr.codec, cfg, episodes=episodes, seed=seed)


def momentum_trap(*, steps: int = 20, seed: int = 0, skip_zero_adv: bool = False, lr: float = 3e-3) -> dict:
    """Train GRPO from the shipped T-maze warm start (2 tasks x 4 rollouts a step, so whole steps go silent often)
    and return per step ``grad_norm``, ``update_norm`` and ``success_rate`` as arrays. On a silent step the
    gradient is exactly 0, yet AdamW's first moment still moves the weights (``update_norm`` > 0) unless
    ``skip_zero_adv`` drops the step."""
    from ..train import TrainConfig
    from ..train.trainer import Trainer
    from ..train.warmstart import match_fields
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    cfg = TrainConfig(**match_fields("tmaze"), init="tmaze", bc_optimizer="continue", estimator="grpo",
                      prompts_per_step=2, group_size=4, lr=lr, grad_clip=1.0, steps=steps, seed=seed,
                      skip_zero_adv=skip_zero_adv, progress=False)
    log = Trainer(cfg).run()
    return {k: np.asarray(log.column(k), float) for k in ("grad_norm", "update_norm", "success_rate")}


def claim_table(series: Optional[dict] = None, **rule) -> dict:
    """arm -> {"seeds", "collapsed", "std_first", "frozen", "mi_fell", "forgot", "final"} over the stored
    ``blind_echo`` runs (``series``: arm -> seed -> run series, default the shipped file), each run judged now by
    ``classify`` with the ledger's ``RULE`` (overridden by ``rule``). Counts of seeds, except ``final``, the mean
    final success. ``mi_fell``: the ledger's template-MI change (``final`` minus ``early``: the last 20% of steps,
    at least 5, against the first 25%) is negative; ``forgot``: final success <= ``FORGOT_AT``."""
    series = load_series(SERIES_PATH) if series is None else series
    out = {}
    for arm, runs in series.items():
        c = [classify(s["reward_mean"], s["reward_std"], s["grad_norm"], **{**RULE, **rule}) for s in runs.values()]
        fell = [final(s["template_mi"]) < early(s["template_mi"]) for s in runs.values()]   # the ledger's MI change
        fin = [final(s["success_rate"]) for s in runs.values()]
        out[arm] = {"seeds": len(c), "collapsed": sum(x["collapsed"] for x in c),
                    "std_first": sum(bool(x["std_first"]) for x in c), "frozen": sum(x["frozen"] for x in c),
                    "mi_fell": int(sum(fell)), "forgot": int(sum(f <= FORGOT_AT for f in fin)),
                    "final": float(np.mean(fin))}
    return out


def collapsed_seeds(arm: str = "grpo", series: Optional[dict] = None, **rule) -> list:
    """The seeds of ``arm``'s stored runs that collapsed by ``classify`` (the ledger's ``RULE``, overridden by
    ``rule``), in order: where the notebook's widget starts."""
    series = load_series(SERIES_PATH) if series is None else series
    return [seed for seed, s in series[arm].items()
            if classify(s["reward_mean"], s["reward_std"], s["grad_norm"], **{**RULE, **rule})["collapsed"]]


def plot_claim_run(arm: str = "grpo", seed: int = 0, series: Optional[dict] = None, claim: str = CLAIM, **rule):
    """One stored run of ``claim`` (``series``: arm -> seed -> run series, default the shipped seeds 0-9):
    success, within-group reward std and template MI on one step axis, with the std drop, the collapse and the
    freeze of ``classify`` marked where found, and, for a fix, the same seed's GRPO success dashed (paired by
    seed). Returns the figure."""
    series = load_series(series_path(claim)) if series is None else series
    if arm not in series or seed not in series[arm]:
        raise ValueError(f"no stored run for arm={arm!r}, seed={seed}; arms {sorted(series)}, "
                         f"seeds {sorted(next(iter(series.values())))}")
    s = series[arm][seed]
    c = classify(s["reward_mean"], s["reward_std"], s["grad_norm"], **{**RULE, **rule})
    from matplotlib.ticker import MaxNLocator
    fig, (ax, ax2) = subplots(1, 2, size=figsize(10, 4.6), sharex=True, layout="constrained",
                              gridspec_kw={"width_ratios": [3, 2]})
    for a_, key, label in ((ax, "success_rate", "success"), (ax, "reward_std", "within-group reward std"),
                           (ax2, "template_mi", "template MI")):
        y = np.asarray(s[key], float)
        a_.plot(np.arange(len(y)), y, label=label, color={"success_rate": "#1d3557", "reward_std": "#e63946",
                                                          "template_mi": "#2a9d8f"}[key])
    if arm != "grpo" and seed in series.get("grpo", {}):
        y = np.asarray(series["grpo"][seed]["success_rate"], float)
        ax.plot(np.arange(len(y)), y, color="0.5", ls="--", label="GRPO success, same seed")
    for a_, ylabel in ((ax, "success, std"), (ax2, "template MI (nats)")):
        mark_steps(a_, {"std drop": c["t_std_drop"], "collapse": c["t_collapse"], "freeze": c["t_freeze"]})
        a_.xaxis.set_major_locator(MaxNLocator(integer=True))
        a_.set_xlabel("RL step", fontsize=font_size("label"))
        a_.set_ylabel(ylabel, fontsize=font_size("label"))
        a_.tick_params(labelsize=font_size("tick"))
    ax.set_ylim(0, 1.02)
    ax.set_title("success and spread", fontsize=font_size("title"))
    ax2.set_title("template MI, its own axis", fontsize=font_size("title"))
    fig.suptitle(f"blind T-maze 5x5, {claim}: {arm}, seed {seed}: " + ("collapsed" if c["collapsed"] else "held")
                 + (", froze" if c["frozen"] else ""), fontsize=font_size("suptitle"))
    handles = {h.get_label(): h for a_ in (ax, ax2) for h in a_.get_legend_handles_labels()[0]}
    fig.legend(list(handles.values()), list(handles), loc="outside lower center", ncol=3, fontsize=font_size("legend"))
    return fig
