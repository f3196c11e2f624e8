"""MockSearch: KB reproducibility, long noisy passages (hand-checked on a tiny KB, then the shipped
one), both token views, gymnasium checker, determinism, snapshot replay, state keys, the text
codec, batched-vs-single equivalence, the oracle and the checkable turn signals."""
from __future__ import annotations

import json
import re
import warnings

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import given, settings
from hypothesis import strategies as st

from toyrl.envs import kb
from toyrl.envs.core import VOID
from toyrl.envs.kb import draw_distractors, max_distractors, passage_pieces
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
    monkeypatch.setattr(kb, "DEFAULT_KB_PATH", tmp_path / "missing.json")
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


# ---- passages: hand-checked on a tiny KB ----------------------------------------------------------
# Aland's document: "About Aland, a country." (4 words) + "Aland was founded in 1300." (5 words) = 9 words
TINY = {"entities": [{"name": "Aland", "type": "country", "facts": {"founded": "1300"}},
                     {"name": "Bor", "type": "country", "facts": {"founded": "1400"}}],
        "noise": ["Songs are old.", "Guides are grey.", "Roads are long.", "Springs are blue."],
        "questions": [{"id": 0, "text": "In what year was Aland founded?", "hops": 1, "chain": ["Aland"],
                       "answer": "1300"}]}


def tiny(seed=0, **kw):
    core = SearchCore(1, kb=TINY, seed=seed, **kw)
    core.reset([[0]])
    return core


def test_max_distractors_hand_checked():
    assert max_distractors(np.array([3, 5]), np.array([2, 4, 2]), 6) == 2          # 3 + 2 + 2 >= 6
    assert max_distractors(np.array([3, 5]), np.array([2, 4, 2]), 3) == 0          # the document suffices
    assert max_distractors(np.array([3, 5]), np.array([2, 4, 2]), 11) == 3         # 3 + 8 = 11
    with pytest.raises(ValueError, match="passage_words must be <= 11"):
        max_distractors(np.array([3, 5]), np.array([2, 4, 2]), 12)


def test_draw_distractors_fills_to_passage_words():
    rng = np.random.default_rng(0)
    doc_len, doc_words, noise_words = np.array([3, 3, 2]), np.array([30, 50, 44]), np.array([10, 10, 10])
    ids, pos = draw_distractors(rng, doc_len, doc_words, noise_words, 2, passage_words=45)
    assert ((ids >= 0).sum(1) == [2, 0, 1]).all()                  # 30 + 20, 50 alone, 44 + 10
    used = ids[0][ids[0] >= 0]
    assert len(set(used.tolist())) == 2 and set(used.tolist()) <= {0, 1, 2}
    assert ((pos >= 1) & (pos <= doc_len[:, None])).all()          # after the title, up to the end
    ids, pos = draw_distractors(rng, doc_len, doc_words, noise_words, 2, shuffle=False)
    assert (ids >= 0).all() and (pos == doc_len[:, None]).all()    # a fixed count, all at the end


def test_passage_pieces_hand_checked():
    assert passage_pieces(2, np.array([7, -1, 3]), np.array([1, 1, 2])) == [
        (False, 0), (True, 7), (False, 1), (True, 3)]
    assert passage_pieces(1, np.array([-1]), np.array([1])) == [(False, 0)]


def test_tiny_passage_holds_the_fact_iff_retrieved():
    core = tiny(passage_words=15)                                  # 9 words + 2 distractors of 3 = 15
    _, _, _, _, info = core.step(np.array([0]))                    # search[Aland]: the answer's document
    text = core.result_text(0)
    assert len(text.split()) == 15 and "Aland was founded in 1300." in text and info["contains_answer"][0]
    assert text.startswith("About Aland, a country.") and sum(s in text for s in TINY["noise"]) == 2
    _, _, _, _, info = core.step(np.array([1]))                    # search[Bor]: not retrieved
    assert "1300" not in core.result_text(0) and not info["contains_answer"][0]
    assert len(core.result_text(0).split()) == 15


def test_tiny_token_views_hand_checked():
    core, word = tiny(passage_words=15), tiny(passage_words=15, token_view="word")
    core.step(np.array([0]))
    word.step(np.array([0]))
    # result of search [ aland ] : (7) + about aland , a country . (6) + aland was founded in 1300 . (6)
    assert len(core.obs_tokens(0)) == 7 + 6 + 6 + 2                # + one token per distractor
    assert len(word.obs_tokens(0)) == 7 + 6 + 6 + 2 * 4            # + songs are old . per distractor
    assert word.decode(word.obs_tokens(0)).count("1300") == 1 == core.decode(core.obs_tokens(0)).count("1300")
    assert core.obs_vocab_size == word.obs_vocab_size


