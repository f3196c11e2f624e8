"""Lesson 00's checkers: each correct form accepted, the plausible near-misses rejected."""
from __future__ import annotations

import numpy as np
import torch

from toyrl.exercises import CHECKS, check, nb00  # noqa: F401  (registers the checkers)
from toyrl.viz.trajectory import flat_view, sample_rollout


def ok(name, answer):
    return CHECKS[name](answer)[0]


def test_policy_tokens():
    ro, _, _ = sample_rollout("gridworld", n=4, seed=0)
    want = int(ro.batch.policy_mask[1].sum())
    assert want == 4                                                  # one action a turn, 4 turns
    for form in (want, np.int64(want), torch.tensor(want), float(want)):
        assert ok("00.policy_tokens", form)
    for miss in (2 * want,                                            # END counted as the policy's
                 int(ro.batch.policy_mask[0].sum()),                  # row 0
                 len(flat_view(ro, 1)["tokens"]),                     # the whole row
                 want + 0.5):
        assert not check("00.policy_tokens", miss)


def test_env_share():
    ro, _, _ = sample_rollout("mock_search", n=4, seed=1, policy="expert")
    v = flat_view(ro, 0)
    prompt = len(ro.episodes[0].prompt)
    obs = (v["kind"][prompt:] == 5)
    want = obs.mean()
    assert ok("00.env_share", want) and ok("00.env_share", round(100 * want, 1))
    pm, first = v["policy_mask"], int(np.argmax(v["policy_mask"]))
    for miss in ((~pm[first:]).mean(),                                # END counted as the environment's
                 obs.sum() / (obs.sum() + pm.sum()),                  # env / (env + policy)
                 (v["kind"] == 5).mean(),                             # the prompt counted in
                 1 - want):
        assert abs(miss - want) > 0.005 and not ok("00.env_share", miss)


def test_void_turns():
    ro, _, _ = sample_rollout("mock_search", n=4, seed=0, policy="expert")
    void = ro.batch.void_turn & ro.batch.turn_mask
    want = int(void.sum())
    assert ok("00.void_turns", want) and ok("00.void_turns", torch.tensor(want))
    assert int(void.any(1).sum()) != want and not ok("00.void_turns", int(void.any(1).sum()))  # rows, not turns
    assert not ok("00.void_turns", int(void[0].sum()))                                          # row 0 only
    assert not check("00.void_turns", 0)
