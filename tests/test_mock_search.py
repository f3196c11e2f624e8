"""MockSearch: KB reproducibility, gymnasium checker, determinism, snapshot replay, state keys, the
text codec, batched-vs-single equivalence, the oracle and the checkable turn signals."""
from __future__ import annotations

import json
import re
import warnings

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import given, settings
from hypothesis import strategies as st

from toyrl.envs import mock_search
from toyrl.envs.core import VOID
from toyrl.envs.mock_search import (DEFAULT_KB_PATH, UNK, MockSearchEnv, SearchCore, build_kb, load_kb,
                                    oracle_actions)

CORE = SearchCore(1)


def random_rollout(core, rng, steps, p_void=0.2, p_answer=0.15):
    """Step ``core`` with random actions (searches mostly); yields (actions, step output)."""
    for _ in range(steps):
        a = rng.integers(core.n_entities, size=core.num_envs)
        ans = rng.random(core.num_envs) < p_answer
        a = np.where(ans, core.n_entities + rng.integers(core.n_values, size=core.num_envs), a)
        a = np.where(rng.random(core.num_envs) < p_void, VOID, a)
        yield a, core.step(a)


# ---- the knowledge base -------------------------------------------------------------------------
def test_shipped_kb_equals_build_kb_0():
    assert DEFAULT_KB_PATH.exists()
    assert DEFAULT_KB_PATH.stat().st_size < 100_000
    assert json.loads(DEFAULT_KB_PATH.read_text()) == build_kb(0)


def test_missing_default_kb_falls_back_to_build_kb(monkeypatch, tmp_path):
    monkeypatch.setattr(mock_search, "DEFAULT_KB_PATH", tmp_path / "missing.json")
    assert load_kb() == build_kb(0)
    assert SearchCore(1).entities == CORE.entities


def test_kb_argument_dict_or_path(tmp_path):
    kb = build_kb(1)
    path = tmp_path / "kb.json"
    path.write_text(json.dumps(kb))
    a, b = SearchCore(1, kb=kb), SearchCore(1, kb=str(path))
    assert a.entities == b.entities and a.questions == b.questions
    assert a.entities != CORE.entities


def test_kb_is_consistent():
    kb = build_kb(0)
    facts = {e["name"]: e["facts"] for e in kb["entities"]}
    assert set(CORE.q_hops.tolist()) == {1, 2, 3}
    for q in kb["questions"]:
        chain = q["chain"]
        for x, y in zip(chain, chain[1:]):                       # each hop is a fact of the previous entity
            assert y in facts[x].values()
        assert q["answer"] in facts[chain[-1]].values() and q["answer"] not in chain
    words = re.compile(r"\b(" + "|".join(re.escape(v) for v in CORE.values) + r")\b")
    assert not any(words.search(s) for s in kb["noise"])          # distractors never hold a value


# ---- gymnasium ----------------------------------------------------------------------------------
def test_check_env():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(MockSearchEnv(render_mode="ansi"))


def _episode_trace(seed, actions):
    env = MockSearchEnv()
    obs, info = env.reset(seed=seed)
    trace = [(obs.tolist(), info, env.render_text())]
    for a in actions:
        obs, r, term, trunc, info = env.step(a)
        trace.append((obs.tolist(), r, term, trunc, info, env.render_text()))
        if term or trunc:
            break
    return trace


def test_same_seed_same_episode():
    actions = [3, None, 7, 7, 12]
    assert _episode_trace(5, actions) == _episode_trace(5, actions)
    assert _episode_trace(5, actions) != _episode_trace(6, actions)


def test_reset_with_task_option():
    env = MockSearchEnv()
    obs, _ = env.reset(seed=0, options={"task": [10]})
    assert obs[0] == 10 and obs[1] == env.core.n_entities and obs[2] == 0
    assert env.core.question(0) == CORE.questions[10]


# ---- snapshot / restore / fork ------------------------------------------------------------------
def test_snapshot_restore_replays_noise():
    core = SearchCore(4, seed=0)
    core.reset(core.sample_tasks(core.np_random, 4))
    rng = np.random.default_rng(1)
    list(random_rollout(core, rng, 2, p_answer=0.0))
    snap = core.snapshot()
    acts = [rng.integers(core.n_entities, size=4) for _ in range(3)]

    def run():
        out = []
        for a in acts:
            o, r, *_ = core.step(a)
            out.append((o.copy(), r.copy(), core.state_keys().copy(), [core.render_text(i) for i in range(4)]))
        return out

    first = run()
    core.restore(snap)
    second = run()
    for x, y in zip(first, second):
        np.testing.assert_array_equal(x[0], y[0])
        np.testing.assert_array_equal(x[1], y[1])
        np.testing.assert_array_equal(x[2], y[2])
        assert x[3] == y[3]


