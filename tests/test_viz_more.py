"""Tests of the viz modules of notebooks 4-8 and 10: worked examples, and every panel's pure function over
its whole slider range (corners of each range, small sizes), asserting on the data each panel draws."""
from __future__ import annotations

import itertools
from dataclasses import replace

import ipywidgets as widgets
import numpy as np
import pytest
import torch
from conftest import assert_curves_drawn, assert_figure_standard, bar_heights, fake_sweep, image_data, line_data

from toyrl.exercises import check, matches
from toyrl.viz import aggregation, context, critics, prototype, trees, void
from toyrl.viz.plots import bind, label
from toyrl.viz.prototype import RUNS_DIR, arm_curves, load_sweep


# ---- toyrl demo's figure --------------------------------------------------------------------------
def test_demo_figure_names_its_setting(tmp_path):
    from toyrl.lab.demo import PANELS, _figure
    rng = np.random.default_rng(0)
    series = {arm: {s: {k: rng.random(12).tolist() for k, _, _ in PANELS} for s in (3, 4, 5)}
              for arm in ("unmasked", "masked")}
    fig = _figure(series, str(tmp_path / "demo.png"), 12)
    assert (tmp_path / "demo.png").stat().st_size > 10_000
    assert [a.get_title() for a in fig.axes] == ["success rate", "observation tokens the policy writes"]
    assert_figure_standard(fig, "GridWorld 4x4", "GRPO", "12 steps", "3 seeds (3..5)", "tiny policy",
                           "whole vocabulary", "masked vs unmasked")
    for ax in fig.axes:
        assert ax.get_xlabel() == "RL step" and "5-step mean" in ax.get_ylabel()
        assert [t.get_text() for t in ax.get_legend().get_texts()] == [
            "unmasked (mean, min-max over seeds)", "masked, the fix (mean, min-max over seeds)"]
        assert len(ax.collections) == 2                                        # one band per arm, both in the legend


# ---- prototype (shared helpers) -----------------------------------------------------------------
def test_smooth_and_stats():
    assert np.allclose(prototype.smooth([0.0, 1.0, 2.0, 3.0], 2), [0.0, 0.5, 1.5, 2.5])
    m, se = prototype.curve_stats([[0.0, 1.0], [2.0, 3.0]])
    assert np.allclose(m, [1.0, 2.0]) and np.allclose(se, [1 / np.sqrt(2)] * 2)
    assert prototype.final_mean([[0.0, 1.0, 1.0], [0.0, 0.0, 0.0]], last=2) == (0.5, 0.5)


def test_save_load_roundtrip(tmp_path):
    sweep = {"a": {"x": [[1.0, float("nan")]]}}
    p = prototype.save_sweep(tmp_path / "s.json", sweep, {"seeds": [0]})
    back, meta = load_sweep(p)
    assert meta == {"seeds": [0]} and back["a"]["x"][0][0] == 1.0 and np.isnan(back["a"]["x"][0][1])


def test_arm_curves_example_and_smoothing():
    c = arm_curves({"a": {"r": [[0.0, 1.0], [2.0, 3.0]]}, "b": {"s": [[1.0]]}}, "r")
    assert list(c) == ["a"]                                                    # b did not log r
    np.testing.assert_allclose(c["a"]["x"], [0, 1])
    np.testing.assert_allclose(c["a"]["mean"], [1.0, 2.0])
    np.testing.assert_allclose(c["a"]["se"], [1 / np.sqrt(2)] * 2)
    assert c["a"]["n"] == 2                                                    # seeds, named in the legend
    sw = fake_sweep(["a"], ["r", "tokens_generated"], S=3, N=5)
    raw = np.asarray(sw["a"]["r"])
    big = arm_curves(sw, "r", smooth_w=10)["a"]["mean"]                          # window > N: running mean
    np.testing.assert_allclose(big, (np.cumsum(raw, 1) / np.arange(1, 6)).mean(0))
    tok = arm_curves(sw, "r", x="tokens")["a"]["x"]
    np.testing.assert_allclose(tok, np.cumsum(np.mean(sw["a"]["tokens_generated"], 0)))
    assert np.all(np.diff(tok) > 0)


