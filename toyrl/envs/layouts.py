"""GridWorld's map families: the drawn shape of a lake, one builder per layout (``GridCore(layout=...)``).

Every builder returns an (n*n,) int64 tile row (``FROZEN``, ``HOLE``, ``GOAL``, ``START``) of one task; a layout
draws its variant per task (``variants(layout, n)`` of them, ``build(layout, n, v)``), so the G rollouts of a group
share one map and a deterministic reset. Two families:

- memory tasks, read under a blind context: ``tmaze_map`` (the goal side is a cue used at the end),
  ``cross_map`` (three exits), ``doors_map`` (a hallway of doors);
- long-horizon credit tasks, read with the map in view: ``snake_map`` (one winding corridor whose
  length grows as n^2 / 2; every side step is fatal, so an episode that fails fails at one turn and every turn
  before it was right) and ``fork_map`` (the first turn picks one of two long corridors; the wrong one ends in a
  hole n - 1 turns later).

Random lakes (``gridworld.random_map``) need the BFS of ``gridworld`` and live there.
"""
from __future__ import annotations

import numpy as np

__all__ = ["FROZEN", "HOLE", "GOAL", "START", "TILE_CHARS", "LAYOUTS", "tmaze_map", "cross_map", "doors_map",
           "snake_map", "fork_map", "variants", "build", "check_size"]

FROZEN, HOLE, GOAL, START = 0, 1, 2, 3
TILE_CHARS = "FHGS"

LAYOUTS = ("random", "tmaze", "cross", "doors", "snake", "fork")
"""how ``GridCore`` draws maps: random lakes, T-mazes whose goal side is the cue, crossings with three exits, a
hallway of doors one of which is the goal (the cue), a winding corridor (snake) or a fork of two corridors"""

def tmaze_map(n: int, side: int) -> np.ndarray:
    """An n x n T-maze (n odd, >= 3) -> (n*n,) tiles: a corridor down the middle column from S (top) to the
    bottom row, which is ice from wall to wall; G at the bottom-left corner (``side`` 0) or bottom-right
    (``side`` 1), a hole at the other corner, holes everywhere else. Any step off the corridor falls in, so
    the agent's cell never records the cue: after turn 0 it survives only in what the agent wrote.
    Optimal length (n - 1) + (n - 1) / 2. Example: n=3, side=1 -> ["HSH", "HFH", "HFG"].
    """
    if n < 3 or n % 2 == 0:
        raise ValueError(f"a T-maze needs an odd size >= 3, got size={n}")
    if side not in (0, 1):
        raise ValueError(f"side must be 0 (goal bottom-left) or 1 (bottom-right), got {side!r}")
    tiles = np.full((n, n), HOLE, dtype=np.int64)
    c = n // 2
    tiles[:, c] = FROZEN
    tiles[n - 1, 1:n - 1] = FROZEN
    tiles[0, c] = START
    tiles[n - 1, (0, n - 1)[side]] = GOAL
    return tiles.reshape(-1)


def cross_map(n: int, exit: int) -> np.ndarray:
    """An n x n crossing (n odd, >= 5) -> (n*n,) tiles: a corridor down the middle column from S (top) to a
    junction at row n - 2 with three exits one step away: left, down and right (``exit`` 0, 1, 2, as the action
    ids 0, 1, 2); one exit is G, the other two holes; holes everywhere else. Like the T-maze the cue is used once,
    at the junction, after n - 2 turns of carrying it; unlike it, a policy that forgets wins 1/3 of the time at
    best, below half of a policy that remembers. Optimal length n - 1. Example: n=5, exit=2 ->
    ["HHSHH", "HHFHH", "HHFHH", "HHFGH", "HHHHH"].
    """
    if n < 5 or n % 2 == 0:
        raise ValueError(f"a crossing needs an odd size >= 5, got size={n}")
    if exit not in (0, 1, 2):
        raise ValueError(f"exit must be 0 (left), 1 (down) or 2 (right), got {exit!r}")
    tiles = np.full((n, n), HOLE, dtype=np.int64)
    c = n // 2
    tiles[:n - 1, c] = FROZEN
    tiles[0, c] = START
    tiles[((n - 2, c - 1), (n - 1, c), (n - 2, c + 1))[exit]] = GOAL
    return tiles.reshape(-1)