def test_env_snapshot_restore():
    env = MockSearchEnv()
    env.reset(seed=2)
    env.step(0)
    snap, text = env.snapshot(), env.render_text()
    out1 = [env.step(a)[0].tolist() + [env.render_text()] for a in (1, 2)]
    env.restore(snap)
    assert env.render_text() == text
    assert [env.step(a)[0].tolist() + [env.render_text()] for a in (1, 2)] == out1


def test_fork_copies_rows():
    core = SearchCore(2, seed=0)
    core.reset(np.array([[0], [50]]))
    core.step(np.array([3, 4]))
    new = core.fork([1, 1, 0])
    np.testing.assert_array_equal(new.state_keys(), core.state_keys()[[1, 1, 0]])
    assert new.render_text(2) == core.render_text(0)


# ---- state keys ---------------------------------------------------------------------------------
def test_state_key_order_invariant_and_noise_free():
    q = 60                                                        # a 3-hop question
    a, b = SearchCore(1, seed=0), SearchCore(1, seed=99, noise_sentences=2)
    a.reset([[q]]), b.reset([[q]])
    assert a.state_keys()[0] == b.state_keys()[0]
    e1, e2 = a.q_chain[q][:2]
    for x in (e1, VOID, e2):
        a.step(np.array([x]))
    for x in (e2, e1, e1):
        b.step(np.array([x]))
    assert a.state_keys()[0] == b.state_keys()[0]                 # same set, other order, other noise
    assert a.render_text(0) != b.render_text(0)


def test_state_key_differs_for_different_states():
    core = SearchCore(4)
    core.reset(np.array([[0], [0], [1], [0]]))
    core.step(np.array([VOID, 5, VOID, 6]))
    k = core.state_keys()
    assert len(set(k.tolist())) == 4
    assert k.dtype == np.int64 and (k >= 0).all()


def test_void_turn_changes_nothing_but_turn():
    core = SearchCore(1, void_penalty=0.1)
    core.reset([[3]])
    core.step(np.array([2]))
    key, result = core.state_keys().copy(), core.result_text(0)
    obs, r, term, trunc, info = core.step(np.array([VOID]))
    assert core.state_keys()[0] == key[0] and core.result_text(0) == result
    assert r[0] == pytest.approx(-0.1) and info["void"][0] and not term[0] and not trunc[0]
    assert obs[0, 2] == 2 and "no valid" in core.render_text(0)


# ---- text codec ---------------------------------------------------------------------------------
def test_action_text_round_trip():
    for a in range(CORE.n_actions):
        assert CORE.parse_action(CORE.action_text(a)) == a


def test_parse_action_tolerates_case_and_whitespace():
    name = CORE.entities[20]
    assert CORE.parse_action(f"let me look. SEARCH[  {name.upper().replace(' ', '   ')} ]") == 20
    assert CORE.parse_action(f"answer[ {CORE.values[7].lower()} ]") == CORE.n_entities + 7


@pytest.mark.parametrize("text", ["", "hello", "search[]", "search[Atlantis]", "answer[42]", "move[left]",
                                  "search Valby", "search[Valby", "answer[]", "[Valby]", "search[[Valby]]"])
def test_parse_action_garbage_is_none(text):
    assert CORE.parse_action(text) is None


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_parse_action_random_text_never_raises(text):
    a = CORE.parse_action(text)
    assert a is None or (0 <= a < CORE.n_actions and CORE.parse_action(CORE.action_text(a)) == a)


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_characters="[]")))
def test_parse_action_without_brackets_is_none(text):
    assert CORE.parse_action(text) is None


def test_obs_tokens_cover_every_observation():
    core = SearchCore(8, seed=3)
    core.reset(core.sample_tasks(core.np_random, 8))
    rng = np.random.default_rng(0)
    for _ in random_rollout(core, rng, 6):
        for i in range(8):
            assert UNK not in core.obs_tokens(i)
    arr = core.obs_token_array()
    assert arr.shape[0] == 8 and arr.dtype == np.int64
    assert arr[0, :len(core.obs_tokens(0))].tolist() == core.obs_tokens(0)
    assert core.obs_token_array(max_len=16).shape == (8, 16)


