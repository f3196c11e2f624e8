"""The text codec: env text in, free text out, parsed like a real LLM agent's reply.

Dimension legend: B rollouts, T flat positions, n rows still playing, M new tokens per turn.

A language-model policy reads the env's ``render_text`` and writes text; ``core.parse_action``
reads the reply, and text it cannot read is a void turn (``VOID``), exactly as with a real LLM.
The codec is the same four-method interface as ``toyrl.rollout.ToyCodec``, so the trainer,
estimators and objectives run unchanged:

    prompt(core, i)   = head + text(first observation) + to_assistant          (token ids)
    observe(core, i)  = to_user + text(new observation) + to_assistant         (env tokens, masked)
    policy turn       = free text, ending at a token that contains a stop string ("]") or EOS
    parse             = core.parse_action(decode(turn), i), None -> VOID

The four template strings are chat-style: ``head`` / ``to_assistant`` / ``to_user`` wrap the user
and assistant turns (a plain "User: ... / Assistant:" format, a compact "> " prompt for TinyLM, or
a Hugging Face chat template, see ``toyrl.policies.hf``). ``render="compact"`` keeps only what is
new in an observation (GridWorld: the map with the agent on it; MockSearch: the question, then
only the newest tool output), which keeps contexts short enough for a CPU.

``WordTokenizer`` is TinyLM's tokenizer: whole words of a fixed vocabulary (from the envs' own
texts) as single tokens, every other piece spelled out in characters, so every string round-trips.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch

from ..envs.core import VOID, BatchedCore

__all__ = ["WordTokenizer", "TextCodec", "compact_text", "turn_texts", "TEMPLATES"]

_PIECES = re.compile(r"[A-Za-z]+|\d+|\s|[^A-Za-z\d\s]")
_CHARS = [chr(c) for c in range(32, 127)] + ["\n"]

# chat templates as (head, to_assistant, to_user): prompt = head + U + to_assistant,
# each observation = to_user + O + to_assistant
TEMPLATES = {
    "compact": ("", "\n> ", "\n"),
    "plain": ("User: ", "\nAssistant: ", "\nUser: "),
}


class WordTokenizer:
    """Words of a fixed vocabulary as one token each, everything else as characters.

    ids: 0 <pad>, 1 <bos>, 2 <eos>, 3 <unk>, then the 96 printable characters and newline, then words.
    Example: with the word "move" known, "move[up]" -> ["move", "[", "u", "p", "]"] and back.
    """

    SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")

    def __init__(self, words: Sequence[str] = ()):
        extra = [w for w in dict.fromkeys(words) if len(w) > 1]
        self.vocab = list(self.SPECIALS) + _CHARS + extra
        self._id = {t: i for i, t in enumerate(self.vocab)}
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = 0, 1, 2, 3

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    @property
    def words(self) -> list[str]:
        """The whole-word tokens (what ``WordTokenizer(words)`` needs to rebuild this tokenizer)."""
        return self.vocab[len(self.SPECIALS) + len(_CHARS):]

    @classmethod
    def from_corpus(cls, texts: Sequence[str], min_count: int = 1) -> "WordTokenizer":
        """Words (letter runs with a lower-case letter, digit runs) seen ``min_count`` times, in sorted
        order. All-capital runs (GridWorld map rows such as "SFFH") stay spelled out."""
        counts: dict[str, int] = {}
        for t in texts:
            for p in _PIECES.findall(t):
                if len(p) > 1 and (p.isdigit() or any(c.islower() for c in p)):
                    counts[p] = counts.get(p, 0) + 1
        return cls(sorted(w for w, c in counts.items() if c >= min_count))

    def encode(self, text: str) -> list[int]:
        out = []
        for p in _PIECES.findall(text):
            if p in self._id:
                out.append(self._id[p])
            else:
                out += [self._id.get(c, self.unk_id) for c in p]
        return out

    def decode(self, ids: Sequence[int], skip_special: bool = True) -> str:
        V = len(self.vocab)
        return "".join(self.vocab[i] for i in ids
                       if 0 <= i < V and not (skip_special and i < len(self.SPECIALS)))

    def id_texts(self) -> list[str]:
        """The text of every id (specials as empty strings), for finding stop tokens."""
        return ["" if i < len(self.SPECIALS) else t for i, t in enumerate(self.vocab)]


def compact_text(core: BatchedCore, i: int, first: bool) -> str:
    """What is new in copy i's ``render_text``: GridWorld the map rows (the agent is the "A");
    MockSearch the question first, then the newest tool output or the void notice; other envs the
    whole text. Example (GridWorld 4x4 start): "AFFF\\nFHFH\\nFFFH\\nHFFG"."""
    text = core.render_text(i)
    lines = text.split("\n")
    if text.startswith("Lake "):
        return "\n".join(lines[1:-1])
    if text.startswith("Question:"):
        if first:
            return lines[0]
        keep = [ln for ln in lines if ln.startswith("Your last reply")] or \
               [ln for ln in lines if ln.startswith("Result of")]
        return "\n".join(keep)
    return text


@dataclass
class TextCodec:
    """Text in, text out: the codec of TinyLM and of Hugging Face policies (see the module docstring)."""

    tokenizer: object
    """has encode(str) -> ids, decode(ids) -> str, vocab_size, pad_id, eos_id, bos_id (None if none), id_texts();
    optionally eos_ids (every id that ends a sequence, e.g. a chat model's end-of-turn and end-of-text)"""
    max_new: int = 8
    """most tokens of one reply (a reply that has not closed its action by then is parsed as is)"""
    render: str = "compact"
    """compact (what is new in each observation) | full (the env's whole render_text every turn)"""
    template: tuple = TEMPLATES["compact"]
    """(head, to_assistant, to_user) strings around user and assistant turns"""
    stop_strings: tuple = ("]",)
    """a token whose text contains one of these ends the reply (as does EOS)"""
    system: str = ""
    """text put before the first observation (an instruction for a real LLM)"""
    size: int = field(init=False)
    """vocabulary size of the policy (ids 0..size-1)"""

    def __post_init__(self):
        if self.render not in ("compact", "full"):
            raise ValueError(f"render must be compact or full, got {self.render!r}")
        self.size = int(self.tokenizer.vocab_size)
        self.PAD = int(self.tokenizer.pad_id)
        texts = self.tokenizer.id_texts()
        stops = [i for i, t in enumerate(texts) if any(s in t for s in self.stop_strings)]
        if self.tokenizer.eos_id is not None:
            stops.append(int(self.tokenizer.eos_id))
        stops += [int(i) for i in getattr(self.tokenizer, "eos_ids", ()) if 0 <= int(i) < self.size]
        self._stops = torch.tensor(sorted(set(stops)), dtype=torch.long)
        self._is_stop = np.zeros(self.size, bool)
        self._is_stop[self._stops.numpy()] = True
        self._enc_cache: dict[str, list[int]] = {}
        self._obs_ids = sorted({i for i in self.tokenizer.encode(self.template[2])       # word pieces of the
                                if len(texts[i].strip()) > 1 and any(c.isalpha() for c in texts[i])})   # user header

    def _encode(self, text: str) -> list[int]:
        ids = self._enc_cache.get(text)
        if ids is None:
            ids = self._enc_cache[text] = list(self.tokenizer.encode(text))
            if len(self._enc_cache) > 50000:
                self._enc_cache.clear()
        return ids

    def _text(self, core: BatchedCore, i: int, first: bool) -> str:
        return compact_text(core, i, first) if self.render == "compact" else core.render_text(i)

    # ---- the codec interface (as ToyCodec) -------------------------------------------------------
    def stop_tokens(self, device=None) -> torch.Tensor:
        """(S,) long: every id whose text holds a stop string, and EOS."""
        return self._stops.to(device)

    def allowed(self, device=None) -> None:
        """None: a language model samples from its whole vocabulary."""
        return None

    def grammar(self, constrain: bool = True, tti=None, device=None) -> None:
        """None: no turn grammar (a language model samples its whole vocabulary; ``constrain`` is moot)."""
        if tti is not None:
            raise ValueError("tti (the thinking intervention) needs the toy codec's END token; text policies have none")
        return None

    def obs_token_mask(self, tokens: torch.Tensor) -> torch.Tensor:
        """(B, T) bool: tokens that open the environment's turn (the word pieces, two or more characters
        with a letter, of the template's ``to_user`` text, e.g. a chat template's user header): a reply
        holding one writes the env's part. A header spelled in single characters marks nothing."""
        ids = torch.as_tensor(self._obs_ids, dtype=torch.long, device=tokens.device)
        return torch.isin(tokens, ids)

    def prompt(self, core: BatchedCore, i: int) -> list[int]:
        head, to_asst, _ = self.template
        bos = [] if self.tokenizer.bos_id is None else [int(self.tokenizer.bos_id)]
        return bos + self._encode(head + self.system + self._text(core, i, True) + to_asst)

    def observe(self, core: BatchedCore, i: int) -> list[int]:
        _, to_asst, to_user = self.template
        return self._encode(to_user + self._text(core, i, False) + to_asst)

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids))

    def parse(self, core: BatchedCore, rows: np.ndarray, gen: torch.Tensor, mask: torch.Tensor) -> np.ndarray:
        """Actions (n,): ``core.parse_action`` of each row's decoded reply, ``VOID`` where it returns None.
        Example (GridWorld): "move[down]" -> 1, "move[dow" -> VOID, "go south" -> VOID."""
        g, m = gen.cpu().numpy(), mask.cpu().numpy()
        out = np.full(len(rows), VOID, dtype=np.int64)
        for j, i in enumerate(rows):
            a = core.parse_action(self.decode(g[j][m[j]].tolist()), int(i))
            out[j] = VOID if a is None else a
        return out

    def summarize(self, gen: list[int]) -> list[int]:
        """A past reply in a summary context: kept whole (it is short)."""
        return list(gen)

    def reasoning_mask(self, tokens: torch.Tensor) -> torch.Tensor:
        """(B, T) bool: every non-stop token (AND it with ``policy_mask``): the reply's free text."""
        is_stop = torch.as_tensor(self._is_stop, device=tokens.device)
        return ~is_stop[tokens.clamp(0, self.size - 1)]

    # ---- demonstrations ---------------------------------------------------------------------------
    def action_ids(self, core: BatchedCore, action: int, i: int) -> list[int]:
        """The ids of the canonical reply of ``action`` (``core.action_text``); EOS alone for VOID. What the
        scripted expert (``toyrl.policies.scripted.ScriptedPolicy``) writes through a text codec."""
        if action == VOID:
            return [int(self.tokenizer.eos_id if self.tokenizer.eos_id is not None else self.PAD)]
        return self._encode(core.action_text(int(action), int(i)))


# ---- text-level diagnostics (the Echo Trap on real text) -------------------------------------------
def turn_texts(ro, codec: TextCodec) -> list[list[str]]:
    """The decoded reply of every turn of every episode of a Rollout: B lists of H_b strings."""
    return [[codec.decode(t.gen) for t in ep.turns] for ep in ro.episodes]
