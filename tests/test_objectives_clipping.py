"""Every clipping scheme on hand-computed tensors: token losses and which tokens are clipped."""
import math

import pytest
import torch

from toyrl.objectives import CLIP_SCHEMES, a2tgpo, cispo, clip_cov, dual_clip, gmpo, gpg, kl_cov, loop, policy_loss
from toyrl.objectives import ppo, sapo, sorl, tis

R = torch.tensor([[0.5, 1.0, 1.5]])
ONE = torch.ones(1, 3)
MASK = torch.ones(1, 3, dtype=torch.bool)
TURN0 = torch.zeros(1, 3, dtype=torch.long)


def close(a, b, tol=1e-4):
    return torch.allclose(a, torch.as_tensor(b, dtype=a.dtype), atol=tol)


def test_registry_is_complete():
    assert set(CLIP_SCHEMES) == {"ppo", "dual_clip", "clip_higher", "gspo", "gmpo", "turn_ppo", "sorl", "cispo", "sapo",
                                 "loop", "a2tgpo", "tis", "clip_cov", "kl_cov", "gpg", "dppo_tv", "dppo_kl", "dro", "luspo",
                                 "vespo"}
    assert CLIP_SCHEMES["gspo"].level == "sequence" and CLIP_SCHEMES["turn_ppo"].level == "turn"
    assert CLIP_SCHEMES["clip_higher"].hyperparameters()["eps_high"] == 0.28
    assert CLIP_SCHEMES["gspo"].hyperparameters() == {"eps_low": 3e-4, "eps_high": 4e-4}
    assert CLIP_SCHEMES["ppo"].fn is CLIP_SCHEMES["clip_higher"].fn is CLIP_SCHEMES["gspo"].fn   # no copies


def test_ppo():
    out = ppo(R, torch.tensor([[1.0, -1.0, 1.0]]))
    assert close(out.loss, [[-0.5, 1.0, -1.2]])
    assert out.high.tolist() == [[False, False, True]] and not out.low.any()
    low = ppo(torch.tensor([[0.5, 0.9]]), torch.tensor([[-1.0, -1.0]]))
    assert close(low.loss, [[0.8, 0.9]]) and low.low.tolist() == [[True, False]]


def test_clip_higher_is_ppo_with_wider_upper_bound():
    r, a = torch.full((1, 2), 1.25), torch.ones(1, 2)
    turn = torch.zeros(1, 2, dtype=torch.long)
    m = torch.ones(1, 2, dtype=torch.bool)
    logp = torch.log(r)
    _, i_ppo = policy_loss(logp, torch.zeros(1, 2), a, m, turn, clip="ppo")
    l_hi, i_hi = policy_loss(logp, torch.zeros(1, 2), a, m, turn, clip="clip_higher")
    assert float(i_ppo["clip_frac"]) == 1.0 and float(i_hi["clip_frac"]) == 0.0
    assert math.isclose(float(l_hi), -1.25, rel_tol=1e-6)


def test_dual_clip():
    out = dual_clip(torch.tensor([[4.0, 2.0, 0.5]]), -ONE)
    assert close(out.loss, [[3.0, 2.0, 0.8]])
    assert out.extra.tolist() == [[True, False, False]] and out.low.tolist() == [[False, False, True]]
    with pytest.raises(ValueError, match="c must be > 1"):
        dual_clip(R, ONE, c=1.0)


def test_loop_asymmetric_bounds():
    out = loop(R.new_tensor([[0.5, 1.1, 1.5]]), torch.tensor([[-1.0, 1.0, 1.0]]))
    assert close(out.loss, [[1 / 1.2, -1.1, -1.2]])
    assert out.low.tolist() == [[True, False, False]] and out.high.tolist() == [[False, False, True]]


