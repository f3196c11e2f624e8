"""Tasks where reasoning is necessary: the T-maze layout, the chain with its plan in the prompt, the blind context,
the expert that writes what must be remembered, and the scrambled-reasoning evaluation."""
import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env

from toyrl.codecs.toy import ToyCodec
from toyrl.envs import make_core
from toyrl.envs.experts import expert_actions, expert_memo
from toyrl.envs.gridworld import LEFT, RIGHT, GridCore, shortest_path
from toyrl.envs.layouts import GOAL, HOLE, cross_map, doors_map, tmaze_map
from toyrl.policies.scripted import ScriptedPolicy
from toyrl.rollout.play import Episode, Sampling, Turn, build_context, rollout, scramble_reasoning

TMAZE = {"size": 5, "layout": "tmaze"}
DOORS = {"size": 5, "layout": "doors"}
CROSS = {"size": 7, "layout": "cross"}
PLAN = {"stages": 4, "arms": 4, "on_wrong": "end", "show_layout": True}


def test_tmaze_map_by_hand_and_errors():
    rows = ["".join("FHGS"[t] for t in tmaze_map(3, 1)[r * 3:(r + 1) * 3]) for r in range(3)]
    assert rows == ["HSH", "HFH", "HFG"]                                       # the docstring's example
    left = tmaze_map(5, 0).reshape(5, 5)
    assert left[4, 0] == GOAL and left[4, 4] == HOLE and (left[:4, [0, 1, 3, 4]] == HOLE).all()
    for n, side in ((4, 0), (1, 0), (5, 2)):
        with pytest.raises(ValueError, match="size|side"):
            tmaze_map(n, side)
    with pytest.raises(ValueError, match="layout"):
        GridCore(2, size=5, layout="maze")
    with pytest.raises(ValueError, match="odd size"):
        GridCore(2, size=4, layout="tmaze")


def test_cross_map_by_hand_and_errors():
    rows = ["".join("FHGS"[t] for t in cross_map(5, 2)[r * 5:(r + 1) * 5]) for r in range(5)]
    assert rows == ["HHSHH", "HHFHH", "HHFHH", "HHFGH", "HHHHH"]               # the docstring's example
    for n in (5, 7, 9):
        for e in range(3):
            tiles = cross_map(n, e)
            assert (tiles == GOAL).sum() == 1 and len(shortest_path(tiles, n)) == n - 1
    for n, e in ((3, 0), (6, 0), (5, 3)):
        with pytest.raises(ValueError, match="size|exit"):
            cross_map(n, e)
    core = GridCore(3, size=5, layout="cross")
    core.reset(np.stack([cross_map(5, e) for e in range(3)]))
    assert [core.memo(i) for i in range(3)] == [[0], [1], [2]]                 # the exit's action id


def test_doors_map_by_hand_and_errors():
    rows = ["".join("FHGS"[t] for t in doors_map(5, 2)[r * 5:(r + 1) * 5]) for r in range(5)]
    assert rows == ["HHSHH", "HHFHH", "HHFHH", "FFFFF", "HHHGH"]               # the docstring's example
    for door in range(4):
        tiles = doors_map(5, door)
        assert (tiles[20:] == GOAL).sum() == 1 and tiles[22] == HOLE            # no door under the corridor
        assert len(shortest_path(tiles, 5)) == 3 + abs(door + (door >= 2) - 2) + 1
    for n, door in ((3, 0), (6, 0), (5, 4), (5, -1)):
        with pytest.raises(ValueError, match="size|door"):
            doors_map(n, door)
    with pytest.raises(ValueError, match="odd size >= 5"):
        GridCore(2, size=3, layout="doors")
    core = GridCore(4, **DOORS)
    core.reset(np.stack([doors_map(5, d) for d in range(4)]))
    assert [core.memo(i) for i in range(4)] == [[0], [1], [2], [3]]


@pytest.mark.parametrize("n", [3, 5, 7, 9])
def test_tmaze_optimal_length(n):
    for side in (0, 1):
        assert len(shortest_path(tmaze_map(n, side), n)) == (n - 1) + (n - 1) // 2


def test_tmaze_tasks_seeded_and_both_sides():
    core = GridCore(64, **TMAZE)
    a, b = core.sample_tasks(np.random.default_rng(3), 64), core.sample_tasks(np.random.default_rng(3), 64)
    assert (a == b).all()
    sides = (a[:, 20] == GOAL).astype(int)                                    # bottom-left corner holds G
    assert 10 < sides.sum() < 54


@pytest.mark.parametrize("kw", [TMAZE, DOORS, CROSS])
def test_check_env_and_determinism(kw):
    env = gym.make("toyrl/GridWorld-v0", **kw).unwrapped
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(env)
    runs = []
    for _ in range(2):
        e = gym.make("toyrl/GridWorld-v0", **kw).unwrapped
        e.action_space.seed(1)
        obs, _ = e.reset(seed=11)
        seq = [obs]
        for _ in range(8):
            obs, r, term, trunc, _ = e.step(e.action_space.sample())
            seq.append((obs, r, term, trunc))
            if term or trunc:
                break
        runs.append(seq)
    assert runs[0] == runs[1]


def random_success(name, kw, n=4000, seed=0):
    core = make_core(name, n, seed=seed, **kw)
    rng = np.random.default_rng(seed)
    core.reset(core.sample_tasks(rng, n))
    won = np.zeros(n, bool)
    while not core.done.all():
        _, _, _, _, info = core.step(rng.integers(0, core.n_actions, n))
        won |= info["success"]
    return won.mean()