def test_sweep_precompute(tmp_path):
    cfg = replace(prototype.prototype_arms(1)["grpo"], prompts_per_step=1, group_size=2)
    make = prototype.sweep_precompute("topic/s.json", lambda steps: {"grpo": replace(cfg, steps=steps)},
                                      ("reward_mean",), 1, "toyrl.viz.prototype")
    path = make(tmp_path / "topic", seeds=(0,))
    sweep, meta = load_sweep(path)
    assert path == tmp_path / "topic" / "s.json" and "data/runs/topic/s.json" in make.__doc__
    assert meta == {"seeds": [0], "steps": 1, "command": "python -m toyrl.viz.prototype"}
    assert np.asarray(sweep["grpo"]["reward_mean"]).shape == (1, 1)


def test_bind_gives_widgets_their_data():
    sweep = fake_sweep(critics.critic_arms(), critics.KEYS)
    cb = bind(prototype.curve_panel, sweep)
    assert cb.__name__ == "curve_panel" and cb.args == (sweep,)
    w = widgets.interactive(cb, metric=["success_rate", "grad_norm"], smooth=(1, 10))
    assert [c.description for c in w.children[:-1]] == ["metric", "smooth"]
    w.children[0].value = "grad_norm"                                          # the slider moves: a new figure
    assert w.result.axes[0].get_title() == "gradient norm (5-step mean)"
    assert_curves_drawn(w.result.axes[0], arm_curves(sweep, "grad_norm", smooth_w=5))
    cb = bind(prototype.curve_panel, sweep, setting="GridWorld 4x4")            # a setting: data, not a widget
    w = widgets.interactive(cb, metric=["success_rate", "grad_norm"], smooth=(1, 10))
    assert [c.description for c in w.children[:-1]] == ["metric", "smooth"]
    assert w.result.axes[0].get_title() == "GridWorld 4x4: success rate (5-step mean)"


def test_compare_tiny():
    cfg = replace(prototype.prototype_arms(2)["grpo"], prompts_per_step=1, group_size=2)
    out = prototype.compare({"grpo": cfg}, seeds=(0, 1), keys=("reward_mean",), steps=1)
    assert np.asarray(out["grpo"]["reward_mean"]).shape == (2, 1)


def test_plot_compare_names_the_setting():
    sweep = fake_sweep(["grpo", "gigpo", "loo_turn"], ["success_rate"], S=3, N=12)
    ax = prototype.plot_compare(sweep, "success_rate")
    curves = arm_curves(sweep, "success_rate", smooth_w=5)
    assert_curves_drawn(ax, {prototype.ARM_NAMES[a]: c for a, c in curves.items()})     # plain words, no code names
    assert all("_" not in t for t in prototype.ARM_NAMES.values())
    assert_figure_standard(ax.figure, "BanditChain", "success rate")


def test_loo_turn_example():
    r = torch.tensor([[0.0, 1.0], [0.0, 0.0]])
    A = prototype.loo_turn(r, torch.ones(2, 2, dtype=torch.bool), torch.tensor([0, 0]), gamma=0.5)
    assert torch.allclose(A, torch.tensor([[0.5, 1.0], [-0.5, -0.5]]))
    one = prototype.loo_turn(r[:1], torch.ones(1, 2, dtype=torch.bool), torch.tensor([0]))
    assert torch.all(one == 0)                                                 # singleton group: no baseline


@pytest.mark.parametrize("gamma,seed", list(itertools.product((0.0, 0.5, 1.0), (0, 5))))
def test_verl_estimator_panel_range(gamma, seed):
    r, m, i = prototype.toy_verl_inputs(B=4, L=6, seed=seed)
    adv, ret = prototype.verl_estimator("loo_turn")(r, m, i, config={"toyrl_kwargs": {"gamma": gamma}})
    assert adv.shape == (4, 6) and torch.equal(adv, ret) and torch.all(adv[m == 0] == 0)
    fig = prototype.verl_advantage_panel("loo_turn", gamma, seed)               # notebook 10's widget
    np.testing.assert_allclose(image_data(fig.axes[1]), adv.numpy())
    assert fig.axes[1].get_title() == f"loo_turn, gamma={gamma:.2f}"
    assert_figure_standard(fig, "toy verl batch", "B=4", "L=6", f"seed {seed}", "GRPO")


