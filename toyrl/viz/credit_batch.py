"""The noisy-expert batch of notebook 01, and every advantage estimator fed on it.

Dimension legend: B rollouts, T tokens, H turns, G group size, n map side.

The batch comes from a *noisy expert* on a fixed GridWorld map: the BFS planner's move with
probability 1 - eps, otherwise a random move (a wall bump or a detour) or, with probability p_void,
a void turn. So we know which turns were useful (``toyrl.viz.credit`` draws and counts them).

Some estimators need more than rewards (``ESTIMATORS[name].needs``); this module feeds each need
something defined (``NEED_SUPPLY``) and says what per estimator (``ESTIMATOR_NEEDS``):
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
    cb.setting                        # "GridWorld 4x4, noisy planner (eps 0.3, void 0.25), 2 groups x G=8, seed 0"
    adv = all_advantages(cb, gamma=0.95, omega=1.0)          # {name: (B, H) numpy}
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from functools import lru_cache
from typing import Optional, Sequence

import numpy as np
import torch

from ..credit import ESTIMATORS
from ..policies.scripted import ScriptedPolicy
from ..envs.experts import expert_actions
from ..envs import make_core
from ..envs.core import VOID
from ..envs.gridworld import HOLE, MAPS, goal_distance, map_to_array
from ..codecs.toy import ToyCodec
from ..rollout.flatten import to_rollout
from ..rollout.play import Episode, play
from .setting import env_setting

__all__ = ["CreditBatch", "make_credit_batch", "noisy_expert", "play_scripted", "ESTIMATOR_NEEDS", "NEED_SUPPLY",
           "estimator_needs", "estimator_kwargs", "all_advantages", "turn_level"]

NEED_SUPPLY = {
    "values": "values (B, H): tabular Monte Carlo fit or zeros",
    "token_values": "token_values: not given, the turn values reach each token of the turn",
    "double_critic": "q, v: tabular Monte Carlo Q(s, a), V(s)",
    "greedy_baseline": "baseline_reward (B,): outcome of the noiseless planner on the task",
    "progress": "progress (B, H): privileged BFS progress c_k",
    "privileged_critic": "critic_adv (B, H): privileged BFS progress c_k",
    "info_gain": "info_gain (B, H): privileged BFS progress c_k",
    "node": "node (B, H): implicit prefix tree",
    "entropy": "entropy (B, T): 0 under the scripted behaviour",
}
"""how this module supplies each need of ``toyrl.credit.NEEDS`` an estimator can declare, on this batch"""


def estimator_needs() -> dict:
    """{name: what this module feeds it} for every registered estimator that declares needs
    (``ESTIMATORS[name].needs``), read from the registry now; a need without a supply says so."""
    return {name: "; ".join(NEED_SUPPLY.get(n, f"{n}: not supplied by this module") for n in est.needs)
            for name, est in ESTIMATORS.items() if est.needs}


ESTIMATOR_NEEDS = estimator_needs()
"""``estimator_needs()`` at import: the keys are the registry's estimators with needs"""


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
    """n, the map side"""
    setting: str = ""
    """what the batch is, named in figure titles: map, slip, behaviour, groups x G, seed"""

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
    (or, with prob. ``p_void``, void) turn. ``setting`` names these arguments, e.g. "GridWorld 4x4,
    noisy planner (eps 0.3, void 0.25), 2 groups x G=8, seed 0" (a slip > 0 follows the map)."""
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
    d_of = goal_distance(tiles, n).astype(float)
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
    setting = (f"{env_setting(core)}, noisy planner (eps {eps:g}, void {p_void:g}), "
               f"{n_groups} groups x G={group_size}, seed {seed}")
    return CreditBatch(ro, cells, dist, actions, greedy_R, tiles, n, setting)


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
    supply = {"greedy_baseline": {"baseline_reward": torch.as_tensor(cb.greedy_R, dtype=torch.float32)},
              "progress": {"progress": c}, "privileged_critic": {"critic_adv": c}, "double_critic": {"q": Q, "v": V}}
    for need in ESTIMATORS[name].needs:                       # values, node, info_gain: set on the batch above
        kw.update(supply.get(need, {}))
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
