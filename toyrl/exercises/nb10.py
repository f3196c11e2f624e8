"""Exercises of notebook 10 (prototype and port)."""
from __future__ import annotations

from . import exercise, matches


def _batches():
    from ..port.verl_credit import batch_from_verl
    from ..viz.prototype import toy_verl_inputs
    for s in range(4):
        rewards, mask, index = toy_verl_inputs(B=6, L=7, seed=s)
        yield batch_from_verl(rewards, mask, index)


@exercise("10.rloo_turns")
def _rloo_turns(fn):
    from ..credit.outcome import rloo
    for b in _batches():
        if not matches(fn(b), rloo(b.outcome(), b.group)[:, None] * b.turn_mask.float()):
            return False, ("return (B, H): R_i minus the mean of the other rollouts of its group, on every valid "
                           "turn (multiply by batch.turn_mask).")
    return True, "a leave-one-out baseline broadcast to every valid turn, as toyrl.credit.rloo."


@exercise("10.verl_shape")
def _shape(ans):
    if tuple(ans) == (4, 6):
        return True, "verl's advantages are per response token: (batch, response length)."
    return False, "verl returns (advantages, returns), each shaped like token_level_rewards."