def test_register_in_verl():
    ca = prototype.load_verl()
    if ca is None:
        pytest.skip("verl not importable")
    key = prototype.register_in_verl("loo_turn", ca)
    r, m, i = prototype.toy_verl_inputs()
    a, _ = ca.get_adv_estimator_fn(key)(token_level_rewards=r, response_mask=m, index=i, config=None)
    b, _ = prototype.verl_estimator("loo_turn")(r, m, i)
    assert torch.allclose(a, b)


# ---- void ------------------------------------------------------------------------------------------
def test_void_rate_by_turn_example():
    v = torch.tensor([[False, True], [True, False]])
    assert np.allclose(void.void_rate_by_turn(v, torch.ones(2, 2, dtype=torch.bool)), [0.5, 0.5])


def test_void_gradients_small():
    cfg = replace(void.base_config(bc_steps=0), prompts_per_step=1, group_size=4)
    g = void.void_gradients(cfg)
    assert g["score_norm"].shape == (4,) and len(g["grad_turn"]) == len(g["void_rate_turn"])
    assert g["setting"] == void.setting_name(cfg) == "MockSearch 1-hop, 4 turns, free sampling, P=1 x G=4, 0 BC steps, seed 0"
    assert void.setting_name(void.base_config(seed=1)) == void.SETTING + ", seed 1"
    hist, turns = void.plot_void_gradients(g)
    assert_figure_standard(hist.figure, "MockSearch 1-hop", "free sampling", "P=1 x G=4", "seed 0", "one batch")
    assert sum(h.sum() for h in bar_heights(hist)) == 4                       # every trajectory in one histogram
    np.testing.assert_allclose(bar_heights(turns)[0], g["grad_turn"])
    rate = line_data(turns.figure.axes[-1])["void-turn rate (right)"][1]       # the twin axis
    np.testing.assert_allclose(rate, g["void_rate_turn"])
    assert ((rate >= 0) & (rate <= 1)).all()


@pytest.mark.parametrize("metric,smooth", list(itertools.product(
    ("void_turn_rate", "void_traj_rate", "success_rate", "reward_mean", "kept_frac"), (1, 10))))
def test_void_panel_range(metric, smooth):
    sweep = fake_sweep(void.void_arms(), void.KEYS)
    arms = list(sweep)[:2]
    fig = void.plot_void_panel(sweep, arms, key=metric, smooth_w=smooth)
    left, right = fig.axes
    mean = f" ({smooth}-step mean)" if smooth > 1 else ""
    assert (left.get_title(), right.get_title()) == (label(metric) + mean, "gradient norm" + mean)
    assert_figure_standard(fig, void.SETTING, "GRPO arms", "6 RL steps")
    assert_curves_drawn(left, arm_curves(sweep, metric, arms, smooth))
    assert_curves_drawn(right, arm_curves(sweep, "grad_norm", arms, smooth))
    for name in arms:
        y = line_data(left)[name][1]
        assert ((y >= 0) & (y < 1)).all()                                      # a mean of numbers in [0, 1)
        if smooth == 1:
            np.testing.assert_allclose(y, np.mean(sweep[name][metric], 0))


def test_void_panel_toggles():
    sweep = fake_sweep(void.void_arms(), void.KEYS)
    names = list(sweep)
    assert void.toggled_arms(["a", "b", "c"], (True, False, True)) == ["a", "c"]
    assert void.toggled_arms(["a", "b", "c"], (False,) * 3) == ["a"]
    fig = void.void_panel(sweep, "kept_frac", 1, grpo=False, filtered=True, penalty=False)
    assert list(line_data(fig.axes[0])) == [names[1]] and fig.axes[0].get_title() == label("kept_frac")
    assert list(line_data(void.void_panel(sweep).axes[1])) == names


