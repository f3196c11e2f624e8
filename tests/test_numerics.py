"""NaN and inf never pass silently; every estimator and every clip scheme x ratio level stays finite.

Layers: the TurnBatch construction check and its exact messages; every estimator of the registry on
NaN / inf inputs (fields changed in place, keyword tensors, the pure functions), empty (B = 0) and
singleton batches; policy_loss for every clip scheme x ratio level on -inf log-probs and +-inf
log-ratios (finite loss and gradient, hand-computed values); hypothesis fuzzing of both; the
trainer's two warnings (group_size=1 with a grouped estimator, zero reward variance).
"""
from __future__ import annotations

import math
import re
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import assert_close_to
from toyrl.testing import random_batch
from toyrl.batch import NonFiniteError, check_finite
from toyrl.credit import ESTIMATORS, dr_grpo, gpg, grpo, grpo_passk, rloo, warn_zero_variance
from toyrl.objectives import CLIP_SCHEMES, LEVELS, policy_loss
from toyrl.objectives.ratios import LOGP_FLOOR, floor_logp
from toyrl.train import TrainConfig, train

NAN, INF = math.nan, math.inf
EXTRA = {  # keyword inputs some estimators need (as tests/test_credit_registry.py)
    "remax": lambda b: {"baseline_reward": torch.rand(b.B, dtype=torch.float64)},
    "sweet": lambda b: {"critic_adv": torch.randn(b.B, b.H, dtype=torch.float64)},
    "spa": lambda b: {"progress": torch.rand(b.B, b.H, dtype=torch.float64)},
    "archer": lambda b: {"q": torch.randn(b.B, b.H, 2, dtype=torch.float64),
                         "v": torch.randn(b.B, b.H, 2, dtype=torch.float64)},
}
READS = {"turn_reward": set(ESTIMATORS) - {"archer", "sweet", "spa"}, "values": {"gae", "turn_gae", "bilevel_gae"},
         "entropy": {"empg"}, "info_gain": {"a2tgpo"}}
"""which registered estimators read each batch field (the others' output must not change)"""


def run_estimator(name, b, kw=None):
    return ESTIMATORS[name](b, **(EXTRA.get(name, lambda b: {})(b) if kw is None else kw))


def singletons(seed, B=9, H=3):
    """A batch as group_size=1 makes it: every rollout its own group and its own prompt."""
    return random_batch(B, H, n_groups=B, seed=seed).replace(task=torch.arange(B))


def full_batch(B=6, H=4, seed=1, **kw):
    b = random_batch(B, H, seed=seed, **kw)
    return b.replace(rollout_logp=b.old_logp.clone())


# ---- TurnBatch: construction refuses NaN / inf and empty batches ------------------------------------
FLOAT_FIELDS = ("turn_reward", "values", "info_gain", "turn_signal", "entropy", "old_logp", "ref_logp", "rollout_logp")
LOGP_FIELDS = ("old_logp", "ref_logp", "rollout_logp")


@pytest.mark.parametrize("field", FLOAT_FIELDS)
@pytest.mark.parametrize("bad", [NAN, INF, -INF])
def test_turn_batch_names_the_field_and_first_bad_position(field, bad):
    b = full_batch()
    x = getattr(b, field).clone()
    x[1, 0] = x[0, 2] = bad                                     # (0, 2) comes first in row-major order
    if field in LOGP_FIELDS and bad == -INF:                    # a token the policy can never pick
        assert torch.equal(getattr(b.replace(**{field: x}), field), x)
        return
    note = " (a log-prob may be -inf, never NaN or +inf)" if field in LOGP_FIELDS else ""
    with pytest.raises(ValueError, match=re.escape(f"TurnBatch.{field} has a non-finite value {bad} at (0, 2){note}")):
        b.replace(**{field: x})


def test_empty_batch_is_refused_by_the_batch_and_by_policy_loss():
    b = full_batch()
    with pytest.raises(ValueError, match=re.escape("TurnBatch has no rollouts (B = 0)")):
        b.select(torch.zeros(b.B, dtype=torch.bool))
    z = torch.zeros(0, 5)
    with pytest.raises(ValueError, match=re.escape("policy_loss got no rollouts (B = 0): logp has shape (0, 5)")):
        policy_loss(z, z, z, z.bool(), z.long())


