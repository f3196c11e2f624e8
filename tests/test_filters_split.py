"""StarPO-S logs what it kept against what it dropped (``toyrl.filters.kept_split``)."""
import math

import numpy as np
import torch

from toyrl.diagnostics import template_entropy_mi, turn_template_ids
from toyrl.envs import make_core
from toyrl.filters import FILTERS, kept_split, starpo_s
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


def test_kept_split_by_hand():
    b = _batch()
    keep = torch.zeros(b.B, dtype=torch.bool)
    keep[:8] = True                                                    # the first two groups kept
    out = kept_split(b, keep)
    R = b.outcome().float()
    assert math.isclose(out["kept_reward"], float(R[:8].mean()), rel_tol=1e-6)
    assert math.isclose(out["dropped_reward"], float(R[8:].mean()), rel_tol=1e-6)
    ids, present = turn_template_ids(b.tokens, b.policy_mask, b.turn_id, b.H)
    present &= b.turn_mask
    task = (b.task if b.task is not None else b.group)[:, None].expand(-1, b.H)
    m = present & keep[:, None]
    assert math.isclose(out["kept_template_mi"], template_entropy_mi(ids[m], task[m])[1], rel_tol=1e-9, abs_tol=1e-12)
    everything = kept_split(b, torch.ones(b.B, dtype=torch.bool))
    assert math.isnan(everything["dropped_reward"]) and math.isnan(everything["dropped_template_mi"])


def test_starpo_s_entry_keeps_as_before_and_logs_the_split():
    b = _batch(seed=1)
    res = FILTERS["starpo_s"](b, p=0.25)
    plain = starpo_s(b.outcome(), b.group, p=0.25)
    assert torch.equal(res.keep, plain.keep)
    assert {"kept_reward", "dropped_reward", "kept_template_mi", "dropped_template_mi"} <= set(res.counts)
    assert res.counts["kept"] == plain.counts["kept"]
