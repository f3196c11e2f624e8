"""Tests of the viz modules of notebooks 4-8 and 10: worked examples, and every panel's pure function over
its whole slider range (corners of each range, small sizes)."""
from __future__ import annotations

import itertools
from dataclasses import replace

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from toyrl.exercises import check  # noqa: E402
from toyrl.viz import aggregation, context, critics, prototype, trees, void  # noqa: E402
from toyrl.viz.prototype import RUNS_DIR, load_sweep  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _fake_sweep(arms, keys, S=2, N=6):
    rng = np.random.default_rng(0)
    return {a: {k: rng.random((S, N)).tolist() for k in keys} for a in arms}


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


def test_compare_tiny():
    cfg = replace(prototype.prototype_arms(2)["grpo"], prompts_per_step=1, group_size=2)
    out = prototype.compare({"grpo": cfg}, seeds=(0, 1), keys=("reward_mean",), steps=1)
    assert np.asarray(out["grpo"]["reward_mean"]).shape == (2, 1)


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
    void.plot_void_gradients(g)


@pytest.mark.parametrize("metric,smooth", list(itertools.product(
    ("void_turn_rate", "void_traj_rate", "success_rate", "reward_mean", "kept_frac"), (1, 10))))
def test_void_panel_range(metric, smooth):
    sweep = _fake_sweep(void.void_arms(), void.KEYS)
    void.plot_void_panel(sweep, list(sweep)[:2], key=metric, smooth_w=smooth)


# ---- context ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("ctx,k,seed", [("last_k", 1, 0), ("last_k", 4, 3), ("summary", 1, 3), ("summary", 4, 0)])
def test_ratio_bias_panel_range(ctx, k, seed):
    res = context.ratio_bias_per_turn(ctx, k, seed=seed, prompts_per_step=1)
    assert np.abs(res["matched"]).max() < 1e-5                                # matched recompute is exact
    assert np.abs(res["flat"][:k + 1]).max() < 1e-5                           # nothing cut yet
    context.plot_ratio_bias(res)
    assert np.isfinite(context.bias_slope(res))


def test_bias_slope_example():
    assert np.isclose(context.bias_slope({"flat": np.array([0.0, 0.1, 0.2]), "turns": np.array([9, 9, 9])}), 0.1)


@pytest.mark.parametrize("metric", context.KEYS)
def test_context_panel_range(metric):
    context.plot_context_panel(_fake_sweep(context.context_arms(), context.KEYS), key=metric, smooth_w=10)


# ---- critics ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("p_expert,n_train,steps", [(0.0, 16, 20), (1.0, 256, 200), (0.0, 256, 200), (1.0, 16, 20)])
def test_value_panel_range(p_expert, n_train, steps):
    tr = critics.collect_grid(min(n_train, 64), seed=0, p_expert=p_expert, max_turns=6)
    te = critics.collect_grid(16, seed=99, p_expert=p_expert, max_turns=6)
    fits = {p: critics.fit_value(tr, te, privileged=p, steps=min(steps, 40), every=20) for p in (False, True)}
    assert all(np.isfinite(f["test_mse"]).all() for f in fits.values())
    critics.plot_value_fit(fits)


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
    critics.plot_critic_panel(_fake_sweep(critics.critic_arms(), critics.KEYS), key=metric, smooth_w=1)


# ---- trees -----------------------------------------------------------------------------------------
def test_tree_edges_example():
    edges, depth = trees.tree_edges(torch.tensor([[0, 1], [0, 2]]), torch.ones(2, 2, dtype=torch.bool))
    assert edges == [(-1, 0), (0, 1), (0, 2)] and depth == {0: 0, 1: 1, 2: 1}
    pos = trees.tree_layout(edges, depth)
    assert pos[0][0] == 0.5 and pos[1][1] == -2


@pytest.mark.parametrize("strategy,seed,task", [(s, *c) for s in ("tree", "arpo", "patr") for c in ((0, 0), (5, 1))])
def test_tree_panel_range(strategy, seed, task):
    node, mask, R, stats = trees.sample_tree(strategy, seed=seed, task=task)
    edges, _ = trees.tree_edges(node, mask)
    assert len(edges) <= int(mask.sum()) and stats["leaves"] >= node.shape[0]
    trees.draw_tree(node, mask, R)


def test_budget_table_small():
    arms = {k: replace(v, prompts_per_step=1) for k, v in trees.tree_arms().items() if k != "PATR"}
    t = trees.budget_table(arms)
    assert set(t) == set(arms) and all(r["tokens"] > 0 for r in t.values())


@pytest.mark.parametrize("metric,x", list(itertools.product(trees.KEYS[:4], ("step", "tokens"))))
def test_tree_curve_panel_range(metric, x):
    trees.plot_tree_panel(_fake_sweep(trees.tree_arms(), trees.KEYS), key=metric, x=x, smooth_w=10)


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
    aggregation.plot_token_weights([short, (short + long) // 2, long])
    aggregation.plot_advantage_mass(G)


@pytest.mark.parametrize("metric", ("turns_per_episode", "success_rate", "zero_var_frac", "clip_frac", "grad_norm"))
def test_agg_panel_range(metric):
    for arms in (aggregation.length_arms(), aggregation.loop_arms()):
        aggregation.plot_agg_panel(_fake_sweep(arms, aggregation.KEYS), key=metric, smooth_w=10)


def test_arms_validate():
    for arms in (void.void_arms(), context.context_arms(), critics.critic_arms(), trees.tree_arms(),
                 aggregation.length_arms(), aggregation.loop_arms(), prototype.prototype_arms()):
        for cfg in arms.values():
            cfg.validate()


# ---- shipped sweeps and exercises ----------------------------------------------------------------
SWEEPS = {"void/filter.json": void.void_arms(), "context/mismatch.json": context.context_arms(),
          "critics/curves.json": critics.critic_arms(), "trees/curves.json": trees.tree_arms(),
          "aggregation/length.json": aggregation.length_arms(), "aggregation/loop.json": aggregation.loop_arms(),
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
                       ("04.masked_frac", 0.0), ("05.last_clean_turn", lambda K: K + 1), ("05.which_recompute", "flat"),
                       ("06.turn_gae", lambda r, V, g, l: r), ("06.archer", lambda q, v: q.amax(-1) - v.amax(-1)),
                       ("07.n_nodes", lambda n, m: int(m.sum())), ("07.saving", lambda n, m: 0.0),
                       ("08.seq_mean_weight", lambda L: np.ones(len(L))), ("08.mean_only_mass", lambda k, G: k),
                       ("10.rloo_turns", lambda b: b.turn_reward), ("10.verl_shape", (6, 4))):
        assert check(eid, wrong) is False
    assert check("05.which_recompute", "matched") and check("08.mean_only_mass", lambda k, G: 2 * k * (G - k) / G)
