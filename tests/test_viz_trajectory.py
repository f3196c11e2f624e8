"""Notebook 00's functions (``toyrl.viz.trajectory``, ``toyrl.viz.setting``): the two views of a rollout agree,
each figure draws its data, and each meets the figure standard (a title naming its setting, labelled axes).
"""
from __future__ import annotations

from dataclasses import asdict

import numpy as np
import pytest
from conftest import assert_figure_standard, assert_no_overlap, assert_projectable

from toyrl.train.config import TrainConfig
from toyrl.envs import make_core
from toyrl.train.runlog import RunLog
from toyrl.viz import plots, setting, trajectory


@pytest.mark.parametrize("env", ["gridworld", "mock_search", "bandit_chain"])
@pytest.mark.parametrize("policy", ["tiny", "expert"])
def test_rollout_views_agree(env, policy):
    ro, core, codec = trajectory.sample_rollout(env, n=4, seed=1, policy=policy)
    b = ro.batch
    for row in range(b.B):
        view = trajectory.flat_view(ro, row)
        table = trajectory.turns_table(ro, row, core)
        first = len(ro.episodes[row].prompt)                                  # the prompt is in no turn
        assert first + sum(r["n_policy"] + r["n_grammar"] + r["n_env"] for r in table) == len(view["tokens"])
        assert sum(r["n_env"] for r in table) == int((view["kind"] == plots.KINDS.index("obs")).sum())
        assert sum(r["n_policy"] for r in table) == int(b.policy_mask[row].sum())
        assert len(table) == int(b.turn_mask[row].sum())
        kinds = view["kind"]
        assert set(np.unique(kinds)) <= set(range(1, len(plots.KINDS)))
        policy_kinds = {plots.KINDS.index(k) for k in ("think", "action", "void", "end")}
        assert set(np.unique(kinds[view["policy_mask"]])) <= policy_kinds
        texts = trajectory.episode_texts(env, ro.tasks[row], trajectory.turn_actions(ro, row))
        assert 1 <= len(texts) <= len(table) + 1 and all(isinstance(t, str) and t for t in texts)


@pytest.mark.parametrize("env", ["gridworld", "mock_search"])
@pytest.mark.parametrize("policy", ["tiny", "expert"])
def test_trajectory_token_kinds_follow_the_episode(env, policy):
    """Prompt, then per turn the policy side (END, sampled or written by the grammar, is its own kind ``end``,
    not ``think``; a void turn is all ``void``) and the env's observation: the kinds spell each episode,
    whatever the policy mask says."""
    K = {k: i for i, k in enumerate(plots.KINDS)}
    for seed in (0, 5):
        ro, core, codec = trajectory.sample_rollout(env, n=4, seed=seed, policy=policy)
        for row in range(ro.batch.B):
            ep, kinds = ro.episodes[row], trajectory.flat_view(ro, row)["kind"]
            labels = [lab for lab in trajectory.token_labels(ro, row, core) if lab]
            t = len(ep.prompt)
            assert (kinds[:t] == K["prompt"]).all()
            for turn in ep.turns:
                gen = kinds[t:t + len(turn.gen)]
                assert (gen == K["void"]).all() if turn.void else (gen != K["void"]).all()
                assert (kinds[t + len(turn.gen):t + len(turn.gen) + len(turn.obs)] == K["obs"]).all()
                for j, tok in enumerate(turn.gen):
                    if tok == codec.END:
                        assert labels[t + j] == "END" and (turn.void or gen[j] == K["end"])
                    elif codec.think0 <= tok < codec.act0 and not turn.void:
                        assert gen[j] == K["think"]
                t += len(turn.gen) + len(turn.obs)
            assert t == len(kinds)


