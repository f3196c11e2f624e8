"""Trees and exploration (notebook 7): Tree-GRPO, ARPO and PATR near an equal token budget, and T2PO's resampling
(which spends more).

Dimension legend: B leaves (rows), H turns, P tasks, G group size, S seeds, N steps.

``TrainConfig(rollout="tree" | "arpo" | "patr")`` replaces G independent episodes per task by a
tree per task grown in rounds until it has generated as many tokens as G independent episodes would have
(``toyrl.rollout.tree.tree_rollout``; the last round's branches overshoot that budget); siblings share a prefix, so their comparison isolates the turns
after the branch point. ``t2po_eta`` regenerates turns whose uncertainty stalled (T2PO), which
spends extra tokens. The turns of a shared prefix carry one node id (``TurnBatch.node``), which is
all ``tree_edges`` needs to draw the tree.

Every arm plays the claims ledger's ``tree_rollout`` setting (``toyrl.lab.claims.credit``): random 4x4 lakes (a new
map per task, 12 turns at most), P=4 tasks per batch x G=8 rollouts per task. Two success rates are logged, and they are not the same thing:

- ``success_rate``: the success of the training batch's rows. For a tree arm the rows are leaves that share
  prefixes and were grown from the chains the tree chose to branch, so this is not the policy's success on an
  episode it plays from the start;
- ``eval_success_rate``: ``EVAL_EPISODES`` fresh independent episodes on a fixed held-out task set, every
  ``EVAL_EVERY`` steps and after the last (``Trainer.evaluate``); NaN on the other steps of a sweep.

``key_curves`` / ``final_evaluated`` read such a sparse column at its evaluated steps only; ``success_gap`` and
``final_table`` put both rates of every arm side by side, and ``plot_tree_panel`` draws them next to each other.

Precompute the learning curves: ``python -m toyrl.viz.trees`` (writes data/runs/trees/curves.json).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from ..train import TrainConfig, Trainer
from .plots import label
from .prototype import arm_curves, curve_stats, draw_curves, final_mean, sweep_precompute
from .style import arm_color, figsize, font_size, subplots

__all__ = ["grid_config", "tree_arms", "budget_table", "arpo_weights", "tree_edges", "tree_layout", "leaf_outcomes", "draw_tree",
           "sample_tree", "tree_panel", "evaluated_steps", "last_evaluated", "final_evaluated", "success_gap",
           "key_curves", "final_table",
           "plot_tree_panel", "tree_curve_panel", "precompute", "COLORS", "KEYS", "SETTING", "TREE_SETTING", "EVAL_KEY",
           "EVAL_EVERY", "EVAL_EPISODES", "STEPS"]

EVAL_KEY = "eval_success_rate"
"""success on fresh independent episodes (``Trainer.evaluate``), logged every ``EVAL_EVERY`` steps"""
EVAL_EVERY = 5
"""steps between two evaluations (the ledger: 10; 5 here, to draw a curve)"""
EVAL_EPISODES = 32
"""fresh episodes per evaluation, one per held-out task (the ledger's number)"""
STEPS = 60
"""RL steps of the stored sweep (the ledger's number)"""
COLORS = {"independent (GRPO)": arm_color("grpo"), "Tree-GRPO": "#d62728", "ARPO": "#2ca02c", "PATR": "#9467bd",
          "T2PO eta=0.3": "#ff7f0e"}
"""arm -> its colour in every figure of the lesson (five distinct colours; GRPO's as in every lesson)"""
KEYS = ("reward_mean", "success_rate", "tokens_generated", "batch_size", "turns_per_episode", EVAL_KEY)
SETTING = "GridWorld 4x4 random lakes, P=4 tasks x G=8 token budget"
"""the setting of the sweep (``tree_arms``), named in its learning-curve titles"""
TREE_SETTING = "GridWorld 4x4 random lakes, untrained policy, G=8 token budget"
"""the setting of ``sample_tree``'s batches, named in the tree figures' titles"""


def grid_config(rollout: str = "independent", *, estimator: str = "grpo", steps: int = STEPS, seed: int = 0,
                prompts_per_step: int = 4, **kw) -> TrainConfig:
    """The ledger's ``tree_rollout`` setting: random 4x4 lakes (12 turns at most), G = 8 per task (the budget
    every arm is held to), fresh-episode evaluation every ``EVAL_EVERY`` steps on ``EVAL_EPISODES`` tasks."""
    return TrainConfig(env="gridworld", env_kwargs={"size": 4, "max_turns": 12}, rollout=rollout,
                       estimator=estimator, prompts_per_step=prompts_per_step, group_size=8, steps=steps,
                       seed=seed, progress=False, eval_every=EVAL_EVERY, eval_episodes=EVAL_EPISODES, **kw)


def tree_arms(steps: int = STEPS, eta: float = 0.3) -> dict:
    """Independent GRPO, Tree-GRPO, ARPO and PATR (GRPO on tree leaves), and T2PO resampling (eta)."""
    return {
        "independent (GRPO)": grid_config(steps=steps),
        "Tree-GRPO": grid_config("tree", estimator="tree_grpo", steps=steps),
        "ARPO": grid_config("arpo", steps=steps),
        "PATR": grid_config("patr", steps=steps),
        f"T2PO eta={eta}": grid_config(steps=steps, t2po_eta=eta),
    }


def budget_table(arms: dict, n_batches: int = 1) -> dict:
    """{arm: {"tokens", "rows", "turns" per row, "budget": a tree's own (G x its first chains' mean cost), "arpo_spread":
    ARPO's largest |w - tau| (``arpo_weights``)}}, means over each arm's first ``n_batches`` batches; NaN: not a tree."""
    out = {}
    for name, cfg in arms.items():
        tr = Trainer(replace(cfg, steps=0))
        tok, rows, turns, budget, spread = [], [], [], [], []
        for _ in range(n_batches):
            ro = tr.sample()
            tok.append(ro.stats.get("tokens_generated", 0))
            budget.append(ro.stats.get("token_budget", float("nan")))
            rows.append(ro.batch.B)
            turns.append(float(ro.batch.turn_mask.sum(1).float().mean()))
            if cfg.rollout == "arpo":
                w = arpo_weights(ro.batch)
                spread.append(float((w[torch.isfinite(w)] - 0.5).abs().max()))
            tr.step_idx += 1
        out[name] = {"tokens": float(np.mean(tok)), "rows": float(np.mean(rows)), "turns": float(np.mean(turns)),
                     "budget": float(np.mean(budget)), "arpo_spread": max(spread) if spread else float("nan")}
    return out


def arpo_weights(batch, *, tau: float = 0.5, beta: float = 0.2) -> torch.Tensor:
    """ARPO's branch weight at each turn boundary (B, H), NaN at turn 0 and past the last turn: clip(tau + beta *
    (H_k - H_0), 0, 1), H_k the entropy of turn k's first policy token (``rollout.tree.branch_weights``). Where the
    entropy does not rise (an untrained policy) every weight is tau: ARPO branches uniformly, as Tree-GRPO does.
    Example: turns starting at entropies 1.0 and 2.5 -> [[nan, 0.8]] (tau 0.5, beta 0.2)."""
    B, T = batch.tokens.shape
    H = batch.turn_mask.shape[1]
    pos = torch.where(batch.policy_mask, torch.arange(T).expand(B, T), torch.full((B, T), T))        # (B, T)
    first = torch.full((B, H), T).scatter_reduce(1, batch.turn_id.clamp(min=0), pos, reduce="amin")    # (B, H)
    ent = torch.cat([batch.entropy.float(), torch.full((B, 1), float("nan"))], 1)                     # (B, T + 1)
    h = ent.gather(1, first.clamp(max=T))                                                             # (B, H)
    w = (tau + beta * (h - h[:, :1])).clamp(0.0, 1.0)
    w[:, 0] = float("nan")
    return torch.where(batch.turn_mask & (first < T), w, torch.full_like(w, float("nan")))


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
    """One batch of ``rollout`` on random 4x4 lakes with an untrained policy; returns (node, turn_mask, R, stats)
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
    leaves coloured by outcome (green 1, grey 0; ``leaf_outcomes``), a legend of the markers outside the data;
    the default title names ``setting`` and the leaf and node counts of the rows drawn."""
    from matplotlib.lines import Line2D
    edges, depth = tree_edges(node, turn_mask)
    pos = tree_layout(edges, depth)
    ax = ax if ax is not None else subplots(size=figsize(9, 4.8), layout="constrained")[1]
    for p, c in edges:
        (x0, y0), (x1, y1) = pos[p], pos[c]
        ax.plot([x0, x1], [y0, y1], "-", color="0.6", lw=1.2)
    leaf_of = leaf_outcomes(node, turn_mask, R)
    xs = [pos[n][0] for n in pos if n != -1]
    ys = [pos[n][1] for n in pos if n != -1]
    ax.scatter(xs, ys, s=20, color="C0", zorder=3)
    for n, r in leaf_of.items():
        ax.scatter(*pos[n], s=70, color="C2" if r > 0 else "0.5", zorder=4)
    ax.scatter(*pos[-1], s=90, color="k", marker="s", zorder=4)
    H = max(depth.values(), default=-1) + 1
    ticks = list(range(0, H, max(1, -(-H // 5))))
    ax.set_yticks([-(k + 1) for k in ticks] + [0], [str(k) for k in ticks] + ["prompt"])
    ax.set_ylabel("turn index k")
    ax.set_xlabel("leaves, depth-first order")
    ax.set_xticks([])
    ax.set_title(title or f"{setting}:\none task's tree, {node.shape[0]} leaves, {len(pos) - 1} turn nodes",
                 fontsize=font_size("title"))
    dot = lambda c, m="o", s=9: Line2D([], [], ls="", marker=m, color=c, markersize=s)   # noqa: E731
    ax.legend([dot("k", "s"), dot("C0", s=6), dot("C2"), dot("0.5")], ["prompt", "turn", "leaf: success (R=1)",
              "leaf: failure (R=0)"], fontsize=font_size("legend"), loc="upper left", bbox_to_anchor=(1.01, 1.0),
              borderaxespad=0.0)
    return ax


def tree_panel(strategy: str = "tree", seed: int = 0, task: int = 0):
    """Notebook 7's tree widget: ``draw_tree`` of one task's rows of a fresh ``strategy`` batch (2 tasks); the
    title names that task's leaves and turn nodes, and, labelled as such, the whole batch's leaves and tokens
    against its budget."""
    node, mask, R, stats = sample_tree(strategy, seed=seed, task=task)
    n_nodes = len(tree_edges(node, mask)[0])
    used, budget = stats["tokens_generated"], stats["token_budget"]
    ax = draw_tree(node, mask, R, title=f"{TREE_SETTING}\n{strategy}, seed {seed}, task {task}: {node.shape[0]} "
                                        f"leaves, {n_nodes} turn nodes\nwhole batch (2 tasks): {stats['leaves']} "
                                        f"leaves, {used} tokens against a budget of {budget} ({used / budget:.2f}x)")
    return ax.figure


# ---- the learning curves: training rows vs fresh episodes --------------------------------------------
def evaluated_steps(rows) -> np.ndarray:
    """Steps (column indices of an (S, N) sweep column) where at least one seed logged a finite value: every
    step for a per-step key, the evaluation steps for an ``eval_*`` key (NaN elsewhere: ``compare`` turns a
    missing key into NaN). Example: [[nan, .5, nan, 1.], [nan, .25, nan, .5]] -> [1, 3]."""
    return np.flatnonzero(np.isfinite(np.asarray(rows, dtype=float)).any(0))


def last_evaluated(rows, last: int = 2) -> np.ndarray:
    """Each seed's mean over its last ``last`` finite values (S,): the final value of a key logged at some steps
    only (the ledger's ``final_eval_success``: the last 2 evaluations); NaN for a seed with none.
    Example: [[nan, .5, nan, 1.], [nan, .25, nan, .5]], last=2 -> [.75, .375]."""
    x = np.asarray(rows, dtype=float)                                             # (S, N)
    return np.array([r[np.isfinite(r)][-last:].mean() if np.isfinite(r).any() else np.nan for r in x])   # (S,)


def final_evaluated(rows, last: int = 2) -> tuple[float, float]:
    """Mean over seeds of ``last_evaluated`` and its seed std.

    Example: [[nan, .5, nan, 1.], [nan, .25, nan, .5]], last=1 -> per seed [1., .5] -> (0.75, 0.25);
    last=2 -> per seed [.75, .375] -> (0.5625, 0.1875).
    """
    per_seed = last_evaluated(rows, last)
    return float(np.mean(per_seed)), float(np.std(per_seed))


def success_gap(cols: dict, train_key: str = "success_rate", fresh_key: str = EVAL_KEY) -> np.ndarray:
    """Per seed (S,): training-row success minus fresh-episode success, averaged over the evaluated steps of
    ``fresh_key`` (the same steps for both, so early low-success steps weigh on neither side alone).

        gap_s = 1/|E| sum_{t in E} (train_{s,t} - fresh_{s,t}),   E = evaluated_steps(fresh)

    Example: train [[.5, .5, .5, 1.]], fresh [[nan, .25, nan, .5]] -> E [1, 3] -> [(.25 + .5) / 2] = [.375].
    """
    fresh = np.asarray(cols[fresh_key], dtype=float)                              # (S, N)
    idx = evaluated_steps(fresh)
    return np.nanmean(np.asarray(cols[train_key], dtype=float)[:, idx] - fresh[:, idx], 1)   # (S,)


def key_curves(sweep: dict, key: str, arms=None, smooth_w: int = 1, x: str = "step") -> dict:
    """``arm_curves`` of ``key``, smoothed over ``smooth_w`` steps when the key is logged at every step; at its
    ``evaluated_steps`` only and unsmoothed when it is logged at some steps (a moving average over the gaps
    would smear one evaluation over ``smooth_w`` steps). Example: {"a": {"e": [[nan, .5, nan, 1.]]}}, "e" ->
    {"a": {"x": [1, 3], "mean": [.5, 1.], ...}}."""
    out = {}
    for name in arms or sweep:
        if key not in sweep[name]:
            continue
        rows = np.asarray(sweep[name][key], dtype=float)                          # (S, N)
        idx = evaluated_steps(rows)
        if len(idx) == rows.shape[1]:
            out[name] = arm_curves(sweep, key, [name], smooth_w, x)[name]
            continue
        m, se = curve_stats(rows[:, idx])                                         # (n_eval,) each
        xs = idx if x == "step" else np.cumsum(np.nanmean(sweep[name]["tokens_generated"], 0))[idx]
        out[name] = {"x": xs, "mean": m, "se": se, "n": rows.shape[0]}
    return out


def final_table(sweep: dict, baseline: str = "independent (GRPO)", *, last_steps: int = 10,
                last_evals: int = 2) -> dict:
    """Per arm: tokens per step over the whole run against ``baseline``'s, rows per batch, the final success
    on the training rows (mean of the last ``last_steps`` steps, ``final_mean``) and on fresh episodes (mean of
    the last ``last_evals`` evaluations, ``final_evaluated``), and the ``success_gap`` over the whole run, each
    of the last three as (mean, seed std).

    Returns {arm: {"tokens_ratio", "rows", "train": (m, s), "fresh": (m, s), "gap": (m, s)}}.
    Example: baseline tokens [[10, 10]], arm tokens [[12, 12]] -> the arm's "tokens_ratio" 1.2.
    """
    tok0 = np.nanmean(sweep[baseline]["tokens_generated"])
    out = {}
    for a, cols in sweep.items():
        gap = success_gap(cols)
        out[a] = {"tokens_ratio": float(np.nanmean(cols["tokens_generated"]) / tok0),
                  "rows": float(np.nanmean(cols["batch_size"])), "train": final_mean(cols["success_rate"], last_steps),
                  "fresh": final_evaluated(cols[EVAL_KEY], last_evals),
                  "gap": (float(np.mean(gap)), float(np.std(gap)))}
    return out


def plot_tree_panel(sweep: dict, key: str = "success_rate", arms=None, smooth_w: int = 5, x: str = "step"):
    """The learning curves, two panels side by side: left ``key`` on the training rows (tree leaves for a tree
    arm; smoothed over ``smooth_w`` steps), right the success on fresh episodes at the evaluated steps (the
    training-row success instead when ``key`` is ``EVAL_KEY``); mean +- s.e. over seeds (``draw_curves``),
    x = "step" or "tokens" (cumulative), one legend outside the data on the right, the suptitle naming
    ``SETTING``. Both success panels share one y range."""
    other = "success_rate" if key == EVAL_KEY else EVAL_KEY
    fig, axes = subplots(1, 2, size=figsize(10, 5), layout="constrained")
    xlabel = "RL step" if x == "step" else "tokens generated (cumulative)"
    for ax, k in zip(axes, (key, other)):
        fresh = k == EVAL_KEY
        where = (f"fresh episodes\n(every {EVAL_EVERY} steps)" if fresh
                 else "training rows\n(tree arm: leaves)" + (f", {smooth_w}-step mean" if smooth_w > 1 else ""))
        draw_curves(ax, key_curves(sweep, k, arms, smooth_w, x), where, xlabel,
                    "fresh-episode success rate" if fresh else label(k), colors=COLORS)
        if fresh:
            for ln in ax.get_lines():
                ln.set_marker("o")
                ln.set_markersize(5)
    axes[0].get_legend().remove()                                             # the same arms: one legend, right
    if {key, other} == {"success_rate", EVAL_KEY}:
        lo = min(ax.get_ylim()[0] for ax in axes)
        hi = max(ax.get_ylim()[1] for ax in axes)
        for ax in axes:
            ax.set_ylim(lo, hi)
    fig.suptitle(f"{SETTING}:\ntraining-row {label(key)} vs success on fresh episodes of {EVAL_EPISODES} held-out "
                 f"tasks", fontsize=font_size("suptitle"))
    return fig


def tree_curve_panel(sweep: dict, metric: str = "success_rate", x: str = "step", smooth: int = 5):
    """Notebook 7's curve widget: every arm's training-row ``metric`` per step or per cumulative generated
    token, beside fresh-episode success (``plot_tree_panel``)."""
    return plot_tree_panel(sweep, metric, None, smooth, x)


precompute = sweep_precompute("trees/curves.json", tree_arms, KEYS, STEPS, "toyrl.viz.trees")


if __name__ == "__main__":
    print(precompute())
