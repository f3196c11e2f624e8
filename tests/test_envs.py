"""Environment contracts, over every registered toyrl env: check_env, determinism, snapshot/restore,
state keys, the text codec, and batched-core vs single-env equivalence."""
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import given, settings, strategies as st

import toyrl
from toyrl.envs import ENVS, VOID, make_core, mix64
from toyrl.envs.gridworld import MAPS, GridCore, map_to_array, random_map, shortest_path

ENV_IDS = [gym_id for gym_id, _ in ENVS.values()]
# a slippery GridWorld exercises the core's random stream; the others are deterministic given the task;
# short MockSearch passages seen word by word exercise its other distractor count and token view
VARIANTS = [(gym_id, {}) for gym_id in ENV_IDS] + [("toyrl/GridWorld-v0", {"slip": 0.3}),
                                                   ("toyrl/MockSearch-v0", {"passage_words": 40, "token_view": "word"})]


def make(gym_id, **kw):
    return gym.make(gym_id, **kw).unwrapped


def play(env, seed, n=12):
    obs, info = env.reset(seed=seed)
    out = [(obs, info["state_key"], env.render_text())]
    for _ in range(n):
        a = env.action_space.sample()
        obs, r, term, trunc, info = env.step(a)
        out.append((obs, r, term, trunc, info["state_key"], env.render_text()))
        if term or trunc:
            break
    return out


def equal(a, b):
    return repr(a) == repr(b)


@pytest.mark.parametrize("gym_id", ENV_IDS)
def test_registered_and_check_env(gym_id):
    assert gym_id in gym.registry
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(make(gym_id))


@pytest.mark.parametrize("gym_id,kw", VARIANTS)
def test_same_seed_same_episode(gym_id, kw):
    e1, e2 = make(gym_id, **kw), make(gym_id, **kw)
    e1.action_space.seed(5)
    e2.action_space.seed(5)
    assert equal(play(e1, 7), play(e2, 7))


@pytest.mark.parametrize("gym_id,kw", VARIANTS)
def test_snapshot_restore_replays(gym_id, kw):
    env = make(gym_id, **kw)
    env.reset(seed=3)
    env.step(env.action_space.sample())
    snap = env.snapshot()
    rng = np.random.default_rng(0)
    actions = rng.integers(env.action_space.n, size=6)

    def tail():
        out = []
        for a in actions:
            obs, r, term, trunc, info = env.step(int(a))
            out.append((obs, r, term, trunc, info["state_key"], env.render_text()))
            if term or trunc:
                break
        return out

    first = tail()
    env.restore(snap)
    assert equal(first, tail())


@pytest.mark.parametrize("gym_id", ENV_IDS)
def test_state_key_stable_across_instances(gym_id):
    e1, e2 = make(gym_id), make(gym_id)
    e1.reset(seed=11)
    e2.reset(seed=11)
    assert e1.state_key() == e2.state_key()
    assert isinstance(e1.state_key(), int)
    e3 = make(gym_id)
    keys = {e3.reset(seed=s)[1]["state_key"] for s in range(20)}
    assert len(keys) > 1  # different tasks give different start keys


@pytest.mark.parametrize("gym_id", ENV_IDS)
@settings(max_examples=60, deadline=None)
@given(text=st.text(max_size=60))
def test_parse_action_garbage_is_none_or_valid(gym_id, text):
    env = _parse_env(gym_id)
    a = env.parse_action(text)
    assert a is None or 0 <= a < env.action_space.n


_PARSE_ENVS = {}


def _parse_env(gym_id):
    if gym_id not in _PARSE_ENVS:
        env = make(gym_id)
        env.reset(seed=0)
        _PARSE_ENVS[gym_id] = env
    return _PARSE_ENVS[gym_id]


@pytest.mark.parametrize("gym_id", ENV_IDS)
def test_parse_action_round_trip_and_void(gym_id):
    env = make(gym_id)
    env.reset(seed=0)
    for a in range(env.action_space.n):
        assert env.parse_action(env.action_text(a)) == a
        assert env.parse_action("Let me think. " + env.action_text(a) + " done") == a
    for junk in ["", "hello", "move[", "[]", "pull[-1]", "move[sideways]", None, "answer["]:
        assert env.parse_action(junk) is None
    key = env.state_key()
    obs, r, term, trunc, info = env.step(None)   # a void turn: observable, never raised
    assert info["void"] is True and env.state_key() == key


