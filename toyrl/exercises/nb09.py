"""Exercise checkers of notebook 9 (a small language-model policy)."""
from __future__ import annotations

import numpy as np

from . import exercise

REPLIES = ["move[down]", "move [down]", "Move[RIGHT]", "move[down", "go left: move[up] then move[left]", "down"]


def _parse_answers() -> list:
    from ..envs import make_core
    core = make_core("gridworld", 1, map_name="4x4")
    return [core.parse_action(r) is None for r in REPLIES]


@exercise("09.void")
def check_void(answer):
    """answer: one bool per reply of REPLIES, True where the turn is void."""
    want = _parse_answers()
    got = [bool(a) for a in answer]
    if len(got) != len(want):
        return False, f"give one True/False per reply ({len(want)} replies)"
    if got == want:
        return True, "a reply is void exactly when parse_action finds no `move[left|down|right|up]` in it"
    wrong = [REPLIES[i] for i in range(len(want)) if got[i] != want[i]]
    return False, (f"look again at {wrong!r}: the parser takes the *last* name[argument], ignores case, and "
                   "needs the bracket right after the name and a closing ]")


@exercise("09.template")
def check_template(answer):
    """answer: (H, MI) of text_template_stats for the replies and tasks given in the notebook."""
    from ..diagnostics import text_template_stats
    want = text_template_stats(["search[Valby]", "search[Osto Ulorvis]", "answer[archivist]", "answer[1842]"],
                               [0, 0, 1, 1])
    h, mi = (float(x) for x in answer)
    if np.allclose([h, mi], want, atol=1e-3):
        return True, f"H = {want[0]:.3f}, MI = {want[1]:.3f} nats: two templates, each tied to one task"
    return False, ("blank the bracket arguments first (search[_], answer[_]), then count templates overall "
                   "and within each task; MI = H(template) - H(template | task)")


VALID_CUT = 0.9
"""exercise 9.4: a step "keeps the format" when its format-valid rate is at least this"""


def _number(answer) -> float:
    v = float(answer)
    if not np.isfinite(v):
        raise ValueError("a finite number")
    return v


@exercise("09.nomask_void")
def check_nomask_void(answer):
    """answer: mean void_turn_rate over the last 5 steps of grid4x4_bc_grpo_nomask minus that of grid4x4_bc_grpo."""
    from ..viz.small_llm import load_small_llm
    runs = load_small_llm(["grid4x4_bc_grpo", "grid4x4_bc_grpo_nomask"])
    tail = lambda rows: float(np.mean([r["void_turn_rate"] for r in rows[-5:]]))   # noqa: E731
    want = tail(runs["grid4x4_bc_grpo_nomask"]) - tail(runs["grid4x4_bc_grpo"])
    got = _number(answer)
    if abs(got - want) < 1e-6:
        return True, (f"{want:+.3f}: trained on the map it reads, the policy starts writing map-like text, and the "
                      "parser finds no move in it")
    if abs(got + want) < 1e-6:
        return False, "the sign: unmasked minus masked"
    return False, "average `void_turn_rate` over rows[-5:] of each run (a list of dicts), then subtract"


@exercise("09.pair_valid")
def check_pair_valid(answer):
    """answer: (TinyLM's, SmolLM2's) number of RL steps of the stored pair runs with format_valid_rate < VALID_CUT."""
    from ..viz.small_llm import load_pair
    pair = load_pair()
    want = [sum(r["format_valid_rate"] < VALID_CUT for r in pair[p]["rows"]) for p in ("tinylm", "smollm2")]
    try:
        got = [float(a) for a in answer]
    except TypeError:
        return False, "answer with a pair (TinyLM's count, SmolLM2's count)"
    if got == want:
        return True, (f"TinyLM: {want[0]} of {len(pair['tinylm']['rows'])} steps below {VALID_CUT}, SmolLM2: "
                      f"{want[1]}: the warm start's format lasts only in the pretrained model")
    if got == want[::-1]:
        return False, "the order: TinyLM's count first, then SmolLM2's"
    return False, (f"count the rows whose r['format_valid_rate'] < {VALID_CUT} in pair['tinylm']['rows'] and "
                   "pair['smollm2']['rows']")
