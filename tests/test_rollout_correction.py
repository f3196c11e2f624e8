"""Rollout corrections (toyrl.objectives.rollout_correction): hand-computed values, a loop reference,
parity with verl 0.9.1's rollout_corr_helper and with TRL's four vLLM IS modes, properties, bad input."""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings, strategies as st

from conftest import assert_close_to
from toyrl.testing import random_batch
from toyrl.objectives.rollout_correction import (
    CORRECTION_LEVELS, CORRECTIONS, RS_OPTIONS, correction_log_rho, correction_stats, masked_is, no_correction,
    off_policy_seq_mask, rejection_mask, rollout_correction, truncated_is)

T_, F_ = True, False
IS_NAMES = [n for n, c in CORRECTIONS.items() if c.fn in (truncated_is, masked_is)]


def engine_batch(seed: int, scale: float = 0.3, B: int = 10, H: int = 3, dtype=torch.float64, ramp: bool = False):
    """Multi-turn inputs: old_logp, rollout_logp (old + scale * noise; ``ramp``: row i's scale grows from 0),
    mask, turn_id, H; garbage off the mask."""
    b = random_batch(B, H, seed=seed, dtype=dtype, optional=False)
    g = torch.Generator().manual_seed(seed + 1)
    old = b.old_logp.clone()
    row_scale = scale * (torch.linspace(0, 1, B, dtype=dtype)[:, None] if ramp else 1.0)
    roll = old + row_scale * torch.randn(old.shape, generator=g, dtype=dtype)
    roll[~b.policy_mask] = 7.0                                         # finite garbage: must never be read
    return old, roll, b.policy_mask, b.turn_id, b.H


# ---- hand-computed --------------------------------------------------------------------------------
def test_log_rho_levels_by_hand():
    old, roll = torch.zeros(1, 4), torch.tensor([[0., -1., -2., 9.]])
    mask, tid = torch.tensor([[T_, T_, T_, F_]]), torch.tensor([[0, 0, 1, 1]])
    want = {"token": [[0., 1., 2., 0.]], "turn": [[1., 1., 2., 0.]], "sequence": [[3., 3., 3., 0.]],
            "geometric": [[1., 1., 1., 0.]]}
    for level in CORRECTION_LEVELS:
        assert_close_to(correction_log_rho(old, roll, mask, tid, level), want[level], 1e-6)


def test_log_rho_floors_minus_inf_and_ignores_nan_off_mask():
    old = torch.tensor([[-math.inf, -1., float("nan")]])
    roll = torch.tensor([[-1., float("nan"), -1.]])
    out = correction_log_rho(old, roll, torch.tensor([[T_, T_, F_]]), level="token")
    assert_close_to(out, [[-999., 0., 0.]], 1e-6)          # -inf -> -1000 floor; NaN on the mask -> 0 (TRL)


def test_truncated_and_masked_is_by_hand():
    lr, m = torch.log(torch.tensor([[0.25, 1., 3., 5.]])), torch.tensor([[T_, T_, T_, F_]])
    assert_close_to(truncated_is(lr, m), [[0.25, 1., 2., 0.]], 1e-6)
    assert_close_to(truncated_is(lr, m, lower=0.5), [[0.5, 1., 2., 0.]], 1e-6)
    assert_close_to(masked_is(lr, m), [[0.25, 1., 0., 0.]], 1e-6)
    assert_close_to(masked_is(lr, m, lower=0.5), [[0., 1., 0., 0.]], 1e-6)
    one = torch.ones(1, 1, dtype=torch.bool)
    assert masked_is(torch.zeros(1, 1), one, upper=1.0, lower=1.0).item() == 1.0     # the bounds are inclusive
    assert_close_to(truncated_is(torch.tensor([[50., -50.]]), torch.ones(1, 2, dtype=torch.bool), upper=1e12),
                    [[math.exp(20), math.exp(-20)]], 1e-3)    # exp of a log-ratio clamped to +-20


