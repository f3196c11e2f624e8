"""What StarPO-S kept against what it dropped and a same-size random keep (``lab.claims.measures.kept_split``)."""
import math

import numpy as np
import pytest
import torch

from toyrl.diagnostics import template_entropy_mi, turn_template_ids
from toyrl.envs import make_core
from toyrl.filters import starpo_s
from toyrl.lab.claims.measures import kept_split, starpo_split_measure
from toyrl.policies import make_policy
from toyrl.rollout import ToyCodec, rollout


def _batch(B=32, G=4, seed=0):
    core = make_core("gridworld", B, seed=seed, map_name="4x4", max_turns=8)
    codec = ToyCodec.for_core(core)
    policy = make_policy("tiny", codec.size, seed=seed)
    tasks = np.repeat(core.sample_tasks(np.random.default_rng(seed), B // G), G, 0)
    ro = rollout(policy, core, tasks, np.repeat(np.arange(B // G), G), codec=codec,
                 generator=torch.Generator().manual_seed(seed))
    return ro.batch


def _mi(b, rows):
    ids, present = turn_template_ids(b.tokens, b.policy_mask, b.turn_id, b.H)
    m = present & b.turn_mask & rows[:, None]
    task = (b.task if b.task is not None else b.group)[:, None].expand(-1, b.H)
    return template_entropy_mi(ids[m], task[m])[1]


def test_kept_split_by_hand():
    b = _batch()
    keep = torch.zeros(b.B, dtype=torch.bool)
    keep[:8] = True                                                    # the first two groups kept
    out = kept_split(b, keep)
    R = b.outcome().float()
    assert math.isclose(out["kept_reward"], float(R[:8].mean()), rel_tol=1e-6)
    assert math.isclose(out["dropped_reward"], float(R[8:].mean()), rel_tol=1e-6)
    assert math.isclose(out["kept_template_mi"], _mi(b, keep), rel_tol=1e-9, abs_tol=1e-12)
    assert math.isclose(out["dropped_template_mi"], _mi(b, ~keep), rel_tol=1e-9, abs_tol=1e-12)
    everything = kept_split(b, torch.ones(b.B, dtype=torch.bool))
    assert math.isnan(everything["dropped_reward"]) and math.isnan(everything["dropped_template_mi"])
    assert everything["random_template_mi"] == everything["kept_template_mi"]   # a random keep of all groups


def test_random_keep_has_as_many_groups_as_the_filter():
    b = _batch(seed=1)
    keep = starpo_s(b.outcome(), b.group, p=0.25).keep
    seen = []

    class Rng:                                                          # records the permutation it hands out
        def permutation(self, n):
            p = np.random.default_rng(3).permutation(n)
            seen.append(p)
            return p
    out = kept_split(b, keep, Rng())
    n_groups = len(torch.unique(b.group[keep]))
    picked = torch.unique(b.group)[torch.as_tensor(seen[0][:n_groups])]
    rows = torch.isin(b.group, picked)
    assert math.isclose(out["random_reward"], float(b.outcome().float()[rows].mean()), rel_tol=1e-6)
    assert math.isclose(out["random_template_mi"], _mi(b, rows), rel_tol=1e-9, abs_tol=1e-12)


def test_measure_validates_its_arm():
    with pytest.raises(ValueError, match="arm"):
        starpo_split_measure("grpo", 0, True, {})
    with pytest.raises(ValueError, match="base must filter with starpo_s"):
        starpo_split_measure("starpo_s", 0, True, {"env": "gridworld"})
