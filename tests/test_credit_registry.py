"""The estimator registry: every entry runs on a random batch, levels, missing fields, user registration."""
from __future__ import annotations

import pytest
import torch

from conftest import random_batch
from toyrl.credit import ESTIMATORS, register_estimator, token_advantages

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
    tok = token_advantages(b, adv, est.level)
    assert tok.shape == (b.B, b.T) and torch.equal(tok[~b.policy_mask], torch.zeros_like(tok[~b.policy_mask]))
    if est.level == "turn":
        assert torch.equal(adv[~b.turn_mask], torch.zeros_like(adv[~b.turn_mask]))
    # degenerate batch: one rollout, all rewards equal, no valid turn in row 0
    d = random_batch(1, 3, n_groups=1, seed=1)
    d = d.replace(turn_mask=torch.zeros_like(d.turn_mask), turn_reward=torch.zeros_like(d.turn_reward))
    assert torch.isfinite(est(d, **EXTRA.get(name, lambda b: {})(d))).all()


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
