"""Long-horizon credit tasks: the snake and the fork layouts of GridWorld, and BanditChain's lures (a
farmable turn reward). Maps by hand, optimal lengths, check_env, determinism, random-policy success, the planner,
and the imperfect teacher that gives the warm starts their per-turn error rate."""
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from toyrl.envs import make_core
from toyrl.envs.bandit_chain import BanditCore
from toyrl.envs.experts import expert_actions, noisy_expert
from toyrl.envs.gridworld import GridCore, shortest_path
from toyrl.envs.layouts import GOAL, HOLE, START, build, check_size, fork_map, snake_map, variants

SNAKE_LEN = {3: 6, 5: 16, 7: 30, 9: 48}


def rows(tiles, n):
    return ["".join("FHGS"[t] for t in tiles[r * n:(r + 1) * n]) for r in range(n)]


def test_snake_by_hand_and_errors():
    assert rows(snake_map(3), 3) == ["SFF", "HHF", "GFF"]                          # the docstring's example
    assert rows(snake_map(5), 5) == ["SFFFF", "HHHHF", "FFFFF", "FHHHH", "FFFFG"]
    assert rows(snake_map(5, 1), 5) == ["FFFFS", "FHHHH", "FFFFF", "HHHHF", "GFFFF"]   # mirrored
    for n, m in ((4, 0), (1, 0), (5, 2)):
        with pytest.raises(ValueError, match="size|mirror"):
            snake_map(n, m)


def test_fork_by_hand_and_errors():
    assert rows(fork_map(5, 1), 5) == ["FFSFF", "FHHHF", "FHHHF", "FHHHF", "HHHHG"]   # the docstring's example
    left = fork_map(7, 0).reshape(7, 7)
    assert left[6, 0] == GOAL and left[6, 6] == HOLE and left[0, 3] == START
    for n, side in ((3, 0), (6, 0), (5, 2)):
        with pytest.raises(ValueError, match="size|side"):
            fork_map(n, side)


@pytest.mark.parametrize("n", [3, 5, 7, 9])
def test_snake_optimal_length_is_the_whole_path(n):
    for m in (0, 1):
        tiles = snake_map(n, m)
        path = shortest_path(tiles, n)
        assert len(path) == SNAKE_LEN[n] == (n + 1) // 2 * n + (n - 1) // 2 - 1
        assert len(path) == int((tiles != HOLE).sum()) - 1                           # every ice cell is on it


@pytest.mark.parametrize("n", [5, 7, 9])
def test_fork_optimal_length(n):
    for side in (0, 1):
        assert len(shortest_path(fork_map(n, side), n)) == (n - 1) // 2 + (n - 1)


def test_layout_registry_and_size_checks():
    assert variants("snake", 7) == 2 and variants("fork", 9) == 2 and variants("doors", 7) == 6
    assert (build("snake", 7, 1) == snake_map(7, 1)).all()
    for layout, n in (("snake", 4), ("fork", 3), ("maze", 5)):
        with pytest.raises(ValueError, match="layout"):
            check_size(layout, n)
        with pytest.raises(ValueError, match="layout"):
            GridCore(2, size=n, layout=layout)
    with pytest.raises(ValueError, match="map_name"):
        GridCore(2, size=5, layout="snake", map_name="4x4")


@pytest.mark.parametrize("kw", [{"size": 7, "layout": "snake"}, {"size": 9, "layout": "fork"},
                                {"stages": 6, "arms": 4, "lures": 1, "dense": True}])
def test_check_env_and_determinism(kw):
    env_id = "toyrl/BanditChain-v0" if "stages" in kw else "toyrl/GridWorld-v0"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(gym.make(env_id, **kw).unwrapped, skip_render_check=True)
    name = "bandit_chain" if "stages" in kw else "gridworld"
    a = make_core(name, 32, seed=5, **kw).sample_tasks(np.random.default_rng(11), 32)
    b = make_core(name, 32, seed=6, **kw).sample_tasks(np.random.default_rng(11), 32)
    assert (a == b).all()                                                       # tasks depend only on their rng
    e1, e2 = gym.make(env_id, **kw), gym.make(env_id, **kw)
    o1, _ = e1.reset(seed=3)
    o2, _ = e2.reset(seed=3)
    assert o1 == o2 and e1.unwrapped.state_key() == e2.unwrapped.state_key()
    for a_ in (1, 2, 2, 0, 1):
        s1, s2 = e1.step(a_), e2.step(a_)
        assert s1[:4] == s2[:4]


