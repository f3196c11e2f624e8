"""Diagnostics: the stability checklist on hand-built batches, exact vs proxy gradient norms per turn."""
import math
from collections import Counter

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from toyrl import TurnBatch
from toyrl.diagnostics import (grad_norm_per_turn, grad_norm_per_turn_proxy, obs_boundary_masks, pool_loss_stats,
                               reward_variance, stability_report, template_entropy_mi, turn_template_ids)
from toyrl.objectives import policy_loss

# 4 rollouts in 2 groups (tasks 0, 1): prompt, a_0 a_0, o_0, a_1 a_1 (T = 6, H = 2)
TURN = torch.tensor([[0, 0, 0, 0, 1, 1]] * 4)
POLICY = torch.tensor([[False, True, True, False, True, True]] * 4)
TOKENS = torch.tensor([[1, 5, 6, 9, 7, 7],
                       [1, 5, 6, 9, 7, 7],
                       [2, 5, 6, 9, 8, 7],
                       [2, 6, 5, 9, 7, 8]])
ENTROPY = torch.tensor([[0.0, 1.0, 2.0, 0.0, 3.0, 4.0]] * 4)


def make_batch(void=True, entropy=True):
    reward = torch.tensor([[0.0, 1.0], [0.0, 1.0], [0.0, 1.0], [0.0, 0.0]])
    return TurnBatch(tokens=TOKENS, policy_mask=POLICY, turn_id=TURN, old_logp=torch.zeros(4, 6),
                     turn_mask=torch.tensor([[1, 1], [1, 1], [1, 1], [1, 0]], dtype=torch.bool), turn_reward=reward,
                     group=torch.tensor([0, 0, 1, 1]), state_key=torch.zeros(4, 2, dtype=torch.long),
                     entropy=ENTROPY if entropy else None,
                     void_turn=torch.tensor([[0, 0], [0, 1], [0, 0], [0, 0]], dtype=torch.bool) if void else None)


def test_reward_variance():
    out = reward_variance(torch.tensor([1.0, 0.0, 1.0, 1.0]), torch.tensor([0, 0, 1, 1]))
    assert math.isclose(out["reward_std"], math.sqrt(0.5) / 2, rel_tol=1e-6) and out["zero_var_frac"] == 0.5


def test_obs_boundary_masks():
    pre, post = obs_boundary_masks(torch.tensor([[False, True, True, False, True]]), torch.tensor([[0, 0, 0, 0, 1]]), 2)
    assert pre.tolist() == [[False, False, True, False, False]] and post.tolist() == [[False, False, False, False, True]]
    pre, post = obs_boundary_masks(POLICY[:1], TURN[:1], 2, window=2)
    assert pre.tolist() == [[False, True, True, False, False, False]]          # the last turn has no observation
    assert post.tolist() == [[False, False, False, False, True, True]]


def test_templates_and_plugin_information():
    ids, present = turn_template_ids(TOKENS, POLICY, TURN, 2)
    assert present.all()
    assert ids[0, 0] == ids[1, 0] == ids[2, 0] != ids[3, 0]                    # "5 6" vs "6 5": order matters
    assert ids[0, 1] == ids[1, 1] != ids[2, 1]
    h, mi = template_entropy_mi(torch.tensor([1, 2, 1, 2]), torch.tensor([0, 0, 1, 1]))
    assert math.isclose(h, math.log(2)) and mi == 0.0
    h, mi = template_entropy_mi(torch.tensor([1, 1, 2, 2]), torch.tensor([0, 0, 1, 1]))
    assert math.isclose(mi, math.log(2))
    assert template_entropy_mi(torch.tensor([], dtype=torch.long), torch.tensor([], dtype=torch.long)) == (0.0, 0.0)


def test_template_entropy_loop_vs_vectorized():
    g = torch.Generator().manual_seed(0)
    tmpl, task = torch.randint(0, 5, (200,), generator=g), torch.randint(0, 4, (200,), generator=g)
    H = lambda c: -sum(n / sum(c.values()) * math.log(n / sum(c.values())) for n in c.values())   # noqa: E731
    joint, tasks = Counter(zip(task.tolist(), tmpl.tolist())), Counter(task.tolist())
    h_t, mi = template_entropy_mi(tmpl, task)
    assert math.isclose(h_t, H(Counter(tmpl.tolist())), rel_tol=1e-9)
    assert math.isclose(mi, h_t - (H(joint) - H(tasks)), rel_tol=1e-9, abs_tol=1e-12)


