"""policy_loss end to end: masks, broadcasting, per-turn stats, shape errors, numerical safety, gradcheck."""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from toyrl.objectives import AGGREGATIONS, CLIP_SCHEMES, LEVELS, loss_mask, policy_loss

# 3 rollouts, T = 8, H = 3. Row 0: prompt, a_0 a_0, o_0, a_1, o_1, a_2 a_2. Row 1: two turns + padding.
# Row 2: prompt only then padding (an all-masked row).
TURN = torch.tensor([[0, 0, 0, 0, 1, 1, 2, 2],
                     [0, 0, 0, 1, 1, 1, -1, -1],
                     [0, -1, -1, -1, -1, -1, -1, -1]])
POLICY = torch.tensor([[0, 1, 1, 0, 1, 0, 1, 1],
                       [0, 1, 0, 1, 1, 0, 0, 0],
                       [0, 0, 0, 0, 0, 0, 0, 0]], dtype=torch.bool)
B, T, H = 3, 8, 3


def extra_kw(clip, B=B, H=H, old=None, g=None):
    kw = {}
    if clip == "a2tgpo":
        kw["z"] = torch.linspace(-1, 1, B * H).view(B, H).to(old.dtype if old is not None else torch.float32)
    if clip == "tis":
        kw["rollout_logp"] = old - 0.1
    if clip == "clip_cov":
        kw["generator"] = torch.Generator().manual_seed(0) if g is None else g
    return kw


def inputs(seed=0, dtype=torch.float32, scale=0.5):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(B, T, generator=g, dtype=dtype) * 2
    logp = (old + scale * torch.randn(B, T, generator=g, dtype=dtype)).requires_grad_()
    adv = torch.randn(B, H, generator=g, dtype=dtype)
    return logp, old, adv


def test_loss_mask_switch():
    assert torch.equal(loss_mask(POLICY, TURN, True), POLICY)
    full = loss_mask(POLICY, TURN, mask_env_tokens=False)
    assert full[0].tolist() == [False, True, True, True, True, True, True, True]      # prompt excluded, obs in
    assert full[1].tolist() == [False, True, True, True, True, True, False, False]
    assert not full[2].any()
    with pytest.raises(ValueError, match="policy_mask and turn_id"):
        loss_mask(POLICY, TURN[:, :3])


def test_env_token_switch_changes_loss_and_kl():
    logp, old, adv = inputs()
    ref = old + 0.3
    on = policy_loss(logp, old, adv, loss_mask(POLICY, TURN), TURN, ref_logp=ref, kl_coef=0.1)
    off = policy_loss(logp, old, adv, loss_mask(POLICY, TURN, False), TURN, ref_logp=ref, kl_coef=0.1)
    assert int(on[1]["n_tokens"]) == 8 and int(off[1]["n_tokens"]) == 12
    assert not torch.isclose(on[0], off[0]) and not torch.isclose(on[1]["kl_ref"], off[1]["kl_ref"])


def test_turn_advantage_equals_broadcast_token_advantage():
    logp, old, adv = inputs()
    adv_bt = adv.gather(1, TURN.clamp(min=0))
    for clip in CLIP_SCHEMES:
        kw = extra_kw(clip, old=old)
        a, _ = policy_loss(logp, old, adv, POLICY, TURN, clip=clip, **kw)
        kw = extra_kw(clip, old=old)
        b, _ = policy_loss(logp, old, adv_bt, POLICY, TURN, clip=clip, H=H, **kw)
        assert torch.allclose(a, b), clip


def test_token_turn_sequence_agree_when_each_row_has_one_token():
    turn = torch.tensor([[0, 0], [0, -1]])
    mask = torch.tensor([[False, True], [True, False]])
    logp = torch.tensor([[0.0, -0.2], [-0.5, 0.0]], requires_grad=True)
    old, adv = torch.tensor([[0.0, -0.6], [-0.4, 0.0]]), torch.tensor([[1.0], [-2.0]])
    for clip in ("ppo", "dual_clip", "cispo", "sapo", "loop", "gmpo"):
        losses = [policy_loss(logp, old, adv, mask, turn, clip=clip, ratio=lv, agg="token-mean")[0] for lv in LEVELS]
        assert all(torch.allclose(x, losses[0]) for x in losses), clip


