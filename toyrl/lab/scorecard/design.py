"""The scorecard's design: the four dials, the base cell, the shared regime and the cells it trains.

ARLArena (arXiv 2602.21534) splits a policy-gradient design into four dials; ``design`` lays out the cells
(one factor at a time around ``BASE``, or the full grid) and ``cell_config`` turns a cell into TrainConfig
fields in the one regime every cell shares (``REGIME``; see ``toyrl.lab.scorecard``'s docstring).

    cells = design()                        # 13 cells: the base, then each other level of one dial
    cell_config(cells[5])["clip"]           # "sapo"
"""
from __future__ import annotations

from typing import Optional

__all__ = ["DIALS", "BASE", "REGIME", "SETTINGS", "STEPS", "SPIKE", "SERIES_KEYS", "DIAG_KEYS", "design", "cell_name",
           "cell_config", "select_cells"]

DIALS = {
    "estimator": ("grpo", "gigpo", "turn_gae"),
    "clip": ("ppo", "clip_higher", "cispo", "sapo", "gspo", "turn_ppo"),
    "agg": ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum"),
    "filter": ("none", "zero_variance", "starpo_s", "void_turn"),
}
"""the four dials and their levels (the first level of each is the base cell)"""
BASE = {dial: levels[0] for dial, levels in DIALS.items()}
"""the base cell of the one-factor-at-a-time design"""

REGIME = dict(n_think=4, think_max=3, constrain=True, staleness=2, ppo_epochs=2, lr=1e-2, grad_clip=0.0,
              prompts_per_step=8, group_size=8)
"""the off-policy long-turn regime every cell shares (see the module docstring)"""
SETTINGS = {
    "gridworld": dict(env="gridworld", env_kwargs={"size": 4, "max_turns": 10}),
    "bandit_chain": dict(env="bandit_chain", env_kwargs={"stages": 4, "max_turns": 10}),
}
"""env settings (bandit_chain's first prompt is the same for every task, so its I(X;Z) is undefined: n/a)"""
STEPS = {"full": 50, "quick": 40}
"""RL steps per run"""
SPIKE = 10.0
"""a grad-norm spike: a step whose pre-clip norm exceeds SPIKE x the run's median (non-zero) norm"""
SERIES_KEYS = ("reward_mean", "reward_std", "success_rate", "grad_norm", "format_valid_rate", "clip_frac",
               "ratio_max", "zero_var_frac", "kept_frac", "template_mi")
"""run-log columns kept per run"""
DIAG_KEYS = ("mi", "cond_entropy", "entropy", "mi_seq", "cond_entropy_seq", "retrieval_acc", "chance",
             "mi_upper_bound", "valid_thinking_rate")
"""RAGEN-2 diagnostics kept per probe"""


def design(kind: str = "ofat", dials: Optional[dict] = None) -> list:
    """The cells: "ofat" (base, then each other level of one dial with the rest at base) or "full".

    Example: dials {"a": (1, 2), "b": (3, 4)} -> ofat [{a 1, b 3}, {a 2, b 3}, {a 1, b 4}]; full: 4 cells.
    """
    dials = dials or DIALS
    if kind == "full":
        import itertools
        return [dict(zip(dials, combo)) for combo in itertools.product(*dials.values())]
    if kind != "ofat":
        raise ValueError(f"design must be ofat or full, got {kind!r}")
    base = {d: levels[0] for d, levels in dials.items()}
    return [dict(base)] + [{**base, d: lv} for d, levels in dials.items() for lv in levels[1:]]


def cell_name(cell: dict) -> str:
    """estimator/clip/agg/filter, e.g. "grpo/ppo/token-mean/none"."""
    return "/".join(str(cell[d]) for d in DIALS)


def cell_config(cell: dict, env: str = "gridworld", steps: int = 50) -> dict:
    """The TrainConfig fields (a dict) of one cell in the shared regime."""
    if env not in SETTINGS:
        raise ValueError(f"unknown scorecard env {env!r}; valid: {', '.join(SETTINGS)}")
    return {**SETTINGS[env], **REGIME, "estimator": cell["estimator"], "clip": cell["clip"], "agg": cell["agg"],
            "filters": [] if cell["filter"] == "none" else [cell["filter"]], "steps": steps}


def select_cells(cells=None) -> list:
    """The design's cells: all (None), the first ``cells`` (an int), or those named (a list of names)."""
    grid = design()
    if cells is None:
        return grid
    if isinstance(cells, int):
        return grid[:cells]
    by_name = {cell_name(c): c for c in design("full")}
    unknown = [n for n in cells if n not in by_name]
    if unknown:
        raise ValueError(f"unknown cell {unknown[0]!r}; a cell is estimator/clip/agg/filter, e.g. {cell_name(BASE)}")
    return [by_name[n] for n in cells]