# ---- context ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("ctx,k,seed", [("last_k", 1, 0), ("last_k", 4, 3), ("summary", 1, 3), ("summary", 4, 0)])
def test_ratio_bias_panel_range(ctx, k, seed):
    res = context.ratio_bias_per_turn(ctx, k, seed=seed, prompts_per_step=1)
    assert np.abs(res["matched"]).max() < 1e-5                                # matched recompute is exact
    assert np.abs(res["flat"][:k + 1]).max() < 1e-5                           # nothing cut yet
    ax = context.plot_ratio_bias(res)
    assert_figure_standard(ax.figure, context.SETTING)
    assert ax.figure.axes[-1].get_ylabel() == "rows reaching turn k"             # the twin axis is labelled
    matched, flat = bar_heights(ax)
    np.testing.assert_allclose(matched, res["matched"])
    np.testing.assert_allclose(flat, res["flat"])
    assert len(flat) == len(res["turns"]) and (flat >= 0).all()
    np.testing.assert_allclose(line_data(ax.figure.axes[-1])["rows with turn k (right axis)"][1], res["turns"])
    assert np.all(np.diff(res["turns"]) <= 0)                                  # fewer rows reach later turns
    assert np.isfinite(context.bias_slope(res))


def test_bias_panel_names_the_slope():
    fig = context.bias_panel("last_k", 2, seed=1)
    res = context.ratio_bias_per_turn("last_k", 2, seed=1)
    assert fig.axes[0].get_title() == f"context=last_k, k=2: slope {context.bias_slope(res):+.4f} per turn"
    np.testing.assert_allclose(bar_heights(fig.axes[0])[1], res["flat"])
    assert_figure_standard(fig, context.SETTING, "seed 1")


def test_bias_figure_panels_apart():
    res = {c: context.ratio_bias_per_turn(c, 1, seed=0, prompts_per_step=1) for c in ("last_k", "summary")}
    fig = context.bias_figure(res, seed=0)
    left, right = fig.axes[:2]                                                 # the panels, then their twins
    assert (left.get_title(), right.get_title()) == ("context=last_k, k=1", "context=summary, k=1")
    np.testing.assert_allclose(bar_heights(right)[1], res["summary"]["flat"])
    assert_figure_standard(fig, context.SETTING, "seed 0")                     # the twin labels do not collide


def test_bias_slope_example():
    assert np.isclose(context.bias_slope({"flat": np.array([0.0, 0.1, 0.2]), "turns": np.array([9, 9, 9])}), 0.1)


@pytest.mark.parametrize("metric", context.KEYS)
def test_context_panel_range(metric):
    sweep = fake_sweep(context.context_arms(), context.KEYS)
    fig = context.plot_context_panel(sweep, key=metric, smooth_w=10)
    ax = fig.axes[0]
    assert ax.get_title() == f"{context.SETTING}, P=4 x G=8: {label(metric)} (10-step mean)"
    assert ax.get_ylabel() == label(metric)
    assert_curves_drawn(ax, arm_curves(sweep, metric, smooth_w=10))
    assert_figure_standard(fig, context.SETTING)
    assert ax.get_legend().get_title().get_text() == "mean, band +-1 s.e.\nover 2 seeds"
    fig = bind(prototype.curve_panel, sweep, setting="GridWorld 4x4")(metric, 10)
    assert_curves_drawn(fig.axes[0], arm_curves(sweep, metric, smooth_w=10))
    assert_figure_standard(fig, "GridWorld 4x4")


# ---- critics ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("p_expert,n_train,steps", [(0.0, 16, 20), (1.0, 256, 200), (0.0, 256, 200), (1.0, 16, 20)])
def test_value_panel_range(p_expert, n_train, steps):
    tr = critics.collect_grid(min(n_train, 64), seed=0, p_expert=p_expert, max_turns=6)
    te = critics.collect_grid(16, seed=99, p_expert=p_expert, max_turns=6)
    fits = {p: critics.fit_value(tr, te, privileged=p, steps=min(steps, 40), every=20) for p in (False, True)}
    assert all(np.isfinite(f["test_mse"]).all() for f in fits.values())
    drawn = line_data(critics.plot_value_fit({"privileged" if p else "observable": f for p, f in fits.items()}))
    assert len(drawn) == 2
    for (label, (x, y)), (p, f) in zip(drawn.items(), fits.items()):
        p = "privileged" if p else "observable"
        assert label == f"{p} (final {f['test_mse'][-1]:.4f})"                # the legend names the final error
        np.testing.assert_allclose(x, f["step"])
        np.testing.assert_allclose(y, f["test_mse"])
        assert (y > 0).all() and x[0] == 0 and x[-1] == min(steps, 40)


