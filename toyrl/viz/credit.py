"""Per-turn credit on one batch: every estimator side by side, and GiGPO's anchor states on the map.

Dimension legend: B rollouts, T tokens, H turns, G group size, n map side.

The batch comes from a *noisy expert* on the 4x4 GridWorld: the BFS planner's move with
probability 1 - eps, otherwise a random move (a wall bump or a detour) or, with probability p_void,
a void turn. So we know which turns were useful: a turn *progresses* when it lowers the BFS
distance to the goal and is *wasted* when the agent did not move (void turn or wall bump).

Some estimators need more than rewards; this module feeds each one something defined and says what
(``ESTIMATOR_NEEDS``):
- values for gae / turn_gae / bilevel_gae: a tabular Monte Carlo fit V(s) = mean discounted
  return-to-go of the batch's turns in state s (``values="mc"``), or zeros (``values="zeros"``);
- q, v for archer: the same tabular fit of Q(s, a) and V(s);
- baseline_reward for remax: the outcome of the noiseless planner (the "greedy" policy) on each task;
- progress (spa), critic_adv (sweet), info_gain (a2tgpo): the privileged per-turn progress
  c_k = (d_k - d_{k+1}) / d_0 from the BFS distance d (a critic that knows the map);
- node for tree_grpo / rtpo: the implicit prefix tree of each group (turns with equal
  state-and-action histories share a node);
- entropy for empg: the scripted behaviour reports 0, so EMPG's modulation is neutral here.

    cb = make_credit_batch(group_size=8, slip=0.0, seed=0)
    adv = all_advantages(cb, gamma=0.95, omega=1.0)          # {name: (B, H) numpy}
    fig = plot_estimators(adv, cb.mask)
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from functools import lru_cache
from typing import Optional, Sequence

import matplotlib.patches as mpatches
import numpy as np
import torch

from ..credit import ESTIMATORS
from ..demos import ScriptedPolicy, _grid_distance, expert_actions
from ..envs import make_core
from ..envs.core import VOID
from ..envs.gridworld import GOAL, HOLE, MAPS, map_to_array
from ..rollout import Episode, ToyCodec, play, to_rollout
from .plots import heatmap, new_figure

__all__ = ["CreditBatch", "make_credit_batch", "noisy_expert", "play_scripted", "ESTIMATOR_NEEDS", "estimator_kwargs", "all_advantages",
           "turn_level", "credit_spread", "turn_classes", "wasted_vs_progress", "step_advantage",
           "anchor_map", "plot_estimators", "plot_anchor_map", "credit_panel"]

ESTIMATOR_NEEDS = {
    "gae": "values (B, H): tabular Monte Carlo fit or zeros", "turn_gae": "values (B, H): tabular fit or zeros",
    "bilevel_gae": "values (B, H): tabular fit or zeros", "archer": "q, v: tabular Monte Carlo Q(s, a), V(s)",
    "remax": "baseline_reward (B,): outcome of the noiseless planner on the task",
    "spa": "progress (B, H): privileged BFS progress c_k", "sweet": "critic_adv (B, H): privileged BFS progress c_k",
    "a2tgpo": "info_gain (B, H): privileged BFS progress c_k", "tree_grpo": "node (B, H): implicit prefix tree",
    "rtpo": "node (B, H): implicit prefix tree", "empg": "entropy (B, T): 0 under the scripted behaviour",
}


@dataclass
class CreditBatch:
    """A rollout batch plus what the figures need, all derived from one seed."""

    ro: object
    """the Rollout (``ro.batch`` is the TurnBatch)"""
    cells: np.ndarray
    """(B, H + 1) cell before each turn and after the last (-1 past the end)"""
    dist: np.ndarray
    """(B, H + 1) BFS distance to the goal of those cells (d_0 = start)"""
    actions: np.ndarray
    """(B, H) env action of each turn (VOID = -1; -2 past the end)"""
    greedy_R: np.ndarray
    """(B,) outcome of the noiseless planner on the same task"""
    tiles: np.ndarray
    """(n*n,) the map"""
    size: int

    @property
    def batch(self):
        return self.ro.batch

    @property
    def mask(self) -> np.ndarray:
        return self.ro.batch.turn_mask.numpy()

    @property
    def success(self) -> np.ndarray:
        return self.ro.success.numpy()


def noisy_expert(eps: float, p_void: float, seed: int):
    """A chooser for ``ScriptedPolicy``: the planner's action w.p. 1 - eps, else a uniformly random
    action, or (w.p. eps * p_void) a void turn. Its own RNG, seeded."""
    rng = np.random.default_rng(seed)

    def choose(core, rows):
        best = expert_actions(core, rows)
        u = rng.random(len(rows))
        rand = rng.integers(0, core.n_actions, len(rows))
        return np.where(u < eps * p_void, VOID, np.where(u < eps, rand, best)).astype(np.int64)
    return choose


def play_scripted(core, codec, tasks, group, chooser, keep_states=True) -> list:
    """Episodes of ``ScriptedPolicy(chooser)`` from ``tasks`` (one per copy of ``core``)."""
    core.reset(tasks)
    eps = [Episode(codec.prompt(core, i), np.asarray(tasks[i]), group=int(group[i])) for i in range(len(tasks))]
    play(ScriptedPolicy(core, codec, chooser), core, eps, codec, keep_states=keep_states)
    return eps


@lru_cache(maxsize=32)
def make_credit_batch(group_size: int = 8, n_groups: int = 2, slip: float = 0.0, eps: float = 0.3,
                      p_void: float = 0.25, seed: int = 0, map_name: str = "4x4", max_turns: int = 12) -> CreditBatch:
    """A batch of ``n_groups`` groups of ``group_size`` noisy-expert rollouts on a fixed map (cached:
    treat the result as read-only). ``slip`` makes moves stochastic, ``eps`` the chance of a random
    (or, with prob. ``p_void``, void) turn."""
    B = group_size * n_groups
    core = make_core("gridworld", B, seed=seed, map_name=map_name, slip=slip, max_turns=max_turns)
    codec = ToyCodec.for_core(core)
    tasks = core.sample_tasks(np.random.default_rng(seed), B)
    group = np.repeat(np.arange(n_groups), group_size)
    episodes = play_scripted(core, codec, tasks, group, noisy_expert(eps, p_void, seed))
    final = core.state["pos"].copy()
    ro = to_rollout(episodes, codec, "cpu")
    H = ro.batch.H
    tiles = map_to_array(MAPS[map_name])
    n = core.size
    d_of = _grid_distance(tiles, n).astype(float)
    d_of[tiles == HOLE] = np.nan                                           # a hole: no distance
    cells = np.full((B, H + 1), -1, dtype=np.int64)
    actions = np.full((B, H), -2, dtype=np.int64)
    for i, ep in enumerate(episodes):
        for k, t in enumerate(ep.turns):
            cells[i, k] = int(t.state["pos"])
            acts = [g - codec.act0 for g in t.gen if codec.act0 <= g < codec.obs0]
            actions[i, k] = VOID if t.void or len(acts) != 1 else acts[0]
        cells[i, len(ep.turns)] = final[i]
    dist = np.where(cells >= 0, d_of[cells.clip(min=0)], np.nan)
    greedy = play_scripted(core, codec, tasks, group, expert_actions, keep_states=False)
    greedy_R = np.array([sum(t.reward for t in ep.turns) for ep in greedy])
    return CreditBatch(ro, cells, dist, actions, greedy_R, tiles, n)


def _progress(cb: CreditBatch) -> torch.Tensor:
    """(B, H) c_k = (d_k - d_{k+1}) / d_0; falling in a hole loses all progress made (c = -(d_0 - d_k)/d_0)."""
    d = cb.dist.copy()
    d0 = d[:, :1]
    nxt = np.where(np.isnan(d[:, 1:]) & (cb.cells[:, 1:] >= 0), d0, d[:, 1:])   # hole -> back to d_0
    c = (d[:, :-1] - nxt) / np.maximum(d0, 1)
    return torch.as_tensor(np.nan_to_num(c) * cb.mask, dtype=torch.float32)


def _tabular(cb: CreditBatch, gamma: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Tabular Monte Carlo fit on the batch: V(s), Q(s, a) = mean return-to-go of turns in s (taking a)."""
    b = cb.batch
    Rk = b.returns(gamma).numpy()                                          # (B, H)
    m = cb.mask
    key = b.state_key.numpy()
    V, Q = np.zeros_like(Rk), np.zeros_like(Rk)
    for s in np.unique(key[m]):
        at = m & (key == s)
        V[at] = Rk[at].mean()
        for a in np.unique(cb.actions[at]):
            sa = at & (cb.actions == a)
            Q[sa] = Rk[sa].mean()
    return torch.as_tensor(V * m, dtype=torch.float32), torch.as_tensor(Q * m, dtype=torch.float32)


