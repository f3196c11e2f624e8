"""Parity with verl 0.9.1's core_algos: policy losses, gradients, metrics, agg_loss, kl_penalty."""
import math
import types

import pytest
import torch
from conftest import verl_loss_data

from toyrl.port import verl_policy as vp
from toyrl.port.verl_losses import get_policy_loss_fn
from toyrl.port.verl_loader import load_core_algos

ca = load_core_algos()
pytestmark = pytest.mark.skipif(ca is None, reason="verl 0.9.1 (or one of its imports) is not installed")

MODES = ["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
NAMES = ["vanilla", "gspo", "cispo", "sapo", "geo_mean", "gpg", "dppo_tv", "dppo_kl", "dro", "clip_cov", "kl_cov"]
SETTINGS = {"clip_ratio": 0.2, "clip_ratio_low": 0.2, "clip_ratio_high": 0.28, "clip_ratio_c": 2.5,
            "tau_pos": 1.0, "tau_neg": 1.05}
DRO_BETA = 0.05
COV = {"clip_cov_ratio": 1.0, "kl_cov_ratio": 0.1}      # clip_cov: every candidate detached (no random choice)
VP_SETTINGS = dict(SETTINGS, policy_loss={"dro_beta": DRO_BETA, **COV})


def verl_config(**extra):
    from verl.workers.config import ActorConfig
    from verl.workers.config.actor import PolicyLossConfig
    cfg = ActorConfig(strategy="fsdp", ppo_micro_batch_size_per_gpu=1, rollout_n=1,
                      policy_loss=PolicyLossConfig(dro_beta=DRO_BETA, **COV), **SETTINGS)
    cfg.global_batch_info.update(extra)
    return cfg


data = verl_loss_data


def run(fn, old, logp, adv, mask, mode, cfg, w):
    x = logp.clone().requires_grad_()
    loss, metrics = fn(old, x, adv, mask, mode, cfg, w)
    (grad,) = torch.autograd.grad(loss, x)
    return loss.detach(), grad, metrics


def assert_same(a, b):
    (l1, g1, m1), (l2, g2, m2) = a, b
    assert torch.allclose(l1, l2, atol=1e-9, rtol=1e-7), (float(l1), float(l2))
    assert torch.allclose(g1, g2, atol=1e-9, rtol=1e-7), (g1 - g2).abs().max()
    assert set(m1) == set(m2)
    for k in m1:
        assert math.isclose(float(m1[k]), float(m2[k]), abs_tol=1e-6), (k, m1[k], m2[k])


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("mode", MODES)
def test_policy_losses_match_verl(name, mode):
    cfg = verl_config()
    for seed, scale in ((0, 0.1), (1, 0.6), (2, 2.0)):            # 2.0 triggers dual clip and wide ratios
        old, logp, adv, mask, w = data(seed, scale=scale)
        for weights in (None, w):
            ref = run(ca.get_policy_loss_fn(name), old, logp, adv, mask, mode, cfg, weights)
            assert_same(ref, run(get_policy_loss_fn(name), old, logp, adv, mask, mode, dict(VP_SETTINGS), weights))


def test_config_forms_and_global_batch_info():
    from omegaconf import OmegaConf
    old, logp, adv, mask, _ = data(3)
    info = {"dp_size": 2, "batch_num_tokens": 40, "global_batch_size": 9, "loss_scale_factor": 16}
    for mode in MODES:
        for name in ("vanilla", "gspo", "cispo"):
            ref = run(ca.get_policy_loss_fn(name), old, logp, adv, mask, mode, verl_config(**info), None)
            forms = [dict(SETTINGS, global_batch_info=info), OmegaConf.create(dict(SETTINGS, global_batch_info=info)),
                     types.SimpleNamespace(**SETTINGS, global_batch_info=info), verl_config(**info)]
            for cfg in forms:
                assert_same(ref, run(get_policy_loss_fn(name), old, logp, adv, mask, mode, cfg, None))
    # clip_ratio_low / high left None fall back to clip_ratio
    cfg = {"clip_ratio": 0.1, "clip_ratio_low": None, "clip_ratio_high": None}
    from verl.workers.config import ActorConfig
    vcfg = ActorConfig(strategy="fsdp", ppo_micro_batch_size_per_gpu=1, rollout_n=1, clip_ratio=0.1,
                       clip_ratio_low=None, clip_ratio_high=None)
    assert_same(run(ca.get_policy_loss_fn("vanilla"), old, logp, adv, mask, "token-mean", vcfg, None),
                run(get_policy_loss_fn("vanilla"), old, logp, adv, mask, "token-mean", cfg, None))


@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_deprecated_compute_policy_loss():
    for seed, scale in ((0, 0.3), (1, 2.0)):
        old, logp, adv, mask, _ = data(seed, scale=scale)
        for mode in MODES:
            kw = dict(cliprange=0.2, cliprange_low=0.15, cliprange_high=0.3, clip_ratio_c=3.0, loss_agg_mode=mode)
            x1, x2 = logp.clone().requires_grad_(), logp.clone().requires_grad_()
            a = ca.compute_policy_loss(old, x1, adv, mask, **kw)
            b = vp.compute_policy_loss(old, x2, adv, mask, **kw)
            for u, v in zip(a, b):
                assert torch.allclose(u.double(), v.double(), atol=1e-7)
            g1, g2 = torch.autograd.grad(a[0], x1)[0], torch.autograd.grad(b[0], x2)[0]
            assert torch.allclose(g1, g2, atol=1e-9)
    with pytest.raises(ValueError, match="clip_ratio_c|c must be > 1"):
        vp.compute_policy_loss(old, logp, adv, mask, cliprange=0.2, clip_ratio_c=1.0)


@pytest.mark.parametrize("mode", MODES)
def test_agg_loss_matches_verl(mode):
    g = torch.Generator().manual_seed(0)
    loss = torch.randn(5, 7, generator=g, dtype=torch.float64)
    mask = (torch.rand(5, 7, generator=g) > 0.4).float()
    mask[2] = 0
    assert torch.allclose(ca.agg_loss(loss, mask, mode), vp.agg_loss(loss, mask, mode))
    kw = dict(dp_size=4, batch_num_tokens=50, global_batch_size=12, loss_scale_factor=10)
    assert torch.allclose(ca.agg_loss(loss, mask, mode, **kw), vp.agg_loss(loss, mask, mode, **kw))
    if mode != "token-sum":                                          # verl needs global counts when dp_size > 1
        with pytest.raises(ValueError, match="required when dp_size > 1"):
            vp.agg_loss(loss, mask, mode, dp_size=2)


@pytest.mark.parametrize("name", ["kl", "abs", "mse", "low_var_kl", "k1", "k2", "k3", "k1+", "abs+", "k3+",
                                  "low_var_kl+", "mse+", "k2+"])
def test_kl_penalty_matches_verl(name):
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(4, 5, generator=g, dtype=torch.float64) * 3
    x1 = (torch.randn(4, 5, generator=g, dtype=torch.float64) * 3).requires_grad_()
    x2 = x1.detach().clone().requires_grad_()
    a, b = ca.kl_penalty(x1, ref, name), vp.kl_penalty(x2, ref, name)
    assert torch.allclose(a, b)
    assert torch.allclose(torch.autograd.grad(a.sum(), x1)[0], torch.autograd.grad(b.sum(), x2)[0])


def test_registry_and_errors():
    assert set(vp.POLICY_LOSS_REGISTRY) == set(NAMES) | {"bypass_mode"}    # bypass_mode: test_port_verl_modes
    with pytest.raises(ValueError, match="Unsupported loss mode"):
        get_policy_loss_fn("trpo")
    with pytest.raises(ValueError, match="dro_beta"):
        get_policy_loss_fn("dro")(*data(0)[:4], "token-mean", dict(SETTINGS))
    with pytest.raises(NotImplementedError):
        vp.kl_penalty(torch.zeros(2), torch.zeros(2), "full")
    with pytest.raises(ValueError, match="kl_penalty must be one of"):
        vp.kl_penalty(torch.zeros(2), torch.zeros(2), "k9")


def test_port_is_finite_on_empty_batch_where_verl_is_not():
    old, logp, adv, _, _ = data(0)
    mask = torch.zeros_like(old)
    for name in ("vanilla", "cispo", "sapo"):
        loss, _ = get_policy_loss_fn(name)(old, logp, adv, mask, "token-mean", dict(SETTINGS))
        assert float(loss) == 0.0
