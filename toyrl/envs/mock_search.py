"""MockSearch: multi-hop question answering with a search tool over a small fictional knowledge base.

The "environment tokens" environment: every ``search[X]`` returns a long passage -- X's document
buried among distractor sentences, about 200 words by default -- so most of a rollout's tokens come
from the environment, not the policy, as with real tool output (Search-R1, arXiv 2503.09516, masks
them from the loss). Questions need 1-3 lookups ("Who is the mayor of the capital of Valdoria?"),
which gives checkable turn signals (did this turn retrieve the answer? how much of the lookup chain
is retrieved? -- Wei et al., arXiv 2505.11821), a privileged reference solution for critics
(SWEET-RL, arXiv 2503.15478) and order-invariant anchor states for GiGPO (arXiv 2505.10978): the
state is (question, set of entities retrieved), the noise is not.

The knowledge base and the passage construction live in ``kb.py``, the token view (what the toy
transformer reads) in ``search_tokens.py``; their public names are re-exported here.

Dimension legend: N copies, E entities, V answer values, P distractors in the pool, K distractor
slots per search, Q questions.
"""
from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Optional, Union

import numpy as np
from gymnasium import spaces

from .core import VOID, BatchedCore, CoreEnv, mix64, parse_bracket_action
from .kb import (ASK_TEXT, DEFAULT_KB_PATH, FACT_TEXT, HOP_TEXT, RELATIONS, build_kb, documents, draw_distractors,
                 load_kb, main, max_distractors, n_words, passage_pieces)
from .search_tokens import PAD, TOKEN_VIEWS, UNK, VOID_TEXT, SearchTokenView, tokenize

__all__ = ["SearchCore", "MockSearchEnv", "build_kb", "load_kb", "oracle_actions", "DEFAULT_KB_PATH",
           "PAD", "UNK", "tokenize", "TOKEN_VIEWS", "RELATIONS", "FACT_TEXT", "ASK_TEXT", "HOP_TEXT"]


def _norm(s: str) -> str:
    """Case- and whitespace-insensitive form of a name: "  Ada   KORVIN " -> "ada korvin"."""
    return " ".join(s.lower().split())


