"""Tree rollouts: fork episodes at turn boundaries so sibling branches share a prefix.

Dimension legend: P tasks, G group size (the independent-rollout budget), B leaves.

Siblings that share every turn before a branch point differ only after it: the cleanest
comparison credit assignment can get. Three ways to choose where to branch, all under the token
budget that G independent episodes per task would have used:

- ``tree`` (Tree-GRPO, arXiv 2509.21240): uniformly among the turn boundaries of existing episodes.
- ``arpo`` (ARPO, arXiv 2507.19849): where the policy's entropy right after an observation rose;
  a boundary at turn k is drawn with weight clip(tau + beta * dH_k, 0, 1), dH_k = H_k - H_0, the
  entropy of the first token of turn k minus that of the episode's first turn.
- ``patr`` (PATR, process-reward-informed tree rollout; no public code, our reading): the
  boundaries whose env state a task process scorer (``demos.process_scores``) rates highest.

Each round picks ``branch`` boundaries per task, restores the env state stored there
(``Turn.state``), and plays each branch to the end with the current policy. Every leaf becomes a
row of the batch; the turns of a shared prefix are the same ``Turn`` records, so their node ids
(``TurnBatch.node``) coincide and ``tree_grpo`` / ``rtpo`` can read the tree.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from ..envs.experts import process_scores
from .flatten import to_rollout
from .play import Episode, Sampling, play, turn_grammar

__all__ = ["STRATEGIES", "tree_rollout", "branch_weights", "take_branches"]

STRATEGIES = ("tree", "arpo", "patr")


def branch_weights(episodes: list, cands: list, strategy: str, core=None, *, tau: float = 0.5,
                   beta: float = 0.2) -> np.ndarray:
    """Weights (len(cands),) of candidate boundaries (episode index, turn k) under a strategy.

    Example (arpo, tau 0.5, beta 0.2): first-token entropies 1.0 at turn 0 and 2.5 at turn k give
    weight clip(0.5 + 0.2 * 1.5, 0, 1) = 0.8.
    """
    if strategy == "tree":
        return np.ones(len(cands))
    if strategy == "arpo":
        dH = np.array([episodes[e].turns[k].entropy[0] - episodes[e].turns[0].entropy[0]
                       if episodes[e].turns[k].entropy and episodes[e].turns[0].entropy else 0.0 for e, k in cands])
        return np.clip(tau + beta * dH, 0.0, 1.0)
    if strategy == "patr":
        sub = core.from_rows([episodes[e].turns[k].state for e, k in cands])
        return process_scores(sub)
    raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")


def _pick(w: np.ndarray, n: int, strategy: str, rng: np.random.Generator) -> np.ndarray:
    if strategy == "patr":                                   # best-scored boundaries, random tie-break
        order = np.lexsort((rng.random(len(w)), -w))
        return order[np.arange(n) % len(order)]
    p = w / w.sum() if w.sum() > 0 else np.full(len(w), 1.0 / len(w))
    return rng.choice(len(w), size=n, replace=True, p=p)


def _cost(ep: Episode, k0: int = 0) -> int:
    """Tokens an episode generated from turn ``k0`` on."""
    return sum(len(t.gen) for t in ep.turns[k0:])


def take_branches(cost: np.ndarray, left: float) -> np.ndarray:
    """Which proposed branches (expected costs ``cost`` (n,), in order) a task with ``left`` budget tokens takes.

    Branches are taken in order while the budget left is at least half the next one's expected cost (its parent's
    generated tokens from the branch point on); the first that does not fit stops the task. The last decision
    rounds the spend to the nearer side of the budget, so the expected spend is the budget. Example: costs
    [10, 10, 10], left 24 -> [True, True, False] (24 -> 14 -> 4, and 4 < 10 / 2); left 26 -> all three (6 >= 5);
    costs [30, 2], left 10 -> [False, False] (the cheap second branch is not used to fill the gap).
    """
    take = np.zeros(len(cost), bool)
    for i, c in enumerate(cost):
        if left <= 0 or left < c / 2:                    # the first branch that does not fit ends the task: skipping
            break                                        # it for a cheaper one would bias the spend upwards
        take[i], left = True, left - c
    return take


@torch.no_grad()
def tree_rollout(policy, core, tasks: np.ndarray, group: np.ndarray, *, codec, group_size: int,
                 strategy: str = "tree", n_init: Optional[int] = None, branch: Optional[int] = None,
                 max_rounds: int = 16, fill: str = "rounds", rng: Optional[np.random.Generator] = None,
                 sampling: Optional[Sampling] = None, policy_version: int = 0, tau: float = 0.5,
                 beta: float = 0.2, **sampling_kw):
    """Tree rollouts for P tasks (``tasks`` (P, task_dim), ``group`` (P,)) at the token budget of
    ``group_size`` independent episodes per task. Returns a ``Rollout`` of all leaves.

    ``n_init`` chains per task start the trees (default G // 2); their mean generated tokens estimate an
    independent episode's cost, so a task's budget is G x that mean (what G independent episodes would generate,
    in expectation). Each round proposes ``branch`` branches per task (default ``n_init``); ``fill`` says how many
    are taken:

    - ``"rounds"`` (default, what the stored sweeps of lesson 7 and the claims before ``tree_budget_tokens`` ran):
      every proposed branch while the task's tokens are below the budget, so the last round overshoots by up to a
      round (on the snake 7x7, 16% over the independent arm).
    - ``"tokens"``: a branch is taken while the task's budget left is at least half its expected cost (the
      parent's generated tokens from the branch point, ``take_branches``), so the expected spend equals the
      budget; a task stops at the first proposed branch that does not fit.

    Stops after ``max_rounds``. ``sampling`` (or its fields as keywords) says how turns are sampled. ``stats``
    reports tokens used and the budget.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    if fill not in ("tokens", "rounds"):
        raise ValueError(f"fill must be 'tokens' or 'rounds', got {fill!r}")
    s = sampling if sampling is not None else Sampling(**sampling_kw)
    grammar = turn_grammar(codec, s, policy.device)
    rng = rng or np.random.default_rng(0)
    P = len(tasks)
    M = n_init or max(1, group_size // 2)
    nb = branch or M
    init = core.resized(P * M)
    init_tasks = np.repeat(np.asarray(tasks), M, 0)                            # (P*M, task_dim)
    init.reset(init_tasks)
    episodes = [Episode(codec.prompt(init, i), init_tasks[i], group=int(group[i // M])) for i in range(P * M)]
    task_of = [i // M for i in range(P * M)]
    play(policy, init, episodes, codec, s, keep_states=True, grammar=grammar)
    used = np.bincount(task_of, [_cost(ep) for ep in episodes], minlength=P).astype(float)   # (P,) tokens so far
    budget = group_size * used / M
    open_ = used < budget                                                      # (P,) tasks still filling
    rounds = 0
    while rounds < max_rounds and open_.any():
        rounds += 1
        new_eps, new_task, states = [], [], []
        for p in np.flatnonzero(open_):
            cands = [(e, k) for e, ep in enumerate(episodes) if task_of[e] == p for k in range(1, len(ep.turns))]
            if not cands:
                open_[p] = False
                continue
            w = branch_weights(episodes, cands, strategy, core, tau=tau, beta=beta)
            picks = [cands[c] for c in _pick(w, nb, strategy, rng)]
            if fill == "tokens":
                take = take_branches(np.array([_cost(episodes[e], k) for e, k in picks], float), budget[p] - used[p])
                open_[p] = bool(take.all())
                picks = [pk for pk, t in zip(picks, take) if t]
            for e, k in picks:
                parent = episodes[e]
                new_eps.append(Episode(parent.prompt, parent.task, list(parent.turns[:k]), group=parent.group))
                new_task.append((p, k))
                states.append(parent.turns[k].state)
        if not new_eps:
            break
        sub = core.from_rows(states)
        play(policy, sub, new_eps, codec, s, keep_states=True, grammar=grammar)
        for ep, (p, k) in zip(new_eps, new_task):
            used[p] += _cost(ep, k)
            task_of.append(p)
        episodes += new_eps
        if fill == "rounds":
            open_ = used < budget
    ro = to_rollout(episodes, codec, policy.device, context=s.context, grammar=grammar, temperature=s.temperature,
                    policy_version=policy_version,
                    stats={"tokens_generated": int(used.sum()), "token_budget": int(budget.sum()),
                           "tree_rounds": rounds, "leaves": len(episodes)})
    return ro
