"""Prototype a method, compare it on the same seeds, then port it with verl's signature (notebook 10).

Dimension legend: B rollouts, L response tokens (verl), H turns, S seeds, N steps.

Three small tools the other notebooks share:

- ``compare(arms, seeds)``: train every arm (a ``TrainConfig``) on the same seeds and keep a few
  run-log columns -> ``{arm: {column: (S, N) list}}``; ``save_sweep`` / ``load_sweep`` store that
  as one small JSON file under ``data/runs/<topic>/`` (how the notebooks ship their heavier sweeps);
- ``verl_estimator(name)``: a registered toyrl estimator behind verl's advantage signature
  ``fn(token_level_rewards, response_mask, index=None, config=None, **kw) -> (adv, returns)``;
- ``load_verl()``: verl's ``core_algos`` module or None, importable without ray (its advantage functions never call it).

Precompute this notebook's sweep: ``python -m toyrl.viz.prototype`` (writes data/runs/prototype/).
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from ..credit import ESTIMATORS, register_estimator
from ..port.verl_advantage import verl_estimator
from ..port.verl_credit import compute_grpo_outcome_advantage
from ..port.verl_loader import load_core_algos
from ..lab.results import atomic_write
from ..train import TrainConfig, train
from .plots import label, legend
from .style import arm_color, figsize, font_size, subplots

__all__ = ["RUNS_DIR", "compare", "save_sweep", "sweep_to", "sweep_precompute", "load_sweep", "curve_stats",
           "final_mean", "smooth", "arm_curves", "draw_curves", "arms_figure", "curve_panel", "verl_estimator",
           "load_verl", "register_in_verl", "loo_turn", "prototype_arms", "precompute", "toy_verl_inputs",
           "plot_compare", "ARM_NAMES", "verl_advantage_panel", "show_verl_advantage_panel", "SETTING"]

RUNS_DIR = Path(__file__).resolve().parents[2] / "data" / "runs"
"""where precomputed sweeps live: data/runs/<topic>/<name>.json"""
SETTING = "BanditChain (fixed layout), P=4 x G=8"
"""the setting of notebook 10's sweep (``prototype_arms``), named in its figure titles"""


# ---- comparing arms on the same seeds ---------------------------------------------------------
def compare(arms: dict, seeds=(0, 1, 2), keys=("reward_mean", "success_rate"), *, steps: Optional[int] = None,
            verbose: bool = False, progress: bool = False) -> dict:
    """Train each arm (name -> TrainConfig) on every seed; keep ``keys`` -> {arm: {key: (S, N) list}}.

    ``steps`` overrides every arm's step count (a short run). Seeds are shared, so arm differences
    are not seed differences. ``progress``: a ``tqdm.auto`` bar over the arm x seed runs (a notebook's
    live cell). Example: compare({"grpo": TrainConfig(steps=3)}, seeds=(0,))["grpo"]["reward_mean"] is a
    1 x 3 list.
    """
    from tqdm.auto import tqdm
    out: dict = {name: {k: [] for k in keys} for name in arms}
    bar = tqdm(total=len(arms) * len(seeds), desc="training runs", disable=not progress)
    for name, cfg in arms.items():
        for s in seeds:
            bar.set_postfix_str(f"{name}, seed {s}")
            c = replace(cfg, seed=int(s), progress=False, **({"steps": steps} if steps is not None else {}))
            log = train(c)
            for k in keys:
                col = [r.get(k) for r in log.rows]
                out[name][k].append([float("nan") if v is None or isinstance(v, list) else float(v) for v in col])
            bar.update(1)
            if verbose:
                print(f"{name} seed {s}: final reward {out[name][keys[0]][-1][-1]:.3f}", flush=True)
    bar.close()
    return out


def save_sweep(path, sweep: dict, meta: Optional[dict] = None) -> Path:
    """Write a sweep (and how it was made) as compact JSON (NaN -> null), whole (``atomic_write``: an interrupted
    write leaves the previous file); returns the path."""
    path = Path(path)
    clean = lambda v: None if isinstance(v, float) and not np.isfinite(v) else (round(v, 5) if isinstance(v, float) else v)  # noqa: E731
    data = {"meta": meta or {}, "arms": {a: {k: [[clean(v) for v in row] for row in rows] for k, rows in cols.items()}
                                         for a, cols in sweep.items()}}
    return atomic_write(path, json.dumps(data, separators=(",", ":")).encode())


def sweep_to(path, arms: dict, seeds, steps: int, keys, command: str) -> Path:
    """Train ``arms`` on ``seeds`` (``compare``) and write the sweep to ``path`` with its seeds, steps and
    the ``command`` that makes it again; returns the path. Every notebook's ``precompute`` is one call."""
    sweep = compare(arms, seeds, keys=keys, verbose=True)
    return save_sweep(path, sweep, {"seeds": list(seeds), "steps": steps, "command": command})