# ---- the batched core ---------------------------------------------------------------------------
class SearchCore(SearchTokenView, BatchedCore):
    """N MockSearch copies stepped with numpy; see ``MockSearchEnv`` for the rules and arguments.

    Actions: ``0..E-1`` = ``search[entities[a]]``, ``E..E+V-1`` = ``answer[values[a-E]]``, ``VOID``.
    State arrays (N, ...): ``qid``, ``seen`` (N, E) bool retrieved set, ``last`` entity of the shown
    result (-1 none), ``noise`` / ``noise_pos`` (N, K) distractor ids (-1 unused) and insertion points
    of that result, ``answered`` value id (-1 none), ``last_void``, ``turn``, ``done``. K is
    ``noise_sentences``: the given count, or the most distractors a ``passage_words`` passage can need.
    """

    def __init__(self, num_envs: int, *, kb: Union[None, dict, str, Path] = None, max_turns: int = 5,
                 passage_words: int = 200, noise_sentences: Optional[int] = None, shuffle: bool = True,
                 token_view: str = "sentence", search_cost: float = 0.0, void_penalty: float = 0.0,
                 hops: tuple[int, ...] = (1, 2, 3), seed: Optional[int] = None):
        super().__init__(num_envs, seed)
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        if token_view not in TOKEN_VIEWS:
            raise ValueError(f"token_view must be one of {TOKEN_VIEWS}, got {token_view!r}")
        self.kb = load_kb(kb)
        self._index_kb()
        self.max_turns, self.shuffle, self.token_view = int(max_turns), bool(shuffle), token_view
        self.search_cost, self.void_penalty = float(search_cost), float(void_penalty)
        P = len(self.noise_pool)
        if noise_sentences is None:
            if passage_words < 0:
                raise ValueError(f"passage_words must be >= 0, got {passage_words}")
            self.passage_words = int(passage_words)
            self.noise_sentences = max_distractors(self._doc_words, self._noise_words, self.passage_words)
        else:
            if not 0 <= noise_sentences <= P:
                raise ValueError(f"noise_sentences must lie in [0, {P}], got {noise_sentences}")
            self.passage_words, self.noise_sentences = None, int(noise_sentences)
        self.hops = tuple(int(h) for h in hops)
        self._task_pool = np.flatnonzero(np.isin(self.q_hops, self.hops))
        if len(self._task_pool) == 0:
            raise ValueError(f"no question has hops in {self.hops}")
        self.kb_hash = zlib.crc32(json.dumps(self.kb, sort_keys=True).encode())
        self._build_vocab()

    def _index_kb(self) -> None:
        """Entity and value ids, documents and their word counts, questions as id arrays."""
        ents, qs = self.kb["entities"], self.kb["questions"]
        self.entities = [e["name"] for e in ents]                                  # E
        self.values = sorted({e["name"] for e in ents} | {v for e in ents for v in e["facts"].values()})
        self.noise_pool = list(self.kb["noise"])                                   # P
        E, V, Q = len(self.entities), len(self.values), len(qs)
        self.n_entities, self.n_values, self.n_questions = E, V, Q
        self.n_actions, self.task_dim = E + V, 1
        self._ent_id = {_norm(n): i for i, n in enumerate(self.entities)}
        self._val_id = {_norm(v): i for i, v in enumerate(self.values)}
        if len(self._ent_id) != E or len(self._val_id) != V:
            raise ValueError("kb: entity names and values must be distinct ignoring case and whitespace")
        # documents: title + one sentence per fact; doc_has[e, v] = value v appears in e's document
        self.docs = documents(self.kb)
        self._doc_len = np.array([len(d) for d in self.docs], np.int64)             # (E,) sentences
        self._doc_words = np.array([n_words(d).sum() for d in self.docs], np.int64)  # (E,) words
        self._noise_words = n_words(self.noise_pool)                                # (P,) words
        self.doc_has = np.zeros((E, V), bool)
        for i, e in enumerate(ents):
            for v in [e["name"], *e["facts"].values()]:
                self.doc_has[i, self._val_id[_norm(v)]] = True
        # questions: chain mask (Q, E), hop count, answer value id
        self.questions = [q["text"] for q in qs]
        self.q_chain = [[self._ent_id[_norm(n)] for n in q["chain"]] for q in qs]
        self.q_hops = np.array([len(c) for c in self.q_chain], np.int64)             # (Q,)
        self.q_answer = np.array([self._val_id[_norm(q["answer"])] for q in qs], np.int64)   # (Q,)
        self.chain_mask = np.zeros((Q, E), bool)
        for q, c in enumerate(self.q_chain):
            self.chain_mask[q, c] = True

    # ---- tasks and dynamics ------------------------------------------------------------------
    def sample_tasks(self, rng: np.random.Generator, n: int, hops: Optional[tuple[int, ...]] = None) -> np.ndarray:
        """n question ids (n, 1), uniform over questions with ``hops`` (default: the core's ``hops``)."""
        pool = self._task_pool if hops is None else np.flatnonzero(np.isin(self.q_hops, hops))
        return pool[rng.integers(len(pool), size=n)].astype(np.int64)[:, None]       # (n, 1)

    def reset(self, tasks: np.ndarray) -> np.ndarray:
        qid = self._check_tasks(tasks)[:, 0]
        if qid.min() < 0 or qid.max() >= self.n_questions:
            raise ValueError(f"tasks must be question ids in [0, {self.n_questions}), got {qid}")
        N, E, K = self.num_envs, self.n_entities, self.noise_sentences
        self.state = self.episode_state(
            qid=qid.copy(),                                      # (N,)
            seen=np.zeros((N, E), bool),                         # (N, E) entities retrieved so far
            last=np.full(N, -1, np.int64),                       # entity of the shown result
            noise=np.full((N, K), -1, np.int64),                 # (N, K) distractor sentence ids, -1 unused
            noise_pos=np.zeros((N, K), np.int64),                # (N, K) inserted before doc sentence j
            answered=np.full(N, -1, np.int64),
            last_void=np.zeros(N, bool))
        return self.obs()

    def step(self, actions):
        a = self._check_actions(actions)
        st, E = self.state, self.n_entities
        live = ~st["done"]
        void = live & (a == VOID)
        search = live & (a >= 0) & (a < E)
        answer = live & (a >= E)
        ent = np.where(search, a, 0)                                                   # (N,)
        # distractors of this turn's passage, drawn for every copy so the stream does not depend on actions
        noise, pos = draw_distractors(self.np_random, self._doc_len[ent], self._doc_words[ent], self._noise_words,
                                      self.noise_sentences, passage_words=self.passage_words, shuffle=self.shuffle)
        before = self.hop_progress()
        rows = np.flatnonzero(search)
        st["seen"][rows, ent[rows]] = True
        st["last"] = np.where(search, a, st["last"])
        st["noise"] = np.where(search[:, None], noise, st["noise"])
        st["noise_pos"] = np.where(search[:, None], pos, st["noise_pos"])
        st["answered"] = np.where(answer, a - E, st["answered"])
        st["last_void"] = np.where(live, void, st["last_void"])
        truth = self.q_answer[st["qid"]]                                               # (N,)
        success = answer & (a - E == truth)
        terminated = answer
        truncated = self.end_turn(live, terminated)
        reward = success.astype(np.float64) - self.search_cost * search - self.void_penalty * void
        progress = self.hop_progress()
        info = {"void": void, "success": success, "searched": search,
                "contains_answer": search & self.doc_has[ent, truth],
                "hop_progress": progress, "hop_gain": progress - before}
        return self.obs(), reward, terminated, truncated, info

    def hop_progress(self) -> np.ndarray:
        """(N,) fraction of the question's lookup chain retrieved so far (order-free)."""
        st = self.state
        return (st["seen"] & self.chain_mask[st["qid"]]).sum(1) / self.q_hops[st["qid"]]

    def obs(self) -> np.ndarray:
        """(N, 3 + E) int64: question id, last searched entity (E = none), turn, retrieved flags."""
        st = self.state
        last = np.where(st["last"] < 0, self.n_entities, st["last"])
        return np.concatenate([np.stack([st["qid"], last, st["turn"]], 1), st["seen"].astype(np.int64)], 1)

    def state_keys(self) -> np.ndarray:
        """(N,) mix64 of (KB, question, retrieved set as 64-bit words): order, turn and noise free."""
        seen = self.state["seen"]
        packed = np.packbits(seen, axis=1, bitorder="little")                          # (N, ceil(E/8))
        packed = np.pad(packed, ((0, 0), (0, -packed.shape[1] % 8)))
        words = packed.view("<u8")                                                     # (N, W)
        return mix64(np.full(self.num_envs, self.kb_hash), self.state["qid"], *words.T)


    # ---- text codec --------------------------------------------------------------------------
    def passage(self, i: int = 0) -> list[tuple[bool, int]]:
        """Copy i's shown passage as (is_distractor, index) per sentence ([] before any search):
        index into ``noise_pool`` for a distractor, into ``docs[last]`` for a document sentence."""
        st = self.state
        e = int(st["last"][i])
        return [] if e < 0 else passage_pieces(int(self._doc_len[e]), st["noise"][i], st["noise_pos"][i])

    def result_text(self, i: int = 0) -> str:
        """The shown tool output of copy i: its last document among the distractors ("" if none)."""
        doc = self.docs[int(self.state["last"][i])]
        return " ".join(self.noise_pool[j] if noisy else doc[j] for noisy, j in self.passage(i))

    def render_text(self, i: int = 0) -> str:
        """The current observation (not the history: the rollout keeps that): question, retrieved set,
        the most recent tool output with its noise, the turn. Retrieved entities are listed in KB
        order, so equal states (``state_keys``) differ in text only by the last result and turn."""
        st = self.state
        seen = [self.entities[e] for e in np.flatnonzero(st["seen"][i])]
        lines = [f"Question: {self.question(i)}",
                 "Searched so far: " + (", ".join(seen) + "." if seen else "nothing yet.")]
        if st["last"][i] >= 0:
            lines.append(f"{self._result_head(i)} {self.result_text(i)}")
        if st["last_void"][i]:
            lines.append(VOID_TEXT)
        if st["answered"][i] >= 0:
            lines.append(f"You answered: {self.values[int(st['answered'][i])]}.")
        lines.append(f"Turn {int(st['turn'][i])} of {self.max_turns}. Reply with search[name] or answer[value].")
        return "\n".join(lines)

    def _result_head(self, i: int) -> str:
        return f"Result of {self.action_text(int(self.state['last'][i]))}:"

    def parse_action(self, text: str, i: int = 0) -> Optional[int]:
        """``search[<known entity>]`` -> its id, ``answer[<known value>]`` -> E + value id (case- and
        whitespace-insensitive); anything else -> None, a void turn. Searching an entity the KB does
        not hold is possible in text but not in the action space, so it is a void turn too."""
        got = parse_bracket_action(text)
        if got is None:
            return None
        name, arg = got
        if name == "search":
            return self._ent_id.get(_norm(arg))
        if name == "answer":
            v = self._val_id.get(_norm(arg))
            return None if v is None else self.n_entities + v
        return None

    def action_text(self, action: int, i: int = 0) -> str:
        a = int(action)
        if not 0 <= a < self.n_actions:
            raise ValueError(f"action must lie in [0, {self.n_actions}), got {a}")
        if a < self.n_entities:
            return f"search[{self.entities[a]}]"
        return f"answer[{self.values[a - self.n_entities]}]"

    # ---- privileged information (for critics, oracles, demonstrations) -----------------------
    def question(self, i: int = 0) -> str:
        return self.questions[int(self.state["qid"][i])]

    def chain(self, i: int = 0) -> list[str]:
        """Names of the entities to look up, in order."""
        return [self.entities[e] for e in self.q_chain[int(self.state["qid"][i])]]

    def answer(self, i: int = 0) -> str:
        return self.values[int(self.q_answer[self.state["qid"][i]])]

    def answer_action(self, i: int = 0) -> int:
        return self.n_entities + int(self.q_answer[self.state["qid"][i]])

    def reference_solution(self, i: int = 0) -> list[int]:
        """Oracle actions from the start: search each chain entity in order, then answer (hops + 1)."""
        return list(self.q_chain[int(self.state["qid"][i])]) + [self.answer_action(i)]

    def privileged(self, i: int = 0) -> dict:
        """Training-time information the policy never sees (SWEET-RL's critic input)."""
        ref = self.reference_solution(i)
        return {"question": self.question(i), "chain": self.chain(i), "answer": self.answer(i),
                "reference_solution": ref, "reference_text": " ".join(self.action_text(a) for a in ref)}