def test_random_policy_success():
    # T-maze 5x5: four downs in a row (a side step is a hole, up only wastes a turn), then the right corner
    assert random_success("gridworld", TMAZE) < 0.03
    assert random_success("gridworld", DOORS) < 0.03
    assert random_success("gridworld", CROSS) < 0.01
    # plan chain, 4 stages x 4 arms, a wrong pull ends the episode: (1/4)^4 = 0.0039
    assert abs(random_success("bandit_chain", PLAN) - 0.25 ** 4) < 0.004


def test_memo_by_hand():
    core = GridCore(2, **TMAZE)
    core.reset(np.stack([tmaze_map(5, 0), tmaze_map(5, 1)]))
    assert [core.memo(0), core.memo(1)] == [[LEFT], [RIGHT]]
    lake = GridCore(1, map_name="4x4")
    lake.reset(lake.sample_tasks(np.random.default_rng(0), 1))
    assert lake.memo(0) == shortest_path(lake.state["tiles"][0], 4)
    lake.step(np.array([shortest_path(lake.state["tiles"][0], 4)[0]]))
    assert len(lake.memo(0)) == len(shortest_path(lake.state["tiles"][0], 4)) - 1     # the plan from here on
    chain = make_core("bandit_chain", 1, **PLAN)
    good = np.zeros((4, 4), np.int64)
    good[[0, 1, 2, 3], [2, 0, 3, 1]] = 1
    chain.reset(good.reshape(1, -1))
    assert chain.memo(0) == [2, 0, 3, 1]
    chain.step(np.array([2]))
    assert chain.memo(0) == [0, 3, 1] and expert_memo(chain) == [[0, 3, 1]]


def test_plan_chain_prompt_and_errors():
    chain = make_core("bandit_chain", 1, **PLAN)
    good = np.zeros((4, 4), np.int64)
    good[[0, 1, 2, 3], [2, 0, 3, 1]] = 1
    chain.reset(good.reshape(1, -1))
    assert chain.prompt_tokens(0) == [4, 9 + 2, 9 + 0, 9 + 3, 9 + 1]          # stage 0, then arm ids after 4 + K + 1
    assert chain.obs_vocab_size == 4 + 5 + 4 and max(chain.prompt_tokens(0)) < chain.obs_vocab_size
    with pytest.raises(ValueError, match="good_arms=1"):
        make_core("bandit_chain", 1, stages=3, arms=4, good_arms=2, show_layout=True)


def test_think_ids():
    codec = ToyCodec(n_think=4, n_actions=4, n_obs=3, think_max=2)
    assert codec.think_ids([2, 0, 3]) == [7, 5]                                # the docstring's example
    with pytest.raises(ValueError, match="n_think"):
        codec.think_ids([4])


def test_blind_context_by_hand():
    codec = ToyCodec(n_think=4, n_actions=4, n_obs=10, think_max=2)
    ep = Episode(prompt=[codec.BOS, 20, 21, 22], task=np.zeros(1))
    assert build_context(ep, codec, "blind", 1) == [codec.BOS, 20, 21, 22]     # turn 0 reads the prompt
    for g, o in (([5, 4, 9], [3, 19]), ([6, 4, 10], [3, 18])):
        ep.turns.append(Turn(context=[], gen=g, logp=[0.0] * 3, entropy=[0.0] * 3, obs=o, reward=0.0, key=0,
                             void=False))
    assert build_context(ep, codec, "blind", 1) == [codec.BOS, 6, 4, 10, 3, 18]        # never the prompt again
    assert build_context(ep, codec, "blind", 2) == [codec.BOS, 5, 4, 9, 3, 19, 6, 4, 10, 3, 18]
    assert build_context(ep, codec, "last_k", 1)[:4] == [codec.BOS, 20, 21, 22]        # last_k keeps the prompt


@pytest.mark.parametrize("name,kw,think_max", [("gridworld", TMAZE, 2), ("gridworld", DOORS, 2),
                                               ("gridworld", CROSS, 2), ("bandit_chain", PLAN, 4)])
def test_reasoning_expert_solves_blind_tasks(name, kw, think_max):
    core = make_core(name, 16, seed=0, **kw)
    codec = ToyCodec.for_core(core, n_think=4, think_max=think_max)
    tasks = core.sample_tasks(np.random.default_rng(0), 16)
    expert = ScriptedPolicy(core, codec, expert_actions, reason=expert_memo)
    ro = rollout(expert, core, tasks, np.arange(16), codec=codec, sampling=Sampling(context="blind", context_k=1))
    assert ro.success.all()
    first = ro.batch.tokens[0]
    think = codec.reasoning_mask(first) & ro.batch.policy_mask[0]
    assert think.any()                                                         # the expert wrote its memo
    with pytest.raises(ValueError, match="think_ids"):
        ScriptedPolicy(core, object(), expert_actions, reason=expert_memo)


def test_scramble_reasoning_touches_only_reasoning():
    codec = ToyCodec(n_think=4, n_actions=4, n_obs=3, think_max=3)
    tokens = torch.tensor([[5, 6, 7, 4, 10], [4, 11, 0, 0, 0]])              # r r r END a | END a pad
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]], dtype=torch.bool)
    g = torch.Generator().manual_seed(0)
    outs = [scramble_reasoning(tokens, mask, codec, g) for _ in range(50)]
    for out in outs:
        assert (out[:, 3:] == tokens[:, 3:]).all() and (out[1] == tokens[1]).all()
        assert ((out[0, :3] >= 5) & (out[0, :3] < 9)).all()
    assert len({tuple(o[0, :3].tolist()) for o in outs}) > 10                  # really drawn, not copied
    with pytest.raises(ValueError, match="reasoning"):
        scramble_reasoning(tokens, mask, object())
