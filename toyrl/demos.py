"""Expert demonstrations: planners for every env, a scripted token policy, shipped demo files, BC.

- Planners: BFS on GridWorld (replanned from the current cell, so it also acts under slip), the
  good arm on BanditChain, the reference solution on MockSearch. ``expert_actions(core)`` gives
  the planner's action for every copy at once.
- ``ScriptedPolicy`` writes the codec's canonical turn of each chosen action, behind the same
  ``generate`` interface as a learned policy, so ``rollout`` turns demonstrations into TurnBatches.
- ``write_demos`` / ``load_demos`` ship JSON-lines transcripts in ``data/demos/`` (task, actions,
  and the text of every turn, for text-level policies too); ``bc_loss`` is the behaviour-cloning NLL.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import torch

from .envs import make_core
from .envs.core import VOID, BatchedCore
from .envs.gridworld import HOLE, GridCore, goal_distance, neighbours
from .envs.bandit_chain import BanditCore
from .envs.mock_search import SearchCore, oracle_actions

__all__ = ["expert_actions", "process_scores", "ScriptedPolicy", "write_demos", "load_demos", "DEMO_DIR", "DEMO_CONFIGS",
           "bc_loss"]

DEMO_DIR = Path(__file__).resolve().parents[1] / "data" / "demos"
# the env settings the shipped demonstration files were made with
DEMO_CONFIGS = {
    "gridworld": {"size": 4},
    "bandit_chain": {"layout_seed": 0},
    "mock_search": {},
}


def expert_actions(core: BatchedCore, rows: Optional[np.ndarray] = None) -> np.ndarray:
    """The planner's action for each of ``rows`` (default all copies) -> (len(rows),) int64."""
    rows = np.arange(core.num_envs) if rows is None else np.asarray(rows)
    st = core.state
    if isinstance(core, GridCore):
        out = np.empty(len(rows), np.int64)
        nxt = neighbours(core.size)[:4]                             # (4, n*n)
        for j, i in enumerate(rows):
            dist = goal_distance(st["tiles"][i], core.size)
            d = dist[nxt[:, st["pos"][i]]]                          # (4,) distance after each move
            d = np.where(st["tiles"][i][nxt[:, st["pos"][i]]] == HOLE, 10**7, d)
            out[j] = int(np.argmin(d))
        return out
    if isinstance(core, BanditCore):
        good = st["good"][rows].reshape(len(rows), core.K, core.M)
        stage = np.minimum(st["stage"][rows], core.K - 1)
        return good[np.arange(len(rows)), stage].argmax(1).astype(np.int64)
    if isinstance(core, SearchCore):
        return np.array([oracle_actions(core, int(i))[0] for i in rows], dtype=np.int64)
    raise ValueError(f"no planner for core {type(core).__name__}")


def process_scores(core: BatchedCore) -> np.ndarray:
    """A task process scorer (higher = closer to success) for every copy -> (N,) float.

    GridWorld: minus the BFS distance to the goal (-100 in a hole); BanditChain: the stage;
    MockSearch: the fraction of the lookup chain retrieved. What PATR-style tree rollouts branch on.
    """
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


@dataclass
class _Gen:
    tokens: torch.Tensor
    logp: torch.Tensor
    entropy: torch.Tensor
    mask: torch.Tensor


class ScriptedPolicy:
    """A token policy that plays ``choose(core, live_rows) -> actions``: each turn is the codec's
    canonical reply of the chosen action (``codec.action_ids``: END + action token for the toy
    codec, the action's text for text codecs; EOT / EOS for VOID).

    It follows the rollout's convention that ``generate`` is called for the copies not yet done,
    in order, and tells a ``constraint`` (the turn grammar) what it wrote, so its tokens carry their
    grammar states like sampled ones. Log-probs and entropies are 0 (the behaviour is deterministic).
    """

    def __init__(self, core: BatchedCore, codec, choose: Callable = expert_actions, device="cpu"):
        self.core, self.codec, self.choose, self._device = core, codec, choose, torch.device(device)
        self.vocab_size = codec.size

    @property
    def device(self) -> torch.device:
        return self._device

    def generate(self, context, context_mask, max_new, temperature=1.0, *, constraint=None, **kw):
        live = np.flatnonzero(~self.core.done)
        tokens, mask = self.turn_tokens(np.asarray(self.choose(self.core, live)), live, max_new)   # (n, M)
        zeros = torch.zeros(tokens.shape, device=self.device)
        if constraint is not None:
            for t in range(max_new):
                constraint.advance(tokens[:, t], None, mask[:, t])
        return _Gen(tokens, zeros, zeros.clone(), mask)

    def turn_tokens(self, act: np.ndarray, rows: np.ndarray, max_new: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The tokens (n, M) and mask of the turns that play ``act`` (right-padded, cut at ``max_new``)."""
        seqs = [self.codec.action_ids(self.core, int(a), int(i))[:max_new] for a, i in zip(act, rows)]
        tokens = torch.full((len(seqs), max_new), self.codec.PAD, dtype=torch.long)   # (n, M)
        mask = torch.zeros(len(seqs), max_new, dtype=torch.bool)
        for j, s in enumerate(seqs):
            tokens[j, :len(s)] = torch.tensor(s, dtype=torch.long)
            mask[j, :len(s)] = True
        return tokens.to(self.device), mask.to(self.device)


def replay_chooser(actions: list[list[int]]) -> Callable:
    """A chooser that replays fixed action lists (one per copy), turn by turn."""

    def choose(core, rows):
        k = int(core.state["turn"][rows[0]]) if len(rows) else 0
        return np.array([actions[i][k] if k < len(actions[i]) else VOID for i in rows], dtype=np.int64)
    return choose


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


def bc_loss(logp: torch.Tensor, policy_mask: torch.Tensor) -> torch.Tensor:
    """Behaviour cloning: mean negative log-likelihood of the expert's policy tokens.

        L_BC = - sum_{i,t} m_{i,t} log pi(y_{i,t} | y_{i,<t}) / sum_{i,t} m_{i,t}

    Example: logp [[-1., -3.]] with mask [[1, 1]] -> 2.0.
    """
    m = policy_mask.to(logp.dtype)
    return -(logp * m).sum() / m.sum().clamp(min=1)