def sweep_precompute(name: str, arms_fn, keys, steps: int, module: str):
    """A notebook's ``precompute(out_dir=None, seeds=(0, 1, 2), steps=steps) -> Path``: train
    ``arms_fn(steps)`` on the seeds and write data/runs/``name`` (``sweep_to``), recording the command
    ``python -m <module>`` that makes it again. Example: sweep_precompute("void/filter.json", void_arms,
    KEYS, 30, "toyrl.viz.void")() writes data/runs/void/filter.json."""
    topic, file = name.split("/")

    def precompute(out_dir=None, seeds=(0, 1, 2), steps: int = steps) -> Path:
        return sweep_to(Path(out_dir or RUNS_DIR / topic) / file, arms_fn(steps), seeds, steps, keys,
                        f"python -m {module}")

    precompute.__doc__ = f"Write data/runs/{name}: the arms of ``{arms_fn.__name__}`` on ``seeds``."
    return precompute


def load_sweep(path) -> tuple[dict, dict]:
    """(sweep, meta) from ``save_sweep``'s file; null -> NaN."""
    data = json.loads(Path(path).read_text())
    arms = {a: {k: [[np.nan if v is None else v for v in row] for row in rows] for k, rows in cols.items()}
            for a, cols in data["arms"].items()}
    return arms, data.get("meta", {})


def smooth(x, w: int = 1) -> np.ndarray:
    """Trailing moving average over the last axis with window ``w`` (w=1: unchanged, NaN-aware).

    Example: smooth([0., 1., 2., 3.], 2) -> [0., 0.5, 1.5, 2.5].
    """
    x = np.asarray(x, dtype=float)
    if w <= 1:
        return x
    out = np.empty_like(x)
    for t in range(x.shape[-1]):
        win = x[..., max(0, t - w + 1):t + 1]
        n = np.isfinite(win).sum(-1)
        out[..., t] = np.where(n > 0, np.where(np.isfinite(win), win, 0.0).sum(-1) / np.maximum(n, 1), np.nan)
    return out


