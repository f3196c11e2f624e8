"""The fictional knowledge base of MockSearch: entities and facts, questions, documents, distractors.

The KB (``data/kb/kb.json``) is invented -- countries, cities, people, rivers, years -- so no
pretrained model knows the answers. ``build_kb(0)`` regenerates the shipped file:
``python -m toyrl.envs.kb --write-kb data/kb/kb.json``.

A search result is a *passage* (``draw_distractors`` + ``passage_pieces``): the searched entity's
document (a title and one sentence per fact, in order) with distractor sentences from the KB's
``noise`` inserted at random places, as many as it takes to reach ``passage_words`` words. The
distractors are subject x predicate sentences that never name a KB value, so a passage holds the
answer exactly when the document does; their words are all words of the shipped TinyLM vocabulary,
so a language-model policy reads a passage one word per token.

Dimension legend: N copies, E entities, P distractor sentences in the pool, K distractor slots.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Optional, Union

import numpy as np

__all__ = ["DEFAULT_KB_PATH", "RELATIONS", "FACT_TEXT", "ASK_TEXT", "HOP_TEXT", "build_kb", "load_kb",
           "documents", "n_words", "max_distractors", "draw_distractors", "passage_pieces", "main"]

DEFAULT_KB_PATH = Path(__file__).resolve().parents[2] / "data" / "kb" / "kb.json"

_SYL = ("val", "dor", "bren", "kes", "tar", "lun", "vel", "ost", "rim", "quel", "zan", "mir", "thal",
        "gor", "cad", "fen", "ith", "orv", "sel", "bar", "nok", "ul", "ver", "ash", "pol", "dra", "hem",
        "jor", "wyn", "ska")
_END = {"country": ("ia", "ora", "esh", "and"), "city": ("mont", "wick", "holm", "gard", "by", "port"),
        "river": ("a", "en", "is", "ur"), "language": ("i", "ic", "ese"), "first": ("a", "o", "e", "in"),
        "last": ("ov", "er", "is", "an")}
_OCCUPATIONS = ("cartographer", "glassblower", "beekeeper", "ferryman", "archivist", "clockmaker",
                "weaver", "astronomer")
# distractors: every subject with every predicate (160 sentences of 6-12 words, no KB value in any)
_NOISE_SUBJECTS = ("Old travel guides", "Local historians", "Popular songs", "Regional almanacs",
                   "Several merchants", "Anonymous diaries", "The people of the region", "Old songs",
                   "Local merchants", "Several historians")
_NOISE_PREDICATES = ("describe the winters as long and grey.", "mention a bridge that no longer stands.",
                     "disagree about the oldest road in the region.", "praise the bread sold at markets.",
                     "record a great flood in a forgotten spring.", "speak of a lighthouse painted blue.",
                     "record ice on the river in the grey winters.", "mention a road that lies far in the region.",
                     "describe a lighthouse that no longer stands.", "praise the people that sold bread on the bridge.",
                     "disagree about where the oldest bridge stands.", "record that the road was painted blue.",
                     "mention a great lighthouse at the start of the road.", "speak of markets that lie on the river.",
                     "describe the spring flood as great.", "disagree about which bridge is the oldest.")
#: (attribute, fact sentence with x = the entity and v = the value, question about the last entity of a chain)
RELATIONS = (
    ("capital", "The capital of {x} is {v}.", "What is the capital of {}?"),
    ("language", "The people of {x} speak {v}.", "What language is spoken in {}?"),
    ("founded", "{x} was founded in {v}.", "In what year was {} founded?"),
    ("country", "{x} is a city in {v}.", "In which country is {}?"),
    ("mayor", "The mayor of {x} is {v}.", "Who is the mayor of {}?"),
    ("river", "{x} lies on the river {v}.", "On which river does {} lie?"),
    ("occupation", "{x} works as a {v}.", "What is the occupation of {}?"),
    ("born", "{x} was born in the year {v}.", "In what year was {} born?"),
    ("birthplace", "{x} was born in the city of {v}.", "In which city was {} born?"),
    ("source", "The river {x} rises in {v}.", "In which country does {} rise?"),
    ("length", "The river {x} is {v} kilometres long.", "How many kilometres long is {}?"),
)
FACT_TEXT = {a: fact for a, fact, _ in RELATIONS}
ASK_TEXT = {a: ask for a, _, ask in RELATIONS}
#: entity-valued relations that chain hops: noun phrase of the target
HOP_TEXT = {"capital": "the capital of {}", "mayor": "the mayor of {}", "birthplace": "the birthplace of {}",
            "source": "the country where {} rises", "country": "the country that {} is in"}


def build_kb(seed: int = 0, *, n_countries: int = 6, per_hop: int = 24) -> dict:
    """Generate the fictional KB deterministically: entities (name, type, facts), distractors, questions.

    6 countries with 2 cities each (one the capital), a mayor per city plus 6 other people, 5 rivers;
    questions are every 1-3 hop relation chain whose answer is not in the chain, ``per_hop`` of each.
    """
    rng = np.random.default_rng(seed)
    used: set[str] = set()

    def word(kind: str, n_syl: int) -> str:
        while True:
            w = "".join(_SYL[j] for j in rng.integers(len(_SYL), size=n_syl))
            w = (w + _END[kind][rng.integers(len(_END[kind]))]).capitalize()
            if w.lower() not in used:
                used.add(w.lower())
                return w

    C, n_rivers, n_people = n_countries, 5, 3 * n_countries
    countries = [word("country", 2) for _ in range(C)]
    cities = [word("city", 1 + int(rng.integers(2))) for _ in range(2 * C)]
    people = [word("first", 1) + " " + word("last", 2) for _ in range(n_people)]
    rivers = [word("river", 2) for _ in range(n_rivers)]
    languages = [word("language", 2) for _ in range(C)]
    years = [str(int(y)) for y in rng.choice(np.arange(1200, 1900), size=C + 2 * C + n_people, replace=False)]
    lengths = [str(int(x)) for x in rng.choice(np.arange(100, 1000), size=n_rivers, replace=False)]
    mayor_of = rng.permutation(n_people)[:2 * C]                     # city j -> person
    ents = []
    for c in range(C):
        ents.append({"name": countries[c], "type": "country", "facts": {
            "capital": cities[2 * c + int(rng.integers(2))], "language": languages[c], "founded": years[c]}})
    for j in range(2 * C):
        ents.append({"name": cities[j], "type": "city", "facts": {
            "country": countries[j // 2], "mayor": people[mayor_of[j]],
            "river": rivers[rng.integers(n_rivers)], "founded": years[C + j]}})
    home = {int(p): j for j, p in enumerate(mayor_of)}
    for p in range(n_people):
        birth = int(rng.integers(2 * C - 1))
        birth += int(p in home and birth >= home[p])                   # a mayor is born elsewhere
        ents.append({"name": people[p], "type": "person", "facts": {
            "occupation": _OCCUPATIONS[rng.integers(len(_OCCUPATIONS))], "born": years[3 * C + p],
            "birthplace": cities[birth]}})
    for r in range(n_rivers):
        ents.append({"name": rivers[r], "type": "river", "facts": {
            "source": countries[rng.integers(C)], "length": lengths[r]}})
    noise = [f"{s} {p}" for s in _NOISE_SUBJECTS for p in _NOISE_PREDICATES]
    return {"name": "toyrl fictional KB", "seed": int(seed), "entities": ents, "noise": noise,
            "questions": _questions(ents, rng, per_hop)}


def _questions(ents: list[dict], rng: np.random.Generator, per_hop: int) -> list[dict]:
    """Every chain e0 -r1-> e1 ... -> e_{k-1} (k <= 3) asking a final attribute, ``per_hop`` per k."""
    by_name = {e["name"]: e for e in ents}
    phrase = lambda e: f"the river {e['name']}" if e["type"] == "river" else e["name"]   # noqa: E731
    found: dict[int, list[dict]] = {1: [], 2: [], 3: []}

    def walk(chain: list[dict], np_text: str):
        last = chain[-1]
        for attr, value in last["facts"].items():
            names = [e["name"] for e in chain]
            if value not in names:
                found[len(chain)].append({"text": ASK_TEXT[attr].format(np_text), "hops": len(chain),
                                          "chain": names, "answer": value})
            if attr in HOP_TEXT and len(chain) < 3 and value not in names:
                walk(chain + [by_name[value]], HOP_TEXT[attr].format(np_text))

    for e in ents:
        walk([e], phrase(e))
    out = []
    for k in (1, 2, 3):
        pick = sorted(rng.permutation(len(found[k]))[:per_hop])
        out += [found[k][int(j)] for j in pick]
    return [{"id": i, **q} for i, q in enumerate(out)]


def load_kb(kb: Union[None, dict, str, Path] = None) -> dict:
    """The KB as a dict: ``kb`` itself, a JSON file, or the shipped file (``build_kb(0)`` if missing)."""
    if isinstance(kb, dict):
        return kb
    path = Path(kb) if kb is not None else DEFAULT_KB_PATH
    if kb is None and not path.exists():
        return build_kb(0)
    return json.loads(path.read_text())


# ---- passages: a document with distractors -----------------------------------------------------
def documents(kb: dict) -> list[list[str]]:
    """Each entity's document: a title, then one sentence per fact in KB order.

    Example: ["About Valby, a city.", "Valby is a city in Brenvalia.", "The mayor of Valby is ...", ...].
    """
    return [[f"About {e['name']}, a {e['type']}."] + [FACT_TEXT[a].format(x=e["name"], v=v)
                                                        for a, v in e["facts"].items()] for e in kb["entities"]]


def n_words(sentences: list[str]) -> np.ndarray:
    """Whitespace words of each sentence (the unit of ``passage_words``): ["A b.", "C d e."] -> [2, 3]."""
    return np.array([len(s.split()) for s in sentences], np.int64)


def max_distractors(doc_words: np.ndarray, noise_words: np.ndarray, passage_words: int) -> int:
    """K: the most distractors any passage can need (shortest document padded with the shortest
    distractors); raises ValueError if even the whole pool cannot fill the shortest document.

    Example: doc_words [3, 5], noise_words [2, 4, 2], passage_words 6 -> 3 + 2 + 2 >= 6 -> K = 2.
    """
    need = passage_words - int(doc_words.min())
    if need <= 0:
        return 0
    total = np.cumsum(np.sort(noise_words))                                     # (P,)
    if total[-1] < need:
        raise ValueError(f"passage_words must be <= {int(doc_words.min() + total[-1])} (the shortest document "
                         f"with every distractor), got {passage_words}")
    return int(np.searchsorted(total, need)) + 1


def draw_distractors(rng: np.random.Generator, doc_len: np.ndarray, doc_words: np.ndarray,
                     noise_words: np.ndarray, K: int, *, passage_words: Optional[int] = None,
                     shuffle: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Distractors of N passages: ids (N, K) (-1 = unused slot) and insertion points (N, K).

    Each row takes distractors from a fresh random order of the pool until its document
    (``doc_words`` words, ``doc_len`` sentences) reaches ``passage_words`` words -- so a passage has
    ``passage_words <= words < passage_words + max(noise_words)`` unless the document alone is
    longer -- or, with ``passage_words=None``, exactly K distractors. Distractor k goes before
    document sentence ``pos[k]`` in 1..doc_len (after the title; ``doc_len`` = at the end; all at
    the end without ``shuffle``). The draws do not depend on the lengths (same ``rng`` calls for
    every N-row input), so a copy's random stream does not depend on what it searched.

    Example: doc_words [30], noise_words [10, 10, 10], passage_words 45, K 2 -> 2 distractors (30 + 20).
    """
    N, P = len(doc_words), len(noise_words)
    order = np.argsort(rng.random((N, P)), 1)                                   # (N, P) random order of the pool
    u = rng.random((N, K))                                                      # (N, K) floats: a fixed draw count
    pos = 1 + (u * doc_len[:, None]).astype(np.int64) if shuffle else np.repeat(doc_len[:, None], K, 1)
    ids = order[:, :K].copy()                                                   # (N, K)
    if passage_words is not None and K:
        words = doc_words[:, None] + np.cumsum(noise_words[ids], 1)             # (N, K) words with k+1 distractors
        count = np.where(doc_words >= passage_words, 0, (words < passage_words).sum(1) + 1)   # (N,)
        ids[np.arange(K)[None, :] >= count[:, None]] = -1
    return ids, pos


def passage_pieces(doc_len: int, ids: np.ndarray, pos: np.ndarray) -> list[tuple[bool, int]]:
    """The order of one passage: (is_distractor, index) per sentence, document sentences in order
    and distractor ``ids[k]`` (skipping -1) before document sentence ``pos[k]``.

    Example: doc_len 2, ids [7, -1, 3], pos [1, 1, 2] -> [(F, 0), (T, 7), (F, 1), (T, 3)].
    """
    out = []
    for j in range(doc_len + 1):
        out += [(True, int(n)) for n, p in zip(ids, pos) if p == j and n >= 0]
        out += [(False, j)] if j < doc_len else []
    return out


def main(argv: Optional[list[str]] = None) -> None:
    p = argparse.ArgumentParser(description="Write the MockSearch knowledge base.")
    p.add_argument("--write-kb", metavar="PATH", required=True, help="output JSON file")
    p.add_argument("--seed", type=int, default=0, help="generator seed (the shipped KB uses 0)")
    args = p.parse_args(argv)
    path = Path(args.write_kb)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(build_kb(args.seed), indent=1) + "\n")
    print(f"wrote {path} ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