def random_success(name, n_eps, seed=0, **kw):
    core = make_core(name, n_eps, seed=seed, **kw)
    core.reset(core.sample_tasks(np.random.default_rng(seed), n_eps))
    rng, won = np.random.default_rng(seed + 1), np.zeros(n_eps, bool)
    while not core.done.all():
        _, _, _, _, info = core.step(rng.integers(0, core.n_actions, n_eps))
        won |= info["success"]
    return won.mean()


def test_random_policy_almost_never_solves_the_long_tasks():
    # uniform moves on the snake: each turn 1/4 along the path, 1/4 (or more at a wall) standing still, else a fall
    assert random_success("gridworld", 20_000, size=5, layout="snake") < 1e-3
    assert random_success("gridworld", 20_000, size=7, layout="snake") == 0.0
    fork = random_success("gridworld", 20_000, size=9, layout="fork")
    assert fork < 1e-3                                                         # 12 right moves (a few ways back)
    # 8 stages, 16 pulls, 1 of 4 arms right: P(Binomial(16, 1/4) >= 8) = 0.027; a lure changes no odds
    for lures in (0, 1):
        r = random_success("bandit_chain", 20_000, stages=8, arms=4, max_turns=16, lures=lures)
        assert abs(r - 0.0271) < 0.006


@pytest.mark.parametrize("kw", [{"size": 5, "layout": "snake"}, {"size": 9, "layout": "snake"},
                                {"size": 9, "layout": "fork"}])
def test_planner_solves_every_task_in_the_optimal_length(kw):
    core = GridCore(8, seed=0, **kw)
    tasks = core.sample_tasks(np.random.default_rng(0), 8)
    core.reset(tasks)
    turns, won = np.zeros(8, int), np.zeros(8, bool)
    while not core.done.all():
        live = ~core.done
        a = np.full(8, -1)
        a[live] = expert_actions(core, np.flatnonzero(live))
        _, _, _, _, info = core.step(a)
        turns += live
        won |= info["success"]
    assert won.all()
    assert all(turns[i] == len(shortest_path(tasks[i], kw["size"])) for i in range(8))


def test_noisy_expert_errs_at_its_rate():
    core = GridCore(4000, size=7, layout="snake", seed=0)
    core.reset(core.sample_tasks(np.random.default_rng(0), 4000))
    rows_ = np.arange(4000)
    right = expert_actions(core, rows_)
    got = noisy_expert(0.2, np.random.default_rng(1))(core, rows_)
    assert abs((got != right).mean() - 0.2 * 0.75) < 0.02                      # a flip to the same action is no error
    assert noisy_expert(0.0, np.random.default_rng(1)) is expert_actions
    with pytest.raises(ValueError, match="eps"):
        noisy_expert(1.5, np.random.default_rng(1))


def test_lure_by_hand():
    core = BanditCore(3, stages=2, arms=4, lures=1, dense=True, on_wrong="end", seed=0)
    task = np.array([[1, 2, 0, 0, 0, 0, 2, 1]])                                 # stage 0: arm 0 good, arm 1 lure
    core.reset(np.repeat(task, 3, 0))
    obs, r, term, trunc, info = core.step(np.array([1, 0, 2]))                 # lure, right, wrong
    assert obs.tolist() == [0, 1, 0]                                            # the lure does not advance
    assert r.tolist() == [0.5, 0.5, 0.0]                                        # but pays like a right pull
    assert info["found"].tolist() == [True, True, False] and info["right"].tolist() == [False, True, False]
    assert term.tolist() == [False, False, True]                               # a lure never ends the chain
    assert core.oracle_actions(0) == [0, 3] and expert_actions(core, np.array([0, 1])).tolist() == [0, 3]


def test_lure_layouts_and_errors():
    plain = BanditCore(1, stages=5, arms=4).sample_tasks(np.random.default_rng(4), 50)
    lured = BanditCore(1, stages=5, arms=4, lures=1).sample_tasks(np.random.default_rng(4), 50)
    assert ((lured == 1) == (plain == 1)).all()                                # the same good arms, the same draws
    per_stage = lured.reshape(50, 5, 4)
    assert ((per_stage == 2).sum(2) == 1).all() and set(np.unique(plain)) == {0, 1}
    with pytest.raises(ValueError, match="lures"):
        BanditCore(1, stages=2, arms=3, good_arms=1, lures=2)
    no_lure = BanditCore(1, stages=2, arms=4)
    no_lure.reset(np.array([[1, 0, 0, 0, 0, 1, 0, 0]]))
    assert "found" not in no_lure.step(np.array([0]))[4]                         # the signal stays "right"