def test_sorl_clipping_triggered_normalization():
    r = torch.tensor([[1.5, 1.5, 1.0]])
    out = sorl(r, ONE, mask=MASK)
    assert close(out.loss, [[-0.72, -0.72, -0.6]])
    per_traj = sorl(torch.tensor([[1.5, 1.0], [1.0, 1.0]]), torch.ones(2, 2), mask=torch.ones(2, 2, dtype=torch.bool),
                    scope="trajectory")
    assert close(per_traj.loss, [[-1.2 / 1.5, -1.0 / 1.5], [-1.0, -1.0]])
    assert close(sorl(r, ONE, mask=MASK, phi0=0.9).loss, [[-1.2, -1.2, -1.0]])   # below threshold: plain PPO


def test_a2tgpo_adaptive_range():
    z = torch.tensor([[0.0, 1e9, -1e9]])
    turn = torch.tensor([[0, 1, 2]])
    out = a2tgpo(torch.full((1, 3), 1.25), ONE, turn_id=turn, z=z)
    assert close(out.loss, [[-1.2, -1.25, -1.1]])
    assert out.high.tolist() == [[True, False, True]]
    with pytest.raises(ValueError, match="z must be"):
        a2tgpo(R, ONE, turn_id=turn, z=torch.zeros(3))


def test_tis_weights_the_ppo_loss():
    out = tis(ONE, ONE, old_logp=torch.zeros(1, 3), rollout_logp=torch.tensor([[0.0, -1.0, 1.0]]), mask=MASK,
              turn_id=TURN0)
    assert close(out.loss, [[-1.0, -2.0, -math.exp(-1)]])
    with pytest.raises(ValueError, match="rollout_logp"):
        policy_loss(torch.zeros(1, 3), torch.zeros(1, 3), ONE, MASK, TURN0, clip="tis")


def test_gmpo_log_space_clip():
    d = torch.tensor([[0.5, 0.0, -0.5]])
    pool = lambda x, how="mean": x.mean(1, keepdim=True).expand_as(x)   # noqa: E731  one sequence
    out = gmpo(torch.exp(d), ONE, token_log_ratio=d, pool=pool, log_clamp=(-20.0, 20.0))
    assert close(out.loss, torch.full((1, 3), -math.exp(-0.1 / 3)))
    assert out.high.tolist() == [[True, False, False]]
    neg = gmpo(torch.exp(d), -ONE, token_log_ratio=d, pool=pool, log_clamp=(-20.0, 20.0))   # d' = [0.5, 0, -0.4]
    assert close(neg.loss, torch.full((1, 3), math.exp(0.1 / 3))) and neg.low.tolist() == [[False, False, True]]


def test_cispo_keeps_every_gradient():
    logp = torch.full((1, 3), -1.0, requires_grad=True)
    out = cispo(torch.tensor([[0.5, 1.0, 2.0]]), ONE, logp=logp)
    assert close(out.loss, [[0.5, 1.0, 1.28]]) and out.high.tolist() == [[False, False, True]]
    (g,) = torch.autograd.grad(out.loss.sum(), logp)
    assert close(g, [[-0.5, -1.0, -1.28]])


def test_sapo_soft_gate():
    out = sapo(torch.tensor([[1.0, 1.0, 2.0]]), torch.tensor([[1.0, -1.0, 1.0]]))
    assert close(out.loss, [[-2.0, 2.0 / 1.05, -4.0 / (1 + math.exp(-1))]])
    r = torch.tensor([[1.0]], requires_grad=True)
    (g,) = torch.autograd.grad(sapo(r, torch.ones(1, 1)).loss.sum(), r)
    assert close(g, [[-1.0]])                                 # f'(1) = 1: the plain surrogate near r = 1


def test_gpg():
    assert close(gpg(R, torch.tensor([[1.0, -1.0, 2.0]]), logp=torch.tensor([[-1.0, -2.0, -0.5]])).loss, [[1.0, -2.0, 1.0]])


def test_clip_cov_detaches_a_candidate():
    # cov_t = (A - mean A)(logp - mean logp): A [2, 0, -2], logp [-1, -3, -5] -> cov [4, 0, 4]
    adv, logp = torch.tensor([[2.0, 0.0, -2.0]]), torch.tensor([[-1.0, -3.0, -5.0]])
    out = clip_cov(ONE, adv, logp=logp, mask=MASK, clip_cov_ratio=0.5, generator=torch.Generator().manual_seed(0))
    assert int(out.extra.sum()) == 1 and not out.extra[0, 1]
    assert float(out.loss[out.extra]) == 0.0
    none = clip_cov(ONE, adv, logp=logp, mask=MASK, clip_cov_lb=10.0)
    assert not none.extra.any() and close(none.loss, [[-2.0, 0.0, 2.0]])


