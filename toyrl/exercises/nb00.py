"""Checkers of notebook 00 (start here): reading a multi-turn rollout."""
from __future__ import annotations

import numpy as np

from . import exercise


def _ro(env="gridworld", policy="tiny"):
    from ..viz.trajectory import sample_rollout
    return sample_rollout(env, n=4, seed=0, policy=policy)


@exercise("00.policy_tokens")
def policy_tokens(answer):
    """How many tokens of row 1 of ``sample_rollout("gridworld", n=4, seed=0)`` did the policy write?"""
    ro, _, _ = _ro()
    want = int(ro.batch.policy_mask[1].sum())
    if int(answer) == want:
        return True, f"{want} policy tokens: sum the row's policy_mask."
    return False, "count the True entries of ro.batch.policy_mask[1] (not the prompt, not the observations)."


@exercise("00.env_share")
def env_share(answer):
    """Fraction of the non-prompt tokens of row 0 of the MockSearch expert rollout that the environment wrote."""
    from ..viz.trajectory import flat_view
    ro, _, _ = _ro("mock_search", "expert")
    v = flat_view(ro, 0)
    pm = v["policy_mask"]
    first = int(np.argmax(pm))
    want = float((~pm[first:]).sum() / len(pm[first:]))
    if abs(float(answer) - want) < 1e-3:
        return True, f"{want:.3f}: almost every token after the question came from the search tool."
    return False, ("start counting at the first policy token (flat_view(ro, 0)['policy_mask']); divide the "
                   "non-policy tokens by all tokens from there on.")


@exercise("00.void_turns")
def void_turns(answer):
    """How many void turns are there in total in ``sample_rollout("gridworld", n=4, seed=0)``?"""
    ro, _, _ = _ro()
    want = int((ro.batch.void_turn & ro.batch.turn_mask).sum())
    if int(answer) == want:
        return True, f"{want} void turns (an EOT or no action token ends the turn without a move)."
    return False, "sum ro.batch.void_turn over the valid turns (ro.batch.turn_mask)."
