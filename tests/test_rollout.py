"""Rollouts: the codec, context policies, matched vs flat recompute, the KV-cache path, trees and forks."""
import numpy as np
import pytest
import torch

from toyrl.envs import VOID, make_core
from toyrl.policies import make_policy
from toyrl.rollout import ToyCodec, build_context, recompute_logp, rollout
from toyrl.rollout.tree import branch_weights, take_branches, tree_rollout

from conftest import NoCache


def setup(env="gridworld", B=16, G=4, seed=0, **kw):
    kw = kw or ({"map_name": "4x4", "max_turns": 8} if env == "gridworld" else {})
    core = make_core(env, B, seed=seed, **kw)
    codec = ToyCodec.for_core(core)
    policy = make_policy("tiny", codec.size, seed=seed)
    tasks = np.repeat(core.sample_tasks(np.random.default_rng(seed), B // G), G, 0)
    group = np.repeat(np.arange(B // G), G)
    return core, codec, policy, tasks, group


def test_codec_parse():
    codec = ToyCodec(n_think=2, n_actions=3, n_obs=5, think_max=2)   # think 5-6, END 4, actions 7-9, obs 10-14, EOT 2
    gen = torch.tensor([[5, 4, 8, 0], [4, 7, 0, 0], [5, 6, 4, 9], [5, 7, 0, 0], [2, 0, 0, 0],
                        [5, 5, 5, 4], [4, 10, 7, 0], [4, 4, 7, 0], [7, 0, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0],
                         [1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 0], [1, 0, 0, 0]], dtype=torch.bool)
    # well-formed: r END a (1), END a (0), r r END a (2); void: no END, EOT, 3 > think_max reasoning
    # tokens without an action, an observation token, a second END, an action with no END
    assert codec.parse(None, None, gen, mask).tolist() == [1, 0, 2, VOID, VOID, VOID, VOID, VOID, VOID]
    assert codec.allowed().sum() == 2 + 3 + 2 and codec.max_new == 4


def test_batch_layout_and_old_logp():
    core, codec, policy, tasks, group = setup()
    ro = rollout(policy, core, tasks, group, codec=codec, generator=torch.Generator().manual_seed(0))
    b = ro.batch
    assert b.B == 16 and (b.turn_mask.sum(1) >= 1).all()
    assert not (b.policy_mask & b.obs_mask).any()
    assert (b.old_logp[~b.policy_mask] == 0).all() and (b.old_logp[b.policy_mask] <= 0).all()
    assert b.tokens[0, 0] == codec.BOS
    # per-turn records agree with the flat batch
    ep = ro.episodes[3]
    assert len(ep.turns) == int(b.turn_mask[3].sum())
    assert [t.void for t in ep.turns] == b.void_turn[3, :len(ep.turns)].tolist()
    assert ro.success.tolist() == [bool((b.turn_reward[i] > 0).any()) for i in range(b.B)]


@pytest.mark.parametrize("context", ["full", "last_k", "summary"])
def test_matched_recompute_gives_ratio_one_and_flat_does_not(context):
    core, codec, policy, tasks, group = setup(B=16)
    ro = rollout(policy, core, tasks, group, codec=codec, context=context, context_k=1,
                 generator=torch.Generator().manual_seed(1))
    b = ro.batch
    with torch.no_grad():
        matched, _ = recompute_logp(policy, ro, "matched")
        flat, _ = recompute_logp(policy, ro, "flat")
    m = b.policy_mask
    assert (matched - b.old_logp)[m].abs().max() < 1e-5                     # ratio exactly 1 (to float noise)
    gap = (flat - b.old_logp)[m].abs().max()
    if context == "full":
        assert gap < 1e-5
    else:
        assert gap > 1e-2                                                    # the trainer sees another context
        first = b.turn_id == 0                                               # turn 0 has the same context either way
        assert (flat - b.old_logp)[m & first].abs().max() < 1e-5


def test_kv_cache_path_equals_recomputing_every_turn():
    core, codec, policy, tasks, group = setup(B=16)
    a = rollout(policy, core, tasks, group, codec=codec, generator=torch.Generator().manual_seed(2))
    b = rollout(NoCache(policy), core, tasks, group, codec=codec, generator=torch.Generator().manual_seed(2))
    assert torch.equal(a.batch.tokens, b.batch.tokens)
    assert (a.batch.old_logp - b.batch.old_logp).abs().max() < 1e-5


def test_context_policies_truncate():
    core, codec, policy, tasks, group = setup(B=4, G=4)
    ro = rollout(policy, core, tasks, group, codec=codec, generator=torch.Generator().manual_seed(0))
    ep = max(ro.episodes, key=lambda e: len(e.turns))
    assert len(ep.turns) >= 3
    full = build_context(ep, codec, "full")
    last1 = build_context(ep, codec, "last_k", 1)
    summ = build_context(ep, codec, "summary", 1)
    assert full == ep.prompt + sum((t.gen + t.obs for t in ep.turns), [])
    assert last1 == ep.prompt + ep.turns[-1].gen + ep.turns[-1].obs
    assert len(last1) < len(summ) < len(full)
    assert all(not codec.think0 <= t < codec.act0 for t in summ[len(ep.prompt):-len(ep.turns[-1].gen + ep.turns[-1].obs)])


def test_same_generator_seed_same_rollout():
    core, codec, policy, tasks, group = setup()
    a = rollout(policy, core, tasks, group, codec=codec, generator=torch.Generator().manual_seed(5))
    b = rollout(policy, core, tasks, group, codec=codec, generator=torch.Generator().manual_seed(5))
    assert torch.equal(a.batch.tokens, b.batch.tokens) and torch.equal(a.batch.state_key, b.batch.state_key)


def test_t2po_resamples_and_counts_tokens():
    core, codec, policy, tasks, group = setup()
    ro = rollout(policy, core, tasks, group, codec=codec, t2po_eta=0.3, generator=torch.Generator().manual_seed(0))
    assert ro.stats["turns_resampled"] > 0
    assert ro.stats["tokens_generated"] > ro.stats["policy_tokens"]


@pytest.mark.parametrize("strategy", ["tree", "arpo", "patr"])
def test_tree_rollout_shares_prefixes_and_respects_budget(strategy):
    core, codec, policy, tasks, group = setup(B=16, G=4)
    ro = tree_rollout(policy, core, tasks[::4], group[::4], codec=codec, group_size=4, strategy=strategy,
                      rng=np.random.default_rng(0), generator=torch.Generator().manual_seed(0), fill="tokens")
    b = ro.batch
    assert b.B > 4 * 2                                                        # branches were added
    # the spend lands within half an episode's worst cost (max_turns x max_new / 2) per task of the budget
    assert abs(ro.stats["tokens_generated"] - ro.stats["token_budget"]) <= 4 * 8 * codec.max_new / 2
    # a branch shares its parent's first turns (same records, same node ids, same tokens)
    shared = 0
    for i in range(b.B):
        for j in range(i + 1, b.B):
            k = 0
            while k < b.H and b.turn_mask[i, k] and b.turn_mask[j, k] and b.node[i, k] == b.node[j, k]:
                k += 1
            if k:
                shared += 1
                end = int(((b.turn_id[i] >= 0) & (b.turn_id[i] < k)).sum())
                assert torch.equal(b.tokens[i, :end], b.tokens[j, :end])
    assert shared > 0
    assert (b.group[:, None] == torch.as_tensor(group[::4])[None]).any(1).all()


def test_take_branches():
    assert take_branches(np.array([10.0, 10.0, 10.0]), 24).tolist() == [True, True, False]
    assert take_branches(np.array([10.0, 10.0, 10.0]), 26).tolist() == [True, True, True]
    assert take_branches(np.array([30.0, 2.0]), 10).tolist() == [False, False]    # no cheap filler after a misfit
    assert take_branches(np.array([4.0]), 0).tolist() == [False]
    core, codec, policy, tasks, group = setup()
    with pytest.raises(ValueError, match="fill"):
        tree_rollout(policy, core, tasks[::4], group[::4], codec=codec, group_size=4, fill="round")


def test_tree_spends_the_chains_tokens():
    """At fill="tokens" the tree arm generates the tokens of G independent episodes per task: summed over 4 seeds
    of 32 random 4x4 tasks x G=8 (untrained policy), within 5% of the chain arm's; the old per-round rule
    (fill="rounds") overshoots by more than 10%."""
    spent = {"tokens": 0, "rounds": 0}
    chains = 0
    for seed in range(4):
        core, codec, policy, tasks, group = setup(B=256, G=8, seed=seed, max_turns=12, map_name="4x4")
        ch = rollout(policy, core, tasks, group, codec=codec, generator=torch.Generator().manual_seed(seed))
        chains += sum(len(t.gen) for e in ch.episodes for t in e.turns)
        for fill in spent:
            tr = tree_rollout(policy, core, tasks[::8], group[::8], codec=codec, group_size=8, fill=fill,
                              rng=np.random.default_rng(seed), generator=torch.Generator().manual_seed(seed + 10))
            spent[fill] += tr.stats["tokens_generated"]
    assert abs(spent["tokens"] / chains - 1) < 0.05
    assert spent["rounds"] / chains > 1.10


def test_forked_state_replays_the_episode():
    """Restoring the env state stored before turn k and replaying the same actions reproduces the episode."""
    core, codec, policy, tasks, group = setup(B=8, G=8)
    ro = tree_rollout(policy, core, tasks[:1], group[:1], codec=codec, group_size=8, strategy="tree",
                      rng=np.random.default_rng(0), generator=torch.Generator().manual_seed(0))
    ep = max(ro.episodes, key=lambda e: len(e.turns))
    k = len(ep.turns) // 2
    fork = core.from_rows([ep.turns[k].state])
    for t in ep.turns[k:]:
        assert fork.state_keys()[0] == t.key
        a = codec.parse(fork, np.array([0]), torch.tensor([t.gen + [0] * (codec.max_new - len(t.gen))]),
                        torch.tensor([[True] * len(t.gen) + [False] * (codec.max_new - len(t.gen))]))
        _, r, *_ = fork.step(a)
        assert r[0] == t.reward


def test_arpo_weights():
    class T:
        def __init__(self, e):
            self.entropy = [e]

    class E:
        turns = [T(1.0), T(2.5), T(0.0)]
    w = branch_weights([E()], [(0, 1), (0, 2)], "arpo")
    assert np.allclose(w, [0.8, 0.3])


def test_rollout_validates():
    core, codec, policy, tasks, group = setup()
    with pytest.raises(ValueError, match="context"):
        rollout(policy, core, tasks, group, codec=codec, context="nope")
    with pytest.raises(ValueError, match="tasks and group"):
        rollout(policy, core, tasks[:3], group, codec=codec)
