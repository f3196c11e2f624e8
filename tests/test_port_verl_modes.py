"""Every policy-loss mode verl 0.9.1 registers, served by the port; errors where verl errs; tis / a2tgpo in verl."""
import math

import pytest
import torch
from conftest import verl_loss_data

from toyrl.objectives import CLIP_SCHEMES, policy_loss
from toyrl.port import verl_policy as vp
from toyrl.port.verl_losses import get_policy_loss_fn
from toyrl.port.verl import register_with_verl, turn_ids_from_mask
from toyrl.port.verl_loader import load_core_algos

ca = load_core_algos()
pytestmark = pytest.mark.skipif(ca is None, reason="verl 0.9.1 (or one of its imports) is not installed")
MODES = ["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
VERL_NATIVE = ("vanilla", "dppo_tv", "dppo_kl", "gspo", "sapo", "gpg", "clip_cov", "kl_cov", "geo_mean", "dro", "cispo",
               "bypass_mode")


def config(policy_loss=None, rollout_correction=None, **kw):
    from verl.trainer.config.algorithm import RolloutCorrectionConfig
    from verl.workers.config import ActorConfig
    from verl.workers.config.actor import PolicyLossConfig
    pl = dict(policy_loss or {})
    if rollout_correction is not None:
        pl["rollout_correction"] = RolloutCorrectionConfig(**rollout_correction)
    return ActorConfig(strategy="fsdp", ppo_micro_batch_size_per_gpu=1, rollout_n=1,
                       policy_loss=PolicyLossConfig(**pl), **kw)


def data(seed, B=6, L=9, scale=0.6):
    """(old, logp, adv, mask): conftest's verl loss inputs without the weights (drawn last, so the rest agree)."""
    return verl_loss_data(seed, B, L, scale)[:4]


def run(fn, old, logp, adv, mask, mode, cfg, w=None, **kw):
    x = logp.clone().requires_grad_()
    loss, metrics = fn(old, x, adv, mask, mode, cfg, w, **kw)
    (grad,) = torch.autograd.grad(loss, x)
    return loss.detach(), grad, metrics


def gap(a, b, keys=None):
    """(largest |difference| of loss and gradient, of the metrics ``keys``; default the metrics both report)."""
    (l1, g1, m1), (l2, g2, m2) = a, b
    keys = (set(m1) & set(m2)) if keys is None else keys
    return (max(float((l1 - l2).abs()), float((g1 - g2).abs().max())),
            max([abs(float(m1[k]) - float(m2[k])) for k in keys], default=0.0))


def close(a, b, keys=None) -> bool:
    """Loss and gradient to 1e-9; metrics to 1e-6 (verl computes some in float32)."""
    g = gap(a, b, keys)
    return g[0] < 1e-9 and g[1] < 1e-6


# ---- the registry -------------------------------------------------------------------------------------------------
def test_every_verl_mode_resolves_in_the_port():
    register_with_verl()
    names = list(ca.POLICY_LOSS_REGISTRY)
    assert set(VERL_NATIVE) <= set(names)                            # verl 0.9.1's own modes, toyrl_* besides
    for name in names:
        fn = get_policy_loss_fn(name)
        if name.startswith("toyrl_"):
            assert fn is ca.POLICY_LOSS_REGISTRY[name], name           # the very adapter verl holds
        else:
            assert fn is vp.POLICY_LOSS_REGISTRY[name] and fn.__name__ == ca.POLICY_LOSS_REGISTRY[name].__name__
    assert set(vp.POLICY_LOSS_REGISTRY) == {n for n in names if not n.startswith("toyrl_")}
    with pytest.raises(ValueError, match="Unsupported loss mode: trpo.*toyrl_sorl"):
        get_policy_loss_fn("trpo")


# ---- the new verl-named ports: parity ------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
def test_clip_cov_and_kl_cov_match_verl(mode):
    """clip_cov_ratio 1: every candidate token is detached, so verl's randperm choice is not involved."""
    for seed, scale in ((0, 0.3), (1, 1.0)):
        old, logp, adv, mask = data(seed, scale=scale)
        for pl in ({"clip_cov_ratio": 1.0, "clip_cov_lb": 0.1, "clip_cov_ub": 3.0}, {"kl_cov_ratio": 0.2},
                   {"kl_cov_ratio": 0.2, "ppo_kl_coef": 0.7}):
            cfg = config(pl, clip_ratio_low=0.15, clip_ratio_high=0.25)
            name = "clip_cov" if "clip_cov_ratio" in pl else "kl_cov"
            for w in (None, torch.rand(mask.shape, dtype=torch.float64) + 0.5):
                a = run(ca.get_policy_loss_fn(name), old, logp, adv, mask, mode, cfg, w)
                b = run(get_policy_loss_fn(name), old, logp, adv, mask, mode, cfg, w)
                assert set(a[2]) == set(b[2]) and close(a, b), (name, gap(a, b))
        if seed == 0:
            assert a[2]["actor/ppo_kl"] > 0                            # kl_cov's metric: mean |d|


def test_clip_cov_detaches_as_many_tokens_as_verl_when_it_must_choose():
    old, logp, adv, mask = data(2, B=8, L=20, scale=0.2)
    cfg = config({"clip_cov_ratio": 0.05, "clip_cov_lb": -1.0, "clip_cov_ub": 50.0})   # many candidates, few chosen
    a = run(ca.get_policy_loss_fn("clip_cov"), old, logp, adv, mask, "token-mean", cfg)
    b = run(get_policy_loss_fn("clip_cov"), old, logp, adv, mask, "token-mean", cfg)
    n = int(mask.sum())
    assert a[2]["actor/pg_clipfrac"] == pytest.approx(max(int(0.05 * n), 1) / n)            # verl: float32
    assert b[2]["actor/pg_clipfrac"] == pytest.approx(max(int(0.05 * n), 1) / n, abs=1e-12)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("loss_type", ["ppo_clip", "reinforce"])
def test_bypass_mode_matches_verl(loss_type, mode):
    for seed, scale in ((0, 0.2), (1, 1.5)):
        old, logp, adv, mask = data(seed, scale=scale)
        for rc in ({"rollout_is": None}, {"rollout_is": "token", "rollout_is_threshold": 1.5},
                   {"rollout_is": "sequence", "rollout_is_threshold": "3.0"},
                   {"rollout_is": "token", "rollout_is_threshold": 2.0, "rollout_is_batch_normalize": True},
                   {"rollout_is": "sequence", "rollout_is_threshold": 2.0, "rollout_is_batch_normalize": True}):
            cfg = config(rollout_correction={**rc, "loss_type": loss_type}, clip_ratio_c=2.5)
            ignored = torch.full(mask.shape, 7.0, dtype=torch.float64)   # verl ignores the passed weights
            a = run(ca.get_policy_loss_fn("bypass_mode"), old, logp, adv, mask, mode, cfg, ignored)
            b = run(get_policy_loss_fn("bypass_mode"), old, logp, adv, mask, mode, cfg, ignored)
            actor = {k for k in a[2] if k.startswith("actor/")}
            assert set(b[2]) == actor and close(a, b, actor), (rc, gap(a, b, actor))


def test_bypass_mode_reinforce_is_weighted_gpg_by_hand():
    """A = 1 on one token, logp = -1, rollout -1 - log 3: w = min(3, 2) = 2 -> loss = -(1)(-1)(2) = 2."""
    old, logp = torch.tensor([[-1.0 - math.log(3.0)]], dtype=torch.float64), torch.tensor([[-1.0]], dtype=torch.float64)
    cfg = config(rollout_correction={"rollout_is": "token", "rollout_is_threshold": 2.0, "loss_type": "reinforce"})
    loss, metrics = vp.compute_policy_loss_bypass_mode(old, logp, torch.ones(1, 1, dtype=torch.float64),
                                                       torch.ones(1, 1), "token-mean", cfg)
    assert float(loss) == pytest.approx(2.0) and metrics["actor/ppo_kl"] == pytest.approx(-math.log(3.0))


# ---- errors where verl errs ----------------------------------------------------------------------------------------
def outcome(fn, *args):
    try:
        fn(*args)
    except (ValueError, AssertionError) as e:
        return type(e).__name__
    return "ok"


BAD = [  # (verl name, toyrl scheme, config kwargs)
    ("dro", "dro", {"policy_loss": {}}), ("dro", "dro", {"policy_loss": {"dro_beta": 0.0}}),
    ("dro", "dro", {"policy_loss": {"dro_beta": -0.1}}), ("dro", "dro", {"policy_loss": {"dro_beta": 0.1}}),
    ("clip_cov", "clip_cov", {"policy_loss": {"clip_cov_ratio": 0.0}}),
    ("clip_cov", "clip_cov", {"policy_loss": {"clip_cov_ratio": -1e-3}}),
    ("clip_cov", "clip_cov", {"policy_loss": {"clip_cov_ratio": 1e-3}}),
    ("kl_cov", "kl_cov", {"policy_loss": {"kl_cov_ratio": 0.0}}),
    ("kl_cov", "kl_cov", {"policy_loss": {"kl_cov_ratio": 0.1}}),
    ("vanilla", "dual_clip", {"clip_ratio_c": 1.0}), ("vanilla", "dual_clip", {"clip_ratio_c": 0.5}),
    ("vanilla", "dual_clip", {"clip_ratio_c": 1.5}),
    ("bypass_mode", None, {"rollout_correction": {"loss_type": "dpo"}}),
    ("bypass_mode", None, {"rollout_correction": {"rollout_is": "turn", "loss_type": "reinforce"}}),
    ("bypass_mode", None, {"rollout_correction": {"rollout_is": "token", "rollout_is_threshold": -2.0}}),
    ("bypass_mode", None, {"rollout_correction": {"rollout_is": "token", "rollout_is_threshold": "4_2"}}),
    ("bypass_mode", None, {"rollout_correction": {"rollout_is": "token", "rollout_is_threshold": "x"}}),
    ("bypass_mode", None, {"rollout_correction": {"rollout_is": "token", "loss_type": "reinforce"}}),
]


@pytest.mark.parametrize("verl_name, scheme, kw", BAD)
def test_port_raises_exactly_where_verl_raises(verl_name, scheme, kw):
    register_with_verl()
    old, logp, adv, mask = data(0)
    cfg = config(**kw)
    want = outcome(ca.get_policy_loss_fn(verl_name), old, logp, adv, mask, "token-mean", cfg)
    ports = [get_policy_loss_fn(verl_name)] + ([ca.get_policy_loss_fn(f"toyrl_{scheme}")] if scheme else [])
    for fn in ports:
        got = outcome(fn, old, logp, adv, mask, "token-mean", cfg)
        assert (got == "ok") == (want == "ok") and got in ("ok", "ValueError"), (fn.__name__, got, want)


def test_dro_needs_beta_from_verl_not_toyrls_default():
    register_with_verl()
    old, logp, adv, mask = data(1)
    for fn in (ca.get_policy_loss_fn("toyrl_dro"), get_policy_loss_fn("dro")):
        for cfg in (None, {"clip_ratio": 0.2}, config()):
            with pytest.raises(ValueError, match="dro_beta must be a positive value"):
                fn(old, logp, adv, mask, "token-mean", cfg)
    loss, _ = ca.get_policy_loss_fn("toyrl_dro")(old, logp, adv, mask, "token-mean", None, beta=0.3)
    ref, _ = policy_loss(logp, old, adv, mask.bool(), turn_ids_from_mask(mask), clip="dro", beta=0.3, adv_level="token")
    assert torch.allclose(loss, ref)


def test_modes_without_a_toyrl_counterpart_say_so():
    old, logp, adv, mask = data(0)
    fn = get_policy_loss_fn("bypass_mode")
    rs = config(rollout_correction={"rollout_rs": "token_k1", "rollout_rs_threshold": "0.5_2.0"})
    assert outcome(ca.get_policy_loss_fn("bypass_mode"), old, logp, adv, mask, "token-mean", rs) == "ok"
    with pytest.raises(ValueError, match="rejection sampling.*no toyrl counterpart"):
        fn(old, logp, adv, mask, "token-mean", rs)
    icepop = config(rollout_correction={"rollout_is": "token", "rollout_is_threshold": "0.5_2.0",
                                        "loss_type": "reinforce"})
    assert outcome(ca.get_policy_loss_fn("bypass_mode"), old, logp, adv, mask, "token-mean", icepop) == "ok"
    with pytest.raises(ValueError, match="IcePop.*no toyrl counterpart"):
        fn(old, logp, adv, mask, "token-mean", icepop)
    ppo_clip = config(rollout_correction={"rollout_is": "token", "rollout_is_threshold": "0.5_2.0"})
    assert close(run(ca.get_policy_loss_fn("bypass_mode"), old, logp, adv, mask, "token-mean", ppo_clip),
                 run(fn, old, logp, adv, mask, "token-mean", ppo_clip), {"actor/ppo_kl"})   # weights unused


# ---- toyrl's adapters against their verl counterparts --------------------------------------------------------------
ALL = ("actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower")
SAME_MATH = [("vanilla", "dual_clip", ALL), ("dppo_tv", "dppo_tv", ALL), ("dppo_kl", "dppo_kl", ALL),
             ("cispo", "cispo", ALL[:2]), ("gpg", "gpg", ()), ("dro", "dro", ALL[1:2]),
             ("clip_cov", "clip_cov", ALL[1:2]), ("kl_cov", "kl_cov", ())]
"""(verl mode, toyrl scheme, metrics of one meaning): the adapters report toyrl's metric set (pg_clipfrac either
bound, ppo_kl = mean -d, pg_clipfrac_lower the scheme's own intervention), where clip_cov's pg_clipfrac is verl's
detached fraction (toyrl's pg_clipfrac_lower) and kl_cov's ppo_kl is mean |d|"""


@pytest.mark.parametrize("verl_name, scheme, keys", SAME_MATH)
def test_toyrl_adapters_equal_their_verl_counterparts(verl_name, scheme, keys):
    register_with_verl()
    cfg = config({"dro_beta": 0.2, "clip_cov_ratio": 1.0, "kl_cov_ratio": 0.1}, clip_ratio_low=0.2,
                 clip_ratio_high=0.28, clip_ratio_c=2.5)
    for seed, scale in ((0, 0.2), (1, 1.0)):
        old, logp, adv, mask = data(seed, scale=scale)
        for mode in MODES:
            for w in (None, torch.rand(mask.shape, dtype=torch.float64) + 0.5):
                a = run(ca.get_policy_loss_fn(verl_name), old, logp, adv, mask, mode, cfg, w)
                b = run(ca.get_policy_loss_fn(f"toyrl_{scheme}"), old, logp, adv, mask, mode, cfg, w)
                assert close(a, b, keys), (verl_name, mode, gap(a, b, keys))
                if scheme == "clip_cov":
                    assert b[2]["actor/pg_clipfrac_lower"] == pytest.approx(a[2]["actor/pg_clipfrac"], abs=1e-6)


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_toyrl_tis_takes_verls_rollout_is_weights(level):
    """verl's decoupled correction hands the loss sg(min(pi_old / pi_rollout, C)); toyrl_tis on those weights is
    clip="tis" on the rollout log-probs, and (dual clip idle) verl's vanilla on the same weights."""
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_weights
    register_with_verl()
    cfg = config(clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=1e6)
    for seed in (0, 1, 2):
        old, logp, adv, mask = data(seed, scale=0.5)
        rollout = old + 0.4 * torch.randn(old.shape, generator=torch.Generator().manual_seed(seed), dtype=old.dtype)
        w, _ = compute_rollout_correction_weights(old - rollout, mask, rollout_is=level, rollout_is_threshold=2.0)
        for mode in MODES:
            a = run(ca.get_policy_loss_fn("toyrl_tis"), old, logp, adv, mask, mode, cfg, w)
            b = run(ca.get_policy_loss_fn("vanilla"), old, logp, adv, mask, mode, cfg, w)
            assert close(a, b, {"actor/pg_clipfrac", "actor/ppo_kl"}), (mode, gap(a, b))
            x = logp.clone().requires_grad_()
            ref, _ = policy_loss(x, old, adv, mask.bool(), turn_ids_from_mask(mask), clip="tis", rollout_logp=rollout,
                                 cap=2.0, tis_level=level, eps_low=0.2, eps_high=0.28, agg=mode, adv_level="token")
            assert abs(float(ref.detach()) - float(a[0])) < 1e-9
            assert float((torch.autograd.grad(ref, x)[0] - a[1]).abs().max()) < 1e-9
    fn = ca.get_policy_loss_fn("toyrl_tis")
    with pytest.raises(ValueError, match="rollout_is_weights.*rollout_log_probs"):
        fn(old, logp, adv, mask, "token-mean", cfg, None)
    with pytest.raises(ValueError, match="both"):
        fn(old, logp, adv, mask, "token-mean", cfg, w, rollout_log_probs=rollout)


def test_toyrl_a2tgpo_in_verls_registry_names_its_missing_z():
    register_with_verl()
    old, logp, adv, mask = data(3)
    fn = ca.get_policy_loss_fn("toyrl_a2tgpo")
    with pytest.raises(ValueError, match=r"toyrl_a2tgpo needs \['z'\].*a2tgpo_z"):
        fn(old_log_prob=old, log_prob=logp, advantages=adv, response_mask=mask, loss_agg_mode="token-mean",
           config=config(), rollout_is_weights=None)                   # exactly verl's call
    tid = turn_ids_from_mask(mask)
    z = torch.linspace(-2, 2, old.shape[0] * 4, dtype=old.dtype).view(-1, 4)
    loss, _ = fn(old, logp, adv, mask, "token-mean", config(), None, z=z)
    ref, _ = policy_loss(logp, old, adv, mask.bool(), tid, clip="a2tgpo", z=z, adv_level="token")
    assert torch.allclose(loss, ref) and "z" in CLIP_SCHEMES["a2tgpo"].hyperparameters()
