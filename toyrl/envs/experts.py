"""Experts: a planner for every env, the task process scores trees branch on, and the shipped demonstrations.

- Planners: BFS on GridWorld (replanned from the current cell, so it also acts under slip), the
  good arm on BanditChain, the reference solution on MockSearch. ``expert_actions(core)`` gives
  the planner's action for every copy at once; ``process_scores(core)`` rates every copy's progress.
- ``write_demos`` / ``load_demos`` ship JSON-lines transcripts in ``data/demos/`` (task, actions,
  and the text of every turn, for text-level policies too): what behaviour cloning
  (``toyrl.train.bc``) and TinyLM's vocabulary (``toyrl.policies.tinylm``) read.

The policy that plays a planner's (or a transcript's) actions as tokens is ``toyrl.policies.scripted``.
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Optional

import numpy as np

from . import make_core
from .core import VOID, BatchedCore
from .gridworld import HOLE, GridCore, goal_distance, neighbours
from .bandit_chain import BanditCore
from .mock_search import SearchCore, oracle_actions

__all__ = ["expert_actions", "noisy_expert", "expert_memo", "process_scores", "write_demos", "load_demos", "DEMO_DIR", "DEMO_CONFIGS"]

DEMO_DIR = Path(__file__).resolve().parents[2] / "data" / "demos"
# the env settings the shipped demonstration files were made with
DEMO_CONFIGS = {
    "gridworld": {"size": 4},
    "bandit_chain": {"layout_seed": 0},
    "mock_search": {},
}


def expert_memo(core: BatchedCore, rows: Optional[np.ndarray] = None) -> list[list[int]]:
    """What each of ``rows`` (default all copies) must remember, as the expert writes it in its reasoning:
    ``core.memo(i)`` (a T-maze's cue, a chain's remaining plan, a lake's remaining route). A core
    without ``memo`` has nothing to remember: empty lists."""
    rows = np.arange(core.num_envs) if rows is None else np.asarray(rows)
    memo = getattr(core, "memo", None)
    return [list(memo(int(i))) if memo is not None else [] for i in rows]


def expert_actions(core: BatchedCore, rows: Optional[np.ndarray] = None) -> np.ndarray:
    """The planner's action for each of ``rows`` (default all copies) -> (len(rows),) int64: the core's own
    ``expert_actions(rows)`` where it has one, else the planner of a built-in env."""
    rows = np.arange(core.num_envs) if rows is None else np.asarray(rows)
    if hasattr(core, "expert_actions"):
        return np.asarray(core.expert_actions(rows), dtype=np.int64)
    st = core.state
    if isinstance(core, GridCore):
        out = np.empty(len(rows), np.int64)
        nxt = neighbours(core.size)[:4]                             # (4, n*n)
        for j, i in enumerate(rows):
            dist = _goal_distance(st["tiles"][i].tobytes(), core.size)
            d = dist[nxt[:, st["pos"][i]]]                          # (4,) distance after each move
            d = np.where(st["tiles"][i][nxt[:, st["pos"][i]]] == HOLE, 10**7, d)
            out[j] = int(np.argmin(d))
        return out
    if isinstance(core, BanditCore):
        good = st["good"][rows].reshape(len(rows), core.K, core.M)
        stage = np.minimum(st["stage"][rows], core.K - 1)
        return (good[np.arange(len(rows)), stage] == 1).argmax(1).astype(np.int64)
    if isinstance(core, SearchCore):
        return np.array([oracle_actions(core, int(i))[0] for i in rows], dtype=np.int64)
    raise ValueError(f"no planner for core {type(core).__name__}")


def noisy_expert(eps: float, rng: np.random.Generator, choose=expert_actions):
    """An imperfect teacher: ``choose``'s action, replaced with probability ``eps`` by a uniformly drawn one (from
    ``rng``) -> a chooser ``(core, rows) -> actions``. A policy cloned from it starts with a per-turn error rate of
    about eps (1 - 1/A), so on a task of L fatal decisions its success starts near (1 - eps (1 - 1/A))^L: the
    competent, imperfect start long-horizon credit is about. eps = 0 returns ``choose`` itself.
    Example: eps 1 -> every action uniform over the core's n_actions."""
    if not 0.0 <= eps <= 1.0:
        raise ValueError(f"eps must lie in [0, 1], got {eps}")
    if eps == 0.0:
        return choose

    def chooser(core: BatchedCore, rows) -> np.ndarray:
        a = np.asarray(choose(core, rows), dtype=np.int64)
        flip = rng.random(len(a)) < eps
        return np.where(flip, rng.integers(0, core.n_actions, len(a)), a)
    return chooser


@lru_cache(maxsize=4096)
def _goal_distance(tiles: bytes, n: int) -> np.ndarray:
    """``goal_distance`` of a map given as its int64 bytes, memoized: the planner asks once per map, not per turn."""
    return goal_distance(np.frombuffer(tiles, dtype=np.int64), n)


def process_scores(core: BatchedCore) -> np.ndarray:
    """A task process scorer (higher = closer to success) for every copy -> (N,) float.

    GridWorld: minus the BFS distance to the goal (-100 in a hole); BanditChain: the stage;
    MockSearch: the fraction of the lookup chain retrieved; a core with ``progress()``: that. What PATR-style tree
    rollouts branch on.
    """
    if hasattr(core, "progress"):
        return np.asarray(core.progress(), dtype=float)
    st = core.state
    if isinstance(core, GridCore):
        d = np.array([goal_distance(st["tiles"][i], core.size)[st["pos"][i]] for i in range(core.num_envs)])
        hole = st["tiles"][np.arange(core.num_envs), st["pos"]] == HOLE
        return np.where(hole | (d >= 10**6), -100.0, -d.astype(float))
    if isinstance(core, BanditCore):
        return st["stage"].astype(float)
    if isinstance(core, SearchCore):
        return core.hop_progress().astype(float)
    raise ValueError(f"no process scorer for core {type(core).__name__}")


def write_demos(env: str, n: int, path: Optional[Path] = None, seed: int = 0, **env_kwargs) -> Path:
    """Play the planner on ``n`` tasks drawn from ``seed`` and write one JSON line per episode."""
    kwargs = {**DEMO_CONFIGS.get(env, {}), **env_kwargs}
    core = make_core(env, n, seed=seed, **kwargs)
    tasks = core.sample_tasks(np.random.default_rng(seed), n)
    core.reset(tasks)
    actions = [[] for _ in range(n)]
    texts = [[] for _ in range(n)]
    total = np.zeros(n)
    while not core.done.all():
        live = np.flatnonzero(~core.done)
        a = np.full(n, VOID, np.int64)
        a[live] = expert_actions(core, live)
        for i in live:
            texts[i].append({"observation": core.render_text(int(i)), "action": core.action_text(int(a[i]), int(i))})
            actions[i].append(int(a[i]))
        _, r, _, _, _ = core.step(a)
        total += r
    path = Path(path) if path else DEMO_DIR / f"{env}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        for i in range(n):
            f.write(json.dumps({"env": env, "env_kwargs": kwargs, "task": tasks[i].tolist(),
                                "actions": actions[i], "reward": float(total[i]), "turns": texts[i]}) + "\n")
    tmp.replace(path)                                                # never leave a half-written file
    return path


def load_demos(env: str, path: Optional[Path] = None) -> list[dict]:
    """The shipped demonstrations of ``env`` (a list of episode dicts)."""
    path = Path(path) if path else DEMO_DIR / f"{env}.jsonl"
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