# ---- batched == single ----------------------------------------------------------------------------
@pytest.mark.parametrize("noise", [0, 3])
def test_batched_core_matches_single_envs(noise):
    N, rng = 6, np.random.default_rng(4)
    tasks = CORE.sample_tasks(rng, N)
    core = SearchCore(N, seed=0, noise_sentences=noise)
    core.reset(tasks)
    envs = [MockSearchEnv(noise_sentences=noise) for _ in range(N)]
    for i, env in enumerate(envs):
        env.reset(seed=100 + i, options={"task": tasks[i]})
    for a, (obs, r, term, trunc, info) in random_rollout(core, rng, 6):
        for i, env in enumerate(envs):
            if core.done[i] and not (term[i] or trunc[i]):
                continue
            o1, r1, t1, tr1, info1 = env.step(None if a[i] == VOID else int(a[i]))
            assert o1.tolist() == obs[i].tolist() and (r1, t1, tr1) == (r[i], term[i], trunc[i])
            assert info1["state_key"] == core.state_keys()[i]
            assert all(info1[k] == info[k][i] for k in info)
            if noise == 0:                                         # the noise stream differs per copy
                assert env.render_text() == core.render_text(i)


# ---- oracle and turn signals --------------------------------------------------------------------
def test_oracle_solves_every_question():
    Q = CORE.n_questions
    core = SearchCore(Q, seed=0)
    core.reset(np.arange(Q)[:, None])
    plans = [core.reference_solution(i) for i in range(Q)]
    assert [len(p) for p in plans] == (core.q_hops + 1).tolist()
    total = np.zeros(Q)
    for t in range(4):
        a = np.array([p[t] if t < len(p) else VOID for p in plans])
        _, r, term, trunc, info = core.step(a)
        total += r
        last_search = core.q_hops == t + 1
        assert (info["contains_answer"][last_search]).all()       # the last hop's document holds the answer
        assert np.allclose(info["hop_progress"], np.minimum(t + 1, core.q_hops) / core.q_hops)
        np.testing.assert_array_equal(term, core.q_hops == t)
    assert (total == 1).all() and core.done.all()
    assert (core.state["turn"] == core.q_hops + 1).all()


def test_oracle_actions_from_mid_episode():
    core = SearchCore(1)
    core.reset([[60]])
    first, *rest = core.reference_solution(0)
    core.step(np.array([first]))
    assert oracle_actions(core, 0) == rest
    assert core.privileged(0)["answer"] == core.answer(0)
    assert core.action_text(core.answer_action(0)) == f"answer[{core.answer(0)}]"


def test_contains_answer_matches_text():
    core = SearchCore(16, seed=7)
    core.reset(core.sample_tasks(core.np_random, 16))
    rng = np.random.default_rng(7)
    seen_true = 0
    for a, (_, _, _, _, info) in random_rollout(core, rng, 5, p_answer=0.05):
        for i in range(16):
            expected = bool(info["searched"][i]) and re.search(
                r"\b" + re.escape(core.answer(i)) + r"\b", core.result_text(i)) is not None
            assert info["contains_answer"][i] == expected
            seen_true += expected
    assert seen_true > 0


def test_wrong_answer_search_cost_and_truncation():
    core = SearchCore(2, search_cost=0.01, max_turns=2)
    core.reset([[0], [0]])
    wrong = core.answer_action(0) + 1 if core.answer_action(0) + 1 < core.n_actions else core.n_entities
    _, r, term, trunc, info = core.step(np.array([wrong, 0]))
    assert r.tolist() == [0.0, -0.01] and term.tolist() == [True, False] and not info["success"].any()
    _, r, term, trunc, _ = core.step(np.array([0, 0]))
    assert r.tolist() == [0.0, -0.01] and trunc.tolist() == [False, True] and core.done.all()


def test_sample_tasks_hops_filter():
    rng = np.random.default_rng(0)
    t = CORE.sample_tasks(rng, 200, hops=(3,))
    assert t.shape == (200, 1) and (CORE.q_hops[t[:, 0]] == 3).all()
    core = SearchCore(1, hops=(1,))
    assert (core.q_hops[core.sample_tasks(rng, 50)[:, 0]] == 1).all()
    with pytest.raises(ValueError):
        SearchCore(1, hops=(7,))
