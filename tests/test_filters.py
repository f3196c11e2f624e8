"""Filters: hand-computed keep masks and counts, registry on a TurnBatch, loop-vs-vectorized."""
import numpy as np
import pytest
import torch

from toyrl import TurnBatch
from toyrl.envs import make_core
from toyrl.filters import (FILTERS, FilterResult, leave_one_out, loop_abs_adv, starpo_s, t2po_resample,
                           turn_uncertainty, void_turn, zero_variance)
from toyrl.policies import make_policy
from toyrl.rollout import ToyCodec, rollout


def make_batch(reward_last, group, void=None, H=2):
    """B rollouts, each: prompt, a_0, o_0, a_1 (H = 2 turns), reward on the last turn."""
    B = len(group)
    T = 4
    turn_id = torch.tensor([[0, 0, 0, 1]] * B)
    policy = torch.tensor([[False, True, False, True]] * B)
    reward = torch.zeros(B, H)
    reward[:, -1] = torch.tensor(reward_last)
    return TurnBatch(tokens=torch.arange(B * T).view(B, T), policy_mask=policy, turn_id=turn_id,
                     old_logp=torch.zeros(B, T), turn_mask=torch.ones(B, H, dtype=torch.bool), turn_reward=reward,
                     group=torch.tensor(group), state_key=torch.zeros(B, H, dtype=torch.long),
                     void_turn=None if void is None else torch.tensor(void, dtype=torch.bool))


def test_zero_variance():
    out = zero_variance(torch.tensor([1.0, 0.0, 1.0, 1.0, 3.0]), torch.tensor([0, 0, 1, 1, 2]))
    assert out.keep.tolist() == [True, True, False, False, False]            # singleton group: std 0
    assert out.counts == {"groups": 3, "kept_groups": 1, "kept": 2, "zero_var_groups": 2}
    loose = zero_variance(torch.tensor([1.0, 0.9, 1.0, 1.0]), torch.tensor([0, 0, 1, 1]), threshold=0.1)
    assert loose.keep.tolist() == [False, False, False, False]


def test_starpo_s_top_p_by_std():
    reward = torch.tensor([0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 5.0, 0.0])
    group = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])                          # stds: .71, 0, 0, 3.54
    out = starpo_s(reward, group, p=0.5)
    assert out.keep.tolist() == [True, True, False, False, False, False, True, True]
    assert starpo_s(reward, group).counts["kept_groups"] == 1               # floor(0.25 * 4) = 1
    assert starpo_s(reward, group, p=0.1).counts["kept_groups"] == 1        # at least one group
    # zero-std groups rank last: p = 0.75 keeps 3 groups, the third is a zero-std one (lowest id first)
    assert starpo_s(reward, group, p=0.75).keep.tolist() == [True, True, True, True, False, False, True, True]
    assert starpo_s(reward, group, p=0.75, include_zero_std=False).counts["kept_groups"] == 2
    with pytest.raises(ValueError, match="p must lie"):
        starpo_s(reward, group, p=0.0)


def test_starpo_s_loop_vs_vectorized():
    g = torch.Generator().manual_seed(0)
    group = torch.randint(0, 9, (60,), generator=g)
    reward = torch.randint(0, 3, (60,), generator=g).float()
    out = starpo_s(reward, group, p=0.25)
    ids = sorted(set(group.tolist()))
    std = {i: float(reward[group == i].std()) if int((group == i).sum()) > 1 else 0.0 for i in ids}
    ranked = sorted(ids, key=lambda i: (-std[i], i))
    kept = set(ranked[:max(1, int(0.25 * len(ids)))])
    assert out.keep.tolist() == [int(x) in kept for x in group]


def test_void_turn_masks_loss_only():
    out = void_turn(torch.tensor([[0, 0], [0, 1], [1, 0]], dtype=torch.bool),
                    torch.tensor([[1, 1], [1, 0], [1, 1]], dtype=torch.bool))
    assert out.keep.tolist() == [True, True, False]                        # row 1's void turn is not valid
    assert out.counts == {"void_trajectories": 1, "void_turns": 1, "kept": 2}
    with pytest.raises(ValueError, match="void and turn_mask"):
        void_turn(torch.zeros(2, 2, dtype=torch.bool), torch.zeros(2, 3, dtype=torch.bool))