def test_rejection_mask_by_hand():
    d, m = torch.tensor([[0.5, 0., 0., 3.]]), torch.tensor([[T_, T_, T_, F_]])
    assert rejection_mask(d, m, "token_k2", 0.1).tolist() == [[F_, T_, T_, F_]]
    assert rejection_mask(d, m, "seq_max_k2", 0.1).tolist() == [[F_, F_, F_, F_]]
    assert rejection_mask(d, m, "seq_mean_k2", 0.1).tolist() == [[T_, T_, T_, F_]]      # mean 0.125 / 3
    assert rejection_mask(d, m, "seq_sum_k2", 0.1).tolist() == [[F_, F_, F_, F_]]       # sum 0.125
    # k1 bounds the engine-over-trainer ratio exp(-d): token 0 has exp(-0.5) = 0.607 < 1/1.5 (default lower)
    assert rejection_mask(d, m, "token_k1", 1.5).tolist() == [[F_, T_, T_, F_]]
    assert rejection_mask(d, m, "token_k1", 1.5, lower=0.6).tolist() == [[T_, T_, T_, F_]]
    k3 = math.exp(0.5) - 1.5                                                            # 0.1487
    assert rejection_mask(d, m, "token_k3", k3 + 1e-4).all(1).tolist() == [False]      # masked token not kept
    assert rejection_mask(d, m, "token_k3", k3 + 1e-4)[0, :3].all()
    # turns: turn 0 = tokens 0-1, turn 1 = token 2; a turn's tokens are kept or dropped together
    tid = torch.tensor([[0, 0, 1, 1]])
    assert rejection_mask(d, m, "turn_max_k2", 0.1, turn_id=tid).tolist() == [[F_, F_, T_, F_]]
    assert rejection_mask(d, m, "turn_mean_k1", 1.2, turn_id=tid).tolist() == [[F_, F_, T_, F_]]  # exp(.25) > 1.2
    assert rejection_mask(d, m, "turn_sum_k3", 0.2, turn_id=tid).tolist() == [[T_, T_, T_, F_]]


def test_opsm_and_none_by_hand():
    lr, m = -torch.ones(2, 2), torch.ones(2, 2, dtype=torch.bool)
    assert off_policy_seq_mask(lr, m, adv=torch.tensor([1., -1.])).tolist() == [[T_, T_], [F_, F_]]
    assert off_policy_seq_mask(lr, m, adv=torch.tensor([1., -1.]), delta=1.0).all()      # KL = 1 <= delta
    assert off_policy_seq_mask(lr, m, adv=torch.tensor([[1., -1.], [0., -2.]])).tolist() == [[T_, F_], [T_, F_]]
    assert no_correction(lr, torch.tensor([[T_, F_], [F_, F_]])).tolist() == [[1., 0.], [0., 0.]]


def test_entry_point_by_hand():
    old, roll, m = torch.zeros(1, 3), torch.tensor([[0., -1., 1.]]), torch.ones(1, 3, dtype=torch.bool)
    w, keep = rollout_correction("tis", old, roll, m)
    assert_close_to(w, [[1., 2., math.exp(-1)]], 1e-4)
    assert keep.tolist() == [[T_, T_, T_]]
    w, _ = rollout_correction("tis", old, roll, m, upper=1.5)
    assert_close_to(w, [[1., 1.5, math.exp(-1)]], 1e-4)
    # turn_tis: turn 0 = tokens 0-1 (product e^1 -> capped at 2), turn 1 = token 2 (e^-1)
    w, _ = rollout_correction("turn_tis", old, roll, m, torch.tensor([[0, 0, 1]]))
    assert_close_to(w, [[2., 2., math.exp(-1)]], 1e-4)
    w, keep = rollout_correction("seq_max_k3", old, roll, m)
    assert w.tolist() == [[0., 0., 0.]] and not keep.any()           # k3(1) = 0.718 > 0.01: the row is dropped
    w, keep = rollout_correction("geo_rs", old, torch.zeros(1, 3), m)
    assert w.tolist() == [[1., 1., 1.]] and keep.all()


def test_correction_stats_by_hand():
    s = correction_stats(torch.tensor([[1., 2., 0., 9.]]), torch.tensor([[T_, T_, F_, T_]]),
                         torch.tensor([[T_, T_, T_, F_]]))
    want = dict(weight_mean=1.0, weight_min=0.0, weight_max=2.0, ess=0.6, zero_weight_frac=1 / 3,
                kept_token_frac=2 / 3, kept_row_frac=0.0)
    assert s == pytest.approx(want)
    assert correction_stats(torch.zeros(2, 2), torch.ones(2, 2, dtype=torch.bool),
                            torch.tensor([[T_, T_], [F_, F_]]))["ess"] == 0.0
    assert all(math.isnan(v) for v in correction_stats(torch.ones(1, 2), torch.ones(1, 2, dtype=torch.bool),
                                                       torch.zeros(1, 2, dtype=torch.bool)).values())


# ---- loop reference vs vectorized -----------------------------------------------------------------
def loop_log_rho(old, roll, mask, turn_id, level):
    B, T = old.shape
    out = torch.zeros(B, T, dtype=old.dtype)
    for b in range(B):
        d = {t: float(old[b, t]) - float(roll[b, t]) for t in range(T) if mask[b, t]}
        for t in d:
            if level == "token":
                out[b, t] = d[t]
            elif level == "turn":
                out[b, t] = sum(v for s, v in d.items() if turn_id[b, s] == turn_id[b, t])
            else:
                out[b, t] = sum(d.values()) / (len(d) if level == "geometric" else 1)
    return out


