"""toyrl's clipping schemes in verl's policy-loss registry (``toyrl_<scheme>``): turns from mask runs, parity."""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from toyrl.objectives import CLIP_SCHEMES, policy_loss
from toyrl.port.verl import register_with_verl, turn_ids_from_mask, verl_policy_loss
from toyrl.port.verl_loader import load_core_algos

ca = load_core_algos()
needs_verl = pytest.mark.skipif(ca is None, reason="verl 0.9.1 (or one of its imports) is not installed")
MODES = ["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]


def turn_ids_loop(mask):
    """Plain reference: count runs of ones left to right."""
    out = []
    for row in mask.tolist():
        k, prev, ids = -1, 0, []
        for m in row:
            k += int(m and not prev)
            ids.append(k)
            prev = m
        out.append(ids)
    return torch.tensor(out)


def multi_turn(seed, B=6, L=16, scale=0.5):
    """verl-shaped inputs whose masks have 1-3 policy runs separated by tool-output zeros."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.zeros(B, L)
    for b in range(B - 1):                                           # the last row stays empty
        t = int(torch.randint(0, 2, (1,), generator=g))
        for _ in range(int(torch.randint(1, 4, (1,), generator=g))):
            n = int(torch.randint(1, 4, (1,), generator=g))
            mask[b, t:t + n] = 1.0
            t += n + int(torch.randint(1, 3, (1,), generator=g))
    old = -torch.rand(B, L, generator=g, dtype=torch.float64) * 3
    logp = old + scale * torch.randn(B, L, generator=g, dtype=torch.float64)
    adv = torch.randn(B, L, generator=g, dtype=torch.float64)
    return old, logp, adv, mask


def extra(name, old, B):
    if name == "a2tgpo":
        return {"z": torch.linspace(-1, 1, B * 4, dtype=old.dtype).view(B, 4)}
    if name == "dro":
        return {"beta": 0.05}                                        # verl has no default beta: it must be given
    return {"rollout_log_probs": old - 0.2} if name == "tis" else {}


def test_turn_ids_from_mask_hand_computed():
    mask = torch.tensor([[0, 1, 1, 0, 1, 0], [1, 0, 0, 1, 1, 1], [0, 0, 0, 0, 0, 0]])
    assert turn_ids_from_mask(mask).tolist() == [[-1, 0, 0, 0, 1, 1], [0, 0, 0, 1, 1, 1], [-1] * 6]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.booleans(), min_size=7, max_size=7), min_size=1, max_size=5))
def test_turn_ids_loop_vs_vectorized(rows):
    mask = torch.tensor(rows)
    tid = turn_ids_from_mask(mask)
    assert torch.equal(tid, turn_ids_loop(mask))
    assert bool((tid[mask] >= 0).all()) and bool((tid.diff(dim=1) >= 0).all())


@pytest.mark.parametrize("name", sorted(CLIP_SCHEMES))
def test_every_adapter_equals_toyrls_policy_loss_on_multi_turn_masks(name):
    for seed in (0, 1):
        old, logp, adv, mask = multi_turn(seed)
        kw = extra(name, old, old.shape[0])
        for mode in MODES:
            x1, x2 = logp.clone().requires_grad_(), logp.clone().requires_grad_()
            torch.manual_seed(0)
            loss, metrics = verl_policy_loss(name)(old, x1, adv, mask, mode, None, None, **kw)
            torch.manual_seed(0)
            kw2 = {("rollout_logp" if k == "rollout_log_probs" else k): v for k, v in kw.items()}
            ref, info = policy_loss(x2, old, adv, mask.bool(), turn_ids_loop(mask), clip=name, agg=mode,
                                    adv_level="token", **kw2)
            assert torch.allclose(loss, ref, atol=1e-12), (name, mode)
            g1, g2 = torch.autograd.grad(loss, x1)[0], torch.autograd.grad(ref, x2)[0]
            assert torch.allclose(g1, g2, atol=1e-12), (name, mode)
            assert math.isclose(metrics["actor/pg_clipfrac"], float(info["clip_frac"]), abs_tol=1e-9)
            assert set(metrics) == {"actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower"}


def test_explicit_turn_id_overrides_mask_runs():
    old, logp, adv, mask = multi_turn(2, scale=1.0)
    fn = verl_policy_loss("turn_ppo")
    runs, _ = fn(old, logp, adv, mask, "token-mean", None)
    one_turn, _ = fn(old, logp, adv, mask, "token-mean", None, turn_id=torch.zeros_like(mask, dtype=torch.long))
    seq, _ = policy_loss(logp, old, adv, mask.bool(), torch.zeros_like(mask, dtype=torch.long), clip="ppo",
                         ratio="sequence", adv_level="token")
    assert torch.allclose(one_turn, seq) and not torch.allclose(runs, one_turn)


def test_unknown_scheme_and_hyperparameter_raise():
    with pytest.raises(ValueError, match="unknown toyrl clipping scheme"):
        verl_policy_loss("trpo")
    old, logp, adv, mask = multi_turn(0)
    with pytest.raises(ValueError, match="does not take"):
        verl_policy_loss("sapo")(old, logp, adv, mask, "token-mean", {"toyrl_kwargs": {"eps": 0.1}})


def actor_config(**kw):
    from verl.workers.config import ActorConfig
    from verl.workers.config.actor import PolicyLossConfig
    return ActorConfig(strategy="fsdp", ppo_micro_batch_size_per_gpu=1, rollout_n=1,
                       policy_loss=PolicyLossConfig(dro_beta=0.1), **kw)


@needs_verl
def test_toyrl_ppo_equals_verl_vanilla():
    register_with_verl()
    cfg = actor_config(clip_ratio=0.2, clip_ratio_low=0.15, clip_ratio_high=0.28, clip_ratio_c=3.0)
    for seed, scale, name in ((0, 0.1, "toyrl_ppo"), (1, 0.4, "toyrl_ppo"), (2, 2.0, "toyrl_dual_clip")):
        old, logp, adv, mask = multi_turn(seed, scale=scale)
        if name == "toyrl_ppo":                                      # vanilla's dual clip is inactive here
            assert not bool(((logp - old).exp()[mask.bool()] > 3.0).any())
        for mode in MODES:
            for w in (None, torch.rand(mask.shape, dtype=torch.float64) + 0.5):
                x1, x2 = logp.clone().requires_grad_(), logp.clone().requires_grad_()
                a, ma = ca.get_policy_loss_fn("vanilla")(old, x1, adv, mask, mode, cfg, w)
                b, mb = ca.get_policy_loss_fn(name)(old, x2, adv, mask, mode, cfg, w)
                assert torch.allclose(a, b, atol=1e-12), (name, mode)
                assert torch.allclose(torch.autograd.grad(a, x1)[0], torch.autograd.grad(b, x2)[0], atol=1e-12)
                assert set(ma) == set(mb) and all(math.isclose(ma[k], mb[k], abs_tol=1e-6) for k in ma)


@needs_verl
def test_registered_in_verl_and_config_reaches_hyperparameters():
    keys = register_with_verl()
    assert {f"toyrl_{n}" for n in CLIP_SCHEMES} <= set(keys) and "toyrl_gigpo" in keys
    assert register_with_verl() == keys                              # idempotent
    fn = ca.get_policy_loss_fn("toyrl_sorl")
    old, logp, adv, mask = multi_turn(3, scale=0.8)
    cfg = actor_config(clip_ratio=0.2, clip_ratio_low=0.1, clip_ratio_high=0.1)   # verl: low / high win
    loss, metrics = fn(old_log_prob=old, log_prob=logp, advantages=adv, response_mask=mask,
                       loss_agg_mode="token-mean", config=cfg, rollout_is_weights=None)
    ref, _ = policy_loss(logp, old, adv, mask.bool(), turn_ids_from_mask(mask), clip="sorl", eps_low=0.1,
                         eps_high=0.1, adv_level="token")
    assert torch.allclose(loss, ref) and metrics["actor/pg_clipfrac"] > 0
    dro, _ = ca.get_policy_loss_fn("toyrl_dro")(old, logp, adv, mask, "token-mean", cfg)
    ref, _ = policy_loss(logp, old, adv, mask.bool(), turn_ids_from_mask(mask), clip="dro", beta=0.1,
                         adv_level="token")
    assert torch.allclose(dro, ref)
