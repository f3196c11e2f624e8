"""Notebook 02's follow-up views (``toyrl.viz.floor``) on hand-made stored runs."""
import matplotlib
import numpy as np
import pytest

from toyrl.viz.floor import floor_counts, kept_curves, plot_kept, record

matplotlib.use("Agg")


def _run(success):
    s = np.asarray(success, float)
    return {"success_rate": s, "reward_mean": s, "reward_std": np.full(len(s), 0.3), "grad_norm": np.ones(len(s))}


def test_floor_counts_judges_each_block_by_both_rules():
    forgot, held = _run([0.95] * 10 + [0.54] * 30), _run([0.95] * 40)
    c = floor_counts(series={"b": {"grpo": {0: forgot, 1: held}, "warm_critic": {0: held, 1: held}}})["b"]
    assert (c["grpo"]["collapsed"], c["grpo"]["collapsed_floor"], c["grpo"]["forgot"]) == (0, 1, 1)
    assert c["warm_critic"]["collapsed_floor"] == 0 and c["warm_critic"]["final"] == pytest.approx(0.95)


def test_kept_curves_by_hand_and_the_figure():
    runs = {"starpo_s": {0: {"kept_template_mi": [0.2, 0.1], "random_template_mi": [0.3, 0.3]},
                         1: {"kept_template_mi": [0.4, float("nan")], "random_template_mi": [0.2, 0.2]}}}
    cv = kept_curves(series={"b": runs})["b"]
    np.testing.assert_allclose(cv["kept"], [0.3, 0.1])
    np.testing.assert_allclose(cv["gap"], [-0.15, 0.2])
    fig = plot_kept({"b": cv})
    assert fig.axes[0].get_xlabel() == "RL step" and "StarPO-S" in fig._suptitle.get_text()
    assert len(fig.legends[0].get_texts()) == 2


def test_record_names_the_command_when_missing():
    with pytest.raises(FileNotFoundError, match="toyrl reproduce no_such_claim"):
        record("no_such_claim")


def test_twin_verdicts_reads_both_policies_and_blocks():
    from toyrl.viz.small_llm import twin_verdicts

    def load(claim, held):
        v = "reproduced" if claim == "x" else "not reproduced"
        t = {"name": "a - b", "effect": {"mean": 0.1 if held else 0.2, "ci95": [0.0, 0.3]}, "outcome": "inconclusive"}
        return {"verdict": v, "result": {"tests": [t]}, "cpu_time_s": 5.0}
    tv = twin_verdicts(("x",), load)["x"]
    assert tv["toy"]["seeds 0-9"]["verdict"] == "reproduced" and tv["smollm2"]["seeds 10-19"]["verdict"] == "not reproduced"
    assert tv["smollm2"]["seeds 10-19"]["tests"] == [("a - b", 0.1, 0.0, 0.3, "inconclusive")]