def test_grad_norm_exact_equals_proxy_when_logp_is_the_parameter():
    g = torch.Generator().manual_seed(0)
    theta = torch.nn.Parameter(-torch.rand(4, 6, generator=g))
    old = theta.detach() + 0.2 * torch.randn(4, 6, generator=g)
    loss, info = policy_loss(theta, old, torch.randn(4, 2, generator=g), POLICY, TURN, clip="ppo")
    exact = grad_norm_per_turn(info, TURN, [theta])
    proxy = grad_norm_per_turn_proxy(loss, theta, TURN, POLICY)
    assert torch.allclose(exact.float(), proxy, atol=1e-6) and exact.shape == (2,)
    (full,) = torch.autograd.grad(loss, theta, retain_graph=True)
    parts = [torch.autograd.grad((info["token_loss"] * info["agg_weight"] * (TURN == k)).sum(), theta,
                                 retain_graph=True)[0] for k in range(2)]
    assert torch.allclose(parts[0] + parts[1], full)                          # the split is exact


def test_grad_norm_exact_loop_over_a_linear_model():
    g = torch.Generator().manual_seed(1)
    feats = torch.randn(4, 6, 3, generator=g)
    w = torch.nn.Parameter(torch.randn(3, generator=g))
    logp = -(feats @ w).exp()                                                  # (B, T)
    loss, info = policy_loss(logp, logp.detach() + 0.1, torch.randn(4, 2, generator=g), POLICY, TURN)
    exact = grad_norm_per_turn(info, TURN, [w])
    for k in range(2):                                                         # one backward per turn, by hand
        tl = info["token_loss"] * info["agg_weight"]
        ref = torch.autograd.grad(tl[TURN == k].sum(), w, retain_graph=True)[0].norm()
        assert math.isclose(float(exact[k]), float(ref), rel_tol=1e-5)


def test_stability_report_values():
    batch = make_batch()
    logp = torch.full((4, 6), -0.1, requires_grad=True)
    _, info = policy_loss(logp, batch.old_logp, torch.ones(4, 2), batch.policy_mask, batch.turn_id)
    row = stability_report(batch, info, grad_norm_turn=torch.tensor([0.5, 2.0]))
    assert math.isclose(row["reward_mean"], 0.75) and row["zero_var_frac"] == 0.5
    assert math.isclose(row["reward_std"], math.sqrt(0.5) / 2, rel_tol=1e-6)
    assert row["entropy"] == 2.5 and row["entropy_pre_obs"] == 2.0 and row["entropy_post_obs"] == 3.0
    assert math.isclose(row["void_turn_rate"], 1 / 7) and row["void_traj_rate"] == 0.25
    assert math.isclose(row["format_valid_rate"], 6 / 7) and row["turns_per_episode"] == 1.75
    # 7 valid turns, templates: "5 6" x3, "6 5", "7 7" x2, "8 7"
    counts = [3, 1, 2, 1]
    assert math.isclose(row["template_entropy"], -sum(c / 7 * math.log(c / 7) for c in counts), rel_tol=1e-9)
    assert 0.0 <= row["template_mi"] <= row["template_entropy"] and len(row["template_entropy_turn"]) == 2
    assert math.isclose(row["ratio_max"], math.exp(-0.1), rel_tol=1e-6) and row["clip_frac"] == 0.0
    assert row["clip_frac_turn"] == [0.0, 0.0] and row["tokens_turn"] == [8.0, 8.0]
    assert row["grad_norm_turn"] == [0.5, 2.0] and row["grad_norm_max_turn"] == 2.0
    for key in ("reward_std", "zero_var_frac", "clip_frac", "ratio_max", "ratio_min", "approx_kl", "entropy",
                "void_turn_rate", "format_valid_rate", "turns_per_episode", "entropy_pre_obs", "entropy_post_obs",
                "template_entropy", "template_mi"):
        assert isinstance(row[key], float) and math.isfinite(row[key]), key


def test_stability_report_unmeasurable_is_nan():
    row = stability_report(make_batch(void=False, entropy=False))
    assert math.isnan(row["entropy"]) and math.isnan(row["void_turn_rate"]) and math.isnan(row["format_valid_rate"])
    assert "clip_frac" not in row and math.isfinite(row["template_mi"])
    row = stability_report(make_batch(void=False), format_valid=torch.ones(4, 2, dtype=torch.bool))
    assert row["format_valid_rate"] == 1.0


@pytest.mark.parametrize("zero", [True, False])
def test_zero_std_groups_do_not_nan(zero):
    batch = make_batch()
    if zero:
        batch = batch.replace(turn_reward=torch.zeros(4, 2))
    row = stability_report(batch)
    assert all(math.isfinite(v) for k, v in row.items() if isinstance(v, float) and k not in ())