def loop_keep(d, mask, turn_id, option, upper, lower):
    B, T = d.shape
    k = int(option[-1])
    scope, how = (option[:-3].split("_") + [""])[:2]
    keep = torch.zeros(B, T, dtype=torch.bool)
    for b in range(B):
        div = {}
        for t in range(T):
            if mask[b, t]:
                x = max(-20.0, min(20.0, float(d[b, t])))
                div[t] = -x if k == 1 else 0.5 * x * x if k == 2 else math.exp(x) - 1 - x
        for t in div:
            unit = [t] if scope == "token" else [s for s in div if scope == "seq" or turn_id[b, s] == turn_id[b, t]]
            vals = [div[s] for s in unit]
            stat = {"": vals[0], "sum": sum(vals), "mean": sum(vals) / len(vals), "max": max(vals)}[how]
            keep[b, t] = (math.log(lower) <= stat <= math.log(upper)) if k == 1 else stat <= upper
    return keep


@pytest.mark.parametrize("seed", [0, 1])
def test_log_rho_matches_loop(seed):
    old, roll, mask, tid, H = engine_batch(seed)
    for level in CORRECTION_LEVELS:
        torch.testing.assert_close(correction_log_rho(old, roll, mask, tid, level, H),
                                   loop_log_rho(old, roll, mask, tid, level))


def test_rejection_matches_loop_every_option():
    old, roll, mask, tid, H = engine_batch(3, scale=0.5, B=12)
    d = correction_log_rho(old, roll, mask, tid)
    for option in RS_OPTIONS:
        upper, lower = (1.6, 0.6) if option.endswith("k1") else (0.15, None)
        upper = upper * 2.5 if option.startswith(("seq_sum", "turn_sum")) else upper
        got = rejection_mask(d, mask, option, upper, lower=lower, turn_id=tid, H=H)
        want = loop_keep(d, mask, tid, option, upper, lower if lower else 1 / upper)
        assert torch.equal(got, want), option


# ---- parity with verl 0.9.1 -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def rch():
    return pytest.importorskip("verl.trainer.ppo.rollout_corr_helper")


@pytest.mark.parametrize("seed", [0, 1])
def test_weights_match_verl(rch, seed):
    old, roll, mask, tid, H = engine_batch(seed, scale=0.6)
    lr, fm = old - roll, mask.to(old.dtype)
    raw = torch.exp(correction_log_rho(old, roll, mask)) * mask                     # untouched token ratios
    cases = [("tis", "token", 2.0, {}), ("tis", "token", 1.2, {"upper": 1.2}), ("icepop", "token", "0.5_5.0", {}),
             ("mis", "token", "0.7_1.3", {"lower": 0.7, "upper": 1.3}), ("seq_tis", "sequence", 2.0, {}),
             ("seq_mis", "sequence", "0.5_5.0", {"lower": 0.5, "upper": 5.0})]
    for name, level, threshold, hyper in cases:
        want, _ = rch.compute_rollout_correction_weights(lr, fm, rollout_is=level, rollout_is_threshold=threshold)
        w, keep = rollout_correction(name, old, roll, mask, tid, H=H, **hyper)
        torch.testing.assert_close(w, want, msg=f"{name} {threshold}")
        assert torch.equal(keep, mask)
        if level == "token":
            assert not torch.allclose(w, raw), (name, threshold)                  # the threshold bites


# verl thresholds per option: k1 as "lower_upper" and as a lone upper (lower 1/upper); k2 / k3 an upper bound
RS_SPECS = {"k1": [("0.6_1.6", 1.6, 0.6), ("1.5", 1.5, None)], "k2": [("0.1", 0.1, None)], "k3": [("0.1", 0.1, None)]}
RS_SUM_SPECS = {"k1": [("0.15_6.4", 6.4, 0.15), ("6.0", 6.0, None)], "k2": [("0.4", 0.4, None)],
                "k3": [("0.4", 0.4, None)]}