def test_value_panel_small():
    fig = critics.value_panel(p_expert=1.0, n_train=16, steps=20, n_test=16)
    ax = fig.axes[0]
    drawn = line_data(ax)
    assert [label.split(" (")[0] for label in drawn] == ["observable", "privileged", "constant critic"]
    te = critics.collect_grid(16, seed=99, p_expert=1.0)
    np.testing.assert_allclose(drawn[list(drawn)[2]][1], te["returns"][te["mask"]].var().item())  # the dotted line
    ys = [y for _, y in drawn.values()]
    assert all(np.isfinite(y).all() and (y > 0).all() and len(y) == 3 for y in ys[:2])
    assert ax.get_yscale() == "log"
    assert critics.data_setting(1.0, 16, 16) == "GridWorld 4x4, random maps, p_expert 1, 16 train / 16 held-out episodes"
    assert_figure_standard(fig, critics.data_setting(1.0, 16, 16))


def test_td_losses_figure():
    arch = critics.fit_archer(critics.collect_grid(16, seed=0, max_turns=5), steps=5)
    ax = critics.plot_td_losses(arch, f"{critics.SETTING}, p_expert 0.5, 16 episodes")
    q, v = line_data(ax).values()
    np.testing.assert_allclose(q[1], arch["q_loss"])
    np.testing.assert_allclose(v[1], arch["v_loss"])
    assert ax.get_yscale() == "log" and f"{arch['adv_expert']:+.3f}" in ax.get_title()
    assert_figure_standard(ax.figure, "GridWorld 4x4, random maps", "p_expert 0.5", "16 episodes", "ArCHer")


def test_collect_grid_returns():
    d = critics.collect_grid(8, seed=0, p_expert=1.0, max_turns=10)
    assert d["returns"][:, 0].max() > 0                                        # the expert reaches goals
    assert (d["expert"][d["mask"]]).all()
    assert critics.features(d, True).shape[-1] == critics.features(d, False).shape[-1] + 1


def test_fit_archer_small():
    out = critics.fit_archer(critics.collect_grid(16, seed=0, max_turns=5), steps=5)
    assert out["adv"].shape == (16, 5) and np.isfinite(out["adv_expert"])


@pytest.mark.parametrize("metric", ("success_rate", "critic_loss", "grad_norm", "reward_mean"))
def test_critic_panel_range(metric):
    sweep = fake_sweep(critics.critic_arms(), critics.KEYS)
    ax = critics.plot_critic_panel(sweep, key=metric, smooth_w=1).axes[0]
    assert_curves_drawn(ax, arm_curves(sweep, metric, smooth_w=1))
    assert_figure_standard(ax.figure, critics.CURVES_SETTING, label(metric))
    for name, (x, y) in line_data(ax).items():
        np.testing.assert_allclose(y, np.mean(sweep[name][metric], 0))         # window 1: the seed mean


# ---- trees -----------------------------------------------------------------------------------------
def test_tree_edges_example():
    edges, depth = trees.tree_edges(torch.tensor([[0, 1], [0, 2]]), torch.ones(2, 2, dtype=torch.bool))
    assert edges == [(-1, 0), (0, 1), (0, 2)] and depth == {0: 0, 1: 1, 2: 1}
    pos = trees.tree_layout(edges, depth)
    assert pos[0][0] == 0.5 and pos[1][1] == -2
    assert trees.leaf_outcomes(torch.tensor([[0, 1], [0, 2]]), torch.tensor([[True, True], [True, False]]),
                               torch.tensor([1.0, 0.0])) == {1: 1.0, 0: 0.0}