# ---- pooling the loss statistics of a step's minibatches x epochs ------------------------------------------------
def _info(n_turn, clip_turn, rmin_turn, rmax_turn, loss):
    """A fake policy_loss info from per-turn figures (the scalars pooled from them as policy_loss would)."""
    n = torch.tensor(n_turn)
    t = lambda v: torch.tensor(v, dtype=torch.float32)                                # noqa: E731
    has, empty = n > 0, not bool((n > 0).any())                                       # empty: policy_loss's fills
    return {"n_tokens": n.sum(), "tokens_turn": n, "loss": t(loss),
            "clip_frac": t(0.0) if empty else (t(clip_turn) * n).sum() / n.sum(), "clip_frac_turn": t(clip_turn),
            "ratio_min": t(1.0) if empty else t(rmin_turn)[has].min(), "ratio_min_turn": t(rmin_turn),
            "ratio_max": t(1.0) if empty else t(rmax_turn)[has].max(), "ratio_max_turn": t(rmax_turn),
            "level": "token", "ratio": torch.ones(2, 3)}                           # non-statistics: dropped


def test_pool_loss_stats_by_hand():
    """Minibatch a: 1 token of turn 0 (clipped), 3 tokens of turn 1 (none clipped); minibatch b: 2 of turn 0
    (both clipped), none of turn 1 (fills 0 / 1 / 1 there)."""
    a = _info([1, 3], [1.0, 0.0], [0.8, 0.9], [1.3, 1.1], loss=2.0)
    b = _info([2, 0], [1.0, 0.0], [0.7, 1.0], [0.95, 1.0], loss=-1.0)
    assert float(a["clip_frac"]) == 0.25 and float(b["clip_frac"]) == 1.0
    out = pool_loss_stats([a, b])
    assert float(out["clip_frac"]) == pytest.approx((4 * 0.25 + 2 * 1.0) / 6)          # 0.5, not b's 1.0
    assert float(out["loss"]) == pytest.approx((4 * 2.0 + 2 * -1.0) / 6)               # 1.0
    assert out["clip_frac_turn"].tolist() == pytest.approx([1.0, 0.0])                 # turn 1: b has no tokens
    assert out["ratio_min"].item() == pytest.approx(0.7) and out["ratio_max"].item() == pytest.approx(1.3)
    assert out["ratio_min_turn"].tolist() == pytest.approx([0.7, 0.9])                 # b's fill 1.0 left out
    assert out["ratio_max_turn"].tolist() == pytest.approx([1.3, 1.1])
    assert out["tokens_turn"].tolist() == [3.0, 3.0] and out["n_tokens"].item() == 6.0
    assert pool_loss_stats([a, b], passes=2)["tokens_turn"].tolist() == [1.5, 1.5]      # per pass over the batch
    assert "level" not in out and "ratio" not in out
    c = _info([0, 0], [0.0, 0.0], [1.0, 1.0], [1.0, 1.0], loss=0.0)                     # an empty minibatch
    assert pool_loss_stats([a, c])["ratio_max"].item() == pytest.approx(1.3)           # not pulled to c's fill
    assert pool_loss_stats([c, c])["ratio_min"].item() == 1.0                          # all empty: the fill
    with pytest.raises(ValueError, match="infos"):
        pool_loss_stats([])
    with pytest.raises(ValueError, match="passes"):
        pool_loss_stats([a], passes=0)
    with pytest.raises(ValueError, match="other statistics"):
        pool_loss_stats([a, {k: v for k, v in b.items() if k != "clip_frac_turn"}])


@settings(max_examples=40, deadline=None)
@given(B=st.integers(1, 4), T=st.integers(1, 6), seed=st.integers(0, 2**16), clip=st.sampled_from(["ppo", "dual_clip"]))
def test_pool_of_one_minibatch_is_that_minibatch_exactly(B, T, seed, clip):
    """ppo_epochs = minibatches = 1: the pooled row is bit for bit the one minibatch's row."""
    g = torch.Generator().manual_seed(seed)
    logp, old = -torch.rand(B, T, generator=g) * 3, -torch.rand(B, T, generator=g) * 3
    turn_id = torch.sort(torch.randint(-1, 3, (B, T), generator=g), 1).values
    mask = (turn_id >= 0) & (torch.rand(B, T, generator=g) < 0.8)
    adv = torch.randn(B, T, generator=g)
    ref = -torch.rand(B, T, generator=g) * 3
    loss, info = policy_loss(logp, old, adv, mask, turn_id, clip=clip, H=3, ref_logp=ref, kl_coef=0.1)
    pooled = pool_loss_stats([{"loss": loss.detach(), **info}])
    assert float(pooled["loss"]) == loss.item()
    old_row, new_row = stability_report(make_batch(), info), stability_report(make_batch(), pooled)
    assert old_row.keys() == new_row.keys()
    for k, v in old_row.items():
        assert v == new_row[k] or (v != v and new_row[k] != new_row[k]), k              # equal, or both NaN