@pytest.mark.parametrize("name", list(ENVS))
def test_batched_core_matches_single_env(name):
    """N copies stepped together equal N gymnasium envs stepped one by one (same tasks, same actions).

    All copies of a core share one random stream, so envs that draw noise per step (MockSearch's
    distractor sentences) are compared without it; the stream itself is covered by the N = 1 test below.
    """
    kw = {"noise_sentences": 0} if name == "mock_search" else {}
    N, steps = 6, 10
    rng = np.random.default_rng(1)
    core = make_core(name, N, seed=0, **kw)
    tasks = core.sample_tasks(rng, N)
    core.reset(tasks)
    actions = rng.integers(-1, core.n_actions, size=(steps, N))
    envs = [make(ENVS[name][0], **kw) for _ in range(N)]
    for i, env in enumerate(envs):
        env.reset(seed=0, options={"task": tasks[i]})
    for t in range(steps):
        obs, r, term, trunc, info = core.step(actions[t])
        for i, env in enumerate(envs):
            if env.core.done[0]:
                continue
            o, ri, te, tr, inf = env.step(None if actions[t, i] == VOID else int(actions[t, i]))
            assert equal(env._obs(obs[i:i + 1]), o) and r[i] == ri and term[i] == te and trunc[i] == tr
            assert inf["state_key"] == core.state_keys()[i]
            assert env.render_text() == core.render_text(i)


@pytest.mark.parametrize("name", list(ENVS))
def test_batched_core_n1_equals_env(name):
    """The gymnasium env is a core of one copy driven by self.np_random: same seed, same stream."""
    kw = {"slip": 0.4} if name == "gridworld" else {}
    env = make(ENVS[name][0], **kw)
    env.reset(seed=9)
    core = make_core(name, 1, **kw)
    core.np_random = np.random.default_rng(9)
    core.reset(core.sample_tasks(core.np_random, 1))
    rng = np.random.default_rng(2)
    for a in rng.integers(0, core.n_actions, size=15):
        o1 = env.step(int(a))
        o2 = core.step(np.array([a]))
        assert o1[1] == o2[1][0] and o1[2] == o2[2][0] and o1[4]["state_key"] == core.state_keys()[0]
        if o1[2] or o1[3]:
            break


def test_fork_branches_continue_from_the_same_state():
    core = make_core("gridworld", 4, seed=0, map_name="4x4")
    core.reset(core.sample_tasks(core.np_random, 1))
    core.step(np.array([2, 1, 2, 1]))
    child = core.fork([0, 0, 1])
    assert child.num_envs == 3
    assert (child.state_keys() == core.state_keys()[[0, 0, 1]]).all()
    child.step(np.array([2, 1, 2]))
    assert (core.state["turn"] == 1).all()   # the parent is untouched


def test_equal_states_equal_keys_across_paths():
    core = make_core("gridworld", 2, seed=0, map_name="4x4")
    core.reset(core.sample_tasks(core.np_random, 1))
    core.step(np.array([2, 1]))   # right / down
    core.step(np.array([1, 2]))   # down / right: both paths end in the hole at (1, 1)
    k = core.state_keys()
    assert k[0] == k[1]


def test_mix64_stable_values():
    # frozen values: a change in the hash would silently regroup GiGPO anchors across versions
    assert mix64(np.array([0, 1, 2])).tolist() == mix64(np.array([0, 1, 2])).tolist()
    assert len(set(mix64(np.arange(10000)).tolist())) == 10000
    assert (mix64(np.arange(100)) >= 0).all()


def test_gridworld_rules():
    core = GridCore(1, map_name="4x4")
    core.reset(map_to_array(MAPS["4x4"]))
    # right, right, down, down, down, right -> goal at (3, 3) along the BFS path
    path = shortest_path(map_to_array(MAPS["4x4"]), 4)
    rewards = [core.step(np.array([a]))[1][0] for a in path]
    assert rewards[-1] == 1.0 and sum(rewards) == 1.0 and core.done[0]
    core.reset(map_to_array(MAPS["4x4"]))
    _, r, term, _, _ = core.step(np.array([1]))      # down to (1, 0): ice
    _, r, term, _, _ = core.step(np.array([2]))      # right to (1, 1): a hole
    assert term[0] and r[0] == 0.0
    core.reset(map_to_array(MAPS["4x4"]))
    _, r, term, _, _ = core.step(np.array([0]))      # left into the wall: stays
    assert core.obs()[0] == 0 and not term[0]