@pytest.mark.parametrize("strategy,seed,task", [(s, *c) for s in ("tree", "arpo", "patr") for c in ((0, 0), (5, 1))])
def test_tree_panel_range(strategy, seed, task):
    node, mask, R, stats = trees.sample_tree(strategy, seed=seed, task=task)
    edges, depth = trees.tree_edges(node, mask)
    assert len(edges) <= int(mask.sum()) and stats["leaves"] >= node.shape[0]
    pos = trees.tree_layout(edges, depth)
    ax = trees.draw_tree(node, mask, R)
    assert len(ax.get_lines()) == len(edges)                                   # one segment per edge
    for ln, (p, c) in zip(ax.get_lines(), edges):
        np.testing.assert_allclose(np.c_[ln.get_xdata(), ln.get_ydata()], [pos[p], pos[c]])
    nodes, leaves = ax.collections[0].get_offsets(), trees.leaf_outcomes(node, mask, R)
    assert len(nodes) == len(pos) - 1 == len({n for _, n in edges})
    assert len(ax.collections) == 2 + len(leaves) and set(leaves.values()) <= {0.0, 1.0}
    assert ax.get_title() == f"{trees.TREE_SETTING}:\none task's tree, {node.shape[0]} leaves, {len(pos) - 1} turn nodes"
    assert_figure_standard(ax.figure, "GridWorld 4x4", "untrained policy", "G=8")


def test_tree_panel_title():
    _, _, _, stats = trees.sample_tree("arpo", seed=2, task=1)
    node, mask, _, _ = trees.sample_tree("arpo", seed=2, task=1)
    fig = trees.tree_panel("arpo", seed=2, task=1)
    assert fig.axes[0].get_title() == (f"{trees.TREE_SETTING}\narpo, seed 2, task 1: {node.shape[0]} leaves, "
                                       f"{len(trees.tree_edges(node, mask)[0])} turn nodes\nwhole batch (2 tasks): "
                                       f"{stats['leaves']} leaves, {stats['tokens_generated']} tokens against a "
                                       f"budget of {stats['token_budget']} "
                                       f"({stats['tokens_generated'] / stats['token_budget']:.2f}x)")
    assert stats["tokens_generated"] >= stats["token_budget"]                  # the last round overshoots
    assert_figure_standard(fig, "GridWorld 4x4", "arpo", "seed 2", "task 1")


def test_budget_table_small():
    arms = {k: replace(v, prompts_per_step=1) for k, v in trees.tree_arms().items() if k != "PATR"}
    t = trees.budget_table(arms)
    assert set(t) == set(arms) and all(r["tokens"] > 0 for r in t.values())
    for a in ("Tree-GRPO", "ARPO"):
        assert t[a]["tokens"] >= t[a]["budget"] > 0                             # grown until its budget is reached
    assert np.isnan(t["independent (GRPO)"]["budget"]) and 0 <= t["ARPO"]["arpo_spread"] < 0.5


