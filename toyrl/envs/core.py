"""The batched environment core and the gymnasium wrapper every toyrl environment shares.

A *core* holds N copies of one environment as numpy arrays and steps them all at once; the trainer
uses cores directly. The gymnasium class of each environment wraps a core of N = 1, so there is one
copy of the dynamics. A core's state is a dict of arrays with leading dimension N plus its random
generator, which is what makes ``snapshot`` / ``restore`` / ``fork`` generic.

Dimension legend: N copies.

Conventions shared by all environments:
- ``VOID = -1`` is the action of a turn that was neither a valid tool call nor a move (text that
  ``parse_action`` could not read). A void turn changes no state, costs ``void_penalty`` and counts
  as a turn; it is reported in ``info["void"]``, never raised.
- A *task* is what a reset draws (a map, a bandit layout, a question): ``sample_tasks(rng, n)``
  returns an int64 array of shape (n, task_dim), so G rollouts of one task share one initial state.
- ``state_keys()`` is a stable int64 hash of each copy's canonical state (``mix64`` below, never
  Python's ``hash``), equal across instances and processes for equal states.
"""
from __future__ import annotations

import copy
import re
from typing import Any, Optional

import gymnasium as gym
import numpy as np

__all__ = ["VOID", "mix64", "BatchedCore", "CoreEnv", "parse_bracket_action"]