@pytest.mark.parametrize("seed", [0, 1])
def test_rejection_matches_verl_every_option(rch, seed):
    old, roll, mask, tid, H = engine_batch(seed, scale=0.5, B=16)
    lr, fm = old - roll, mask.to(old.dtype)
    d = correction_log_rho(old, roll, mask, tid)
    bites = 0
    for option in sorted(rch.SUPPORTED_ROLLOUT_RS_OPTIONS):
        for spec, upper, lower in (RS_SUM_SPECS if "sum" in option else RS_SPECS)[option[-2:]]:
            want, _ = rch.compute_rollout_rejection_mask(lr, fm, rollout_rs=option, rollout_rs_threshold=spec)
            got = rejection_mask(d, mask, option, upper, lower=lower)
            assert torch.equal(got, want.bool()), (option, spec)
            bites += int(0 < int((mask & ~got).sum()) < int(mask.sum()))
    assert bites >= 12                                            # most options drop some tokens, never all


@pytest.mark.parametrize("name,option,spec", [("geo_rs", "seq_mean_k1", "0.999_1.001"),
                                              ("k3_rs", "seq_mean_k3", "0.01"), ("token_rs_k3", "token_k3", "0.01"),
                                              ("seq_max_k3", "seq_max_k3", "0.01")])
def test_registered_rejection_matches_verl_presets(rch, name, option, spec):
    old, roll, mask, tid, H = engine_batch(5, scale={"geo_rs": 0.003}.get(name, 0.3), B=16, ramp=True)
    want, _ = rch.compute_rollout_rejection_mask(old - roll, mask.double(), rollout_rs=option,
                                                 rollout_rs_threshold=spec)
    w, keep = rollout_correction(name, old, roll, mask, tid, H=H)
    assert torch.equal(keep, want.bool()) and torch.equal(w, keep.double())
    assert 0.1 < keep.sum() / mask.sum() < 0.9                    # the preset keeps some tokens and drops some


# ---- TRL's four vLLM IS modes, re-derived from TRL's documented semantics ---------------------------
def trl_weights(old, sampling, mask, mode, clip_min, clip_max):
    """TRL GRPOTrainer: diff = (old - sampling) * mask; the sequence modes sum it per row; ratio = exp(diff);
    *_truncate clamps it to [clip_min, clip_max]; *_mask zeroes it outside; the loss is then masked."""
    diff = torch.nan_to_num((old - sampling) * mask, nan=0.0)
    if mode.startswith("sequence"):
        diff = diff.sum(-1, keepdim=True)
    ratio = torch.exp(diff)
    if mode.endswith("truncate"):
        ratio = torch.clamp(ratio, min=clip_min, max=clip_max)
    else:
        lo, hi = -math.inf if clip_min is None else clip_min, math.inf if clip_max is None else clip_max
        ratio = ratio.masked_fill((ratio < lo) | (ratio > hi), 0.0)
    return ratio.expand_as(old) * mask


@pytest.mark.parametrize("clip_min,clip_max", [(None, 3.0), (0.5, 1.5)])
def test_trl_vllm_is_modes(clip_min, clip_max):
    old, roll, mask, tid, H = engine_batch(7, scale=0.4, B=16)
    fm = mask.double()
    for mode, name in [("token_truncate", "tis"), ("token_mask", "mis"), ("sequence_truncate", "seq_tis"),
                       ("sequence_mask", "seq_mis")]:
        w, keep = rollout_correction(name, old, roll, mask, tid, upper=clip_max, lower=clip_min)
        torch.testing.assert_close(w, trl_weights(old, roll, fm, mode, clip_min, clip_max), msg=mode)
        if clip_min or mode.startswith("sequence"):                           # the bounds change some weights
            assert not torch.allclose(w, trl_weights(old, roll, fm, mode, None, math.inf)), mode


def test_trl_off_policy_sequence_mask():
    """TRL get_off_policy_mask: kl = sampling - current (old here); keep if A >= 0 or masked-mean kl <= delta."""
    old, roll, mask, tid, H = engine_batch(8, scale=0.6, B=16)
    adv = torch.randn(16, dtype=old.dtype, generator=torch.Generator().manual_seed(0))
    kl = ((roll - old) * mask).sum(1, keepdim=True) / mask.sum(1, keepdim=True).clamp(min=1)
    for delta in (0.05, 0.5):
        want = ((adv[:, None] >= 0) | (kl <= delta)) & mask
        _, keep = rollout_correction("opsm", old, roll, mask, tid, adv=adv, delta=delta)
        assert torch.equal(keep, want)
    assert not torch.equal(keep, mask)


# ---- properties -----------------------------------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), scale=st.sampled_from([0.0, 0.05, 0.5, 3.0, 40.0]),
       name=st.sampled_from(sorted(CORRECTIONS)), upper=st.floats(1.0, 10.0))
