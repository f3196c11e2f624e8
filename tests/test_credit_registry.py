"""The estimator registry: every entry runs on a random batch and passes the public property checks
(toyrl.testing.check_estimator), which catch planted bugs; levels, missing fields, user registration."""
from __future__ import annotations

import pytest
import torch

from toyrl.testing import random_batch
from toyrl.credit import ESTIMATORS, register_estimator, token_advantages
from toyrl.testing import check_estimator

EXTRA = {  # keyword inputs some estimators need
    "remax": lambda b: {"baseline_reward": torch.rand(b.B, dtype=torch.float64)},
    "sweet": lambda b: {"critic_adv": torch.randn(b.B, b.H, dtype=torch.float64)},
    "spa": lambda b: {"progress": torch.rand(b.B, b.H, dtype=torch.float64)},
    "archer": lambda b: {"q": torch.randn(b.B, b.H, 2, dtype=torch.float64),
                         "v": torch.randn(b.B, b.H, 2, dtype=torch.float64)},
}
NAMES = ["grpo", "dr_grpo", "rloo", "reinforce_pp", "reinforce_pp_baseline", "remax", "opo", "gpg", "grpo_passk",
         "gae", "turn_gae", "bilevel_gae", "gigpo", "mt_grpo", "archer", "sweet", "tree_grpo", "rtpo", "spa", "empg",
         "a2tgpo"]


def test_all_required_names_registered():
    assert set(NAMES) <= set(ESTIMATORS)
    for e in ESTIMATORS.values():
        assert e.level in ("turn", "token") and e.doc and "\n" not in e.doc


@pytest.mark.parametrize("name", NAMES)
def test_every_estimator_runs_finite_with_right_shape(name):
    b = random_batch(15, 4, seed=7)
    est = ESTIMATORS[name]
    adv = est(b, **EXTRA.get(name, lambda b: {})(b))
    assert adv.shape == ((b.B, b.H) if est.level == "turn" else (b.B, b.T))
    assert torch.isfinite(adv).all()


@pytest.mark.parametrize("name", sorted(n for n, e in ESTIMATORS.items() if e.fn.__module__.startswith("toyrl.credit")))
def test_every_builtin_estimator_passes_the_public_property_checks(name):
    """toyrl.testing.check_estimator: shape, finite, masked, label and row invariance, groups of one, degenerate."""
    check_estimator(name, kwargs=EXTRA.get(name))


def test_the_property_checks_catch_planted_bugs():
    def leaky(batch):
        """Outcome on every turn index, the invalid ones too."""
        return batch.outcome()[:, None].expand(-1, batch.H).clone()

    def by_label(batch):
        """The group id itself as the advantage: depends on how groups are numbered."""
        return batch.group.double()[:, None] * batch.turn_mask

    def first_row(batch):
        """Row 0's outcome as everyone's baseline: depends on the order of the rollouts."""
        R = batch.outcome()
        return (R - R[0])[:, None] * batch.turn_mask

    for fn, prop in ((leaky, "masked"), (by_label, "labels"), (first_row, "rows")):
        est = register_estimator(f"test_{fn.__name__}", level="turn")(fn)
        try:
            with pytest.raises(AssertionError, match=f"test_{fn.__name__} {prop}"):
                check_estimator(est)
        finally:
            ESTIMATORS.pop(f"test_{fn.__name__}")


@pytest.mark.parametrize("name,field", [("empg", "entropy"), ("a2tgpo", "info_gain"), ("tree_grpo", "node"),
                                        ("rtpo", "node"), ("turn_gae", "values"), ("gae", "values")])
def test_missing_field_raises(name, field):
    b = random_batch(6, 3, seed=2).replace(**{field: None})
    with pytest.raises(ValueError, match=field):
        ESTIMATORS[name](b)


@pytest.mark.parametrize("name,kw", [("remax", "baseline_reward"), ("spa", "progress"), ("sweet", "critic_adv"),
                                     ("archer", "q")])
def test_missing_keyword_raises(name, kw):
    with pytest.raises(ValueError, match=kw):
        ESTIMATORS[name](random_batch(6, 3, seed=2))


def test_user_registration_and_token_advantages():
    @register_estimator("test_centred", level="turn")
    def centred(batch, *, scale=1.0):
        """Outcome minus the batch mean on every valid turn."""
        R = batch.outcome()
        return scale * (R - R.mean())[:, None] * batch.turn_mask

    try:
        b = random_batch(6, 3, seed=3)
        assert ESTIMATORS["test_centred"].doc == "Outcome minus the batch mean on every valid turn."
        adv = ESTIMATORS["test_centred"](b, scale=2.0)
        tok = token_advantages(b, adv)
        torch.testing.assert_close(tok, b.turn_to_token(adv) * b.policy_mask)
    finally:
        ESTIMATORS.pop("test_centred")
    with pytest.raises(ValueError, match="adv"):
        token_advantages(b, torch.zeros(6, 99))