VOID = -1
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def mix64(*cols: np.ndarray) -> np.ndarray:
    """Stable 63-bit hash of integer columns (splitmix64 finalizer, folded left to right) -> int64.

    Example: mix64(np.array([1, 2])) gives two distinct non-negative int64 keys, the same in every process.
    """
    h = np.full(np.shape(cols[0]), 0x9E3779B97F4A7C15, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for c in cols:
            z = h ^ np.asarray(c).astype(np.uint64)
            z = (z ^ (z >> np.uint64(30))) * _M1
            z = (z ^ (z >> np.uint64(27))) * _M2
            h = z ^ (z >> np.uint64(31))
    return (h >> np.uint64(1)).astype(np.int64)


_BRACKET = re.compile(r"([A-Za-z_]+)\[([^\[\]\n]*)\]")


def parse_bracket_action(text: str) -> Optional[tuple[str, str]]:
    """The last ``name[argument]`` in ``text``, lower-cased name and stripped argument, or None.

    Example: "I think... move[ Left ]" -> ("move", "Left"); "hello" -> None.
    """
    if not isinstance(text, str):
        return None
    found = _BRACKET.findall(text)
    if not found:
        return None
    name, arg = found[-1]
    return name.lower(), arg.strip()


class BatchedCore:
    """N copies of an environment stepped together. Subclasses define the state arrays and dynamics.

    Everything the trainer reads (``docs/your_env.md``; ``toyrl.rollout.contract.CONTRACT``, which
    ``toyrl check-env MODULE:CLASS`` runs on a core):
    - ``__init__(num_envs, *, seed=None, **kwargs)`` calling this one, and setting the attributes ``n_actions``,
      ``task_dim``, ``max_turns``; ``obs_vocab_size`` for toy policies;
    - ``sample_tasks(rng, n)``; ``reset(tasks)``, keeping all state in ``self.state`` (``episode_state``);
      ``step(actions)`` -> obs, reward, terminated, truncated, info (``end_turn`` counts the turn; a done copy
      does not move and gets reward 0); ``state_keys()`` (``mix64`` of the canonical state);
    - ``info["success"]`` always; a per-turn signal ``info["found"]`` / ``"right"`` / ``"contains_answer"`` and
      ``info["void"]`` where the env has them;
    - toy policies: ``prompt_tokens(i)``, ``obs_tokens(i)``; text policies: ``render_text(i)``,
      ``parse_action(text, i)``, ``action_text(a, i)``;
    - read by some methods only: ``privileged(i)`` (sweet), ``answer_action(i)`` (a2tgpo), ``memo(i)``
      (bc_reasoning). ``obs()`` is read by the gymnasium wrapper only.
    """

    #: number of actions (excluding VOID)
    n_actions: int = 0
    #: width of a task row
    task_dim: int = 1

    def __init__(self, num_envs: int, seed: Optional[int] = None):
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.num_envs = num_envs
        self.np_random = np.random.default_rng(seed)
        self.state: dict[str, np.ndarray] = {}

    # ---- the episode clock every env keeps: state["turn"], state["done"] ----------------------
    def episode_state(self, **arrays: np.ndarray) -> dict:
        """The state of N fresh episodes: the env's own ``arrays`` plus the clock (turn 0, not done)."""
        N = self.num_envs
        return {**arrays, "turn": np.zeros(N, np.int64), "done": np.zeros(N, bool)}

    def end_turn(self, live: np.ndarray, terminated: np.ndarray) -> np.ndarray:
        """Count a turn for the ``live`` copies and close finished episodes; returns ``truncated``.

        truncated = live and not terminated and turn >= max_turns; done |= terminated | truncated.
        Example: live [T, T, F], terminated [T, F, F], turns [0, 4, 5] -> 5, max_turns 5 -> truncated [F, T, F].
        """
        st = self.state
        st["turn"] = st["turn"] + live
        truncated = live & ~terminated & (st["turn"] >= self.max_turns)
        st["done"] = st["done"] | terminated | truncated
        return truncated

    # ---- to implement ------------------------------------------------------------------------
    def sample_tasks(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Draw n tasks (n, task_dim) int64 from ``rng``."""
        raise NotImplementedError

    def reset(self, tasks: np.ndarray) -> np.ndarray:
        """Start every copy on its task row (N, task_dim); returns ``obs()``."""
        raise NotImplementedError

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        """Step all copies with int actions (N,) (VOID allowed) -> obs, reward, terminated, truncated, info.

        Copies already done do not move and get reward 0.
        """
        raise NotImplementedError

    def obs(self) -> np.ndarray:
        raise NotImplementedError

    def state_keys(self) -> np.ndarray:
        """(N,) int64 canonical state hash."""
        raise NotImplementedError

    def render_text(self, i: int = 0) -> str:
        raise NotImplementedError

    def parse_action(self, text: str, i: int = 0) -> Optional[int]:
        raise NotImplementedError

    def action_text(self, action: int, i: int = 0) -> str:
        """The canonical text of an action (``parse_action(action_text(a)) == a``)."""
        raise NotImplementedError

    # ---- generic -----------------------------------------------------------------------------
    def _check_actions(self, actions) -> np.ndarray:
        a = np.asarray(actions)
        if a.shape != (self.num_envs,):
            raise ValueError(f"actions must have shape (N,)=({self.num_envs},), got {a.shape}")
        if not np.issubdtype(a.dtype, np.integer):
            raise ValueError(f"actions must be integers, got dtype {a.dtype}")
        if a.size and (a.min() < VOID or a.max() >= self.n_actions):
            raise ValueError(f"actions must lie in [-1 (VOID), {self.n_actions}), got range [{a.min()}, {a.max()}]")
        return a.astype(np.int64, copy=False)

    def _check_tasks(self, tasks) -> np.ndarray:
        t = np.asarray(tasks, dtype=np.int64)
        if t.ndim == 0:
            t = t.reshape(1, 1)
        if t.ndim == 1:
            t = t[None]
        if t.shape[0] == 1 and self.num_envs > 1:
            t = np.repeat(t, self.num_envs, 0)
        if t.shape != (self.num_envs, self.task_dim):
            raise ValueError(f"tasks must have shape (N, task_dim)=({self.num_envs}, {self.task_dim}) "
                             f"or (1, {self.task_dim}), got {np.shape(tasks)}")
        return t

    @property
    def done(self) -> np.ndarray:
        return self.state["done"]

    def snapshot(self) -> dict:
        """A deep copy of the full state, the random generator included."""
        return {"state": {k: v.copy() for k, v in self.state.items()},
                "rng": copy.deepcopy(self.np_random.bit_generator.state)}

    def restore(self, snap: dict) -> None:
        """Return to a snapshot; the following steps replay exactly as they did after it."""
        n = len(next(iter(snap["state"].values())))
        if n != self.num_envs:
            raise ValueError(f"snapshot holds {n} copies, this core has num_envs={self.num_envs}")
        self.state = {k: v.copy() for k, v in snap["state"].items()}
        self.np_random.bit_generator.state = copy.deepcopy(snap["rng"])

    def row_state(self, i: int) -> dict:
        """A copy of copy i's state arrays (no random generator): a node to branch from later."""
        return {k: v[i].copy() for k, v in self.state.items()}

    def from_rows(self, states: list) -> "BatchedCore":
        """A new core whose copies start from the given ``row_state`` dicts; its random generator is
        seeded from this core's, so branches explore fresh randomness (slip, noise)."""
        if not states:
            raise ValueError("states must hold at least one row_state")
        new = copy.copy(self)
        new.num_envs = len(states)
        new.state = {k: np.stack([s[k] for s in states]) for k in states[0]}
        new.np_random = np.random.default_rng(self.np_random.integers(2**63))
        return new

    def resized(self, num_envs: int) -> "BatchedCore":
        """A core with the same settings and ``num_envs`` copies (state empty until ``reset``)."""
        new = copy.copy(self)
        new.num_envs = num_envs
        new.state = {}
        new.np_random = np.random.default_rng(self.np_random.integers(2**63))
        return new

    def fork(self, rows) -> "BatchedCore":
        """A new core whose copies are copies of ``rows`` of this one (a row may repeat: branching)."""
        rows = np.asarray(rows, dtype=np.int64)
        new = copy.copy(self)
        new.num_envs = len(rows)
        new.state = {k: v[rows].copy() for k, v in self.state.items()}
        new.np_random = np.random.default_rng(self.np_random.integers(2**63))
        return new


class CoreEnv(gym.Env):
    """gymnasium.Env over a core of one copy: reset draws a task from ``self.np_random``.

    Subclasses set ``core_cls`` and the spaces. ``step(None)`` (or VOID) is a void turn.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 4}
    core_cls: type = BatchedCore

    def __init__(self, render_mode: Optional[str] = None, **core_kwargs: Any):
        self.render_mode = render_mode
        self.core = self.core_cls(1, **core_kwargs)
        self.core.np_random = self.np_random

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        self.core.np_random = self.np_random
        task = (options or {}).get("task")
        if task is None:
            task = self.core.sample_tasks(self.np_random, 1)
        obs = self.core.reset(task)
        return self._obs(obs), self._info({})

    def step(self, action):
        a = VOID if action is None else int(action)
        obs, r, term, trunc, info = self.core.step(np.array([a], dtype=np.int64))
        return self._obs(obs), float(r[0]), bool(term[0]), bool(trunc[0]), self._info(info)

    def _obs(self, obs: np.ndarray):
        return obs[0]

    def _info(self, info: dict) -> dict:
        out = {k: (v[0].item() if isinstance(v, np.ndarray) and v.ndim == 1 and v.dtype != object
                   else v[0] if isinstance(v, np.ndarray) else v) for k, v in info.items()}
        out["state_key"] = int(self.core.state_keys()[0])
        return out

    def render(self):
        if self.render_mode == "ansi":
            return self.render_text()
        return None

    # ---- the toyrl extras --------------------------------------------------------------------
    def state_key(self) -> int:
        """Stable canonical key of the current state (equal states give equal keys)."""
        return int(self.core.state_keys()[0])

    def snapshot(self) -> dict:
        return self.core.snapshot()

    def restore(self, snap: dict) -> None:
        self.core.restore(snap)
        self.np_random = self.core.np_random

    def render_text(self) -> str:
        return self.core.render_text(0)

    def parse_action(self, text: str) -> Optional[int]:
        """The action the text names, or None for text that is no valid action (a void turn)."""
        return self.core.parse_action(text, 0)

    def action_text(self, action: int) -> str:
        return self.core.action_text(action, 0)