def test_trajectory_settings_name_the_data():
    assert setting.env_setting(make_core("gridworld", 1, map_name="4x4")) == "GridWorld 4x4"
    assert setting.env_setting(make_core("gridworld", 1, size=5, slip=0.2)) == "GridWorld 5x5, random maps, slip 0.2"
    assert setting.env_setting(make_core("gridworld", 1, size=7, layout="snake")) == "GridWorld 7x7, snake maps"
    assert setting.env_setting(make_core("mock_search", 1, hops=(1, 2))) == "MockSearch 1/2-hop"
    assert setting.env_setting(make_core("bandit_chain", 1, stages=3, arms=3)) == "BanditChain 3 stages x 3 arms"
    ro, core, _ = trajectory.sample_rollout("gridworld", n=4, seed=0)
    assert setting.rollout_setting(ro, core) == "GridWorld 4x4, policy sampled at T=1, G=4 rollouts of one task"
    ro, core, _ = trajectory.sample_rollout("mock_search", n=4, seed=0, policy="expert")
    assert setting.rollout_setting(ro, core) == "MockSearch 1/2-hop, scripted play, G=4 rollouts of one task"
    assert trajectory.player("tiny", 2) == "untrained tiny policy (T=1), seed 2"
    assert trajectory.player("expert") == "noisy planner (eps 0.3, void 0.3), seed 0"
    cfg = TrainConfig(env="gridworld", env_kwargs={"map_name": "4x4"}, prompts_per_step=4, group_size=8, lr=1e-2,
                      steps=30, seed=0)
    assert setting.run_setting(asdict(cfg)) == "GridWorld 4x4, grpo, tiny policy, P=4 x G=8, lr 0.01, 30 steps, seed 0"


@pytest.mark.parametrize("row", [0, 3])
@pytest.mark.parametrize("seed", [0, 5])
def test_rollout_figure_range(row, seed):
    for env in ("gridworld", "mock_search"):
        policy = "expert" if seed else "tiny"
        fig = trajectory.rollout_figure(env, row=row, seed=seed, policy=policy)
        top, bot = fig.axes
        ro, core, _ = trajectory.sample_rollout(env, n=4, seed=seed, policy=policy)
        r = min(row, ro.batch.B - 1)
        view = trajectory.flat_view(ro, r)
        shown = min(len(view["tokens"]), 80)
        assert len(top.patches) == shown                                       # one coloured cell per token
        assert len(bot.patches) == shown                                       # the same tokens, by turn
        n_pol, n_env = int(view["policy_mask"].sum()), int((view["kind"] == plots.KINDS.index("obs")).sum())
        n_prompt = len(ro.episodes[r].prompt)
        assert top.get_title() == (f"flat view: row {r}, {len(view['tokens'])} tokens = {n_prompt} prompt + {n_pol} "
                                   f"sampled by the policy + {len(view['tokens']) - n_prompt - n_pol - n_env} "
                                   f"written for it + {n_env} env")
        table = trajectory.turns_table(ro, r, core)                           # the figure and the table agree
        assert sum(t["n_grammar"] for t in table) == len(view["tokens"]) - n_prompt - n_pol - n_env
        assert fig._suptitle.get_text() == f"{setting.rollout_setting(ro, core, trajectory.player(policy, seed))}: row {r}"
        assert_figure_standard(fig, setting.env_setting(core), trajectory.player(policy, seed), "G=4", f"row {r}")
    ro, core, _ = trajectory.sample_rollout("gridworld", n=4, seed=seed)
    fig = trajectory.plot_turn_strips(ro, core, rows=[0, 1, 2, 3])
    assert [ax.get_title() for ax in fig.axes] == [f"row {r}: R={float(ro.batch.outcome()[r]):.0f}" for r in range(4)]
    for r, ax in enumerate(fig.axes):
        view = trajectory.flat_view(ro, r)
        first = len(ro.episodes[r].prompt)
        in_turns = (view["turn_id"] >= 0) & (view["turn_id"] < 8) & (np.arange(len(view["turn_id"])) >= first)
        assert len(ax.patches) == int(in_turns.sum())                        # the tokens of the first 8 turns
    assert_figure_standard(fig, "GridWorld 4x4", "policy sampled at T=1", "G=4", "rows 0, 1, 2, 3")


@pytest.mark.parametrize("env", ["gridworld", "mock_search", "bandit_chain"])
def test_trajectory_figures_meet_the_standard(env):
    """The notebook's calls: the flat/turn view of a sampled row, the turn strips of an expert group."""
    ro, core, _ = trajectory.sample_rollout(env, n=4, seed=0)
    assert_figure_standard(trajectory.plot_flat_vs_turns(ro, 0, core), setting.env_setting(core),
                           "policy sampled at T=1", "G=4 rollouts", "row 0")
    ro, core, _ = trajectory.sample_rollout(env, n=4, seed=0, policy="expert")
    fig = trajectory.plot_turn_strips(ro, core, max_turns=3)
    assert_figure_standard(fig, setting.env_setting(core), "scripted play", "G=4 rollouts", "first 3 turns")