def _prefix_nodes(cb: CreditBatch) -> torch.Tensor:
    """(B, H) node ids of the implicit prefix tree: equal (group, states, actions) histories share a node."""
    b = cb.batch
    key, grp, m = b.state_key.numpy(), b.group.numpy(), cb.mask
    ids: dict = {}
    node = np.full(key.shape, -1, dtype=np.int64)
    for i in range(key.shape[0]):
        hist: tuple = (int(grp[i]),)
        for k in range(key.shape[1]):
            if not m[i, k]:
                break
            hist = hist + (int(key[i, k]), int(cb.actions[i, k]))
            node[i, k] = ids.setdefault(hist, len(ids))
    return torch.as_tensor(node)


def estimator_kwargs(cb: CreditBatch, name: str, *, gamma: float = 0.95, omega: float = 1.0,
                     values: str = "mc") -> tuple[object, dict]:
    """(batch, kwargs) to call ``ESTIMATORS[name]`` on this batch: the extra inputs of
    ``ESTIMATOR_NEEDS`` filled in, and ``gamma`` / ``omega`` passed to estimators that take them."""
    b = cb.batch
    V, Q = _tabular(cb, gamma)
    if values == "zeros":
        V = torch.zeros_like(V)
    elif values != "mc":
        raise ValueError(f"values must be 'mc' or 'zeros', got {values!r}")
    c = _progress(cb)
    b = b.replace(values=V, node=_prefix_nodes(cb), info_gain=c)
    kw: dict = {}
    params = inspect.signature(ESTIMATORS[name].fn).parameters
    if "gamma" in params:
        kw["gamma"] = gamma
    if "gamma_turn" in params:
        kw["gamma_turn"] = gamma
    if "omega" in params:
        kw["omega"] = omega
    extra = {"remax": {"baseline_reward": torch.as_tensor(cb.greedy_R, dtype=torch.float32)},
             "spa": {"progress": c}, "sweet": {"critic_adv": c},
             "archer": {"q": Q, "v": V}}
    kw.update(extra.get(name, {}))
    return b, kw