def test_gridworld_random_maps_solvable_and_seeded():
    rng1, rng2 = np.random.default_rng(4), np.random.default_rng(4)
    for _ in range(20):
        m1, m2 = random_map(rng1, 5), random_map(rng2, 5)
        assert (m1 == m2).all() and shortest_path(m1, 5) is not None


def test_gridworld_truncates_at_max_turns():
    core = GridCore(3, map_name="4x4", max_turns=3)
    core.reset(map_to_array(MAPS["4x4"]))
    for t in range(3):
        _, _, term, trunc, _ = core.step(np.zeros(3, np.int64))   # left into the wall forever
    assert trunc.all() and not term.any() and core.done.all()
    _, r, term, trunc, _ = core.step(np.zeros(3, np.int64))       # done copies stay put
    assert not trunc.any() and (r == 0).all()


def test_gridworld_slip_rate():
    core = GridCore(20000, map_name="8x8", slip=0.3, seed=0)
    core.reset(map_to_array(MAPS["8x8"]))
    core.step(np.full(20000, 2))                                   # right from (0, 0)
    moved_right = (core.obs() == 1).mean()
    assert abs(moved_right - 0.7) < 0.02                           # slips go down (or up into the wall)


def test_bandit_rules():
    from toyrl.envs.bandit_chain import BanditCore
    core = BanditCore(3, stages=3, arms=3, on_wrong="stay")
    good = np.zeros((3, 3), np.int64)
    good[:, 1] = 1                                                  # arm 1 is right at every stage
    core.reset(good.reshape(1, -1))
    _, r, term, _, info = core.step(np.array([1, 0, VOID]))
    assert core.obs().tolist() == [1, 0, 0] and info["right"].tolist() == [True, False, False]
    core.step(np.array([1, 1, 1]))
    _, r, term, _, info = core.step(np.array([1, 1, 1]))
    assert r.tolist() == [1.0, 0.0, 0.0] and term.tolist() == [True, False, False]
    end = BanditCore(2, stages=2, arms=2, on_wrong="end", dense=True)
    end.reset(np.array([[0, 1, 1, 0]]))
    _, r, term, _, _ = end.step(np.array([1, 0]))
    assert r.tolist() == [0.5, 0.0] and term.tolist() == [False, True]
    restart = BanditCore(1, stages=2, arms=2, on_wrong="restart")
    restart.reset(np.array([[0, 1, 1, 0]]))
    restart.step(np.array([1]))
    restart.step(np.array([1]))                                     # wrong at stage 1 -> stage 0
    assert restart.obs()[0] == 0


def test_core_validates_inputs():
    core = make_core("gridworld", 2, map_name="4x4")
    with pytest.raises(ValueError, match="tasks"):
        core.reset(np.zeros((3, 16), np.int64))
    core.reset(core.sample_tasks(core.np_random, 2))
    with pytest.raises(ValueError, match=r"actions must have shape \(N,\)=\(2,\)"):
        core.step(np.zeros(3, np.int64))
    with pytest.raises(ValueError, match="actions must lie"):
        core.step(np.array([0, 7]))
    with pytest.raises(ValueError, match="unknown env"):
        make_core("nope", 1)


def test_goal_distance_and_neighbours_by_hand():
    from toyrl.envs.gridworld import goal_distance, map_to_array, neighbours
    assert neighbours(2).tolist() == [[0, 0, 2, 2], [2, 3, 2, 3], [1, 1, 3, 3], [0, 1, 0, 1], [0, 1, 2, 3]]
    assert goal_distance(map_to_array(["SF", "HG"]), 2).tolist() == [2, 1, 1000000, 0]
    with pytest.raises(ValueError, match="tiles must have shape"):
        goal_distance(map_to_array(["SF", "HG"]), 3)