def test_check_finite_hand_cases():
    check_finite("x", torch.tensor([[1.0, -INF]]), log_prob=True)                     # -inf allowed
    check_finite("x", torch.tensor([[1.0, NAN]]), torch.tensor([[True, False]]))      # off the mask
    with pytest.raises(NonFiniteError, match=re.escape("x has a non-finite value inf at (0, 1) (a log-prob")):
        check_finite("x", torch.tensor([[-INF, INF]]), log_prob=True)
    with pytest.raises(ValueError, match=re.escape("x has a non-finite value nan at (2)")):
        check_finite("x", torch.tensor([0.0, 1.0, NAN, INF]))


# ---- estimators: NaN / inf inputs, singletons ---------------------------------------------------------
@pytest.mark.parametrize("name", sorted(ESTIMATORS))
@pytest.mark.parametrize("field", sorted(READS))
@pytest.mark.parametrize("bad", [NAN, INF])
def test_every_estimator_names_a_field_made_non_finite_in_place(name, field, bad):
    b = random_batch(15, 4, seed=7)
    kw = EXTRA.get(name, lambda b: {})(b)
    clean = run_estimator(name, b, kw)
    getattr(b, field)[0, 2] = bad                              # bypasses construction: the estimator catches it
    if name in READS[field]:
        with pytest.raises(ValueError, match=re.escape(f"TurnBatch.{field} has a non-finite value {bad} at (0, 2)")):
            run_estimator(name, b, kw)
    else:
        torch.testing.assert_close(run_estimator(name, b, kw), clean)


KEYWORD_CASES = [  # (estimator, keywords with one NaN at the front, the argument the message names)
    ("remax", lambda b: {"baseline_reward": torch.full((b.B,), NAN)}, "baseline_reward"),
    ("sweet", lambda b: {"critic_adv": torch.full((b.B, b.H), NAN)}, "critic_adv"),
    ("sweet", lambda b: {"critic_logp": torch.full((b.B, b.T), NAN, dtype=torch.float64)}, "critic_logp"),
    ("spa", lambda b: {"progress": torch.full((b.B, b.H), INF)}, "progress"),
    ("archer", lambda b: {"q": torch.full((b.B, b.H), NAN), "v": torch.zeros(b.B, b.H)}, "q"),
    ("archer", lambda b: {"q": torch.zeros(b.B, b.H), "v": torch.full((b.B, b.H), -INF)}, "v"),
    ("gae", lambda b: {"token_values": torch.full((b.B, b.T), NAN, dtype=torch.float64)}, "values"),
    ("bilevel_gae", lambda b: {"token_values": torch.full((b.B, b.T), INF, dtype=torch.float64)}, "values"),
    ("turn_gae", lambda b: {"last_value": torch.full((b.B,), NAN, dtype=torch.float64)}, "last_value"),
    ("empg", lambda b: {"base_adv": torch.full((b.B,), NAN, dtype=torch.float64)}, "adv"),
    ("gdpo", lambda b: {"components": torch.full((b.B, 2), NAN)}, "components"),
    ("optimal_token_baseline", lambda b: {"sum_pi_squared": torch.full((b.B, b.T), NAN)}, "sum_pi_sq"),
    ("tir_optimal_token_baseline", lambda b: {"is_weights": torch.full((b.B, b.T), INF)}, "is_weights"),
]


@pytest.mark.parametrize("name,kw,arg", KEYWORD_CASES, ids=[f"{c[0]}-{c[2]}" for c in KEYWORD_CASES])
def test_keyword_tensors_with_nan_or_inf_raise_naming_them(name, kw, arg):
    b = random_batch(8, 3, seed=4)
    with pytest.raises(ValueError, match=rf"^{arg} has a non-finite value (nan|inf|-inf) at \(0"):
        ESTIMATORS[name](b, **kw(b))