def turn_level(batch, adv: torch.Tensor, level: str) -> np.ndarray:
    """(B, H) numpy: a turn-level advantage as is, a token-level one averaged over each turn's policy tokens."""
    if level == "token":
        adv = batch.token_to_turn(adv.float(), "mean")
    return (adv.float() * batch.turn_mask).numpy()


def all_advantages(cb: CreditBatch, names: Optional[Sequence[str]] = None, *, gamma: float = 0.95,
                   omega: float = 1.0, values: str = "mc") -> dict:
    """{name: (B, H) numpy turn advantages} of every registered estimator (or ``names``) on ``cb``."""
    out = {}
    for name in (names or list(ESTIMATORS)):
        b, kw = estimator_kwargs(cb, name, gamma=gamma, omega=omega, values=values)
        est = ESTIMATORS[name]
        out[name] = turn_level(b, est(b, **kw), est.level)
    return out


def credit_spread(adv: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """(B,) max minus min advantage over the valid turns of each trajectory (0: every turn equal).

    Example: adv [[1., 1., 0.], [2., -1., 5.]], mask [[1, 1, 0], [1, 1, 1]] -> [0., 6.].
    """
    hi = np.where(mask, adv, -np.inf).max(1)
    lo = np.where(mask, adv, np.inf).min(1)
    return np.where(mask.any(1), hi - lo, 0.0)


def turn_classes(cb: CreditBatch) -> dict:
    """(B, H) bool masks of valid turns: ``progress`` (BFS distance went down), ``wasted`` (the
    agent did not move: a void turn or a wall bump), ``void`` (void turns only)."""
    m = cb.mask
    d0, d1 = cb.dist[:, :-1], cb.dist[:, 1:]
    stayed = (cb.cells[:, 1:] == cb.cells[:, :-1]) & m
    return {"progress": m & (d1 < d0), "wasted": stayed, "void": m & (cb.actions == VOID)}


def wasted_vs_progress(cb: CreditBatch, adv: np.ndarray) -> dict:
    """Mean advantage of progressing vs wasted turns *inside successful trajectories*, the number of
    each, and ``paired_gaps``: for every successful trajectory with both kinds, its mean progressing
    credit minus its mean wasted credit (GRPO: exactly 0 each; GiGPO: mostly positive)."""
    cls = turn_classes(cb)
    ok = cb.success[:, None]
    p, w = cls["progress"] & ok, cls["wasted"] & ok
    both = p.any(1) & w.any(1)                                              # trajectories holding both kinds
    gaps = np.array([adv[i][p[i]].mean() - adv[i][w[i]].mean() for i in np.flatnonzero(both)])
    return {"progress_mean": float(adv[p].mean()) if p.any() else float("nan"),
            "wasted_mean": float(adv[w].mean()) if w.any() else float("nan"),
            "n_progress": int(p.sum()), "n_wasted": int(w.sum()), "paired_gaps": gaps}


def step_advantage(cb: CreditBatch, gamma: float = 0.95) -> np.ndarray:
    """(B, H) GiGPO's anchor-state term A^S alone: gigpo(omega=1) - gigpo(omega=0)."""
    a1 = all_advantages(cb, ["gigpo"], gamma=gamma, omega=1.0)["gigpo"]
    a0 = all_advantages(cb, ["gigpo"], gamma=gamma, omega=0.0)["gigpo"]
    return a1 - a0


def anchor_map(cb: CreditBatch, group: int = 0, gamma: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """For one group: how many turns start in each cell's anchor state (n, n), and the mean step
    advantage A^S of the turns that took each action there (n, n, 5: left, down, right, up, void;
    NaN where no turn did). A^S averages to 0 over an anchor, so the split by action is the signal."""
    a_s = step_advantage(cb, gamma)
    rows = cb.batch.group.numpy() == group
    m = cb.mask & rows[:, None]
    cell, act = cb.cells[:, :-1][m], np.where(cb.actions[m] == VOID, 4, cb.actions[m])
    n = cb.size
    count = np.bincount(cell, minlength=n * n).astype(float)
    idx = cell * 5 + act
    num = np.bincount(idx, minlength=n * n * 5).astype(float)
    total = np.bincount(idx, weights=a_s[m], minlength=n * n * 5)
    mean = np.where(num > 0, total / np.maximum(num, 1), np.nan)
    return count.reshape(n, n), mean.reshape(n, n, 5)


def plot_estimators(adv: dict, mask: np.ndarray, names: Optional[Sequence[str]] = None, *, ncols: int = 6,
                    success: Optional[np.ndarray] = None):
    """A grid of turn x trajectory heatmaps, one per estimator (each with its own symmetric scale)."""
    names = list(names or adv)
    nrows = int(np.ceil(len(names) / ncols))
    fig, axes = new_figure(nrows, min(ncols, len(names)), width=2.3, height=2.0)
    for ax, name in zip(axes.flat, names):
        heatmap(ax, adv[name], mask, title=name, colorbar=False, xlabel="", ylabel="")
        if success is not None:
            ax.set_xticks(np.arange(len(success)))
            ax.set_xticklabels(["+" if s else "." for s in success], fontsize=6)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    fig.supxlabel("trajectory (+ = reached the goal)", fontsize=8)
    fig.supylabel("turn", fontsize=8)
    fig.tight_layout()
    return fig


_OFFSET = {0: (-0.3, 0.0), 1: (0.0, 0.32), 2: (0.3, 0.0), 3: (0.0, -0.32), 4: (0.0, 0.0)}   # (dx, dy) per action


def plot_anchor_map(cb: CreditBatch, group: int = 0, gamma: float = 0.95, ax=None):
    """The map with each cell coloured by how many turns of ``group`` start there (its anchor-state
    group size); around the centre, the mean step advantage A^S of each action taken there
    (left / down / right / up at the matching edge, void in the centre). Holes black, G the goal."""
    count, mean = anchor_map(cb, group, gamma)
    n = cb.size
    if ax is None:
        fig, axes = new_figure(1, 1, width=4.2, height=3.8)
        ax = axes[0, 0]
    im = ax.imshow(count, cmap="Greens", vmin=0, vmax=max(count.max() * 1.6, 1))
    tiles = cb.tiles.reshape(n, n)
    for r in range(n):
        for c in range(n):
            if tiles[r, c] == HOLE:
                ax.add_patch(mpatches.Rectangle((c - .5, r - .5), 1, 1, color="black"))
            elif tiles[r, c] == GOAL:
                ax.text(c, r, "G", ha="center", va="center", fontsize=12, color="#e76f51", weight="bold")
            for a in range(5):
                v = mean[r, c, a]
                if np.isfinite(v):
                    dx, dy = _OFFSET[a]
                    ax.text(c + dx, r + dy, ("v" if a == 4 else "") + f"{v:+.1f}", ha="center", va="center",
                            fontsize=6, color="#b2182b" if v > 0 else "#2166ac")
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(f"group {group}: colour = turns per anchor state;\ntext = mean A^S per action (gamma={gamma})",
                 fontsize=8)
    ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.02)
    return ax.figure


def credit_panel(estimator: str = "gigpo", gamma: float = 0.95, omega: float = 1.0, group_size: int = 8,
                 slip: float = 0.0, seed: int = 0, values: str = "mc"):
    """The widget figure: GRPO, the chosen estimator, and GiGPO's anchor map of group 0."""
    cb = make_credit_batch(group_size=group_size, slip=slip, seed=seed)
    adv = all_advantages(cb, ["grpo", estimator], gamma=gamma, omega=omega, values=values)
    fig, axes = new_figure(1, 3, width=3.6, height=3.0)
    heatmap(axes[0, 0], adv["grpo"], cb.mask, title="grpo (trajectory level)")
    heatmap(axes[0, 1], adv[estimator], cb.mask, title=f"{estimator} (gamma={gamma}, omega={omega})")
    plot_anchor_map(cb, 0, gamma, ax=axes[0, 2])
    fig.tight_layout()
    return fig