def curve_stats(rows, w: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard error over seeds (S, N) -> ((N,), (N,)), after smoothing each seed."""
    x = smooth(np.asarray(rows, dtype=float), w)                               # (S, N)
    ok = np.isfinite(x)
    n = ok.sum(0)                                                              # (N,) seeds with a value
    z = np.where(ok, x, 0.0)
    mean = np.where(n > 0, z.sum(0) / n.clip(min=1), np.nan)                   # NaN (no warning) where no seed has one
    var = np.where(ok, (z - mean) ** 2, 0.0).sum(0) / n.clip(min=1)
    return mean, np.where(n > 0, np.sqrt(var) / np.sqrt(n.clip(min=1)), np.nan)


def arm_curves(sweep: dict, key: str, arms=None, smooth_w: int = 1, x: str = "step") -> dict:
    """The data of a sweep panel: {arm: {"x", "mean", "se", "n"}} (each (N,), ``n`` the seed count), for the
    chosen arms that logged ``key`` (an arm whose ``key`` is NaN throughout, e.g. GRPO's ``critic_loss``, is
    left out: it has no curve to draw, so it gets no legend entry).

    ``mean`` / ``se``: mean and standard error over seeds after smoothing (``curve_stats``); ``x``:
    the step index, or with ``x="tokens"`` the cumulative mean ``tokens_generated`` (an equal-budget axis).
    Example: {"a": {"r": [[0., 1.], [2., 3.]]}}, "r" -> {"a": {"x": [0, 1], "mean": [1., 2.], "se": [.71, .71], "n": 2}}.
    """
    out = {}
    for name in arms or sweep:
        if key in sweep[name] and np.isfinite(np.asarray(sweep[name][key], dtype=float)).any():
            m, se = curve_stats(sweep[name][key], smooth_w)
            xs = np.arange(len(m)) if x == "step" else np.cumsum(np.nanmean(sweep[name]["tokens_generated"], 0))
            out[name] = {"x": xs, "mean": m, "se": se, "n": len(sweep[name][key])}
    return out


def draw_curves(ax, curves: dict, title: str = "", xlabel: str = "RL step", ylabel: str = "", *,
                colors: Optional[dict] = None, names: Optional[dict] = None):
    """Draw ``arm_curves``' output on ``ax``: one line per arm in the arm's fixed colour (``colors[arm]`` where
    given, else ``style.arm_color``), labelled by arm, and its +- s.e. band, which shares the arm's legend entry
    (``plots.legend``; the legend, outside the data on the right, says in its title what the band is). Steps get
    integer ticks. ``names``: the legend's words for an arm (default its name)."""
    from matplotlib.ticker import MaxNLocator
    for name, c in curves.items():
        shown = (names or {}).get(name, name)
        line, = ax.plot(c["x"], c["mean"], label=shown, color=(colors or {}).get(name) or arm_color(name))
        ax.fill_between(c["x"], c["mean"] - c["se"], c["mean"] + c["se"], alpha=0.2, color=line.get_color(),
                        label=shown)
    n = sorted({c["n"] for c in curves.values()})
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=font_size("title"), wrap=True)
    if xlabel == "RL step":
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    legend(ax, fontsize=font_size("legend"), title=f"mean, band +-1 s.e.\nover {'/'.join(map(str, n))} seeds",
           title_fontsize=font_size("legend"), loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    return ax


def _title(setting: str, what: str) -> str:
    """The title of a curve figure: "setting: what" (just "what" without a setting)."""
    return f"{setting}: {what}" if setting else what


def arms_figure(sweep: dict, key: str = "success_rate", arms=None, smooth_w: int = 5, x: str = "step",
                setting: str = "", *, colors: Optional[dict] = None):
    """Widget panel: ``key`` over steps (or cumulative tokens, ``x="tokens"``) for the chosen arms of a
    sweep (mean +- s.e. over seeds); arms that did not log ``key`` are left out. The title names the
    ``setting`` (e.g. "GridWorld 4x4, GRPO, P=4 x G=8") and the metric; ``colors``: arm -> colour (a lesson's
    fixed colours), else ``style.arm_color``."""
    fig, ax = subplots(size=figsize(8, 4), layout="constrained")
    what = label(key) + (f" ({smooth_w}-step mean)" if smooth_w > 1 else "")
    draw_curves(ax, arm_curves(sweep, key, arms, smooth_w, x), _title(setting, what),
                "RL step" if x == "step" else "tokens generated (cumulative)", label(key), colors=colors)
    return fig


def curve_panel(sweep: dict, metric: str = "success_rate", smooth: int = 5, *, setting: str = "",
                colors: Optional[dict] = None):
    """The notebooks' learning-curve widget: ``arms_figure`` of every arm, by the widget's names. Bind the
    sweep (and its setting), not a global: ``interactive(bind(curve_panel, sweep, setting="..."), metric=[...])``."""
    return arms_figure(sweep, metric, None, smooth, setting=setting, colors=colors)


def final_mean(rows, last: int = 10) -> tuple[float, float]:
    """Mean over seeds of each seed's mean over its last ``last`` steps, and the seed std."""
    x = np.asarray(rows, dtype=float)[:, -last:]
    per_seed = np.nanmean(x, 1)
    return float(np.mean(per_seed)), float(np.std(per_seed))


ARM_NAMES = {"grpo": "GRPO: one advantage per episode",
             "gigpo": "GiGPO: plus groups of turns from one state",
             "loo_turn": "prototype: leave-one-out, per-turn returns",
             "my_loo_turn": "prototype: leave-one-out, per-turn returns"}
"""the legend's plain words for the arms of the prototype comparison"""


def plot_compare(sweep: dict, key: str = "reward_mean", *, w: int = 5, ax=None, arms=None, title: str = "",
                 setting: str = SETTING, names: Optional[dict] = None):
    """Mean +- s.e. over seeds of ``key`` for each arm, labelled in ``names`` (default ``ARM_NAMES``); the
    default title names ``setting``; returns the axes."""
    if ax is None:
        ax = subplots(size=figsize(8, 4), layout="constrained")[1]
    what = f"{label(key)} ({w}-step mean)"
    draw_curves(ax, arm_curves(sweep, key, arms, w), title or _title(setting, what), "RL step", label(key),
                names=ARM_NAMES if names is None else names)
    return ax


def loo_turn(turn_reward: torch.Tensor, turn_mask: torch.Tensor, group: torch.Tensor, *,
             gamma: float = 0.95) -> torch.Tensor:
    """Leave-one-out baseline on discounted turn returns (an example prototype, not a paper) -> (B, H).

        A_{i,k} = R_{i,k} - 1/(G-1) sum_{j != i, j in g(i)} R_{j,0},   R_{i,k} = sum_{k'>=k} gamma^{k'-k} r_{i,k'}

    Later turns of a success keep more credit than with one trajectory-level number when gamma < 1.
    Example: rewards [[0., 1.], [0., 0.]] one group, gamma 0.5 -> R [[0.5, 1.], [0., 0.]],
    baseline [0., 0.5] -> [[0.5, 1.], [-0.5, -0.5]].
    """
    from ..batch import discounted_returns
    from ..segments import dense_index, segment_count, segment_sum
    R = discounted_returns(turn_reward, turn_mask, gamma)                      # (B, H)
    g, S = dense_index(group)
    R0 = R[:, 0]                                                                # (B,)
    n = segment_count(g, S, R.dtype)[g]
    others = (segment_sum(R0, g, S)[g] - R0) / (n - 1).clamp(min=1)             # (B,)
    A = R - others[:, None]
    return torch.where(n[:, None] > 1, A, torch.zeros_like(A)) * turn_mask.to(R.dtype)


@register_estimator("loo_turn", level="turn", grouped=True)
def _loo_turn(batch, *, gamma: float = 0.95):
    """Leave-one-out baseline on discounted turn returns (notebook 10's example prototype)."""
    return loo_turn(batch.turn_reward, batch.turn_mask, batch.group, gamma=gamma)


# ---- verl's signature ---------------------------------------------------------------------------
def load_verl():
    """verl's ``verl.trainer.ppo.core_algos`` or None when verl (or one of its needs) is absent
    (ray is stubbed when missing: see ``toyrl.port.verl_loader``)."""
    return load_core_algos()


def register_in_verl(name: str, core_algos=None, requires: tuple = ()) -> Optional[str]:
    """Register ``verl_estimator(name)`` in verl's registry as ``toyrl_<name>``; None without verl."""
    core_algos = core_algos if core_algos is not None else load_verl()
    if core_algos is None:
        return None
    key = f"toyrl_{name}"
    core_algos.ADV_ESTIMATOR_REGISTRY.pop(key, None)        # idempotent: re-running a cell re-registers
    core_algos.register_adv_est(key)(verl_estimator(name, requires))
    return key


def toy_verl_inputs(B: int = 4, L: int = 6, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """verl-shaped toy inputs: rewards (B, L) with the outcome on the last response token, a mask
    (B, L) with two turns per row split by one observation token, and uid strings (two per group)."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.ones(B, L)
    mask[:, L // 2] = 0                                                        # an observation token
    R = torch.randint(0, 2, (B,), generator=g).float()
    rewards = torch.zeros(B, L)
    rewards[:, -1] = R
    index = np.array([f"uid{i // 2}" for i in range(B)], dtype=object)
    return rewards, mask, index


def verl_advantage_panel(name: str = "loo_turn", gamma: float = 0.5, seed: int = 0):
    """Notebook 10's widget figure: token advantages (B, L) of verl's GRPO beside ``verl_estimator(name)`` at
    ``gamma`` on ``toy_verl_inputs(seed=seed)``; one colour scale (one colour bar), integer token and row ticks,
    the title naming the toy batch. Returns the figure."""
    from matplotlib.ticker import MaxNLocator
    r, m, i = toy_verl_inputs(B=4, L=6, seed=seed)
    a_p, _ = verl_estimator(name)(r, m, i, config={"toyrl_kwargs": {"gamma": gamma}})
    a_g, _ = compute_grpo_outcome_advantage(r, m, i)
    fig, axes = subplots(1, 2, size=figsize(10, 4), sharey=True, layout="constrained")
    for ax, a, t in zip(axes, (a_g, a_p), ("GRPO (verl's function)", f"{name}, gamma={gamma:.2f}")):
        im = ax.imshow(a.numpy(), cmap="RdBu", vmin=-1.5, vmax=1.5, aspect="auto")
        ax.set(title=t, xlabel="response token l\n(token 3: observation)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    axes[0].set_ylabel("row (2 per uid)")
    axes[1].set_ylabel("row")
    axes[1].tick_params(labelleft=False)
    fig.colorbar(im, ax=axes, label="advantage")
    fig.suptitle(f"toy verl batch: B=4 rows, L=6 response tokens,\noutcome on the last token, seed {seed}")
    return fig


def show_verl_advantage_panel(name: str = "loo_turn", gamma: float = 0.5, seed: int = 0):
    """``verl_advantage_panel`` displayed and closed: a widget callback (``interactive`` does not display a
    returned figure, and a figure made after the first is not drawn by itself outside interactive mode)."""
    import matplotlib.pyplot as plt
    from IPython.display import display
    fig = verl_advantage_panel(name, gamma, seed)
    display(fig)
    plt.close(fig)


# ---- notebook 10's sweep ------------------------------------------------------------------------
def prototype_arms(steps: int = 30) -> dict:
    """GRPO, GiGPO and the prototype on BanditChain (fixed layout, restart on a wrong pull)."""
    base = TrainConfig(env="bandit_chain", env_kwargs={"layout_seed": 0, "on_wrong": "restart", "max_turns": 8},
                       prompts_per_step=4, group_size=8, steps=steps)
    return {name: replace(base, estimator=name) for name in ("grpo", "gigpo", "loo_turn")}


precompute = sweep_precompute("prototype/compare.json", prototype_arms,
                              ("reward_mean", "success_rate", "turns_per_episode"), 30, "toyrl.viz.prototype")


if __name__ == "__main__":
    print(precompute())