def test_reinforce_pp_kl_reward_with_minus_inf_log_probs_raises():
    b = random_batch(8, 3, seed=4)
    ref = b.ref_logp.clone()
    t = int(b.policy_mask[0].nonzero()[0])
    ref[0, t] = -INF                                            # allowed in the batch, not in a KL reward
    with pytest.raises(ValueError, match=re.escape(f"old_logp - ref_logp (the KL reward of reinforce_pp) has a "
                                                   f"non-finite value inf at (0, {t})")):
        ESTIMATORS["reinforce_pp"](b.replace(ref_logp=ref), kl_coef=0.1)
    ref[~b.policy_mask] = -INF                                  # off the policy tokens: ignored
    ref[0, t] = b.ref_logp[0, t]
    assert torch.isfinite(ESTIMATORS["reinforce_pp"](b.replace(ref_logp=ref), kl_coef=0.1)).all()


@pytest.mark.parametrize("fn", [grpo, dr_grpo, rloo, gpg, grpo_passk])
@pytest.mark.parametrize("bad", [NAN, INF])
def test_outcome_functions_name_R(fn, bad):
    """The issue's measurement: one bad return gave 96 NaN advantages (grpo) or zeros (grpo_passk)."""
    with pytest.raises(ValueError, match=re.escape(f"R has a non-finite value {bad} at (1)")):
        fn(torch.tensor([1.0, bad, 0.0, 1.0]), torch.tensor([0, 0, 1, 1]))


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_every_estimator_finite_on_singletons(name):
    """One rollout (B = 1), and a batch of singleton groups (group_size = 1): finite, right shape."""
    for b in (random_batch(1, 3, n_groups=1, seed=5), singletons(5)):
        adv = run_estimator(name, b)
        assert adv.shape == ((b.B, b.H) if ESTIMATORS[name].level == "turn" else (b.B, b.T))
        assert torch.isfinite(adv).all()


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_grouped_flag_is_exactly_the_estimators_that_give_zero_on_singleton_groups(name):
    """``grouped`` (what the trainer's group_size=1 warning reads) holds iff every advantage is 0 with groups of one."""
    zeros = [bool((run_estimator(name, singletons(s)) == 0).all()) for s in range(3)]
    assert all(zeros) == ESTIMATORS[name].grouped and len(set(zeros)) == 1


@settings(max_examples=25, deadline=None)
@given(B=st.integers(1, 9), H=st.integers(1, 4), n_groups=st.integers(1, 4), seed=st.integers(0, 10**6),
       dtype=st.sampled_from([torch.float32, torch.float64]), scale=st.sampled_from([0.0, 1e-3, 1.0, 1e3, 1e6]))
def test_every_estimator_finite_on_random_valid_batches(B, H, n_groups, seed, dtype, scale):
    b = random_batch(B, H, n_groups=n_groups, seed=seed, dtype=dtype)
    b = b.replace(turn_reward=b.turn_reward * scale)
    for name in ESTIMATORS:
        if name == "gdpo" and int(b.policy_mask.sum()) < 2:    # documented: gdpo whitens over >= 2 tokens
            continue
        assert torch.isfinite(run_estimator(name, b)).all(), name


# ---- policy_loss: NaN raises, -inf log-probs and +-inf log-ratios stay finite -------------------------
TURN = torch.tensor([[0, 0, 0, 1, 1, 2], [0, 0, 1, 1, 1, -1]])             # (B=2, T=6), H = 3
MASK = torch.tensor([[0, 1, 1, 1, 0, 1], [0, 1, 1, 1, 1, 0]], dtype=torch.bool)


def scheme_kw(clip, old, B=2, H=3):
    return {"z": torch.zeros(B, H, dtype=old.dtype)} if clip == "a2tgpo" else \
        {"rollout_logp": old - 0.1} if clip == "tis" else {}


def loss_and_grad(logp, old, adv, mask=MASK, turn_id=TURN, **kw):
    logp = logp.clone().requires_grad_()
    loss, info = policy_loss(logp, old, adv, mask, turn_id, **kw)
    (g,) = torch.autograd.grad(loss, logp, allow_unused=True)
    return loss, info, torch.zeros_like(logp) if g is None else g