def test_arpo_weights_by_hand_and_uniform_before_training():
    """Rows of policy tokens with entropies: row 0 turns start at H 1.0 and 2.5 -> clip(0.5 + 0.2 * 1.5) = 0.8;
    row 1 has one turn only -> NaN after it; turn 0 is never a boundary."""
    from toyrl.batch import TurnBatch
    pm = torch.tensor([[1, 0, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)
    tid = torch.tensor([[0, 0, 1, 1], [0, 0, 0, -1]])
    ent = torch.tensor([[1.0, 9.0, 2.5, 7.0], [3.0, 1.0, 0.0, 0.0]])
    b = TurnBatch(tokens=torch.zeros(2, 4, dtype=torch.long), policy_mask=pm, turn_id=tid,
                  old_logp=torch.zeros(2, 4), turn_mask=torch.tensor([[True, True], [True, False]]),
                  turn_reward=torch.zeros(2, 2), group=torch.zeros(2, dtype=torch.long),
                  state_key=torch.zeros(2, 2, dtype=torch.long), entropy=ent)
    w = trees.arpo_weights(b)
    assert torch.isnan(w[:, 0]).all() and w[0, 1].item() == pytest.approx(0.8) and torch.isnan(w[1, 1])
    assert trees.arpo_weights(b, tau=0.9, beta=1.0)[0, 1].item() == 1.0        # clipped at 1
    arms = trees.tree_arms()
    t = trees.budget_table({a: replace(arms[a], prompts_per_step=2) for a in ("Tree-GRPO", "ARPO")})
    assert t["ARPO"]["arpo_spread"] < 0.01                                      # untrained: every weight ~ tau
    assert {k: v for k, v in t["ARPO"].items() if k != "arpo_spread"} == \
        {k: v for k, v in t["Tree-GRPO"].items() if k != "arpo_spread"}          # so ARPO draws Tree-GRPO's tree


@pytest.mark.parametrize("metric,x", list(itertools.product(trees.KEYS[:4], ("step", "tokens"))))
def test_tree_curve_panel_range(metric, x):
    sweep = fake_sweep(trees.tree_arms(), trees.KEYS)
    ax = trees.plot_tree_panel(sweep, key=metric, x=x, smooth_w=10).axes[0]
    curves = arm_curves(sweep, metric, smooth_w=10, x=x)
    assert_curves_drawn(ax, curves)
    assert ax.get_xlabel() == ("RL step" if x == "step" else "tokens generated (cumulative)")
    assert_figure_standard(ax.figure, trees.SETTING, label(metric))
    for c in curves.values():
        assert np.all(np.diff(c["x"]) > 0)                                      # steps and token counts grow
    assert_curves_drawn(trees.tree_curve_panel(sweep, metric, x, 10).axes[0], curves)


# ---- aggregation -----------------------------------------------------------------------------------
def test_token_weights_and_mass_examples():
    assert np.allclose(aggregation.token_weights([2, 4]), [0.25, 0.125])
    assert np.allclose(aggregation.token_weights([2, 4], "token-mean"), [1 / 6, 1 / 6])
    m = aggregation.advantage_mass(2)
    assert np.isclose(m["grpo"][1], np.sqrt(2), atol=1e-4) and m["dr_grpo"][1] == 1.0 and m["rloo"][1] == 2.0
    G = 8
    assert np.allclose(aggregation.advantage_mass(G, ("dr_grpo",))["dr_grpo"],
                       [2 * k * (G - k) / G for k in range(G + 1)])


@pytest.mark.parametrize("short,long,G", list(itertools.product((1, 12), (12, 48), (2, 16))))
def test_weights_panel_range(short, long, G):
    lengths = [short, (short + long) // 2, long]
    left, right = aggregation.weights_panel(short, long, G).axes
    w = line_data(left)
    np.testing.assert_allclose(w["token-mean"][0], sorted(lengths))
    np.testing.assert_allclose(w["token-mean"][1], 1 / sum(lengths))          # every token weighs the same
    seq = w["seq-mean-token-mean"][1]
    np.testing.assert_allclose(seq, 1 / (3 * np.sort(lengths)))
    assert np.all(np.diff(seq) <= 0)                                           # longer rollout, lighter token
    mass = line_data(right)
    assert list(mass) == ["grpo", "dr_grpo", "rloo"]
    for name, (k, m) in mass.items():
        np.testing.assert_allclose(k, np.arange(G + 1))
        np.testing.assert_allclose(m, aggregation.advantage_mass(G)[name])
        assert m[0] == m[-1] == 0 and np.allclose(m, m[::-1], atol=1e-6)       # no signal at k = 0, G; symmetric
    assert right.get_xlabel() == f"successes k out of G = {G}"
    assert_figure_standard(left.figure, f"G = {G}", f"lengths {lengths[0]}")


@pytest.mark.parametrize("metric", ("turns_per_episode", "success_rate", "zero_var_frac", "clip_frac", "grad_norm"))
def test_agg_panel_range(metric):
    loop = fake_sweep(aggregation.loop_arms(), aggregation.KEYS, seed=1)
    sweeps = aggregation.panel_sweeps(fake_sweep(aggregation.length_arms(), aggregation.KEYS), loop)
    settings = [aggregation.SETTING, aggregation.SETTING, aggregation.RANDOM_SETTING]
    for (name, sweep), setting in zip(sweeps.items(), settings):
        fig = aggregation.plot_agg_panel(sweep, key=metric, smooth_w=10)
        ax = fig.axes[0]
        assert_curves_drawn(ax, arm_curves(sweep, metric, smooth_w=10))
        assert_figure_standard(fig, setting, label(metric))
        assert_curves_drawn(aggregation.agg_panel(sweeps, name, metric, 10).axes[0], arm_curves(sweep, metric,
                                                                                               smooth_w=10))
    first = next(iter(sweeps.values()))
    assert list(line_data(aggregation.agg_panel(sweeps).axes[0])) == list(first)   # default: the first
    assert set(sweeps["BC warm start (random maps)"]) == set(aggregation.RANDOM_ARMS)
    with pytest.raises(ValueError, match="mix the fixed map and random maps"):        # one axis, one setting
        aggregation.plot_agg_panel(loop, key=metric)


def test_arms_validate():
    """Every sweep's arms are valid configs, differ from each other and share one step budget."""
    for arms in (void.void_arms(), context.context_arms(), critics.critic_arms(), trees.tree_arms(),
                 aggregation.length_arms(), aggregation.loop_arms(), prototype.prototype_arms()):
        for cfg in arms.values():
            cfg.validate()
        assert len({repr(cfg) for cfg in arms.values()}) == len(arms) > 1
        assert len({cfg.steps for cfg in arms.values()}) == 1


# ---- shipped sweeps and exercises ----------------------------------------------------------------
SWEEPS = {"void/filter.json": void.void_arms(), "context/mismatch.json": context.context_arms(),
          "critics/curves.json": critics.critic_arms(), "trees/curves.json": trees.tree_arms(),
          "aggregation/length.json": aggregation.length_arms(), "aggregation/loop.json": aggregation.loop_arms(),
          "aggregation/ledger_length_bias.json": aggregation.ledger_arms("length_bias"),
          "aggregation/ledger_is_granularity.json": aggregation.ledger_arms("is_granularity"),
          "prototype/compare.json": prototype.prototype_arms()}


@pytest.mark.parametrize("name", list(SWEEPS))
def test_shipped_sweeps_match_arms(name):
    sweep, meta = load_sweep(RUNS_DIR / name)
    assert set(sweep) == set(SWEEPS[name]) and meta["command"].startswith("python -m toyrl.viz.")


def test_shipped_sweeps_small():
    total = sum(p.stat().st_size for d in ("void", "context", "critics", "trees", "aggregation", "prototype")
                for p in (RUNS_DIR / d).glob("*.json"))
    assert total < 1_000_000


def test_exercises_wrong_answers_give_hints():
    for eid, wrong in (("04.void_rate", lambda v, m: np.zeros(3)), ("04.keep", lambda v, m: v.any(1)),
                       ("04.masked_frac", 0.0), ("05.last_clean_turn", lambda K: K + 1), ("05.biased_turns", lambda K, n: n - K),
                       ("06.turn_gae", lambda r, V, g, l: r), ("06.archer", lambda q, v: q.amax(-1) - v.amax(-1)),
                       ("07.n_nodes", lambda n, m: int(m.sum())), ("07.saving", lambda n, m: 0.0),
                       ("08.seq_mean_weight", lambda L: np.ones(len(L))), ("08.mean_only_mass", lambda k, G: k),
                       ("10.rloo_turns", lambda b: b.turn_reward), ("10.verl_shape", (6, 4))):
        assert check(eid, wrong) is False
    assert check("05.biased_turns", lambda K, n: max(n - K - 1, 0)) and check("08.mean_only_mass", lambda k, G: 2 * k * (G - k) / G)


def test_matches_example():
    assert matches([0.5, 0.5], np.array([0.5, 0.5])) and matches(torch.tensor([1.0]), [1.0 + 1e-7])
    assert not matches([0.5], np.array([0.5, 0.5])) and not matches([0.5, 0.6], [0.5, 0.5])


@pytest.mark.parametrize("claim", list(aggregation.LEDGER_RUNS))
def test_ledger_runs_stored_as_declared(claim):
    """Lesson 08's runs in a ledger claim's setting: stored with the declared arms, seeds, steps and keys, and a
    live run's first step equals the stored one (the store is this code's)."""
    arms, seeds, steps, keys = aggregation.LEDGER_RUNS[claim]
    sweep, meta = load_sweep(RUNS_DIR / "aggregation" / f"ledger_{claim}.json")
    assert list(sweep) == list(arms) and meta["seeds"] == list(seeds) and meta["steps"] == steps
    assert all(set(cols) == set(keys) and np.asarray(cols[keys[0]]).shape == (len(seeds), steps)
               for cols in sweep.values())
    for cfg in aggregation.ledger_arms(claim).values():
        cfg.validate()
        assert cfg.steps == steps
    head = aggregation.ledger_runs(claim, seeds=(0,), steps=1)
    for arm in arms:
        for k in keys:
            np.testing.assert_allclose(head[arm][k], np.asarray(sweep[arm][k], float)[:1, :1], atol=1e-4)
