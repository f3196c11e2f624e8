"""Exercises of notebook 10 (prototype and port)."""
from __future__ import annotations

from . import exercise, matches

SHAPE_INPUTS = dict(B=8, L=5)
"""exercise 10.2: the ``toy_verl_inputs`` sizes the question asks about"""


def _ragged_inputs(B: int, seed: int):
    """verl-shaped inputs whose rows hold 1, 2 or 3 turns (runs of response-mask ones split by one observation
    token, then padding): rewards (B, L) with a 0/1 outcome on each row's last response token, mask (B, L), uids."""
    import numpy as np
    import torch
    g = torch.Generator().manual_seed(seed)
    turns = torch.randint(1, 4, (B,), generator=g)                              # (B,) turns per row
    L = 3 * 3                                                                   # up to 3 turns of 2 tokens + 1 gap
    mask, rewards = torch.zeros(B, L), torch.zeros(B, L)
    for i, k in enumerate(turns.tolist()):
        for t in range(k):
            mask[i, 3 * t:3 * t + 2] = 1
        rewards[i, 3 * (k - 1) + 1] = float(torch.randint(0, 2, (1,), generator=g))
    index = np.array([f"uid{i // 3}" for i in range(B)], dtype=object)
    return rewards, mask, index


def _batches():
    from ..port.verl_credit import batch_from_verl
    for s in range(4):
        yield batch_from_verl(*_ragged_inputs(6, s))


@exercise("10.rloo_turns")
def _rloo_turns(fn):
    from ..credit.outcome import rloo
    for b in _batches():
        want = rloo(b.outcome(), b.group)[:, None] * b.turn_mask.float()      # (B, H)
        got = fn(b)
        if matches(got, want):
            continue
        unmasked = rloo(b.outcome(), b.group)[:, None].expand_as(want)
        if matches(got, unmasked):
            return False, ("right values, but also on turns a row does not have: multiply by batch.turn_mask "
                           "(rows here hold 1 to 3 turns).")
        return False, ("return (B, H): R_i minus the mean of the other rollouts of its group, on every valid "
                       "turn (multiply by batch.turn_mask).")
    return True, "a leave-one-out baseline broadcast to every valid turn, as toyrl.credit.rloo."


def _shape(x):
    """A shape from a tuple / list / torch.Size / array shape, or a tensor's own shape; None if not one."""
    if hasattr(x, "shape") and not isinstance(x, tuple):
        return tuple(int(v) for v in x.shape)
    try:
        return tuple(int(v) for v in x)
    except (TypeError, ValueError):
        return None


@exercise("10.verl_shape")
def _verl_shape(ans):
    want = (SHAPE_INPUTS["B"], SHAPE_INPUTS["L"])
    if isinstance(ans, (tuple, list)) and len(ans) == 2 and all(
            hasattr(a, "shape") or isinstance(a, (tuple, list)) for a in ans):
        shapes = [_shape(a) for a in ans]                                       # the pair (advantages, returns)
        if all(s == want for s in shapes):
            return True, "both advantages and returns: one value per response token, (batch, response length)."
        return False, "each of the pair (advantages, returns) is shaped like token_level_rewards."
    got = _shape(ans)
    if got == want:
        return True, "verl's advantages are per response token: (batch, response length), like token_level_rewards."
    if got is not None and len(got) == 1:
        return False, "one number per sequence is GRPO's math, but verl broadcasts it to every response token."
    return False, "verl returns (advantages, returns), each shaped like token_level_rewards."