CASES = {  # name -> (positions where logp is -inf, positions where old_logp is -inf)
    "logp=-inf": ([(0, 2)], []), "log-ratio=+inf": ([], [(0, 3)]),
    "log-ratio=+-inf in one unit": ([(0, 1)], [(0, 2)]), "logp=old_logp=-inf": ([(1, 2)], [(1, 2)]),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("clip", sorted(CLIP_SCHEMES))
def test_every_scheme_and_level_is_finite_on_infinite_log_probs(clip, level, case):
    g = torch.Generator().manual_seed(0)
    logp, old = -torch.rand(2, 6, generator=g) * 3, -torch.rand(2, 6, generator=g) * 3
    adv = torch.randn(2, 6, generator=g)
    for pos in CASES[case][0]:
        logp[pos] = -INF
    for pos in CASES[case][1]:
        old[pos] = -INF
    loss, info, grad = loss_and_grad(logp, old, adv, ratio=level, clip=clip, ref_logp=old.flip(1), kl_coef=0.1,
                                     **scheme_kw(clip, old))
    assert torch.isfinite(loss) and torch.isfinite(grad).all()
    assert all(torch.isfinite(v).all() for v in info.values() if isinstance(v, torch.Tensor))
    for pos in CASES[case][0]:                                  # a -inf log-prob passes no gradient
        assert grad[pos] == 0


def test_floor_logp_hand_computed_value_and_gradient():
    x = torch.tensor([[-INF, -2.0, NAN, -5000.0]], requires_grad=True)
    y = floor_logp(x, torch.tensor([[True, True, False, True]]))
    y.sum().backward()
    assert y.tolist() == [[LOGP_FLOOR, -2.0, 0.0, LOGP_FLOOR]] and LOGP_FLOOR == -1000.0
    assert x.grad.tolist() == [[0.0, 1.0, 0.0, 0.0]]


def test_hand_computed_losses_with_a_minus_inf_log_prob():
    """One row, tokens 1-2 in the loss, logp [., -inf, -1], old_logp [., -1, -1], A = 1, token-mean."""
    turn, mask = torch.tensor([[0, 0, 0]]), torch.tensor([[False, True, True]])
    logp, old, adv = torch.tensor([[0.0, -INF, -1.0]]), torch.tensor([[0.0, -1.0, -1.0]]), torch.ones(1, 3)
    e20 = math.exp(-20.0)                                       # d = -999 clamps to -20 before exp
    want = {"gpg": ((1000.0 + 1.0) / 2, [0.0, 0.0, -0.5]),     # -A logp, logp floored at -1000
            "ppo": ((-e20 - 1.0) / 2, [0.0, 0.0, -0.5]),       # max(-A r, -A clip(r)) = -e^-20
            "cispo": ((1000.0 * e20 + 1.0) / 2, [0.0, 0.0, -0.5]),   # -sg(w) A logp, w = e^-20
            "kl_cov": ((-e20 - 1.0 + 999.0) / 2, None)}        # + |d| = 999 on the top-covariance token
    for clip, (value, grad) in want.items():
        loss, _, g = loss_and_grad(logp, old, adv, mask, turn, clip=clip, kl_cov_ratio=0.5) if clip == "kl_cov" \
            else loss_and_grad(logp, old, adv, mask, turn, clip=clip)
        assert math.isclose(loss.item(), value, rel_tol=1e-6), clip
        if grad is not None:
            assert_close_to(g, [grad], 1e-6)


def test_gspo_sequence_ratio_with_plus_and_minus_inf_log_ratio_is_one():
    """Before: NaN (mean of +inf and -inf). Now d = [-1000 + 1, 1000 - 1] -> mean 0 -> r = 1, loss -A."""
    turn, mask = torch.tensor([[0, 0, 0]]), torch.tensor([[False, True, True]])
    logp, old = torch.tensor([[0.0, -INF, -1.0]]), torch.tensor([[0.0, -1.0, -INF]])
    loss, info, g = loss_and_grad(logp, old, torch.full((1, 3), 2.0), mask, turn, clip="gspo")
    assert math.isclose(loss.item(), -2.0, rel_tol=1e-6) and float(info["ratio_max"]) == 1.0
    assert_close_to(g, [[0.0, 0.0, -1.0]], 1e-6)                # -A r / 2 per token; the -inf token gets 0


@pytest.mark.parametrize("clip", sorted(CLIP_SCHEMES))
def test_nan_advantage_on_the_mask_raises_naming_adv(clip):
    old = -torch.rand(2, 6, generator=torch.Generator().manual_seed(1))
    adv = torch.ones(2, 6)
    adv[0, 0] = NAN                                             # off the mask: ignored
    loss, _, g = loss_and_grad(old, old, adv, clip=clip, **scheme_kw(clip, old))
    assert torch.isfinite(loss) and torch.isfinite(g).all()
    adv[1, 2] = NAN
    with pytest.raises(ValueError, match=re.escape("adv has a non-finite value nan at (1, 2)")):
        policy_loss(old, old, adv, MASK, TURN, clip=clip, **scheme_kw(clip, old))


def test_turn_advantage_and_log_prob_errors_name_argument_and_token():
    old = -torch.rand(2, 6, generator=torch.Generator().manual_seed(2))
    adv_BH = torch.ones(2, 3)
    adv_BH[1, 1] = INF                                          # turn 1 of row 1 starts at token 2
    with pytest.raises(ValueError, match=re.escape("adv has a non-finite value inf at (1, 2)")):
        policy_loss(old, old, adv_BH, MASK, TURN)
    adv_BH[1, 2] = NAN                                          # row 1 has no turn 2: never read
    adv_BH[1, 1] = 0.0
    assert torch.isfinite(policy_loss(old, old, adv_BH, MASK, TURN)[0])
    for name, bad in (("logp", NAN), ("old_logp", INF), ("ref_logp", NAN), ("rollout_logp", INF)):
        x = old.clone()
        x[0, 3] = bad
        kw = {"logp": old, "old_logp": old, "ref_logp": old, "rollout_logp": old, name: x}
        with pytest.raises(ValueError, match=re.escape(f"{name} has a non-finite value {bad} at (0, 3) (a log-prob")):
            policy_loss(kw["logp"], kw["old_logp"], adv_BH, MASK, TURN, clip="tis", ref_logp=kw["ref_logp"],
                        rollout_logp=kw["rollout_logp"], kl_coef=0.1)
    w = torch.ones(2, 6)
    w[0, 1] = INF
    with pytest.raises(ValueError, match=re.escape("is_weights has a non-finite value inf at (0, 1)")):
        policy_loss(old, old, adv_BH, MASK, TURN, is_weights=w)


def test_nan_log_probs_off_the_mask_are_ignored():
    logp, old = torch.full((2, 6), -1.0), torch.full((2, 6), -1.5)
    w = torch.ones(2, 6)
    logp[~MASK], old[~MASK], w[~MASK] = NAN, NAN, NAN           # padding and prompt positions
    for clip in CLIP_SCHEMES:
        loss, _, g = loss_and_grad(logp, old, torch.ones(2, 6), clip=clip, is_weights=w, ref_logp=old, kl_coef=0.1,
                                   **scheme_kw(clip, old))
        assert torch.isfinite(loss) and torch.isfinite(g).all() and (g[~MASK] == 0).all(), clip


LOGPS = st.one_of(st.floats(-60.0, 0.0), st.sampled_from([-INF, -1e30, -1e4, -1e3, -0.0, 0.0]))


@st.composite
def loss_inputs(draw):
    B, T, H = draw(st.integers(1, 4)), draw(st.integers(1, 8)), draw(st.integers(1, 3))
    dtype = draw(st.sampled_from([torch.float32, torch.float64, torch.bfloat16]))
    cuts = [sorted(draw(st.lists(st.integers(0, T), min_size=H, max_size=H))) for _ in range(B)]
    n_real = [draw(st.integers(0, T)) for _ in range(B)]
    turn_id = torch.tensor([[min(sum(t >= c for c in row), H - 1) if t < n else -1 for t in range(T)]
                            for row, n in zip(cuts, n_real)])                  # (B, T) non-decreasing, -1 padding
    mask = torch.tensor(draw(st.lists(st.booleans(), min_size=B * T, max_size=B * T))).view(B, T) & (turn_id >= 0)
    if draw(st.booleans()):
        mask &= False                                           # no token in the loss at all
    vals = lambda n, s: torch.tensor(draw(st.lists(s, min_size=n, max_size=n)), dtype=torch.float64)   # noqa: E731
    logp, old = vals(B * T, LOGPS).view(B, T), vals(B * T, LOGPS).view(B, T)
    turn_level = draw(st.booleans())
    adv = vals(B * (H if turn_level else T), st.one_of(st.floats(-1e3, 1e3), st.just(0.0))).view(B, -1)
    poison = draw(st.sampled_from([None, None, "adv", "logp", "old_logp"]))
    if poison is not None and bool(mask.any()):
        b, t = (int(i) for i in mask.nonzero()[draw(st.integers(0, int(mask.sum()) - 1))])
        target = {"adv": adv, "logp": logp, "old_logp": old}[poison]
        target[b, int(turn_id[b, t]) if poison == "adv" and turn_level else t] = NAN
    else:
        poison = None
    cast = lambda x: x.to(dtype)                                                # noqa: E731
    return cast(logp), cast(old), cast(adv), mask, turn_id, H, "turn" if turn_level else "token", poison


@pytest.mark.parametrize("clip", sorted(CLIP_SCHEMES))
@settings(max_examples=25, deadline=None)
@given(inp=loss_inputs(), level=st.sampled_from(LEVELS))
def test_policy_loss_fuzz_is_a_clear_error_or_finite(clip, inp, level):
    """Random shapes, dtypes, masks and log-probs (-inf, huge log-ratios, zeros): a ValueError naming the
    poisoned argument, or a finite loss with finite gradients w.r.t. logp; never a silent NaN / inf."""
    logp, old, adv, mask, turn_id, H, adv_level, poison = inp
    kw = scheme_kw(clip, old, logp.shape[0], H)
    if poison is not None:
        with pytest.raises(ValueError, match=rf"^{poison} has a non-finite value nan at \("):
            policy_loss(logp, old, adv, mask, turn_id, ratio=level, clip=clip, H=H, adv_level=adv_level, **kw)
        return
    loss, info, g = loss_and_grad(logp, old, adv, mask, turn_id, ratio=level, clip=clip, H=H, adv_level=adv_level,
                                  ref_logp=old.flip(1), kl_coef=0.1, **kw)
    assert torch.isfinite(loss) and torch.isfinite(g).all()
    assert all(torch.isfinite(v).all() for v in info.values() if isinstance(v, torch.Tensor))


# ---- the trainer's warnings ---------------------------------------------------------------------------
TINY = dict(env="bandit_chain", env_kwargs={"layout_seed": 0}, steps=2, prompts_per_step=2, group_size=1,
            progress=False)
ZERO_VAR = "zero reward variance: in each of the first 2 steps every group's rollouts got equal rewards"


def test_group_size_one_with_a_grouped_estimator_warns_and_indeed_nothing_trains():
    msg = "group_size=1: every group has one rollout, so grpo's advantages are all 0 and nothing trains"
    with pytest.warns(UserWarning) as rec:
        log = train(TrainConfig(estimator="grpo", **TINY))
    texts = [str(w.message) for w in rec]
    assert sum(msg in t for t in texts) == 1 and sum(ZERO_VAR in t for t in texts) == 1
    assert all(r["grad_norm"] == 0.0 and r["zero_var_frac"] == 1.0 for r in log.rows)


def test_group_size_one_with_a_non_grouped_estimator_warns_only_of_zero_variance():
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        train(TrainConfig(estimator="reinforce_pp", **TINY))
    texts = [str(w.message) for w in rec]
    assert not any("group_size=1" in t for t in texts) and sum(ZERO_VAR in t for t in texts) == 1


def test_warn_zero_variance_speaks_once_at_the_right_row_count():
    flat, varied = {"zero_var_frac": 1.0}, {"zero_var_frac": 0.5}
    with pytest.warns(UserWarning, match="first 10 steps"):
        warn_zero_variance([flat] * 10, steps=50)
    with pytest.warns(UserWarning, match="zero reward variance: in the first step every group"):
        warn_zero_variance([flat], steps=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                          # any warning below fails the test
        warn_zero_variance([flat] * 9, steps=50)                # not yet
        warn_zero_variance([flat] * 11, steps=50)               # already spoken at 10
        warn_zero_variance([flat, varied], steps=2)             # some variance: silent
        warn_zero_variance([], steps=0)
