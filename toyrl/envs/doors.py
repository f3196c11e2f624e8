"""Doors: a corridor of rooms, each lit in a colour that names the door out. A multi-turn task sized for a
135M-parameter LLM: short turns, a reply that must read the observation, states that recur within a group.

The rule is fixed and stated in the instruction (``SYSTEM``): colour c opens door c (red -> left, green ->
right, blue -> middle, yellow -> back). A task is the colour of each room. The right door leads to the next
room; a wrong one is locked and the agent stays, so a group of rollouts of one task keeps meeting the same
(room, colour) states at different turns: GiGPO's anchors. A policy that ignores the light passes a room
with probability 1 / colours per turn; one that reads it passes every room on its first try.

    core = DoorsCore(4, rooms=3, colours=3)
    core.reset(core.sample_tasks(np.random.default_rng(0), 4))
    core.render_text(0)          # 'Room 1 of 3: the light is blue.'
    core.parse_action("go[middle]", 0)   # 2
"""
from __future__ import annotations

from typing import Optional

import numpy as np
from gymnasium import spaces

from .core import VOID, BatchedCore, CoreEnv, mix64, parse_bracket_action

__all__ = ["DoorsCore", "DoorsEnv", "COLOURS", "DOORS", "SYSTEM", "instruction"]

COLOURS = ("red", "green", "blue", "yellow")
"""light colours; colour c opens door c"""
DOORS = ("left", "right", "middle", "back")
"""door names, as the reply writes them: go[left] ..."""


def instruction(colours: int = 3) -> str:
    """The rule and the reply format, as the chat's system message. Example (colours 2): 'Each room has a coloured
    light. A red light opens the left door, a green light the right door. Reply with one action: go[left] or
    go[right].'"""
    rule = ", ".join(f"a {COLOURS[c]} light the {DOORS[c]} door" for c in range(1, colours))
    replies = [f"go[{DOORS[c]}]" for c in range(colours)]
    return (f"Each room has a coloured light. A {COLOURS[0]} light opens the {DOORS[0]} door, {rule}. "
            f"Reply with one action: {', '.join(replies[:-1])} or {replies[-1]}.")


SYSTEM = instruction(3)
"""the instruction of the default task (3 colours), the ``system`` of a text policy's runs on it"""