def test_kl_cov_penalizes_top_covariance_token():
    adv, logp = torch.tensor([[2.0, 0.0, -1.0]]), torch.tensor([[-1.0, -3.0, -1.5]])
    d = torch.tensor([[0.3, -0.2, 0.1]])
    out = kl_cov(torch.exp(d), adv, logp=logp, mask=MASK, token_log_ratio=d, ppo_kl_coef=1.0)
    assert out.extra.tolist() == [[True, False, False]]
    assert close(out.loss, [[-2 * math.exp(0.3) + 0.3, 0.0, math.exp(0.1)]])


def test_gspo_and_turn_ppo_clip_whole_units():
    # two rows of two tokens (one turn each, or turn 0 / turn 1 in row 1)
    turn = torch.tensor([[0, 0], [0, 1]])
    m = torch.ones(2, 2, dtype=torch.bool)
    logp = torch.tensor([[0.5, -0.5], [0.4, 0.0]])
    _, info = policy_loss(logp, torch.zeros(2, 2), torch.ones(2, 2), m, turn, clip="gspo")
    # row 0: sequence log-ratio 0 -> not clipped; row 1: 0.2 -> exp(0.2) > 1 + 4e-4 -> both tokens clipped
    assert info["level"] == "sequence" and info["clipped"].tolist() == [[False, False], [True, True]]
    _, info = policy_loss(logp, torch.zeros(2, 2), torch.ones(2, 2), m, turn, clip="turn_ppo")
    assert info["clipped"].tolist() == [[False, False], [True, False]]   # turn ratios: 1, 1 | e^.4, 1
    _, info = policy_loss(logp, torch.zeros(2, 2), torch.ones(2, 2), m, turn, clip="turn_ppo", ratio="token")
    assert info["clipped"].tolist() == [[True, False], [True, False]]


def test_keywords_and_clip_kwargs_agree_and_unknown_rejected():
    logp, m, t = torch.tensor([[0.3, -0.3]]), torch.ones(1, 2, dtype=torch.bool), torch.zeros(1, 2, dtype=torch.long)
    a = policy_loss(logp, torch.zeros(1, 2), torch.ones(1, 2), m, t, clip="ppo", eps_high=0.5)[0]
    b = policy_loss(logp, torch.zeros(1, 2), torch.ones(1, 2), m, t, clip="ppo", clip_kwargs={"eps_high": 0.5})[0]
    assert torch.equal(a, b)
    with pytest.raises(ValueError, match="does not take"):
        policy_loss(logp, torch.zeros(1, 2), torch.ones(1, 2), m, t, clip="sapo", eps=0.1)
    with pytest.raises(ValueError, match="clip must be one of"):
        policy_loss(logp, torch.zeros(1, 2), torch.ones(1, 2), m, t, clip="trpo")


def test_a2tgpo_z_feeds_the_a2tgpo_clip():
    from toyrl.credit import a2tgpo_z
    x = torch.tensor([[1.0, 2.0], [3.0, 2.0], [5.0, 0.0]])
    tm = torch.tensor([[True, True], [True, True], [True, False]])
    z = a2tgpo_z(x, tm, torch.tensor([0, 0, 1]))
    s = 2 ** 0.5
    assert close(z, [[-1 / s, 0.0], [1 / s, 0.0], [0.0, 0.0]])            # equal values and singletons -> 0
    turn = torch.tensor([[0, 1]] * 3)
    loss, _ = policy_loss(torch.zeros(3, 2), torch.zeros(3, 2), torch.ones(3, 2), torch.ones(3, 2, dtype=torch.bool),
                          turn, clip="a2tgpo", z=z)
    assert torch.isfinite(loss)
    with pytest.raises(ValueError, match="prompt"):
        a2tgpo_z(x, tm, torch.tensor([0, 0]))