def test_loop_abs_adv_and_leave_one_out():
    assert loop_abs_adv(torch.tensor([0.5, -0.005, 0.0])).keep.tolist() == [True, False, False]
    assert leave_one_out(torch.tensor([1.0, 0.0, 0.0, 2.0]), torch.tensor([0, 0, 0, 1])).tolist() == [1.0, -0.5, -0.5, 0.0]
    with pytest.raises(ValueError, match="adv must be a 1-D"):
        loop_abs_adv(torch.zeros(2, 2))


def test_t2po_resample():
    u = torch.tensor([[0.9, 0.8, 0.8, 0.1], [0.0, 0.2, 0.3, 0.35]])
    tm = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]], dtype=torch.bool)
    out = t2po_resample(u, tm)
    assert out.keep.tolist() == [[False, True, False, False], [False, True, True, False]]
    assert out.counts == {"resample_turns": 3, "valid_turns": 7}


def test_registry_on_turnbatch():
    batch = make_batch([1.0, 0.0, 1.0, 1.0], [0, 0, 1, 1], void=[[0, 0], [0, 1], [0, 0], [0, 0]])
    assert set(FILTERS) == {"zero_variance", "starpo_s", "void_turn", "loop_abs_adv", "t2po_resample"}
    assert FILTERS["zero_variance"](batch).keep.tolist() == [True, True, False, False]
    assert FILTERS["starpo_s"](batch).keep.tolist() == [True, True, False, False]
    assert FILTERS["void_turn"](batch).keep.tolist() == [True, False, True, True]
    assert FILTERS["loop_abs_adv"](batch).keep.tolist() == [True, True, False, False]
    assert FILTERS["t2po_resample"](batch, u=torch.tensor([[0.0, 0.1]] * 4)).keep.shape == (4, 2)
    with pytest.raises(ValueError, match="needs u"):
        FILTERS["t2po_resample"](batch)
    assert all(isinstance(FILTERS[n](batch, **({"u": torch.zeros(4, 2)} if n == "t2po_resample" else {})),
                          FilterResult) for n in FILTERS)


def test_turn_uncertainty_by_hand_and_the_t2po_entry():
    u = turn_uncertainty(torch.tensor([[0.2, 0.4, 9.0, 0.6]]), torch.tensor([[True, True, False, True]]),
                         torch.tensor([[0, 0, 0, 1]]), 2)
    assert torch.allclose(u, torch.tensor([[0.3, 0.6]]))                    # the written token does not count
    batch = make_batch([1.0, 0.0], [0, 0]).replace(entropy=torch.tensor([[0.0, 0.9, 0.0, 0.8]] * 2))
    f = FILTERS["t2po_resample"]
    assert f.level == "turn" and f.needs == ("entropy",) and FILTERS["starpo_s"].level == "rollout"
    out = f(batch)                                                          # u = [[.9, .8]]: |diff| .1 < .3 stalls
    assert out.keep.tolist() == [[True, False]] * 2 and out.counts == {"resample_turns": 2, "valid_turns": 4}
    assert f(batch, eta=0.05).keep.all()                                    # .1 > eta: the turn moved


def test_turn_uncertainty_is_the_signal_the_rollout_resamples_on():
    core = make_core("gridworld", 8, seed=0, map_name="4x4", max_turns=6)
    codec = ToyCodec.for_core(core, think_max=2)
    policy = make_policy("tiny", codec.size, seed=0)
    tasks = core.sample_tasks(np.random.default_rng(0), 8)
    ro = rollout(policy, core, tasks, np.arange(8), codec=codec, generator=torch.Generator().manual_seed(0))
    b = ro.batch
    u = turn_uncertainty(b.entropy, b.policy_mask, b.turn_id, b.H)
    want = torch.zeros(b.B, b.H)
    for i, ep in enumerate(ro.episodes):
        for k, t in enumerate(ep.turns):
            want[i, k] = t.u
    assert torch.allclose(u, want, atol=1e-6)
