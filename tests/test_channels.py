"""The failure channels: reasoning turns, the turn grammar, unconstrained sampling, exact on-policy
ratios, the off-policy regime (staleness, epochs, minibatches, policy lag), fresh-episode evaluation
and T2PO's thinking intervention."""
import numpy as np
import pytest
import torch

from toyrl.envs import make_core
from toyrl.policies import make_policy
from toyrl.rollout import Sampling, recompute_logp, rollout
from toyrl.codecs.toy import ThinkingIntervention, ToyCodec, TurnGrammar
from toyrl.train import TrainConfig, Trainer, train

GRID16 = {"map_name": "4x4", "max_turns": 16}


def toy_setup(B=16, G=4, seed=0, think_max=6, n_think=8, env="gridworld", **kw):
    core = make_core(env, B, seed=seed, **(kw or ({"map_name": "4x4", "max_turns": 6} if env == "gridworld" else {})))
    codec = ToyCodec.for_core(core, n_think, think_max)
    policy = make_policy("tiny", codec.size, seed=seed, max_len=512)
    tasks = np.repeat(core.sample_tasks(np.random.default_rng(seed), B // G), G, 0)
    return core, codec, policy, tasks, np.repeat(np.arange(B // G), G)


def test_grammar_table_and_transitions_by_hand():
    codec = ToyCodec(n_think=2, n_actions=3, n_obs=4, think_max=1)   # END 4, think 5-6, act 7-9, obs 10-13
    g = TurnGrammar(codec)
    assert (g.ACT, g.FORCE) == (2, 3)
    assert torch.nonzero(g.table[0]).flatten().tolist() == [4, 5, 6]      # reasoning or END
    assert torch.nonzero(g.table[1]).flatten().tolist() == [4]            # budget spent: END only
    assert torch.nonzero(g.table[2]).flatten().tolist() == [7, 8, 9]      # the action
    assert torch.nonzero(g.table[3]).flatten().tolist() == [4]            # the intervention's END
    assert (g.next[0, 5], g.next[0, 4], g.next[1, 4], g.next[3, 4]) == (1, 2, 2, 2)
    free = TurnGrammar(codec, constrain=False)
    assert free.table[:3].all() and free.table[3].sum() == 1
    run = g.start(2)
    for tok in ([5, 4], [4, 7]):
        assert run.allowed()[torch.arange(2), torch.tensor(tok)].all()
        run.advance(torch.tensor(tok), None, torch.tensor([True, True]))
    states, forced = run.record(3)
    assert states.tolist() == [[0, 1, -1], [0, 2, -1]]
    assert forced.tolist() == [[False, True, False], [False, False, False]]   # state 1 allows END only
    assert g.allowed_at(torch.tensor([-1, 2]))[0].all() and g.allowed_at(torch.tensor([-1, 2]))[1].sum() == 3


def test_intervention_uncertainty_by_hand():
    tti = ThinkingIntervention(delta=0.1, alpha=0.5)
    uniform4 = torch.log(torch.tensor([[0.25, 0.25, 0.25, 0.25, 0.0]]))
    assert tti.uncertainty(uniform4).item() == pytest.approx(0.5 * 1.0 + 0.5 * 0.75)
    sure = torch.log(torch.tensor([[1.0, 0.0, 0.0]]))
    assert tti.uncertainty(sure).item() == pytest.approx(0.0)
    with pytest.raises(ValueError, match="delta"):
        ThinkingIntervention(delta=0.0)


@pytest.mark.parametrize("constrain", [True, False])
@pytest.mark.parametrize("temperature", [0.5, 0.7, 1.0, 1.5])
def test_on_policy_ratio_is_exactly_one(temperature, constrain):
    """Recompute scores every sampled token under the distribution that drew it (temperature and grammar)."""
    core, codec, policy, tasks, group = toy_setup()
    for context in ("full", "last_k"):
        ro = rollout(policy, core, tasks, group, codec=codec, temperature=temperature, constrain=constrain,
                     context=context, context_k=1, generator=torch.Generator().manual_seed(1))
        b = ro.batch
        with torch.no_grad():
            logp, _ = recompute_logp(policy, ro, "matched")
        d = (logp - b.old_logp)[b.policy_mask]
        assert d.numel() > 100 and d.abs().max().item() < 2e-5, (temperature, constrain, context)


def test_trainer_logs_ratio_one_at_temperature_07():
    """The issue's reproduction: TrainConfig(temperature=0.7, steps=1) logged ratios 0.82-1.17 before."""
    row = train(TrainConfig(temperature=0.7, steps=1, env_kwargs={"map_name": "4x4"}, progress=False)).rows[0]
    assert row["onpolicy_ratio_err"] < 1e-5


def test_intervention_cuts_reasoning_and_keeps_ratios_exact():
    core, codec, policy, tasks, group = toy_setup(think_max=12)
    tti = ThinkingIntervention(delta=0.05, window=3, min_think=4)
    ro = rollout(policy, core, tasks, group, codec=codec, tti=tti, generator=torch.Generator().manual_seed(0))
    b = ro.batch
    assert ro.stats["turns_cut"] > 0
    written = (b.tokens == codec.END) & ~b.policy_mask & (b.turn_id >= 0) & ~b.obs_mask
    assert int(written.sum()) >= ro.stats["turns_cut"]            # every cut turn's END is written, not sampled
    n_cut = 0
    for ep in ro.episodes:
        for t in ep.turns:
            if any(t.forced):
                k = t.forced.index(True)                           # reasoning ends at the cut (or the budget)
                assert t.gen[k] == codec.END and all(codec.think0 <= x < codec.act0 for x in t.gen[:k])
                assert k >= tti.min_think
                n_cut += k < codec.think_max
    assert n_cut == ro.stats["turns_cut"]
    with torch.no_grad():
        logp, _ = recompute_logp(policy, ro, "matched")
    assert (logp - b.old_logp)[b.policy_mask].abs().max().item() < 2e-5


def test_unconstrained_sampling_at_init_emits_obs_tokens_and_void_turns():
    core, codec, policy, tasks, group = toy_setup(B=32)
    ro = rollout(policy, core, tasks, group, codec=codec, constrain=False, generator=torch.Generator().manual_seed(0))
    b = ro.batch
    wrote_obs = codec.obs_token_mask(b.tokens) & b.policy_mask
    assert ro.stats["obs_token_rate"] > 0 and wrote_obs.any()
    assert ro.stats["obs_token_rate"] == pytest.approx(wrote_obs.sum().item() / b.policy_mask.sum().item())
    assert b.void_turn[b.turn_mask].float().mean() > 0.2
    constrained = rollout(policy, core, tasks, group, codec=codec, generator=torch.Generator().manual_seed(0))
    assert constrained.stats["obs_token_rate"] == 0 and not constrained.batch.void_turn.any()


def test_reasoning_turns_at_32_tokens_train_and_are_long():
    """Done-when of the channels issue: GridWorld 4x4, 16 turns, n_think = think_max = 32."""
    log = train(TrainConfig(env="gridworld", env_kwargs=GRID16, n_think=32, think_max=32, steps=2, progress=False))
    for r in log.rows:
        assert r["policy_tokens_per_turn"] >= 16 and r["reasoning_tokens_per_turn"] >= 14
        assert np.isfinite(r["loss"]) and r["onpolicy_ratio_err"] < 1e-5


@pytest.mark.parametrize("env", ["gridworld", "bandit_chain", "mock_search"])
def test_64_reasoning_tokens_fit_every_env(env):
    tr = Trainer(TrainConfig(env=env, n_think=16, think_max=64, steps=1, group_size=2, prompts_per_step=2,
                             progress=False))
    row = tr.step()
    assert tr.codec.max_new == 66 and row["policy_tokens_per_turn"] > 8
    assert tr.policy.config.max_len >= tr.core.max_turns * 66


def test_policy_lag_counts_updates_between_behaviour_and_learner():
    """staleness 2 (steps), 2 epochs x 2 minibatches = 4 updates a step: step s samples with the
    weights of step s - 2 (version 4(s - 2)), its updates run at versions 4s .. 4s + 3."""
    tr = Trainer(TrainConfig(env="bandit_chain", staleness=2, ppo_epochs=2, minibatches=2, steps=4,
                             group_size=4, prompts_per_step=2, progress=False))
    rows = [tr.step() for _ in range(4)]
    assert [r["policy_lag_max"] for r in rows] == [3, 7, 11, 11]
    assert [r["policy_lag_mean"] for r in rows] == [1.5, 5.5, 9.5, 9.5]
    assert tr.version == 16


def test_minibatch_rows_recompute_like_the_full_batch():
    core, codec, policy, tasks, group = toy_setup(think_max=3)
    ro = rollout(policy, core, tasks, group, codec=codec, context="last_k", context_k=1,
                 generator=torch.Generator().manual_seed(3))
    rows = torch.tensor([1, 4, 5, 11])
    with torch.no_grad():
        full, _ = recompute_logp(policy, ro, "matched", env_tokens=False)
        sub, _ = recompute_logp(policy, ro.select(rows), "matched", env_tokens=False)
    assert torch.allclose(sub, full[rows], atol=1e-5)
    assert ro.select(rows).batch.B == 4 and ro.select(rows).batch.T == ro.batch.T


def test_evaluation_is_independent_of_the_training_run():
    base = dict(env="gridworld", env_kwargs={"map_name": "4x4", "max_turns": 8}, steps=3, progress=False)
    plain = train(TrainConfig(**base)).rows
    evald = train(TrainConfig(**base, eval_every=2, eval_episodes=12)).rows
    timing = ("time_rollout", "time_prep", "time_recompute", "time_update")
    strip = lambda r: {k: v for k, v in r.items() if k not in timing and not k.startswith("eval_")}   # noqa: E731
    assert [strip(r) for r in plain] == [strip(r) for r in evald]
    assert ["eval_success_rate" in r for r in evald] == [False, True, True]     # every 2 steps and the last
    assert all(0 <= r["eval_success_rate"] <= 1 and 1 <= r["eval_turns"] <= 8 for r in evald[1:])


def test_evaluation_of_tree_rollouts_plays_fresh_episodes():
    tr = Trainer(TrainConfig(env="gridworld", env_kwargs={"map_name": "4x4", "max_turns": 8}, rollout="tree",
                             steps=1, eval_every=1, eval_episodes=10, progress=False))
    row = tr.step()
    core, tasks, _ = tr.eval_set
    assert core.num_envs == 10 and len(tasks) == 10
    assert row["eval_success_rate"] * 10 == pytest.approx(round(row["eval_success_rate"] * 10))


@pytest.mark.parametrize("field,value,match", [
    ("staleness", -1, "staleness"), ("eval_episodes", 0, "eval_episodes"), ("think_max", 300, "think_max"),
    ("n_think", 0, "n_think"), ("minibatches", 0, "minibatches"), ("minibatches", 1000, "minibatches"),
    ("temperature", 0.0, "temperature"), ("tti_delta", -0.1, "tti_delta"), ("ppo_epochs", 0, "ppo_epochs"),
])
def test_bad_channel_settings_raise_before_any_rollout(field, value, match):
    with pytest.raises(ValueError, match=match):
        Trainer(TrainConfig(**{field: value}))


def test_text_policy_reasoning_budget_is_checked():
    with pytest.raises(ValueError, match="think_max=64"):
        Trainer(TrainConfig(policy="tinylm", env="gridworld", env_kwargs=GRID16, think_max=64, context="full"))
    tr = Trainer(TrainConfig(policy="tinylm", env="gridworld", env_kwargs=GRID16, think_max=64, context="last_k",
                             context_k=1))
    assert tr.codec.max_new == 8 + 64
    with pytest.raises(ValueError, match="tti"):
        Trainer(TrainConfig(policy="tinylm", tti_delta=0.05))


def test_scripted_expert_writes_well_formed_turns_with_grammar_states():
    from toyrl.policies.scripted import ScriptedPolicy
    core, codec, _, tasks, group = toy_setup(think_max=2)
    ro = rollout(ScriptedPolicy(core, codec), core, tasks, group, codec=codec)
    b = ro.batch
    assert not b.void_turn[b.turn_mask].any() and ro.success.float().mean() > 0.9
    first = ro.episodes[0].turns[0]
    assert first.gen[0] == codec.END and first.states == [0, codec.think_max + 1] and first.forced == [False, False]
    none = ToyCodec.for_core(core, 2, 0)                      # no reasoning: the END is written, not chosen
    ro0 = rollout(ScriptedPolicy(core, none), core, tasks, group, codec=none)
    assert ro0.episodes[0].turns[0].forced == [True, False]
    assert ro0.stats["policy_tokens"] == ro0.stats["turns"]


def test_describe_turn_by_hand():
    codec = ToyCodec(n_think=2, n_actions=4, n_obs=3, think_max=2)      # END 4, r 5-6, act 7-10, obs 11-13
    assert codec.describe([5, 6, 4, 8], ["left", "down", "right", "up"]) == "r0 r1 </think> down"
    assert codec.describe([3, 12, 2]) == "| o1 <eot>"


def test_logprobs_by_length_equals_one_padded_forward_with_gradients():
    from toyrl.rollout.flatten import logprobs_by_length
    core, codec, policy, tasks, group = toy_setup(B=16, think_max=8)
    ro = rollout(policy, core, tasks, group, codec=codec, generator=torch.Generator().manual_seed(4))
    b = ro.batch
    attn = b.turn_id >= 0
    allowed = ro.grammar.allowed_at(ro.sample_state)
    ends = attn.sum(1)
    assert ends.min() < ends.max()                                   # rows of different length
    lp_a, en_a = policy.logprobs(b.tokens, attn, allowed=allowed, temperature=0.7)
    lp_b, en_b = logprobs_by_length(policy, b.tokens, attn, allowed, 0.7, buckets=4)
    assert torch.allclose(lp_a, lp_b, atol=1e-5) and torch.allclose(en_a, en_b, atol=1e-5)
    ga = torch.autograd.grad(lp_a.sum(), policy.lm_head.weight)[0]
    gb = torch.autograd.grad(lp_b.sum(), policy.lm_head.weight)[0]
    assert torch.allclose(ga, gb, atol=1e-4)


def test_text_codec_has_no_grammar_and_marks_the_user_turn_header():
    from toyrl.codecs.text import TextCodec, WordTokenizer
    tok = WordTokenizer(["move", "User"])
    codec = TextCodec(tok, template=("User: ", "\nAssistant: ", "\nUser: "))
    assert codec.grammar(True) is None
    with pytest.raises(ValueError, match="tti"):
        codec.grammar(True, ThinkingIntervention())
    ids = torch.tensor([tok.encode("move[up]\nUser: hi")])
    marked = codec.obs_token_mask(ids)[0].tolist()
    assert marked.count(True) == 1 and marked[-5]                       # the word "User" of the header


def test_think_min_withholds_end_and_keeps_ratios_exact():
    codec = ToyCodec(n_think=2, n_actions=3, n_obs=4, think_max=3, think_min=2)   # END 4, r 5-6, act 7-9
    g = TurnGrammar(codec)
    assert [torch.nonzero(g.table[k]).flatten().tolist() for k in range(4)] == [[5, 6], [5, 6], [4, 5, 6], [4]]
    core, codec, policy, tasks, group = toy_setup(think_max=12)
    codec = ToyCodec.for_core(core, 8, 12, think_min=8)
    ro = rollout(policy, core, tasks, group, codec=codec, generator=torch.Generator().manual_seed(5))
    lengths = [t.gen.index(codec.END) for ep in ro.episodes for t in ep.turns]
    assert min(lengths) >= 8 and max(lengths) <= 12
    with torch.no_grad():
        logp, _ = recompute_logp(policy, ro, "matched")
    assert (logp - ro.batch.old_logp)[ro.batch.policy_mask].abs().max().item() < 2e-5
    with pytest.raises(ValueError, match="think_min"):
        ToyCodec(n_think=2, n_actions=3, n_obs=4, think_max=1, think_min=2)
    with pytest.raises(ValueError, match="think_min"):
        Trainer(TrainConfig(think_max=2, think_min=3))