def doors_map(n: int, door: int) -> np.ndarray:
    """An n x n hallway of doors (n odd, >= 5) -> (n*n,) tiles: a corridor down the middle column from S (top)
    to a hallway (row n - 2, ice from wall to wall); below it, row n - 1 holds n - 1 doors (every column but the
    middle one, which is a hole), the ``door``-th of them (0-based, left to right) G and the others holes; holes
    everywhere else. The door is seen at turn 0 only under a blind context; a policy that forgets it opens the
    right one with probability 1 / (n - 1) at best. Optimal length (n - 2) + |column - n // 2| + 1.
    Example: n=5, door=2 -> ["HHSHH", "HHFHH", "HHFHH", "FFFFF", "HHHGH"].
    """
    if n < 5 or n % 2 == 0:
        raise ValueError(f"a hallway of doors needs an odd size >= 5, got size={n}")
    if not 0 <= door < n - 1:
        raise ValueError(f"door must lie in [0, {n - 1}) for size {n}, got {door!r}")
    tiles = np.full((n, n), HOLE, dtype=np.int64)
    c = n // 2
    tiles[:n - 1, c] = FROZEN
    tiles[n - 2, :] = FROZEN
    tiles[0, c] = START
    tiles[n - 1, door + (door >= c)] = GOAL
    return tiles.reshape(-1)


def snake_map(n: int, mirror: int = 0) -> np.ndarray:
    """An n x n winding corridor (n odd, >= 3) -> (n*n,) tiles: the even rows are ice from wall to wall, each odd row
    has one ice cell at alternating ends (row 1 at the far end, row 3 at the near end, ...), holes elsewhere; S at
    the start of row 0, G at the end of the last row. ``mirror`` 1 flips it left-right (S top-right). The path is
    the only way: every step off it is a fall, and a bump into the outer wall keeps the agent in place.
    Optimal length (n + 1) / 2 * n + (n - 1) / 2 - 1 (n=5: 16, n=7: 30, n=9: 48).
    Example: n=3 -> ["SFF", "HHF", "GFF"].
    """
    if n < 3 or n % 2 == 0:
        raise ValueError(f"a snake needs an odd size >= 3, got size={n}")
    if mirror not in (0, 1):
        raise ValueError(f"mirror must be 0 (start top-left) or 1 (top-right), got {mirror!r}")
    tiles = np.full((n, n), HOLE, dtype=np.int64)
    tiles[0::2, :] = FROZEN
    for r in range(1, n, 2):
        tiles[r, n - 1 if r % 4 == 1 else 0] = FROZEN               # the turn: far end, then near end
    tiles[0, 0] = START
    last = n - 1
    tiles[last, n - 1 if (last // 2) % 2 == 0 else 0] = GOAL
    return (tiles[:, ::-1] if mirror else tiles).reshape(-1).copy()


def fork_map(n: int, side: int) -> np.ndarray:
    """An n x n fork (n odd, >= 5) -> (n*n,) tiles: S in the middle of row 0, which is ice from wall to wall; two
    corridors run down the outer columns to the bottom row, where one ends in G (``side`` 0 left, 1 right) and
    the other in a hole; holes elsewhere. The first moves choose the corridor; the choice is paid for n - 1 turns
    later (a way back exists: up the corridor and across row 0). Optimal length (n - 1) / 2 + (n - 1).
    Example: n=5, side=1 -> ["FFSFF", "FHHHF", "FHHHF", "FHHHF", "HHHHG"].
    """
    if n < 5 or n % 2 == 0:
        raise ValueError(f"a fork needs an odd size >= 5, got size={n}")
    if side not in (0, 1):
        raise ValueError(f"side must be 0 (goal bottom-left) or 1 (bottom-right), got {side!r}")
    tiles = np.full((n, n), HOLE, dtype=np.int64)
    tiles[0, :] = FROZEN
    tiles[:n - 1, 0] = tiles[:n - 1, n - 1] = FROZEN
    tiles[0, n // 2] = START
    tiles[n - 1, (0, n - 1)[side]] = GOAL
    return tiles.reshape(-1)


_BUILD = {"tmaze": (tmaze_map, 3, lambda n: 2), "cross": (cross_map, 5, lambda n: 3),
          "doors": (doors_map, 5, lambda n: n - 1), "snake": (snake_map, 3, lambda n: 2),
          "fork": (fork_map, 5, lambda n: 2)}


def check_size(layout: str, n: int) -> None:
    """Raise a ValueError unless ``layout`` is known and, for a structured one, ``n`` is odd and large enough."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if layout != "random" and (n < _BUILD[layout][1] or n % 2 == 0):
        raise ValueError(f"layout={layout!r} needs an odd size >= {_BUILD[layout][1]}, got size={n}")


def variants(layout: str, n: int) -> int:
    """How many distinct maps a structured layout has at size n (tmaze 2, cross 3, doors n - 1, snake 2, fork 2)."""
    return _BUILD[layout][2](n)


def build(layout: str, n: int, v: int) -> np.ndarray:
    """The v-th map (0 <= v < ``variants``) of a structured layout at size n -> (n*n,) tiles."""
    return _BUILD[layout][0](n, int(v))