def test_properties_every_correction(seed, scale, name, upper):
    old, roll, mask, tid, H = engine_batch(seed, scale=scale, B=5, dtype=torch.float32)
    old.requires_grad_(True)
    adv = torch.randn(5)
    w, keep = rollout_correction(name, old, roll, mask, tid, H=H, adv=adv)
    assert not w.requires_grad and w.shape == keep.shape == mask.shape and keep.dtype == torch.bool
    assert torch.isfinite(w).all() and (w >= 0).all()
    assert (w[~mask] == 0).all() and (w[~keep] == 0).all() and not (keep & ~mask).any()
    ident_w, ident_keep = rollout_correction(name, old, old.detach(), mask, tid, H=H, adv=adv)
    assert torch.equal(ident_w, mask.float()) and torch.equal(ident_keep, mask)
    if name in IS_NAMES:
        hyper = {"upper": upper} if name != "icepop" else {"upper": upper, "lower": 0.5}
        w2, _ = rollout_correction(name, old, roll, mask, tid, H=H, **hyper)
        assert (w2 <= upper).all()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_matches_cpu():
    old, roll, mask, tid, H = engine_batch(9, scale=0.5, B=8, dtype=torch.float32)
    adv = torch.randn(8)
    for name in CORRECTIONS:
        w, keep = rollout_correction(name, old, roll, mask, tid, H=H, adv=adv)
        wc, kc = rollout_correction(name, old.cuda(), roll.cuda(), mask.cuda(), tid.cuda(), H=H, adv=adv.cuda())
        assert wc.is_cuda and torch.equal(kc.cpu(), keep)
        torch.testing.assert_close(wc.cpu(), w)
        assert correction_stats(wc, kc, mask.cuda()) == pytest.approx(correction_stats(w, keep, mask), nan_ok=True)


# ---- bad input ------------------------------------------------------------------------------------
def test_bad_input_errors():
    old, roll, mask, tid, H = engine_batch(0)
    with pytest.raises(ValueError, match="correction name must be one of"):
        rollout_correction("tiss", old, roll, mask)
    with pytest.raises(ValueError, match=r"'tis' does not take \['cap'\]"):
        rollout_correction("tis", old, roll, mask, cap=2.0)
    for bad in (0.0, -1.0, float("nan"), math.inf, True, "2"):            # checked before the tensors are read
        with pytest.raises(ValueError, match="upper must be a positive finite number"):
            rollout_correction("tis", None, None, None, upper=bad)
    with pytest.raises(ValueError, match="lower must be <= upper"):
        rollout_correction("icepop", old, roll, mask, lower=3.0, upper=2.0)
    with pytest.raises(ValueError, match="the default lower is 1/upper"):
        rollout_correction("geo_rs", old, roll, mask, upper=0.9, lower=None)
    with pytest.raises(ValueError, match="takes an upper bound only"):
        rejection_mask(old - roll, mask, "token_k3", 0.1, lower=0.01)
    with pytest.raises(ValueError, match="option must be one of"):
        rejection_mask(old - roll, mask, "seq_max_k1", 2.0)
    with pytest.raises(ValueError, match="delta must be a positive"):
        rollout_correction("opsm", old, roll, mask, adv=torch.zeros(len(old)), delta=0)
    with pytest.raises(ValueError, match=r"needs adv \(B,\) or \(B, T\)"):
        rollout_correction("opsm", old, roll, mask)
    with pytest.raises(ValueError, match=r"needs adv"):
        rollout_correction("opsm", old, roll, mask, adv=torch.zeros(3, 2))
    with pytest.raises(ValueError, match="mask must be a bool tensor"):
        rollout_correction("tis", old, roll, mask.float())
    with pytest.raises(ValueError, match="rollout_logp must have the shape of old_logp"):
        rollout_correction("tis", old, roll[:, 1:], mask)
    with pytest.raises(ValueError, match="old_logp must be a"):
        rollout_correction("tis", old.long(), roll, mask)
    with pytest.raises(ValueError, match="turn_id .* is required by a turn-level correction"):
        rollout_correction("turn_tis", old, roll, mask)
    with pytest.raises(ValueError, match="turn_id .* is required by a turn-level correction"):
        rollout_correction("turn_geo_rs", old, roll, mask)
    with pytest.raises(ValueError, match="H must be None or a positive int above every turn_id"):
        rollout_correction("turn_tis", old, roll, mask, tid, H=1)
    with pytest.raises(ValueError, match="turn_id must be an integer tensor"):
        rollout_correction("turn_tis", old, roll, mask, tid.float())
    with pytest.raises(ValueError, match="level must be one of"):
        correction_log_rho(old, roll, mask, tid, "trajectory")
    with pytest.raises(ValueError, match="keep and mask must be bool tensors"):
        correction_stats(old, mask.float(), mask)
