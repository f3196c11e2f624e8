"""Every registered estimator equals its plain-loop reference (toyrl.credit.REFERENCE) on random multi-turn batches."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

from toyrl.testing import assert_matches_reference, random_batch
from toyrl.credit import ESTIMATORS, REFERENCE

NEEDS = {  # keyword inputs some estimators need (placeholders, made per batch by ``kwargs``)
    "remax": dict(baseline_reward="rows"), "sweet": dict(critic_adv="turns"), "spa": dict(progress="turns"),
    "archer": dict(q="heads", v="heads"),
}
VARIANTS = {  # non-default hyperparameters, checked beside the defaults
    "grpo": [dict(ddof=0, norm="mean"), dict(eps=0.0)], "rloo": [dict(scale_by_std=True)],
    "gpg": [dict(f_norm=2.0)], "grpo_passk": [dict(norm=False), dict(ddof=0)],
    "reinforce_pp": [dict(gamma=0.9), dict(kl_coef=0.1)],
    "gae": [dict(gamma=0.9, lam=0.8), dict(whiten=False, gamma=0.99, lam=0.5)],
    "turn_gae": [dict(gamma=1.0, lam=1.0, whiten=True), dict(last_value="rand")],
    "bilevel_gae": [dict(gamma_turn=0.9, lam_turn=0.7, gamma_token=0.95, lam_token=0.9, whiten=False)],
    "gigpo": [dict(norm="mean", gamma=0.9), dict(ddof=1, omega=0.5), dict(episode="step"),
              dict(similarity_features="onehot", threshold=0.9)],
    "mt_grpo": [dict(lam=0.5, ddof=0)], "tree_grpo": [dict(ddof=0)], "rtpo": [dict(norm="std", gamma=0.9)],
    "spa": [dict(gamma=0.9, whiten=True, beta=0.2)], "empg": [dict(kappa=2.0, zeta=0.3), dict(base_adv="turns")],
    "a2tgpo": [dict(gamma=0.9, outcome_last=False)], "sweet": [dict(critic_logp="rand")],
    "gdpo": [dict(components="comps", weights=[1.0, 0.5])],
    "optimal_token_baseline": [dict(zero_tail=False), dict(is_weights="tokens", sum_pi_squared="tokens")],
    "tir_optimal_token_baseline": [dict(zero_tail=False), dict(is_weights="tokens")],
}


def kwargs(name: str, b, variant: dict) -> dict:
    """NEEDS inputs plus a variant, with placeholder strings turned into tensors for this batch."""
    kw = dict(NEEDS.get(name, {}), **variant)
    g = torch.Generator().manual_seed(b.B * 31 + b.H)
    make = {"rand": lambda shape: torch.rand(*shape, generator=g, dtype=torch.float64),
            "onehot": lambda shape: torch.nn.functional.one_hot(b.state_key % 3, 3).double(),
            "turns": lambda shape: torch.randn(b.B, b.H, generator=g, dtype=torch.float64),
            "rows": lambda shape: torch.rand(b.B, generator=g, dtype=torch.float64),
            "heads": lambda shape: torch.randn(b.B, b.H, 2, generator=g, dtype=torch.float64),
            "tokens": lambda shape: torch.rand(b.B, b.T, generator=g, dtype=torch.float64),
            "comps": lambda shape: torch.randint(0, 3, (b.B, 2), generator=g).double()}
    shapes = {"last_value": (b.B,), "critic_logp": (b.B, b.T)}
    for key, val in list(kw.items()):
        if isinstance(val, str) and val in make:
            kw[key] = make[val](shapes.get(key))
    if "critic_logp" in kw:
        kw.pop("critic_adv", None)
    return kw


def test_every_registered_estimator_has_a_reference():
    """Every estimator toyrl.credit registers (user prototypes, e.g. notebook 10's, register elsewhere)."""
    builtin = {name for name, est in ESTIMATORS.items() if est.fn.__module__.startswith("toyrl.credit")}
    assert len(builtin) >= 24 and builtin == set(REFERENCE)


@pytest.mark.parametrize("name", sorted(REFERENCE))
@settings(deadline=None, max_examples=12)
@given(seed=st.integers(0, 10_000), B=st.integers(1, 14), H=st.integers(1, 5), n_groups=st.integers(1, 4),
       hashed=st.booleans())
def test_vectorized_equals_reference(name, seed, B, H, n_groups, hashed):
    b = random_batch(B, H, n_groups=n_groups, seed=seed, hash_keys=hashed)
    for variant in [{}] + VARIANTS.get(name, []):                     # a ValueError must come from both
        assert_matches_reference(ESTIMATORS[name], REFERENCE[name], batches=[b], kwargs=kwargs(name, b, variant))


def test_reference_catches_a_wrong_estimator():
    """The comparison can fail: GRPO without the std division differs from the reference, and the public check
    names the batch and the position."""
    b = random_batch(12, 3, seed=1)
    assert not torch.allclose(ESTIMATORS["grpo"](b, norm="mean"), REFERENCE["grpo"](b))
    with pytest.raises(AssertionError, match=r"batch \d+ \(B=\d+, H=\d+, T=\d+\): differs from the reference at"):
        assert_matches_reference(lambda b: ESTIMATORS["grpo"](b, norm="mean"), REFERENCE["grpo"])
    assert assert_matches_reference(ESTIMATORS["gigpo"], REFERENCE["gigpo"]) == 24


def test_float32_batch_within_rounding_of_the_reference():
    b = random_batch(14, 5, seed=4, dtype=torch.float32)
    for name in ("gigpo", "gae", "bilevel_gae", "reinforce_pp", "grpo", "turn_gae"):
        kw = kwargs(name, b, {})
        got = ESTIMATORS[name](b, **kw)
        assert got.dtype == torch.float32
        torch.testing.assert_close(got, REFERENCE[name](b, **kw), atol=2e-5, rtol=2e-5)
