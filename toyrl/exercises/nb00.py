"""Checkers of notebook 00 (start here): reading a multi-turn rollout."""
from __future__ import annotations

import numpy as np

from . import exercise

SEARCH_SEED = 1
"""the seed of the MockSearch group the lesson draws (its noisy planner answers in 3 of 4 rows)"""
VOID_SEED = 0
"""the seed of the MockSearch group whose void turns exercise 3 counts (not drawn in the lesson)"""


def _ro(env="gridworld", policy="tiny", seed=0):
    from ..viz.trajectory import sample_rollout
    return sample_rollout(env, n=4, seed=seed, policy=policy)


def _integer(answer) -> int:
    """An integer answer from an int, a numpy integer or a one-element tensor; a float that is not whole raises."""
    x = answer.item() if hasattr(answer, "item") else answer
    if isinstance(x, bool) or float(x) != int(float(x)):
        raise ValueError(f"answer must be a whole number, got {answer!r}")
    return int(float(x))


@exercise("00.policy_tokens")
def policy_tokens(answer):
    """How many tokens of row 1 of ``sample_rollout("gridworld", n=4, seed=0)`` did the policy sample (True in
    ``policy_mask``: the tokens the loss touches)? The END the grammar writes is on the policy's side of the
    turn, but not sampled."""
    ro, _, _ = _ro()
    want = int(ro.batch.policy_mask[1].sum())
    got = _integer(answer)
    if got == want:
        return True, f"{want} sampled tokens: one action a turn; the grammar wrote each turn's END."
    if got == 2 * want:
        return False, "that counts END too: the grammar writes it, the policy did not sample it (policy_mask)."
    return False, "count the True entries of ro.batch.policy_mask[1] (not the prompt, END or the observations)."


def env_share_of(ro, row: int) -> float:
    """The share of row ``row``'s tokens after the prompt that the environment wrote (token kind ``obs``)."""
    from ..viz.plots import KINDS
    from ..viz.trajectory import flat_view
    kind = flat_view(ro, row)["kind"][len(ro.episodes[row].prompt):]
    return float(np.mean(kind == KINDS.index("obs")))


@exercise("00.env_share")
def env_share(answer):
    """In row 0 of ``sample_rollout("mock_search", n=4, seed=1, policy="expert")``, what fraction of the tokens
    after the prompt did the environment write? (A fraction in [0, 1], or a percentage.)"""
    ro, _, _ = _ro("mock_search", "expert", SEARCH_SEED)
    want = env_share_of(ro, 0)
    got = float(answer)
    if abs(got - want) < 1e-3 or abs(got - 100 * want) < 0.1:
        return True, f"{want:.3f}: almost every token after the question came from the search tool."
    return False, ("take flat_view(ro, 0)['kind'] after the prompt (len(ro.episodes[0].prompt) tokens) and count "
                   "the environment's kind, 'obs' (KINDS.index('obs')): END and the action are the policy's side.")


@exercise("00.void_turns")
def void_turns(answer):
    """How many void turns are there in ``sample_rollout("mock_search", n=4, seed=0, policy="expert")``, all
    rows together?"""
    ro, _, _ = _ro("mock_search", "expert", VOID_SEED)
    want = int((ro.batch.void_turn & ro.batch.turn_mask).sum())
    if _integer(answer) == want:
        return True, f"{want} void turns: the planner's slips that wrote no valid action (the agent stays put)."
    return False, "sum ro.batch.void_turn over the valid turns (ro.batch.turn_mask), over every row."
