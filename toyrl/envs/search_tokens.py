"""MockSearch's token view: the word vocabulary, and how a long passage becomes observation tokens.

What the toy transformer reads through ``toyrl.rollout.ToyCodec`` (``obs_vocab_size``,
``prompt_tokens``, ``obs_tokens``); language-model policies read ``render_text`` instead. Two views
of one passage (``SearchCore(token_view=...)``), both deterministic functions of the state:

- ``"word"``: every word and punctuation mark of the text, as ``render_text`` shows it: a passage
  of ~200 words is ~230 tokens, so observation tokens dominate a trajectory as real tool output does.
- ``"sentence"`` (default): the document's sentences word by word, each distractor sentence as one
  token (``vocab[id]`` is its text): ~55 tokens for the same passage. The fact a policy needs
  keeps its words and its varying place among the distractors; a trajectory stays short enough for
  the default toy transformer (context and step time: ``MockSearchEnv``'s Arguments).

Example (sentence view): "Result of search[Valby]: About Valby, a city. Old songs praise the bread
sold at markets. Valby is a city in ..." -> result of search [ valby ] : about valby , a city .
<Old songs praise ...> valby is a city in ...
"""
from __future__ import annotations

import re
from typing import Optional

import numpy as np

__all__ = ["PAD", "UNK", "TOKEN_VIEWS", "VOID_TEXT", "tokenize", "SearchTokenView"]

PAD, UNK = 0, 1
#: how a passage becomes observation tokens
TOKEN_VIEWS = ("sentence", "word")
VOID_TEXT = "Your last reply had no valid search[name] or answer[value], so nothing happened."
_UI_TEXT = ("Question: Searched so far: nothing yet. Result of search[x]: answer[x] You answered: "
            "Turn of Reply with name value, About a country city person river.")
_TOKEN = re.compile(r"[a-z0-9]+|[^\sa-z0-9]")


def tokenize(text: str) -> list[str]:
    """Lower-cased words, numbers and single punctuation marks: "search[Ada K.]" -> search [ ada k . ]."""
    return _TOKEN.findall(text.lower())


class SearchTokenView:
    """The token methods of ``SearchCore`` (a mixin over its ``docs``, ``noise_pool``, ``questions``,
    ``passage(i)``, ``render_text(i)``, ``token_view`` and state)."""

    def _build_vocab(self) -> None:
        """The token vocabulary: <pad>, <unk>, every word the env can print, then one token per
        distractor sentence (its text is its vocabulary entry, so ``decode`` reads back)."""
        corpus = [_UI_TEXT, VOID_TEXT, *self.noise_pool, *self.questions, *(s for d in self.docs for s in d),
                  *(self.action_text(a) for a in range(self.n_actions)), *map(str, range(self.max_turns + 1))]
        self.vocab = ["<pad>", "<unk>"] + sorted({t for s in corpus for t in tokenize(s)})
        self._tok_id = {t: i for i, t in enumerate(self.vocab)}
        self._noise0 = len(self.vocab)
        self.vocab += self.noise_pool

    def encode(self, text: str) -> list[int]:
        """Token ids of ``tokenize(text)`` in ``vocab`` (``UNK`` = 1 for unknown words)."""
        return [self._tok_id.get(t, UNK) for t in tokenize(text)]

    def decode(self, tokens) -> str:
        return " ".join(self.vocab[int(t)] for t in tokens if int(t) != PAD)

    @property
    def obs_vocab_size(self) -> int:
        """Words, then one token per distractor sentence; the same for both token views."""
        return len(self.vocab)

    def prompt_tokens(self, i: int = 0) -> list[int]:
        """The question as token ids: what a token policy reads before its first turn."""
        return self.encode(f"Question: {self.question(i)}")

    def obs_tokens(self, i: int = 0) -> list[int]:
        """What this turn brought, as token ids over ``vocab``: the tool output, or the note of a
        void turn (the rollout keeps the history; ``render_text`` is the whole current view).

        ``token_view="word"``: every word and punctuation mark of the text, as ``render_text`` shows
        it (a 200-word passage is ~230 tokens). ``"sentence"``: the document's sentences word by word,
        each distractor sentence as one token (``vocab[id]`` is its text), so the fact the policy
        needs keeps its words and its varying place while the passage costs ~50-60 tokens.
        """
        st = self.state
        if st["last_void"][i]:
            return self.encode(VOID_TEXT)
        if st["last"][i] < 0:
            return self.encode(self.render_text(i))
        if self.token_view == "word":
            return self.encode(f"{self._result_head(i)} {self.result_text(i)}")
        doc, out = self.docs[int(st["last"][i])], self.encode(self._result_head(i))
        for noisy, j in self.passage(i):
            out += [self._noise0 + j] if noisy else self.encode(doc[j])
        return out

    def obs_token_array(self, max_len: Optional[int] = None) -> np.ndarray:
        """(N, L) int64 token ids of every copy's observation, right-padded with ``PAD``; L is the
        longest observation or ``max_len`` (longer ones keep their last ``max_len`` tokens)."""
        toks = [self.obs_tokens(i) for i in range(self.num_envs)]
        L = max_len if max_len is not None else max(len(t) for t in toks)
        out = np.full((self.num_envs, L), PAD, np.int64)                              # (N, L)
        for i, t in enumerate(toks):
            t = t[-L:] if L else []
            out[i, :len(t)] = t
        return out
