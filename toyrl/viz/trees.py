"""Trees and exploration (notebook 7): Tree-GRPO, ARPO, PATR and T2PO at an equal token budget.

Dimension legend: B leaves (rows), H turns, P tasks, G group size, S seeds, N steps.

``TrainConfig(rollout="tree" | "arpo" | "patr")`` replaces G independent episodes per task by a
tree per task grown until it has generated as many tokens as G independent episodes would have
(``toyrl.tree.tree_rollout``); siblings share a prefix, so their comparison isolates the turns
after the branch point. ``t2po_eta`` regenerates turns whose uncertainty stalled (T2PO), which
spends extra tokens. The turns of a shared prefix carry one node id (``TurnBatch.node``), which is
all ``tree_edges`` needs to draw the tree.

Precompute the learning curves: ``python -m toyrl.viz.trees`` (writes data/runs/trees/curves.json).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from ..train import TrainConfig, Trainer
from .prototype import arms_figure, sweep_precompute

__all__ = ["grid_config", "tree_arms", "budget_table", "tree_edges", "tree_layout", "leaf_outcomes", "draw_tree",
           "sample_tree", "tree_panel", "plot_tree_panel", "tree_curve_panel", "precompute", "KEYS", "SETTING",
           "TREE_SETTING"]

KEYS = ("reward_mean", "success_rate", "tokens_generated", "batch_size", "turns_per_episode")
SETTING = "GridWorld 4x4, P=4 x G=8 token budget"
"""the setting of the sweep (``tree_arms``), named in its learning-curve titles"""
TREE_SETTING = "GridWorld 4x4, untrained policy, G=8 token budget"
"""the setting of ``sample_tree``'s batches, named in the tree figures' titles"""


def grid_config(rollout: str = "independent", *, estimator: str = "grpo", steps: int = 30, seed: int = 0,
                prompts_per_step: int = 4, **kw) -> TrainConfig:
    """GridWorld 4x4 (16 turns at most), G = 8 per task: the budget every arm is held to."""
    return TrainConfig(env="gridworld", env_kwargs={"map_name": "4x4", "max_turns": 16}, rollout=rollout,
                       estimator=estimator, prompts_per_step=prompts_per_step, group_size=8, steps=steps,
                       seed=seed, progress=False, **kw)


def tree_arms(steps: int = 30, eta: float = 0.3) -> dict:
    """Independent GRPO, Tree-GRPO, ARPO and PATR (GRPO on tree leaves), and T2PO resampling (eta)."""
    return {
        "independent (GRPO)": grid_config(steps=steps),
        "Tree-GRPO": grid_config("tree", estimator="tree_grpo", steps=steps),
        "ARPO": grid_config("arpo", steps=steps),
        "PATR": grid_config("patr", steps=steps),
        f"T2PO eta={eta}": grid_config(steps=steps, t2po_eta=eta),
    }


def budget_table(arms: dict, n_batches: int = 1) -> dict:
    """Tokens generated, leaves (rows) and turns per batch of each arm's first ``n_batches`` samples.

    Returns {arm: {"tokens": mean tokens per batch, "rows": mean rows, "turns": mean turns per row}}.
    """
    out = {}
    for name, cfg in arms.items():
        tr = Trainer(replace(cfg, steps=0))
        tok, rows, turns = [], [], []
        for _ in range(n_batches):
            ro = tr.sample()
            tok.append(ro.stats.get("tokens_generated", 0))
            rows.append(ro.batch.B)
            turns.append(float(ro.batch.turn_mask.sum(1).float().mean()))
            tr.step_idx += 1
        out[name] = {"tokens": float(np.mean(tok)), "rows": float(np.mean(rows)), "turns": float(np.mean(turns))}
    return out


def tree_edges(node: torch.Tensor, turn_mask: torch.Tensor) -> tuple[list, dict]:
    """Edges (parent, child) of the forest spanned by rows' node ids, and each node's depth.

    The root of every row is the virtual node -1 (the prompt). Example: node [[0, 1], [0, 2]]
    (both valid) -> edges [(-1, 0), (0, 1), (0, 2)], depth {0: 0, 1: 1, 2: 1}.
    """
    edges, depth, seen = [], {}, set()
    for i in range(node.shape[0]):
        parent = -1
        for k in range(node.shape[1]):
            if not bool(turn_mask[i, k]):
                break
            n = int(node[i, k])
            if (parent, n) not in seen:
                seen.add((parent, n))
                edges.append((parent, n))
            depth[n] = k
            parent = n
    return edges, depth


def tree_layout(edges: list, depth: dict) -> dict:
    """x, y of every node: leaves spaced by one in depth-first order, parents centred over children."""
    children: dict = {}
    for p, c in edges:
        children.setdefault(p, []).append(c)
    pos, nxt = {}, [0.0]

    def place(n):
        kids = children.get(n, [])
        if not kids:
            x = nxt[0]
            nxt[0] += 1.0
        else:
            x = float(np.mean([place(c) for c in kids]))
        pos[n] = (x, -(depth.get(n, -1) + 1))
        return x

    place(-1)
    return pos


def sample_tree(rollout: str = "tree", *, seed: int = 0, task: int = 0):
    """One batch of ``rollout`` on GridWorld 4x4 with an untrained policy; returns (node, turn_mask, R, stats)
    of the rows of task ``task`` (clamped to the tasks present)."""
    tr = Trainer(grid_config(rollout, seed=seed, prompts_per_step=2, steps=0))
    ro = tr.sample()
    b = ro.batch
    gids = torch.unique(b.group)
    rows = b.group == gids[min(task, len(gids) - 1)]
    return b.node[rows], b.turn_mask[rows], b.outcome()[rows], dict(ro.stats)


def leaf_outcomes(node: torch.Tensor, turn_mask: torch.Tensor, R: torch.Tensor) -> dict:
    """{node id of each row's last valid turn: that row's outcome}. Example: node [[0, 1], [0, 2]], R [1., 0.]
    -> {1: 1.0, 2: 0.0}."""
    n_valid = turn_mask.sum(1)
    return {int(node[i, n - 1]): float(R[i]) for i, n in enumerate(n_valid.tolist()) if n}


def draw_tree(node: torch.Tensor, turn_mask: torch.Tensor, R: torch.Tensor, ax=None, title: str = "", *,
              setting: str = TREE_SETTING):
    """Draw the rows' tree: one dot per turn node (at ``tree_layout``), an edge per ``tree_edges`` pair,
    leaves coloured by outcome (green 1, grey 0; ``leaf_outcomes``), a legend of the markers; the default
    title names ``setting`` and the leaf and node counts."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    edges, depth = tree_edges(node, turn_mask)
    pos = tree_layout(edges, depth)
    ax = ax if ax is not None else plt.subplots(figsize=(9, 3.8), layout="constrained")[1]
    for p, c in edges:
        (x0, y0), (x1, y1) = pos[p], pos[c]
        ax.plot([x0, x1], [y0, y1], "-", color="0.6", lw=0.8)
    leaf_of = leaf_outcomes(node, turn_mask, R)
    xs = [pos[n][0] for n in pos if n != -1]
    ys = [pos[n][1] for n in pos if n != -1]
    ax.scatter(xs, ys, s=10, color="C0", zorder=3)
    for n, r in leaf_of.items():
        ax.scatter(*pos[n], s=40, color="C2" if r > 0 else "0.5", zorder=4)
    ax.scatter(*pos[-1], s=60, color="k", marker="s", zorder=4)
    H = max(depth.values(), default=-1) + 1
    ax.set_yticks([-(k + 1) for k in range(0, H, max(1, H // 6))] + [0],
                  [str(k) for k in range(0, H, max(1, H // 6))] + ["prompt"])
    ax.set_ylabel("turn index k")
    ax.set_xlabel("leaves, depth-first order")
    ax.set_xticks([])
    ax.set_title(title or f"{setting}: {node.shape[0]} leaves, {len(pos) - 1} turn nodes", fontsize=10)
    dot = lambda c, m="o", s=6: Line2D([], [], ls="", marker=m, color=c, markersize=s)   # noqa: E731
    ax.legend([dot("k", "s"), dot("C0", s=4), dot("C2"), dot("0.5")], ["prompt", "turn", "leaf: success (R=1)",
              "leaf: failure (R=0)"], fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return ax


def tree_panel(strategy: str = "tree", seed: int = 0, task: int = 0):
    """Notebook 7's tree widget: ``draw_tree`` of one task's rows of a fresh ``strategy`` batch, the title
    naming the batch's leaves and tokens against its budget."""
    node, mask, R, stats = sample_tree(strategy, seed=seed, task=task)
    ax = draw_tree(node, mask, R, title=f"{TREE_SETTING}, {strategy}, seed {seed}, task {task}:\n"
                                        f"{stats['leaves']} leaves in the batch, {stats['tokens_generated']} tokens "
                                        f"(budget {stats['token_budget']})")
    return ax.figure


def plot_tree_panel(sweep: dict, key: str = "success_rate", arms=None, smooth_w: int = 5, x: str = "step"):
    """The learning curves: ``arms_figure`` (x = "step" or "tokens", cumulative) titled with ``SETTING``."""
    return arms_figure(sweep, key, arms, smooth_w, x, setting=SETTING)


def tree_curve_panel(sweep: dict, metric: str = "success_rate", x: str = "step", smooth: int = 5):
    """Notebook 7's curve widget: every arm's ``metric`` per step or per cumulative generated token."""
    return plot_tree_panel(sweep, metric, None, smooth, x)


precompute = sweep_precompute("trees/curves.json", tree_arms, KEYS, 30, "toyrl.viz.trees")


if __name__ == "__main__":
    print(precompute())