def test_plot_training_on_rows():
    rows = [{"step": i, "reward_mean": i / 10, "success_rate": 0.5, "reward_std": 0.1, "entropy": 1.0,
             "turns_per_episode": 4.0, "void_turn_rate": 0.0} for i in range(8)]
    axes = trajectory.plot_training(rows).axes
    keys = ("reward_mean", "reward_std", "entropy", "turns_per_episode")   # the defaults: no identical or flat panel
    assert [ax.get_title() for ax in axes] == [plots.label(k) for k in keys]
    assert [ax.get_ylabel() for ax in axes] == [plots.label(k) for k in keys]
    assert axes[0].figure._suptitle.get_text().startswith("training log, 8 steps")
    assert_no_overlap(axes[0].figure)
    for ax, k in zip(axes, keys):
        raw = ax.get_lines()[0]
        np.testing.assert_allclose(raw.get_xdata(), np.arange(8))
        np.testing.assert_allclose(raw.get_ydata(), [r[k] for r in rows])
    np.testing.assert_allclose(axes[0].get_lines()[1].get_ydata(), plots.smooth(np.arange(8) / 10, 5))


def test_plot_training_names_the_run():
    cfg = TrainConfig(env="mock_search", env_kwargs={"hops": (1,), "max_turns": 3}, estimator="gigpo",
                      prompts_per_step=2, group_size=4, lr=3e-3, steps=6, seed=3)
    log = RunLog(config=asdict(cfg))
    rng = np.random.default_rng(0)
    for i in range(6):
        log.append({"step": i, **{k: float(rng.random()) for k in ("reward_mean", "success_rate", "reward_std",
                                                                     "entropy", "turns_per_episode", "void_turn_rate")}})
    fig = trajectory.plot_training(log, window=3)
    assert_figure_standard(fig, "MockSearch 1-hop", "gigpo", "tiny policy", "P=2 x G=4", "6 steps", "seed 3",
                           "last 3 steps")


def test_turns_table_counts_every_token_once():
    """Row 0 of the lesson's group: 18 prompt tokens, then per turn END (written by the grammar, not sampled),
    the sampled action and the env's SEP + cell; the table's three counts and the figure's title say the same."""
    ro, core, _ = trajectory.sample_rollout("gridworld", n=4, seed=0)
    table = trajectory.turns_table(ro, 0, core)
    assert [(r["n_policy"], r["n_grammar"]) for r in table] == [(1, 1)] * len(table)
    assert all(r["n_env"] == 2 for r in table[:-1]) and table[-1]["policy"].split()[0] == "END"


@pytest.mark.parametrize("env,policy,row", [("gridworld", "tiny", 0), ("gridworld", "tiny", 3),
                                            ("mock_search", "expert", 0), ("bandit_chain", "tiny", 2)])
def test_trajectory_figures_project(env, policy, row):
    """Every figure of lesson 00 at its defaults in the lesson's style: text >= 12 pt on a slide, width <= 10 in
    before the slides scale."""
    from toyrl.viz import style
    with style.figure_style("slides"):
        fig = trajectory.rollout_figure(env, row=row, policy=policy)
        assert fig.get_size_inches()[0] <= style.figsize(10, 1)[0] + 1e-9
        assert_projectable(fig)
        ro, core, _ = trajectory.sample_rollout(env, n=4, seed=1, policy=policy)
        fig = trajectory.plot_turn_strips(ro, core, max_turns=3)
        assert fig.get_size_inches()[0] <= style.figsize(10, 1)[0] + 1e-9
        assert_projectable(fig)
        assert_figure_standard(fig, setting.env_setting(core), "G=4 rollouts", "rows 0, 1")


def test_plot_training_projects():
    from toyrl.viz import style
    rows = [{"step": i, "reward_mean": i / 10, "reward_std": 0.1, "entropy": 1.0, "turns_per_episode": 4.0}
            for i in range(8)]
    with style.figure_style("slides"):
        fig = trajectory.plot_training(rows)
        assert_projectable(fig)
        assert_figure_standard(fig, "training log, 8 steps")