class DoorsCore(BatchedCore):
    """N copies of the corridor stepped with numpy; see ``DoorsEnv`` for the rules."""

    def __init__(self, num_envs: int, *, rooms: int = 3, colours: int = 3, max_turns: Optional[int] = None,
                 void_penalty: float = 0.0, seed: Optional[int] = None):
        super().__init__(num_envs, seed)
        if rooms < 1 or not 2 <= colours <= len(COLOURS):
            raise ValueError(f"need rooms >= 1 and 2 <= colours <= {len(COLOURS)}, got rooms={rooms}, "
                             f"colours={colours}")
        self.K, self.C = int(rooms), int(colours)
        self.max_turns = int(max_turns) if max_turns is not None else 2 * rooms
        if self.max_turns < rooms:
            raise ValueError(f"max_turns must be >= rooms={rooms} (a perfect run needs one turn a room), "
                             f"got {self.max_turns}")
        self.void_penalty = float(void_penalty)
        self.n_actions = self.C
        self.task_dim = self.K

    def sample_tasks(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """(n, rooms) colour indices, uniform and independent per room."""
        return rng.integers(0, self.C, (n, self.K)).astype(np.int64)

    def reset(self, tasks: np.ndarray) -> np.ndarray:
        light = self._check_tasks(tasks)
        if light.min() < 0 or light.max() >= self.C:
            raise ValueError(f"tasks: every room's colour must lie in [0, {self.C}), got range "
                             f"[{light.min()}, {light.max()}]")
        N = self.num_envs
        self.state = self.episode_state(
            light=light.copy(),                                     # (N, K) colour of each room
            task_hash=mix64(*light.T),                              # (N,)
            room=np.zeros(N, np.int64),
            last=np.full(N, 3, np.int64))                           # feedback: 0 opened, 1 locked, 2 void, 3 none
        return self.obs()

    def step(self, actions):
        a = self._check_actions(actions)
        st, N = self.state, self.num_envs
        live = ~st["done"]
        void = live & (a == VOID)
        colour = st["light"][np.arange(N), np.minimum(st["room"], self.K - 1)]
        right = live & ~void & (a == colour)                        # colour c opens door c
        st["room"] = st["room"] + right
        st["last"] = np.where(void, 2, np.where(right, 0, 1)) * live + 3 * ~live
        success = live & (st["room"] >= self.K)
        truncated = self.end_turn(live, success)
        reward = success.astype(np.float64) - self.void_penalty * void
        return self.obs(), reward, success, truncated, {"void": void, "success": success, "right": right}

    def obs(self) -> np.ndarray:
        return self.state["room"].copy()

    def state_keys(self) -> np.ndarray:
        """(task, room): within a group (one task) the anchor state is the room, whatever the turn."""
        return mix64(self.state["task_hash"], self.state["room"])

    def light(self, i: int = 0) -> int:
        """The colour index of copy i's current room."""
        return int(self.state["light"][i, min(int(self.state["room"][i]), self.K - 1)])

    def render_text(self, i: int = 0) -> str:
        st = self.state
        note = {1: "That door is locked. ", 2: "No door opened. "}.get(int(st["last"][i]), "")
        if int(st["room"][i]) >= self.K:
            return note + "You are out."
        return note + f"Room {int(st['room'][i]) + 1} of {self.K}: the light is {COLOURS[self.light(i)]}."

    def parse_action(self, text: str, i: int = 0) -> Optional[int]:
        got = parse_bracket_action(text)
        if got is None or got[0] != "go":
            return None
        door = got[1].lower()
        return DOORS.index(door) if door in DOORS[:self.C] else None

    def action_text(self, action: int, i: int = 0) -> str:
        return f"go[{DOORS[action]}]"

    def expert_actions(self, rows: np.ndarray) -> np.ndarray:
        """The door each of ``rows`` must take: its room's colour."""
        st = self.state
        rows = np.asarray(rows)
        return st["light"][rows, np.minimum(st["room"][rows], self.K - 1)].astype(np.int64)

    def progress(self) -> np.ndarray:
        """(N,) rooms passed: how far each copy got (tree rollouts branch on it)."""
        return self.state["room"].astype(float)

    def oracle_actions(self, i: int = 0) -> list[int]:
        """A shortest successful action sequence for copy i from its current room."""
        return [int(c) for c in self.state["light"][i, int(self.state["room"][i]):]]

    # ---- token view for a small-vocabulary policy: feedback ids 0..3, room ids 4..4+K, colour ids after ----
    @property
    def obs_vocab_size(self) -> int:
        return 4 + self.K + 1 + self.C

    def prompt_tokens(self, i: int = 0) -> list[int]:
        return [4 + int(self.state["room"][i]), 5 + self.K + self.light(i)]

    def obs_tokens(self, i: int = 0) -> list[int]:
        return [int(self.state["last"][i]), 4 + int(self.state["room"][i]), 5 + self.K + self.light(i)]


class DoorsEnv(CoreEnv):
    """Walk a corridor of rooms, reading each room's light to pick the door.

    ## Description
    ``rooms`` rooms in a row, each lit in one of ``colours`` colours (drawn per task from the reset seed). Colour c
    opens door c (red: left, green: right, blue: middle, yellow: back), the rule the instruction ``SYSTEM`` states.
    The right door leads to the next room; a wrong door is locked and the agent stays where it is.

    ## Action Space
    ``Discrete(colours)``: the door. Text form ``go[left]``; ``step(None)`` is a void turn.

    ## Observation Space
    ``Discrete(rooms + 1)``: the current room (``rooms`` once out). Text: "Room 2 of 3: the light is red.", after a
    wrong door "That door is locked. Room 2 of 3: ...".

    ## Rewards
    +1 on leaving the last room; ``-void_penalty`` on a void turn.

    ## Episode End
    Terminated on leaving the last room; truncated after ``max_turns`` turns (default 2 ``rooms``).

    ## Arguments
    ``rooms=3``, ``colours=3``, ``max_turns=None``, ``void_penalty=0.0``.

    ## Version History
    - v0: first version.
    """

    core_cls = DoorsCore

    def __init__(self, render_mode: Optional[str] = None, **kwargs):
        super().__init__(render_mode, **kwargs)
        self.observation_space = spaces.Discrete(self.core.K + 1)
        self.action_space = spaces.Discrete(self.core.C)

    def _obs(self, obs):
        return int(obs[0])

