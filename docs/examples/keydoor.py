"""KeyDoor: fetch the key, then open the door. A complete toyrl env in one file (docs/your_env.md).

A corridor of ``rooms`` rooms. The key lies in a room drawn per task; the door is in the last room. The agent
starts in room 0 and may move left, move right, pick up, or open. Opening the door while holding the key in
the last room succeeds (reward 1); anything else costs nothing but a turn.

    toyrl check-env keydoor:KeyDoorCore
    toyrl train --import keydoor --env keydoor --estimator gigpo --steps 20
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from toyrl.envs import VOID, BatchedCore, mix64, register_env
from toyrl.envs.core import parse_bracket_action

ACTIONS = ("left", "right", "pick", "open")


class KeyDoorCore(BatchedCore):
    """N KeyDoor corridors stepped together with numpy.

    Task: the key's room (one int). State: room, has_key. Rewards: 1 on opening the door with the key.
    Episode end: success, or ``max_turns`` turns (default 2 * rooms + 2). info: ``success``; ``found`` marks the
    turn that picked the key up (the per-turn signal MT-GRPO reads).
    """

    def __init__(self, num_envs: int, *, rooms: int = 4, max_turns: Optional[int] = None, seed: Optional[int] = None):
        super().__init__(num_envs, seed)
        if rooms < 2:
            raise ValueError(f"rooms must be >= 2, got {rooms}")
        self.rooms = rooms
        self.n_actions = len(ACTIONS)
        self.task_dim = 1
        self.max_turns = int(max_turns) if max_turns is not None else 2 * rooms + 2

    def sample_tasks(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.integers(1, self.rooms, (n, 1)).astype(np.int64)          # the key is never in room 0

    def reset(self, tasks: np.ndarray) -> np.ndarray:
        t = self._check_tasks(tasks)
        self.state = self.episode_state(key=t[:, 0].copy(), room=np.zeros(self.num_envs, np.int64),
                                        has_key=np.zeros(self.num_envs, bool))
        return self.obs()

    def step(self, actions):
        a = self._check_actions(actions)
        st = self.state
        live = ~st["done"]
        moved = np.where(a == 0, -1, np.where(a == 1, 1, 0)) * live
        st["room"] = np.clip(st["room"] + moved, 0, self.rooms - 1)
        found = live & (a == 2) & ~st["has_key"] & (st["room"] == st["key"])
        st["has_key"] = st["has_key"] | found
        success = live & (a == 3) & st["has_key"] & (st["room"] == self.rooms - 1)
        truncated = self.end_turn(live, success)
        info = {"success": success, "found": found, "void": live & (a == VOID)}
        return self.obs(), success.astype(np.float64), success, truncated, info

    def obs(self) -> np.ndarray:
        return np.stack([self.state["room"], self.state["has_key"]], 1)

    def state_keys(self) -> np.ndarray:
        st = self.state
        return mix64(st["key"], st["room"], st["has_key"])

    # the token view of the toy policy: rooms 0..R-1, then "no key" R and "key" R + 1
    @property
    def obs_vocab_size(self) -> int:
        return self.rooms + 2

    def prompt_tokens(self, i: int = 0) -> list:
        return [int(self.state["key"][i]), int(self.state["room"][i])]

    def obs_tokens(self, i: int = 0) -> list:
        return [int(self.state["room"][i]), self.rooms + int(self.state["has_key"][i])]

    # the text view of language-model policies
    def render_text(self, i: int = 0) -> str:
        st = self.state
        key = "You hold the key." if st["has_key"][i] else f"The key is in room {int(st['key'][i])}."
        return (f"Room {int(st['room'][i])} of {self.rooms}; the door is in room {self.rooms - 1}. {key} "
                "Actions: move[left], move[right], pick[], open[].")

    def parse_action(self, text: str, i: int = 0) -> Optional[int]:
        got = parse_bracket_action(text)
        if got is None:
            return None
        name, arg = got
        if name == "move" and arg.lower() in ("left", "right"):
            return ACTIONS.index(arg.lower())
        return ACTIONS.index(name) if name in ("pick", "open") else None

    def action_text(self, action: int, i: int = 0) -> str:
        return f"move[{ACTIONS[action]}]" if action < 2 else f"{ACTIONS[action]}[]"


register_env("keydoor", KeyDoorCore)