def test_per_turn_stats_loop_vs_vectorized():
    logp, old, adv = inputs(seed=3, scale=0.6)
    mask = loss_mask(POLICY, TURN, False)
    _, info = policy_loss(logp, old, adv, mask, TURN, ratio="turn", clip="dual_clip")
    r, clipped = info["ratio"], info["clipped"]
    d = (logp - old).detach()
    for k in range(H):
        sel = [(b, t) for b in range(B) for t in range(T) if mask[b, t] and TURN[b, t] == k]
        rs = [float(r[b, t]) for b, t in sel]
        assert int(info["tokens_turn"][k]) == len(sel)
        assert math.isclose(float(info["clip_frac_turn"][k]), sum(bool(clipped[b, t]) for b, t in sel) / len(sel))
        assert math.isclose(float(info["ratio_max_turn"][k]), max(rs), rel_tol=1e-6)
        assert math.isclose(float(info["ratio_min_turn"][k]), min(rs), rel_tol=1e-6)
        assert math.isclose(float(info["ratio_mean_turn"][k]), sum(rs) / len(rs), rel_tol=1e-5)
        k3 = [math.expm1(float(d[b, t])) - float(d[b, t]) for b, t in sel]
        assert math.isclose(float(info["approx_kl_turn"][k]), sum(k3) / len(k3), rel_tol=1e-4, abs_tol=1e-7)
    assert math.isclose(float(info["ratio_max"]), float(r[mask].max()), rel_tol=1e-6)
    assert math.isclose(float(info["ppo_kl"]), float(-d[mask].mean()), rel_tol=1e-5)


def test_empty_turns_rows_and_batch_are_finite():
    logp, old, adv = inputs()
    adv5 = torch.cat([adv, torch.zeros(B, 2)], 1)                          # turn indices 3, 4 are empty
    _, info = policy_loss(logp, old, adv5, POLICY, TURN)
    assert info["tokens_turn"].tolist() == [3, 3, 2, 0, 0]
    assert info["ratio_max_turn"][3:].tolist() == [1.0, 1.0] and info["clip_frac_turn"][3:].tolist() == [0.0, 0.0]
    empty = torch.zeros(B, T, dtype=torch.bool)
    for clip in CLIP_SCHEMES:
        for agg in AGGREGATIONS:
            loss, info = policy_loss(logp, old, adv, empty, TURN, clip=clip, agg=agg, **extra_kw(clip, old=old))
            (g,) = torch.autograd.grad(loss, logp, allow_unused=True)
            assert float(loss.detach()) == 0.0 and (g is None or torch.all(g == 0)), (clip, agg)
            assert all(torch.isfinite(v).all() for v in info.values() if isinstance(v, torch.Tensor))


def test_shape_errors_name_the_argument():
    logp, old, adv = inputs()
    with pytest.raises(ValueError, match="old_logp must have shape"):
        policy_loss(logp, old[:, :4], adv, POLICY, TURN)
    with pytest.raises(ValueError, match="loss_mask must have shape"):
        policy_loss(logp, old, adv, POLICY[:2], TURN)
    with pytest.raises(ValueError, match="adv must have shape"):
        policy_loss(logp, old, adv[:2], POLICY, TURN)
    with pytest.raises(ValueError, match="turn_id has values up to 2 but H=2"):
        policy_loss(logp, old, adv[:, :2], POLICY, TURN)
    with pytest.raises(ValueError, match="ref_logp must have shape"):
        policy_loss(logp, old, adv, POLICY, TURN, ref_logp=old[0])
    with pytest.raises(ValueError, match="padding"):
        policy_loss(logp, old, adv, torch.ones(B, T, dtype=torch.bool), TURN)
    with pytest.raises(ValueError, match="ratio must be one of"):
        policy_loss(logp, old, adv, POLICY, TURN, ratio="episode")
    with pytest.raises(ValueError, match="turn_id must be an integer"):
        policy_loss(logp, old, adv, POLICY, TURN.float())


def test_kl_term_added_on_mask_only():
    logp, old, adv = inputs()
    base, _ = policy_loss(logp, old, adv, POLICY, TURN)
    ref = old.clone()
    ref[~POLICY] = 1e6                                                     # garbage off the mask
    loss, info = policy_loss(logp, old, adv, POLICY, TURN, ref_logp=ref, kl="k2", kl_coef=0.5)
    k2 = 0.5 * ((logp - old)[POLICY] ** 2).mean()
    assert torch.allclose(info["kl_ref"], k2.detach()) and torch.allclose(loss, base + 0.5 * k2)


def test_loss_equals_sum_of_weighted_token_losses():
    logp, old, adv = inputs()
    for agg in AGGREGATIONS:
        loss, info = policy_loss(logp, old, adv, POLICY, TURN, clip="sapo", agg=agg)
        assert torch.allclose(loss, (info["token_loss"] * info["agg_weight"]).sum())


