"""GridWorld: a FrozenLake-like N x N lake with holes, a goal, optional slip, many copies at once.

The "state grouping" environment: rollouts of one map pass through the same cells again and
again, so GiGPO's anchor states are plentiful, and a slip probability dials in stochasticity.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
from gymnasium import spaces

from .core import VOID, BatchedCore, CoreEnv, mix64, parse_bracket_action
from .layouts import FROZEN, GOAL, HOLE, START, TILE_CHARS, build, check_size, variants

__all__ = ["MAPS", "GridCore", "GridWorldEnv", "random_map", "map_to_array", "neighbours", "shortest_path",
           "goal_distance"]

LEFT, DOWN, RIGHT, UP = 0, 1, 2, 3
ACTION_NAMES = ("left", "down", "right", "up")
_DROW = np.array([0, 1, 0, -1])
_DCOL = np.array([-1, 0, 1, 0])

MAPS = {
    "4x4": ["SFFF", "FHFH", "FFFH", "HFFG"],
    "5x5": ["SFFFF", "FHFHF", "FFFHF", "HFFFF", "FFHFG"],
    "8x8": ["SFFFFFFF", "FFFFFFFF", "FFFHFFFF", "FFFFFHFF",
            "FFFHFFFF", "FHHFFFHF", "FHFFHFHF", "FFFHFFFG"],
}


def map_to_array(rows: list[str]) -> np.ndarray:
    """A map as strings ("SFFF", ...) -> (n*n,) int64 tiles."""
    return np.array([TILE_CHARS.index(c) for c in "".join(rows)], dtype=np.int64)


def neighbours(n: int) -> np.ndarray:
    """(5, n*n) next cell of each action from each cell (walls keep the agent in place); row 4 = VOID.
    Example: n=2 -> left [0, 0, 2, 2], down [2, 3, 2, 3], right [1, 1, 3, 3], up [0, 1, 0, 1], VOID [0, 1, 2, 3]."""
    cell = np.arange(n * n)
    r, c = cell // n, cell % n
    out = np.empty((5, n * n), dtype=np.int64)
    for a in range(4):
        rr = np.clip(r + _DROW[a], 0, n - 1)
        cc = np.clip(c + _DCOL[a], 0, n - 1)
        out[a] = rr * n + cc
    out[4] = cell
    return out


def shortest_path(tiles: np.ndarray, n: int, start: Optional[int] = None) -> Optional[list[int]]:
    """BFS to G avoiding holes on a deterministic map, from ``start`` (default the S cell) -> list of actions,
    or None if unreachable."""
    nxt = neighbours(n)
    start = int(np.flatnonzero(tiles == START)[0]) if start is None else int(start)
    goal = int(np.flatnonzero(tiles == GOAL)[0])
    if start == goal:
        return []
    prev = {start: None}
    frontier = [start]
    while frontier:
        new = []
        for s in frontier:
            for a in range(4):
                t = int(nxt[a, s])
                if t in prev or tiles[t] == HOLE:
                    continue
                prev[t] = (s, a)
                if t == goal:
                    path = []
                    while prev[t] is not None:
                        t, a_ = prev[t]
                        path.append(a_)
                    return path[::-1]
                new.append(t)
        frontier = new
    return None


def goal_distance(tiles: np.ndarray, n: int) -> np.ndarray:
    """(n*n,) BFS distance of every cell to the goal, walking around holes (the planner's value on a
    deterministic map):

        d(G) = 0,   d(c) = 1 + min_a d(next(c, a))  for a frozen or start cell c

    Holes, and cells from which no path avoids them, keep 10**6. Example: map ["SF", "HG"] ->
    [2, 1, 1000000, 0] (S goes right then down; the hole has no distance).
    """
    tiles = np.asarray(tiles)
    if tiles.shape != (n * n,):
        raise ValueError(f"tiles must have shape ({n * n},) for an n={n} map, got {tiles.shape}")
    nxt = neighbours(n)[:4]
    dist = np.full(n * n, 10**6)
    dist[tiles == GOAL] = 0
    for _ in range(n * n):
        via = dist[nxt].min(0) + 1                                  # best neighbour + 1, (n*n,)
        new = np.where((tiles == HOLE) | (tiles == GOAL), dist, np.minimum(dist, via))
        if (new == dist).all():
            break
        dist = new
    return dist

def random_map(rng: np.random.Generator, n: int = 4, p_frozen: float = 0.8) -> np.ndarray:
    """Draw an n x n map with S top-left and G bottom-right, redrawn until G is reachable -> (n*n,)."""
    while True:
        tiles = np.where(rng.random(n * n) < p_frozen, FROZEN, HOLE)
        tiles[0], tiles[-1] = START, GOAL
        if shortest_path(tiles, n) is not None:
            return tiles.astype(np.int64)


class GridCore(BatchedCore):
    """N GridWorld copies stepped with numpy; see ``GridWorldEnv`` for the rules."""

    def __init__(self, num_envs: int, *, size: int = 4, map_name: Optional[str] = None, slip: float = 0.0,
                 max_turns: Optional[int] = None, p_frozen: float = 0.8, void_penalty: float = 0.0,
                 layout: str = "random", seed: Optional[int] = None):
        super().__init__(num_envs, seed)
        if layout != "random" and map_name is not None:
            raise ValueError(f"layout={layout!r} draws its own maps: it takes no map_name, got map_name={map_name!r}")
        check_size(layout, size)
        self.layout = layout
        if map_name is not None:
            if map_name not in MAPS:
                raise ValueError(f"map_name must be one of {sorted(MAPS)}, got {map_name!r}")
            size = len(MAPS[map_name])
        if size < 2:
            raise ValueError(f"size must be >= 2, got {size}")
        if not 0.0 <= slip <= 1.0:
            raise ValueError(f"slip must lie in [0, 1], got {slip}")
        self.size, self.map_name, self.slip, self.p_frozen = size, map_name, float(slip), p_frozen
        self.max_turns = int(max_turns) if max_turns is not None else 2 * size * size
        self.void_penalty = float(void_penalty)
        self.n_actions = 4
        self.task_dim = size * size
        self._next = neighbours(size)                                   # (5, n*n)
        self._fixed = map_to_array(MAPS[map_name]) if map_name else None

    def sample_tasks(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self._fixed is not None:
            return np.repeat(self._fixed[None], n, 0)                     # (n, n*n)
        if self.layout != "random":                                       # a structured layout: its variant per task
            return np.stack([build(self.layout, self.size, v) for v in rng.integers(0, variants(self.layout, self.size), n)])
        return np.stack([random_map(rng, self.size, self.p_frozen) for _ in range(n)])

    def reset(self, tasks: np.ndarray) -> np.ndarray:
        tiles = self._check_tasks(tasks)
        if not ((tiles == START).sum(1) == 1).all() or not ((tiles == GOAL).sum(1) == 1).all():
            raise ValueError("tasks: every map needs exactly one S (3) and one G (2) tile")
        N = self.num_envs
        self.state = self.episode_state(
            tiles=tiles.copy(),                                           # (N, n*n)
            map_hash=mix64(*tiles.T),                                     # (N,)
            pos=np.argmax(tiles == START, 1).astype(np.int64))            # (N,)
        return self.obs()

    def step(self, actions):
        a = self._check_actions(actions)
        st, N = self.state, self.num_envs
        live = ~st["done"]
        move = np.where(a == VOID, 4, a)
        if self.slip > 0:
            slipped = (self.np_random.random(N) < self.slip) & (move < 4)
            side = np.where(self.np_random.random(N) < 0.5, 1, 3)        # perpendicular turn
            move = np.where(slipped, (move + side) % 4, move)
        new = self._next[move, st["pos"]]
        new = np.where(live, new, st["pos"])
        tile = st["tiles"][np.arange(N), new]
        st["pos"] = new
        goal = live & (tile == GOAL)
        terminated = live & ((tile == GOAL) | (tile == HOLE))
        truncated = self.end_turn(live, terminated)
        void = live & (a == VOID)
        reward = goal.astype(np.float64) - self.void_penalty * void
        info = {"void": void, "success": goal}
        return self.obs(), reward, terminated, truncated, info

    def obs(self) -> np.ndarray:
        return self.state["pos"].copy()

    def state_keys(self) -> np.ndarray:
        return mix64(self.state["map_hash"], self.state["pos"])

    def memo(self, i: int = 0) -> list[int]:
        """What copy i must carry forward when it cannot see its map again (a blind context), as action ids:
        on a T-maze the side of the goal ([0] left or [2] right: the cue), at a crossing the exit to take (its
        action id: 0 left, 1 down, 2 right), in a hallway of doors the goal door's index; on other maps the
        shortest route from the current cell (the remaining plan). Example: T-maze with the goal bottom-right ->
        [2]; doors with the goal at column 4 of 5 -> [3]."""
        tiles, n = self.state["tiles"][i], self.size
        if self.layout == "tmaze":
            return [LEFT if tiles[n * (n - 1)] == GOAL else RIGHT]
        if self.layout == "cross":
            j = n * (n - 2) + n // 2                                    # the junction
            return [{j - 1: LEFT, j + n: DOWN, j + 1: RIGHT}[int(np.flatnonzero(tiles == GOAL)[0])]]
        if self.layout == "doors":
            col = int(np.flatnonzero(tiles[n * (n - 1):] == GOAL)[0])
            return [col - (col > n // 2)]
        return shortest_path(tiles, n, int(self.state["pos"][i])) or []

    # ---- token view for a small-vocabulary policy: tile ids 0..3, then cell ids 4..4+n*n-1 ----
    @property
    def obs_vocab_size(self) -> int:
        return 4 + self.size * self.size

    def prompt_tokens(self, i: int = 0) -> list[int]:
        """The map (n*n tile ids) followed by the start cell."""
        return self.state["tiles"][i].tolist() + [4 + int(self.state["pos"][i])]

    def obs_tokens(self, i: int = 0) -> list[int]:
        """The cell the agent is in after the turn."""
        return [4 + int(self.state["pos"][i])]

    def render_text(self, i: int = 0) -> str:
        n, st = self.size, self.state
        chars = [TILE_CHARS[t] for t in st["tiles"][i]]
        chars[st["pos"][i]] = "A"
        rows = ["".join(chars[r * n:(r + 1) * n]) for r in range(n)]
        r, c = divmod(int(st["pos"][i]), n)
        return (f"Lake {n}x{n} (S start, F ice, H hole, G goal, A you):\n" + "\n".join(rows)
                + f"\nYou are at row {r}, column {c}. Turn {int(st['turn'][i])} of {self.max_turns}.")

    def parse_action(self, text: str, i: int = 0) -> Optional[int]:
        got = parse_bracket_action(text)
        if got is None or got[0] != "move" or got[1].lower() not in ACTION_NAMES:
            return None
        return ACTION_NAMES.index(got[1].lower())

    def action_text(self, action: int, i: int = 0) -> str:
        return f"move[{ACTION_NAMES[action]}]"


class GridWorldEnv(CoreEnv):
    """Cross a frozen lake from the start (top left) to the goal (bottom right) without falling in a hole.

    ## Description
    An N x N grid of ice (F), holes (H), a start (S) and a goal (G), as in gymnasium's FrozenLake.
    Maps are drawn from the reset seed (each redrawn until the goal is reachable) or fixed by
    ``map_name``. With probability ``slip`` a move goes to one of the two perpendicular directions.

    ## Action Space
    ``Discrete(4)``: 0 left, 1 down, 2 right, 3 up. Text form ``move[left]``; ``step(None)`` is a void
    turn (unparseable text): the agent stays and pays ``void_penalty``.

    ## Observation Space
    ``Discrete(N*N)``: the agent's cell ``row * N + col``. ``render_text()`` draws the map. The map is
    in the prompt only: a policy whose context drops the prompt after turn 0 (``context="blind"``)
    must carry what it needs in its own reasoning (``memo()`` says what that is).

    ## Rewards
    +1 on reaching the goal, 0 otherwise (sparse); ``-void_penalty`` on a void turn.

    ## Episode End
    Terminated on reaching the goal or a hole; truncated after ``max_turns`` turns (default 2 N^2).

    ## Arguments
    ``size=4`` (N), ``map_name=None`` (one of ``MAPS``: "4x4", "5x5", "8x8"), ``slip=0.0``,
    ``max_turns=None``, ``p_frozen=0.8`` (ice probability of drawn maps), ``void_penalty=0.0``,
    ``layout="random"``: the map family (``toyrl.envs.layouts``), drawn per task so a group shares one map:
    - ``"tmaze"``: an odd-sized T-maze whose goal corner, left or right, is shown only in the map: a cue to
      remember down a corridor where any side step is a hole; optimal length 1.5 (N - 1); a policy that forgets
      the cue wins half the time at best;
    - ``"cross"``: the same corridor ending in a junction with three exits, one the goal; optimal length N - 1; a
      policy that forgets wins 1/3 at best;
    - ``"doors"``: a hallway of N - 1 doors below a corridor, one of them the goal; a policy that forgets which
      wins 1 / (N - 1) of the time at best;
    - ``"snake"``: one winding corridor (even rows ice, odd rows one cell at alternating ends), mirrored per task;
      optimal length (N + 1) / 2 N + (N - 1) / 2 - 1 (16, 30, 48 at N = 5, 7, 9) and no shorter way, so the
      horizon stays long after learning; every side step is fatal, so a failed episode holds only right turns
      before its one fatal turn (what a trajectory-level advantage misjudges);
    - ``"fork"``: row 0 leads from S (middle) to two corridors down the outer columns, one ending in G and one in
      a hole; optimal length 1.5 (N - 1); the first moves choose the corridor, and the choice is paid for N - 1
      turns later.

    ## Version History
    - v0: first version (``layout``, its families and ``memo()`` added later; random lakes unchanged).
    """

    core_cls = GridCore

    def __init__(self, render_mode: Optional[str] = None, **kwargs):
        super().__init__(render_mode, **kwargs)
        n = self.core.size
        self.observation_space = spaces.Discrete(n * n)
        self.action_space = spaces.Discrete(4)

    def _obs(self, obs):
        return int(obs[0])