def oracle_actions(core: SearchCore, i: int = 0) -> list[int]:
    """Oracle plan from copy i's current state: search the chain entities not yet retrieved, then answer."""
    todo = [e for e in core.q_chain[int(core.state["qid"][i])] if not core.state["seen"][i, e]]
    return todo + [core.answer_action(i)]


class MockSearchEnv(CoreEnv):
    """Answer a 1-3 hop question about a fictional world by searching its knowledge base.

    ## Description
    A question such as "Who is the mayor of the capital of Valdoria?" is drawn from the KB
    (``data/kb/kb.json``: countries, cities, people, rivers, all invented). Each ``search[X]`` shows
    a passage: X's document (a title, then its facts in order) with distractor sentences from the
    KB's noise inserted at random places (``self.np_random``), about ``passage_words`` words in all,
    so the fact that matters sits at a different place each time. The agent answers when ready.

    ## Action Space
    ``Discrete(E + V)``: ``a < E`` is ``search[entities[a]]``, ``a >= E`` is ``answer[values[a - E]]``.
    Text form via ``parse_action`` / ``action_text``; text that names no known entity or value
    (including a search for an entity the KB lacks) parses to None, and ``step(None)`` is a void turn:
    nothing changes, the turn counts and costs ``void_penalty``.

    ## Observation Space
    ``MultiDiscrete([Q, E + 1, max_turns + 1] + [2] * E)``: question id, last searched entity (E if
    none yet), turn, then one retrieved flag per entity. ``render_text()`` is the text observation
    (question, retrieved set, latest passage, turn); ``core.obs_tokens(0)`` the latest passage as ids
    over ``core.vocab`` (``token_view``).

    ## Rewards
    +1 for answering the ground truth, 0 for a wrong answer; ``-search_cost`` per search and
    ``-void_penalty`` per void turn. ``info``: ``success``, ``void``, ``searched``, ``contains_answer``
    (this turn's passage holds the answer: its document does, distractors never name a KB value),
    ``hop_progress`` (fraction of the lookup chain retrieved so far), ``hop_gain`` (its increase this
    turn), ``state_key``.

    ## Episode End
    Terminated on any answer; truncated after ``max_turns`` turns (default 5; 3 hops need 4).

    ## Arguments
    - ``kb=None``: dict or JSON path; default the shipped KB.
    - ``max_turns=5``, ``search_cost=0.0``, ``void_penalty=0.0``, ``hops=(1, 2, 3)`` (questions drawn).
    - ``passage_words=200``: distractors are added until a passage has at least this many words
      (``passage_words <= words < passage_words + 15``, the longest distractor; a longer document
      comes bare); the documents hold 17-28 words, so ``passage_words=40`` is a short setting and 0 the bare document.
    - ``noise_sentences=None``: an int inserts exactly that many distractors instead (0 = the bare
      document; 4 = the passages of earlier releases); ``passage_words`` is then unused.
    - ``shuffle=True``: distractors at random places after the title (False: all after the document).
    - ``token_view="sentence"``: the toy view ``obs_tokens``: ``"word"`` (a token per word: ~230
      tokens for a 200-word passage, the length of real tool output) or ``"sentence"`` (a token per
      distractor sentence, the document word by word: ~55 tokens). ``"sentence"`` is the default
      because the word view makes a 5-turn trajectory ~1200 tokens, past the toy transformer's
      default context and slow to train on two CPU cores.
    ``reset(options={"task": [qid]})`` fixes the question.

    ## Version History
    - v0: first version; search results became ~200-word passages (``passage_words``) with 160
      distractor sentences in the KB (earlier: 4 of 36 distractors, ``noise_sentences=4``).
    """

    core_cls = SearchCore

    def __init__(self, render_mode: Optional[str] = None, **kwargs):
        super().__init__(render_mode, **kwargs)
        c = self.core
        nvec = [c.n_questions, c.n_entities + 1, c.max_turns + 1] + [2] * c.n_entities
        self.observation_space = spaces.MultiDiscrete(np.array(nvec, np.int64))
        self.action_space = spaces.Discrete(c.n_actions)

    def reference_solution(self) -> list[int]:
        return self.core.reference_solution(0)

    def answer(self) -> str:
        return self.core.answer(0)


if __name__ == "__main__":
    main()