@pytest.mark.parametrize("clip", ["ppo", "clip_higher", "gspo", "turn_ppo", "luspo"])
def test_written_out_ppo_branch_is_the_registry_function(clip):
    """policy_loss's PPO branch (-min(r A, clip(r, 1 - eps_low, 1 + eps_high) A), written in loss.py) gives,
    bit for bit, the token loss and clip masks of the scheme's registered function, and the expected numbers."""
    logp, old, adv = inputs(seed=3)
    scheme = CLIP_SCHEMES[clip]
    loss, info = policy_loss(logp, old, adv, POLICY, TURN, clip=clip, eps_low=0.15)
    adv_t = torch.where(POLICY, adv.gather(1, TURN.clamp(min=0)), torch.zeros(B, T))
    want = scheme.fn(info["ratio"], adv_t, **{**scheme.hyper, "eps_low": 0.15})
    assert torch.equal(info["token_loss"], torch.where(POLICY, want.loss, torch.zeros(B, T)))
    assert torch.equal(info["clipped"], (want.high | want.low) & POLICY)
    r, hi = info["ratio"], 1.0 + scheme.hyper["eps_high"]
    by_hand = -torch.minimum(r * adv_t, r.clamp(0.85, hi) * adv_t)
    assert torch.allclose(info["token_loss"], torch.where(POLICY, by_hand, torch.zeros(B, T)))


# ---- numerical safety ------------------------------------------------------------------------
MASK_SAFE = loss_mask(POLICY, TURN, False)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(-1e4, 1e4), min_size=B * T, max_size=B * T),
       st.lists(st.floats(-10, 10), min_size=B * H, max_size=B * H))
def test_any_log_ratio_gives_finite_loss_and_gradient(d, a):
    old = torch.linspace(-30, 0, B * T).view(B, T)
    logp = (old + torch.tensor(d).view(B, T)).requires_grad_()
    adv = torch.tensor(a).view(B, H)
    for clip in CLIP_SCHEMES:
        for level in LEVELS:
            kw = extra_kw(clip, old=old)
            if clip == "tis":
                kw["rollout_logp"] = old - torch.tensor(d).view(B, T).flip(1)
            loss, info = policy_loss(logp, old, adv, MASK_SAFE, TURN, clip=clip, ratio=level,
                                     ref_logp=old + torch.tensor(d).view(B, T).flip(0), kl_coef=0.1, **kw)
            (g,) = torch.autograd.grad(loss, logp)
            assert torch.isfinite(loss) and torch.isfinite(g).all(), (clip, level)
            assert all(torch.isfinite(v).all() for v in info.values() if isinstance(v, torch.Tensor)), (clip, level)


# a detached weight sg(w) * logp is not the derivative of the loss value: cispo, dppo_*, vespo
@pytest.mark.parametrize("clip", sorted(set(CLIP_SCHEMES) - {"cispo", "dppo_tv", "dppo_kl", "vespo"}))
def test_gradcheck_float64(clip):
    logp, old, adv = inputs(seed=1, dtype=torch.float64, scale=0.3)
    logp = logp.detach().requires_grad_()
    levels = ("token", "turn", "sequence") if clip != "clip_cov" else ("token",)
    for level in levels:
        def f(x):
            kw = extra_kw(clip, old=old, g=torch.Generator().manual_seed(0))
            return policy_loss(x, old, adv, POLICY, TURN, clip=clip, ratio=level, ref_logp=old + 0.2, kl_coef=0.1,
                               **kw)[0]
        assert torch.autograd.gradcheck(f, (logp,), eps=1e-6, atol=1e-5), (clip, level)


def test_trajectory_level_gradcheck():
    logp, old, adv = inputs(seed=2, dtype=torch.float64, scale=0.05)
    logp = logp.detach().requires_grad_()
    f = lambda x: policy_loss(x, old, adv, POLICY, TURN, ratio="trajectory", clip="loop")[0]      # noqa: E731
    assert torch.autograd.gradcheck(f, (logp,), eps=1e-6, atol=1e-5)


def test_straight_through_matches_plain_gradient_for_sequence_advantage():
    """GSPO-token = GSPO when the advantage is constant over each sequence (paper, Sec. 4.3)."""
    logp, old, _ = inputs(seed=2, dtype=torch.float64, scale=0.3)
    adv = torch.tensor([[1.0] * 3, [-0.5] * 3, [2.0] * 3], dtype=torch.float64)
    grads = []
    for st_ in (False, True):
        loss, _ = policy_loss(logp, old, adv, POLICY, TURN, clip="gspo", eps_low=0.1, eps_high=0.1,
                              straight_through=st_)
        grads.append(torch.autograd.grad(loss, logp)[0])
    assert torch.allclose(grads[0], grads[1])


def test_cispo_gradient_is_clipped_weight_times_advantage():
    logp, old, adv = inputs(seed=4, dtype=torch.float64, scale=0.5)
    loss, info = policy_loss(logp, old, adv, POLICY, TURN, clip="cispo", agg="token-sum")
    (g,) = torch.autograd.grad(loss, logp)
    w = info["ratio"].clamp(0.0, 1.28) * adv.gather(1, TURN.clamp(min=0))
    assert torch.allclose(g, torch.where(POLICY, -w, torch.zeros_like(w)))