def test_tiny_fact_position_varies_with_the_seed():
    places = set()
    for seed in range(20):
        core = tiny(seed, passage_words=15)
        core.step(np.array([0]))
        places.add(core.passage(0).index((False, 1)))              # where the fact sentence sits
    assert places == {1, 2, 3}                                     # before, between and after the distractors


# ---- passages on the shipped KB ------------------------------------------------------------------
def _searched(seed=0, n=64, **kw):
    core = SearchCore(n, seed=seed, **kw)
    core.reset(core.sample_tasks(np.random.default_rng(seed), n))
    _, _, _, _, info = core.step(np.random.default_rng(seed).integers(core.n_entities, size=n))
    return core, info


@pytest.mark.parametrize("passage_words", [40, 200, 300])
def test_passage_length_within_stated_range(passage_words):
    core, _ = _searched(passage_words=passage_words)
    longest = max(len(s.split()) for s in core.noise_pool)
    words = [len(core.result_text(i).split()) for i in range(core.num_envs)]
    assert all(passage_words <= w < passage_words + longest for w in words), words
    assert core.noise_sentences >= max((core.state["noise"] >= 0).sum(1))


def test_default_passage_is_long_and_deterministic():
    core, info = _searched(seed=3)
    again, _ = _searched(seed=3)
    other, _ = _searched(seed=4)
    texts = [core.result_text(i) for i in range(64)]
    assert all(200 <= len(t.split()) < 215 for t in texts)
    assert texts == [again.result_text(i) for i in range(64)]
    assert texts != [other.result_text(i) for i in range(64)]
    for i, t in enumerate(texts):                                  # the fact is there iff the document has it
        assert info["contains_answer"][i] == (re.search(r"\b" + re.escape(core.answer(i)) + r"\b", t) is not None)


def test_fact_position_varies_on_shipped_kb():
    core = SearchCore(64, seed=0)
    core.reset([[0]])
    e = core.q_chain[0][-1]                                        # the document that holds the answer
    _, _, _, _, info = core.step(np.full(64, e))
    assert info["contains_answer"].all()
    fact = [j for j, s in enumerate(core.docs[e]) if re.search(r"\b" + re.escape(core.answer(0)) + r"\b", s)][0]
    at = [core.passage(i).index((False, fact)) for i in range(64)]  # sentence index of the fact in the passage
    assert len(set(at)) >= 8 and min(at) >= 1                      # anywhere after the title


def test_noise_sentences_and_bare_document_settings():
    core, _ = _searched(noise_sentences=4)
    assert ((core.state["noise"] >= 0).sum(1) == 4).all() and core.passage_words is None
    bare, _ = _searched(passage_words=0)
    assert all(bare.result_text(i) == " ".join(bare.docs[bare.state["last"][i]]) for i in range(64))
    for bad in [dict(passage_words=10_000), dict(passage_words=-1), dict(noise_sentences=1000),
                dict(token_view="char")]:
        with pytest.raises(ValueError):
            SearchCore(1, **bad)


def test_token_views_lengths_on_shipped_kb():
    core, _ = _searched()
    word, _ = _searched(token_view="word")
    n_sent = [len(core.obs_tokens(i)) for i in range(64)]
    n_word = [len(word.obs_tokens(i)) for i in range(64)]
    assert all(40 <= n <= 70 for n in n_sent), n_sent               # the default toy view
    assert all(200 <= n <= 260 for n in n_word), n_word             # hundreds of tokens
    for i in range(64):                                             # one token per distractor in the sentence view
        n_noise = int((core.state["noise"][i] >= 0).sum())
        assert sum(t >= core.obs_vocab_size - len(core.noise_pool) for t in core.obs_tokens(i)) == n_noise
        assert UNK not in core.obs_tokens(i) and UNK not in word.obs_tokens(i)


def test_noise_stream_does_not_depend_on_the_search():
    a, b = SearchCore(1, seed=5), SearchCore(1, seed=5)
    a.reset([[0]]), b.reset([[0]])
    a.step(np.array([0])), b.step(np.array([7]))                    # documents of other lengths
    a.step(np.array([3])), b.step(np.array([3]))
    assert a.result_text(0) == b.result_text(0)


def test_distractor_words_are_tinylm_words():
    """Every distractor word is one token of the shipped TinyLM tokenizer, so a passage costs a token
    per word (and space) there rather than a token per character."""
    torch = pytest.importorskip("torch")
    from toyrl.policies.tinylm import DEFAULT_CHECKPOINT
    if not DEFAULT_CHECKPOINT.exists():
        pytest.skip("no shipped TinyLM checkpoint")
    words = set(torch.load(DEFAULT_CHECKPOINT, map_location="cpu", weights_only=True)["words"])
    pieces = {w for s in CORE.noise_pool for w in re.findall(r"[A-Za-z]{2,}", s)}
    assert pieces and pieces <= words, pieces - words


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
