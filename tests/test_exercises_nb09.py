"""The checkers of notebook 9: each correct form accepted, the plausible near-misses rejected."""
import numpy as np
import pytest

from toyrl.exercises import check
from toyrl.exercises.nb09 import REPLIES, VALID_CUT


def _void():
    from toyrl.envs import make_core
    core = make_core("gridworld", 1, map_name="4x4")
    return [core.parse_action(r) is None for r in REPLIES]


def test_void_accepts_bools_and_ints():
    want = _void()
    assert check("09.void", want) and check("09.void", [int(v) for v in want]) and check("09.void", np.array(want))


@pytest.mark.parametrize("flip", range(len(REPLIES)))
def test_void_rejects_any_one_wrong(flip):
    ans = _void()
    ans[flip] = not ans[flip]
    assert not check("09.void", ans)


def test_void_rejects_the_wrong_length():
    assert not check("09.void", _void()[:-1])


def test_template_accepts_the_pair_and_rejects_near_misses():
    from toyrl.diagnostics import text_template_stats
    h, mi = text_template_stats(["search[Valby]", "search[Osto Ulorvis]", "answer[archivist]", "answer[1842]"],
                                [0, 0, 1, 1])
    assert check("09.template", (h, mi)) and check("09.template", [float(h), float(mi)])
    assert not check("09.template", (mi, h)) or h == mi                    # swapped
    assert not check("09.template", (np.log(4), 0.0))                       # arguments not blanked
    assert not check("09.template", (h / np.log(2), mi / np.log(2)))        # bits


def _runs():
    from toyrl.viz.small_llm import load_small_llm
    return load_small_llm(["grid4x4_bc_grpo", "grid4x4_bc_grpo_nomask"])


def test_nomask_void_accepts_the_difference_in_any_numeric_form():
    runs = _runs()
    tail = lambda n: np.mean([r["void_turn_rate"] for r in runs[n][-5:]])   # noqa: E731
    want = tail("grid4x4_bc_grpo_nomask") - tail("grid4x4_bc_grpo")
    assert check("09.nomask_void", want) and check("09.nomask_void", np.float32(want).item())
    assert check("09.nomask_void", str(float(want)))


def test_nomask_void_rejects_near_misses():
    runs = _runs()
    tail = lambda n, k=5: np.mean([r["void_turn_rate"] for r in runs[n][-k:]])   # noqa: E731
    want = tail("grid4x4_bc_grpo_nomask") - tail("grid4x4_bc_grpo")
    for wrong in (-want, tail("grid4x4_bc_grpo_nomask"),                     # sign; unmasked alone
                  np.mean([r["void_turn_rate"] for r in runs["grid4x4_bc_grpo_nomask"]])
                  - np.mean([r["void_turn_rate"] for r in runs["grid4x4_bc_grpo"]]),   # whole run, not last 5
                  "many"):
        assert not check("09.nomask_void", wrong)


def test_pair_valid_counts_steps_below_the_cut():
    from toyrl.viz.small_llm import load_pair
    pair = load_pair()
    want = tuple(sum(r["format_valid_rate"] < VALID_CUT for r in pair[p]["rows"]) for p in ("tinylm", "smollm2"))
    assert want[0] > want[1]                                                  # the question has a contrast
    assert check("09.pair_valid", want) and check("09.pair_valid", list(want)) and check("09.pair_valid", np.array(want))
    lowest = tuple(min(r["format_valid_rate"] for r in pair[p]["rows"]) for p in ("tinylm", "smollm2"))
    at_most = tuple(sum(r["format_valid_rate"] <= VALID_CUT for r in pair[p]["rows"]) for p in ("tinylm", "smollm2"))
    for wrong in (want[::-1], lowest, (want[0] + 1, want[1]), 7):
        assert not check("09.pair_valid", wrong), wrong
    assert at_most == want or not check("09.pair_valid", at_most)
