"""Parity of toyrl.port.verl_credit with verl 0.9.1 core_algos on multi-turn masks with observation gaps."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from toyrl.port.verl_loader import load_core_algos
from toyrl.port import verl_credit as port

core = load_core_algos()
needs_verl = pytest.mark.skipif(core is None, reason="verl 0.9.1 (or one of its imports) is not available")


def multi_turn(seed, B=24, L=40, group_size=(2, 5), singletons=False):
    """Rewards on the last token of each policy run, response masks with 0-runs (observations) inside."""
    rng = np.random.default_rng(seed)
    mask = np.zeros((B, L), dtype=np.int64)
    for b in range(B):
        t = 0
        for _ in range(rng.integers(1, 5)):
            a, o = rng.integers(1, 6), rng.integers(0, 5)
            mask[b, t:t + a] = 1
            t += a + o
            if t >= L - 6:
                break
    mask[:, 0] = 1
    rewards = np.zeros((B, L))
    for b in range(B):
        ends = np.flatnonzero(mask[b, :-1] > np.r_[mask[b, 1:-1], 0][: L - 1]) if mask[b].any() else []
        for e in ends:
            rewards[b, e] = rng.choice([0.0, 0.5, 1.0, -1.0])
    ids, b = [], 0
    while len(ids) < B:
        n = 1 if singletons and rng.random() < 0.3 else int(rng.integers(*group_size, endpoint=True))
        ids += [f"uid-{b}"] * n
        b += 1
    ids = ids[:B]
    if not singletons and ids.count(ids[-1]) == 1:          # a truncated tail group joins the one before
        ids[-1] = ids[-2]
    index = np.array(ids, dtype=object)
    return torch.tensor(rewards, dtype=torch.float32), torch.tensor(mask, dtype=torch.float32), index


def assert_same(a, b):
    for x, y in zip(a, b):
        torch.testing.assert_close(x.float(), y.float(), atol=2e-5, rtol=2e-5)


CASES = [
    ("compute_grpo_outcome_advantage", lambda r, m, i: dict(token_level_rewards=r, response_mask=m, index=i)),
    ("compute_grpo_outcome_advantage", lambda r, m, i: dict(token_level_rewards=r, response_mask=m, index=i,
                                                            norm_adv_by_std_in_grpo=False)),
    ("compute_rloo_outcome_advantage", lambda r, m, i: dict(token_level_rewards=r, response_mask=m, index=i)),
    ("compute_opo_outcome_advantage", lambda r, m, i: dict(token_level_rewards=r, response_mask=m, index=i)),
    ("compute_gpg_outcome_advantage", lambda r, m, i: dict(token_level_rewards=r, response_mask=m, index=i)),
    ("compute_reinforce_plus_plus_baseline_outcome_advantage",
     lambda r, m, i: dict(token_level_rewards=r, response_mask=m, index=i, config={})),
    ("compute_reinforce_plus_plus_outcome_advantage",
     lambda r, m, i: dict(token_level_rewards=r, response_mask=m, config=SimpleNamespace(gamma=0.9))),
    ("compute_remax_outcome_advantage",
     lambda r, m, i: dict(token_level_rewards=r, response_mask=m, reward_baselines=torch.rand(r.shape[0]), config={})),
]


@needs_verl
@pytest.mark.parametrize("singletons", [False, True])
@pytest.mark.parametrize("k", range(len(CASES)))
def test_outcome_parity(k, singletons):
    name, kw = CASES[k]
    for seed in range(3):
        r, m, i = multi_turn(seed, singletons=singletons)
        args = kw(r, m, i)
        assert_same(getattr(port, name)(**args), getattr(core, name)(**{k: (v.clone() if isinstance(v, torch.Tensor) else v)
                                                                for k, v in args.items()}))


@needs_verl
def test_passk_parity_and_singleton_raises():
    from omegaconf import OmegaConf
    for seed, norm in ((0, True), (1, False)):
        r, m, i = multi_turn(seed)
        r = r.round()                                       # ties at the top too
        cfg = OmegaConf.create({"norm_adv_by_std_in_grpo": norm})
        assert_same(port.compute_grpo_passk_outcome_advantage(r, m, i, config=cfg),
             core.compute_grpo_passk_outcome_advantage(r.clone(), m, i, config=cfg))
    with pytest.raises(ValueError):
        port.compute_grpo_passk_outcome_advantage(r[:3], m[:3], np.array(["a", "b", "b"]), config={})


@needs_verl
@pytest.mark.parametrize("gamma,lam", [(1.0, 1.0), (0.99, 0.95)])
def test_gae_parity(gamma, lam):
    for seed in range(3):
        r, m, _ = multi_turn(seed)
        v = torch.randn_like(r)
        assert_same(port.compute_gae_advantage_return(r, v, m, gamma, lam), core.compute_gae_advantage_return(r, v, m, gamma, lam))


def test_batch_from_verl_turns():
    m = torch.tensor([[1, 1, 0, 0, 1, 0, 1, 1]], dtype=torch.float32)
    r = torch.tensor([[0, 0.5, 0, 0, 0, 0, 0, 1.0]])
    b = port.batch_from_verl(r, m, np.array(["x"]))
    assert b.turn_id.tolist() == [[0, 0, 0, 0, 1, 1, 2, 2]] and b.H == 3
    assert b.turn_reward.tolist() == [[0.5, 0.0, 1.0]]


@needs_verl
def test_register_with_verl_multi_turn():
    from toyrl.port.verl_advantage import register_with_verl as register_estimators
    names = register_estimators()
    assert "toyrl_gigpo" in names and register_estimators() == names          # idempotent
    fn = core.get_adv_estimator_fn("toyrl_gigpo")
    r, m, i = multi_turn(0)
    H = int(port.batch_from_verl(r, m, i).H)
    keys = np.random.default_rng(0).integers(0, 3, (r.shape[0], H))
    adv, ret = fn(token_level_rewards=r, response_mask=m, index=i, config={"toyrl_kwargs": {"gamma": 1.0}},
                  non_tensor_batch={"state_key": keys})
    assert adv.shape == r.shape and torch.isfinite(adv).all() and (adv[m == 0] == 0).all()
    with pytest.raises(ValueError, match="state_key"):
        fn(token_level_rewards=r, response_mask=m, index=i, config=None)
    adv, _ = core.get_adv_estimator_fn("toyrl_mt_grpo")(token_level_rewards=r, response_mask=m, index=i, config=None)
    assert torch.isfinite(adv).all()


def test_blocks_detects_only_consecutive_equal_groups():
    from toyrl.port.verl_credit import _blocks, _labels
    for ids, want in (([0, 0, 1, 1], 2), ([0, 1, 0, 1], 0), ([0, 0, 0, 1], 0), ([3, 3, 4, 4, 5, 5], 2),
                      ([1, 1, 0, 0], 0), ([0, 1, 2], 1), ([0, 0, 2, 2], 0), ([5, 5, 5, 5], 4)):
        for index in (np.array(ids), torch.tensor(ids), np.array(ids, dtype=np.uint64) + np.uint64(2**63)):
            assert _blocks(*_labels(index, len(ids))) == want, (ids, index.dtype)
    assert _blocks(*_labels(np.array(["b", "b", "a", "a"], dtype=object), 4)) == 2      # factorize: first-seen order


def test_block_layout_equals_scattered_layout():
    """verl's layout (a uid repeated over its G rows) takes the (S, G) view path; the same groups with
    their rows shuffled take the scatter path: the advantages agree row by row (GRPO, its mean-only
    variant and RLOO), and by hand on one group."""
    from toyrl.port import verl_credit as port
    g = torch.Generator().manual_seed(3)
    B, L, G = 48, 5, 4
    r = torch.zeros(B, L)
    r[:, -1] = torch.randint(0, 3, (B,), generator=g).float()
    m = torch.ones(B, L)
    ids = np.arange(B) // G
    perm = torch.randperm(B, generator=g)
    for fn, kw in ((port.compute_grpo_outcome_advantage, {}),
                   (port.compute_grpo_outcome_advantage, {"norm_adv_by_std_in_grpo": False}),
                   (port.compute_rloo_outcome_advantage, {})):
        a_block = fn(r, m, ids, **kw)[0]
        a_scat = fn(r[perm], m[perm], ids[perm.numpy()], **kw)[0]
        torch.testing.assert_close(a_block[perm], a_scat, atol=1e-6, rtol=0)
    one = torch.tensor([[1.0], [0.0], [0.0], [0.0]])
    a = port.compute_rloo_outcome_advantage(one, torch.ones(4, 1), np.zeros(4, dtype=int))[0]
    assert torch.allclose(a[:, 0], torch.tensor([1.0, -1 / 3, -1 / 3, -1 / 3]))      # R - mean of the others
    a = port.compute_grpo_outcome_advantage(one, torch.ones(4, 1), np.zeros(4, dtype=int))[0]
    assert torch.allclose(a[:, 0], torch.tensor([1.5, -0.5, -0.5, -0.5]), atol=1e-5)   # std (ddof 1) = 0.5
