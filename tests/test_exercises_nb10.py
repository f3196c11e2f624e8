"""The checkers of notebook 10: each correct form accepted, the plausible near-misses rejected."""
import pytest
import torch

from toyrl.exercises import check
from toyrl.exercises.nb10 import SHAPE_INPUTS, _batches


def _rloo(b):
    from toyrl.credit.outcome import rloo
    return rloo(b.outcome(), b.group)


def test_the_checker_batches_have_rows_with_fewer_turns():
    """Without ragged rows a mask-less answer could not be told from a right one."""
    assert any((~b.turn_mask).any() for b in _batches())


@pytest.mark.parametrize("answer", [
    lambda b: _rloo(b)[:, None] * b.turn_mask.float(),
    lambda b: torch.where(b.turn_mask, _rloo(b)[:, None], torch.zeros(())),
    lambda b: (_rloo(b)[:, None] * b.turn_mask).tolist(),                     # a nested list is fine
])
def test_rloo_turns_accepts(answer):
    assert check("10.rloo_turns", answer)


@pytest.mark.parametrize("answer", [
    lambda b: _rloo(b)[:, None].expand(b.turn_mask.shape),                    # no turn mask
    lambda b: _rloo(b),                                                       # (B,), not (B, H)
    lambda b: (b.outcome() - b.outcome().mean())[:, None] * b.turn_mask,      # batch mean, not leave-one-out
    lambda b: b.outcome()[:, None] * b.turn_mask,                             # no baseline
])
def test_rloo_turns_rejects(answer):
    assert not check("10.rloo_turns", answer)


def test_verl_shape_accepts_every_form_of_the_right_shape():
    from toyrl.port.verl import compute_grpo_outcome_advantage
    from toyrl.viz.prototype import toy_verl_inputs
    r, m, i = toy_verl_inputs(**SHAPE_INPUTS)
    adv, ret = compute_grpo_outcome_advantage(r, m, i)
    B, L = SHAPE_INPUTS["B"], SHAPE_INPUTS["L"]
    for ans in [(B, L), [B, L], torch.Size([B, L]), adv.shape, adv, (adv, ret), ((B, L), (B, L)),
                (adv.shape, ret.shape)]:
        assert check("10.verl_shape", ans), ans


@pytest.mark.parametrize("answer", [(8,), (8, 1), (5, 8), (8, 2), 40, "8, 5", ((8, 5), (8,)), (4, 6)])
def test_verl_shape_rejects(answer):
    assert not check("10.verl_shape", answer)
