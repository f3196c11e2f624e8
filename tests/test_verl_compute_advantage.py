"""verl 0.9.1's own ray_trainer.compute_advantage, patched by toyrl.port.verl_advantage, on a multi-turn DataProto
in both layouts (one row per trajectory; one row per turn with traj_uid): GiGPO, turn-level GAE and a user's
registered estimator equal toyrl's advantages on the same turns within 1e-6; a missing state key raises."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from toyrl.credit import ESTIMATORS, register_estimator
from toyrl.port.verl import register_with_verl
from toyrl.port.verl_advantage import patch_compute_advantage
from toyrl.port.verl_loader import load_core_algos
from toyrl.segments import anchor_index, segment_mean
from toyrl.testing import random_batch

try:                                              # verl 0.9.1 and what its trainer module imports (toyrl[verl-cpu])
    load_core_algos()                             # ray stand-ins where ray is absent
    from verl import DataProto
    from verl.trainer.ppo import ray_trainer
except Exception:
    DataProto = ray_trainer = None
pytestmark = pytest.mark.skipif(ray_trainer is None, reason="verl's trainer module is not importable")

USER = "test_anchor_loo"


def anchor_loo(batch):
    """A user's idea: each turn's reward minus the mean reward of its (group, state) anchor."""
    idx, S = anchor_index(batch.group, batch.state_key, batch.turn_mask)
    r = batch.turn_reward.masked_fill(~batch.turn_mask, 0)                    # (B, H)
    mean = segment_mean(r.flatten(), idx.flatten(), S + 1)[idx]               # (B, H)
    return (r - mean) * batch.turn_mask


@pytest.fixture(scope="module")
def verl_keys():
    if USER not in ESTIMATORS:
        register_estimator(USER, level="turn")(anchor_loo)
    keys = register_with_verl(("gigpo", "turn_gae", USER), requires={USER: ("state_key",)})
    patch_compute_advantage()
    yield keys
    ESTIMATORS.pop(USER, None)


def toyrl_reference():
    """A random multi-turn batch (keys that recur within groups) and per-turn values; every rollout has a turn
    (one row per turn cannot hold a rollout of none)."""
    b = random_batch(14, 3, n_groups=2, n_keys=2, seed=3, optional=False)
    b = b.select(b.turn_mask.any(1).nonzero().flatten())
    return b.replace(values=torch.rand(b.B, b.H, generator=torch.Generator().manual_seed(4), dtype=torch.float64))


def one_row_per_trajectory(b, *, keys=True):
    """Each valid turn: 2 response tokens then 1 observation token; its reward on its last response token."""
    L = 3 * b.H
    mask = torch.zeros(b.B, L, dtype=torch.long)
    rew = torch.zeros(b.B, L, dtype=torch.float64)
    for i in range(b.B):
        for k in range(int(b.turn_mask[i].sum())):
            mask[i, 3 * k:3 * k + 2] = 1
            rew[i, 3 * k + 1] = b.turn_reward[i, k]
    nt = {"uid": np.array([f"q{int(g)}" for g in b.group], dtype=object)}
    for name, v in (("state_key", b.state_key), ("values", b.values)):
        col = np.empty(b.B, dtype=object)
        col[:] = [[(f"s{int(x)}" if name == "state_key" else float(x)) for x in v[i][b.turn_mask[i]]]
                  for i in range(b.B)]
        nt[name] = col
    if not keys:
        nt.pop("state_key")
    want_pos = [(i, 3 * k + j, k) for i in range(b.B) for k in range(int(b.turn_mask[i].sum())) for j in (0, 1)]
    return DataProto.from_dict(tensors={"token_level_rewards": rew, "response_mask": mask}, non_tensors=nt), want_pos


def one_row_per_turn(b, *, shuffle=True):
    """Each valid turn its own row (2 response tokens, its reward on the last), rows shuffled, turn_index given."""
    cells = [(i, k) for i in range(b.B) for k in range(int(b.turn_mask[i].sum()))]
    order = torch.randperm(len(cells), generator=torch.Generator().manual_seed(5)).tolist() if shuffle \
        else list(range(len(cells)))
    cells = [cells[j] for j in order]
    N = len(cells)
    mask = torch.zeros(N, 3, dtype=torch.long)
    mask[:, :2] = 1
    rew = torch.zeros(N, 3, dtype=torch.float64)
    rew[:, 1] = torch.stack([b.turn_reward[i, k] for i, k in cells])
    obj = lambda xs: np.array(xs, dtype=object)                               # noqa: E731
    nt = {"uid": obj([f"q{int(b.group[i])}" for i, _ in cells]), "traj_uid": obj([f"t{i}" for i, _ in cells]),
          "state_key": obj([f"s{int(b.state_key[i, k])}" for i, k in cells]),
          "values": np.array([float(b.values[i, k]) for i, k in cells])}
    if shuffle:
        nt["turn_index"] = np.array([k for _, k in cells])
    return DataProto.from_dict(tensors={"token_level_rewards": rew, "response_mask": mask}, non_tensors=nt), cells


@pytest.mark.parametrize("name", ["gigpo", "turn_gae", USER])
def test_verl_compute_advantage_matches_toyrl_one_row_per_trajectory(verl_keys, name):
    b = toyrl_reference()
    want = ESTIMATORS[name](b)                                                # (B, H) toyrl's own advantages
    assert want.abs().sum() > 0
    data, pos = one_row_per_trajectory(b)
    out = ray_trainer.compute_advantage(data, adv_estimator=f"toyrl_{name}")
    adv = out.batch["advantages"]                                             # (B, L)
    got = torch.stack([adv[i, t] for i, t, _ in pos])
    ref = torch.stack([want[i, k] for i, _, k in pos])
    torch.testing.assert_close(got, ref, atol=1e-6, rtol=0)
    assert not adv[data.batch["response_mask"] == 0].any()


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("name", ["gigpo", "turn_gae", USER])
def test_verl_compute_advantage_matches_toyrl_one_row_per_turn(verl_keys, name, shuffle):
    b = toyrl_reference()
    want = ESTIMATORS[name](b)
    data, cells = one_row_per_turn(b, shuffle=shuffle)
    adv = ray_trainer.compute_advantage(data, adv_estimator=f"toyrl_{name}").batch["advantages"]   # (N, 3)
    ref = torch.stack([want[i, k] for i, k in cells])
    torch.testing.assert_close(adv[:, 0], ref, atol=1e-6, rtol=0)
    torch.testing.assert_close(adv[:, 1], ref, atol=1e-6, rtol=0)
    assert not adv[:, 2].any()


def test_gigpo_without_state_keys_is_not_rloo_it_raises(verl_keys):
    b = toyrl_reference()
    data, _ = one_row_per_trajectory(b, keys=False)
    with pytest.raises(ValueError, match="no 'state_key'"):
        ray_trainer.compute_advantage(data, adv_estimator="toyrl_gigpo")
    with pytest.raises(ValueError, match="no 'state_key'"):
        ray_trainer.compute_advantage(data, adv_estimator=f"toyrl_{USER}")
    data.non_tensor_batch.pop("values")
    with pytest.raises(ValueError, match="no 'values'"):
        ray_trainer.compute_advantage(data, adv_estimator="toyrl_turn_gae")


def test_verl_estimators_run_verl_code_unchanged_and_registration_is_what_was_asked(verl_keys):
    from verl.trainer.ppo import core_algos
    assert verl_keys == ["toyrl_gigpo", "toyrl_turn_gae", f"toyrl_{USER}"]
    assert register_with_verl(("gigpo",)) == ["toyrl_gigpo"]                   # no policy loss with it
    b = toyrl_reference()
    data, _ = one_row_per_trajectory(b)
    out = ray_trainer.compute_advantage(data, adv_estimator="grpo")            # verl's own branch
    R = data.batch["token_level_rewards"].sum(-1)
    adv, _ = core_algos.compute_grpo_outcome_advantage(data.batch["token_level_rewards"],
                                                       data.batch["response_mask"], data.non_tensor_batch["uid"])
    torch.testing.assert_close(out.batch["advantages"], adv)
    assert R.abs().sum() > 0
