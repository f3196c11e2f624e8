"""The stability scorecard: RAGEN-2's cross-scoring estimates on hand-computed scores, the regime
labels, the reasoning pairs of rollout episodes, batched cross-scoring against a per-pair loop, the
design, per-run metrics on a made-up run, and a 2-cell slice end to end (JSON, runs, figure, CLI)."""
import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import assert_figure_standard, line_data

from toyrl.lab.results import LOCK
from toyrl.lab.scorecard import (BASE, DIALS, build_record, cell_config, design, paired_effect, rebuild, run_metrics,
                                 run_scorecard, summary)
from toyrl.lab.scorecard.mi import REGIMES, cross_score_mi, cross_scores, first_turn_pairs, regime
from toyrl.lab.scorecard.plot import (cell_series, effect_sign, heatmap_data, load_scorecard, marginal_effects,
                                      plot_cell, write_figure)

L8, L2 = math.log(0.8), math.log(0.2)


def test_cross_score_mi_hand_computed():
    # matched = log .8; marginal = log((.8 + .2) / 2) = log .5
    out = cross_score_mi(torch.tensor([[L8, L2], [L2, L8]]), torch.tensor([0, 1]), torch.tensor([1.0, 1.0]))
    assert out["mi"] == pytest.approx(math.log(1.6), abs=1e-6)          # 0.470
    assert out["cond_entropy"] == pytest.approx(-L8, abs=1e-6)          # 0.223
    assert out["entropy"] == pytest.approx(math.log(2), abs=1e-6)
    assert out["retrieval_acc"] == 1.0 and out["chance"] == 0.5
    assert out["mi_upper_bound"] == pytest.approx(math.log(2))


def test_cross_score_mi_per_token_and_identity():
    # lengths 2: per-token scores are halved; I = H(Z) - H(Z|X) holds for both variants
    scores = torch.tensor([[2 * L8, 2 * L2], [2 * L2, 2 * L8], [-1.0, -3.0]])
    out = cross_score_mi(scores, torch.tensor([0, 1, 1]), torch.tensor([2.0, 2.0, 2.0]))
    for sfx in ("", "_seq"):
        assert out["mi" + sfx] == pytest.approx(out["entropy" + sfx] - out["cond_entropy" + sfx], abs=1e-6)
    # by hand: pairs 1-2 give log(.8/.5) = 0.4700 per token, log(.64/.34) = 0.6325 per sequence; pair 3 (column 1)
    # -1.5 - (logsumexp(-.5, -1.5) - log 2) = -0.6201 per token, -3 - (logsumexp(-1, -3) - log 2) = -1.4338
    assert out["mi"] == pytest.approx((2 * 0.4700 - 0.6201) / 3, abs=1e-3)
    assert out["mi_seq"] == pytest.approx((2 * 0.6325 - 1.4338) / 3, abs=1e-3)
    assert out["retrieval_acc"] == pytest.approx(2 / 3)                  # the third pair is retrieved wrongly


def test_input_agnostic_reasoning_has_zero_mi_and_chance_retrieval():
    scores = torch.tensor([[-1.0, -1.0, -1.0]] * 6)                      # every prompt scores Z the same
    out = cross_score_mi(scores, torch.tensor([0, 0, 1, 1, 2, 2]), torch.ones(6))
    assert abs(out["mi"]) < 1e-6 and out["cond_entropy"] == pytest.approx(1.0)
    one = cross_score_mi(torch.zeros(0, 1), torch.zeros(0, dtype=torch.long), torch.zeros(0))
    assert math.isnan(one["mi"])                                         # fewer than 2 prompts: no estimate


def test_regime_labels_the_four_corners():
    kw = dict(h_ref=math.log(4), mi_ref=math.log(8))
    assert regime(1.2, 0.5, **kw) == "diverse"
    assert regime(1.2, 0.01, **kw) == "template collapse"
    assert regime(0.1, 0.5, **kw) == "compressed"
    assert regime(0.1, 0.01, **kw) == "low-entropy collapse"
    assert regime(float("nan"), 0.5, **kw) == "n/a" and len(set(REGIMES)) == 4


def _codec():
    from toyrl.codecs.toy import ToyCodec
    return ToyCodec(n_think=2, n_actions=4, n_obs=20, think_max=3)       # think 5-6, END 4, actions 7-10


def _episode(prompt, gen):
    return SimpleNamespace(prompt=prompt, turns=[SimpleNamespace(gen=gen)])


def test_first_turn_pairs_keeps_closed_reasoning_only():
    c = _codec()
    eps = [_episode([1, 11], [5, 6, 4, 7]), _episode([1, 12], [6, 4, 8]), _episode([1, 11], [4, 7]),
           _episode([1, 12], [5, 7]), _episode([1, 11], [5, 5, 4, 9])]
    prompts, segments, column = first_turn_pairs(eps, c)
    assert prompts == [[1, 11], [1, 12]]
    assert segments == [[5, 6], [6], [5, 5]]                             # empty and unclosed reasoning dropped
    assert column == [0, 1, 0]


def test_cross_scores_equal_a_loop_over_pairs():
    from toyrl.policies.toy import ToyTransformer, ToyTransformerConfig
    torch.manual_seed(0)
    pol = ToyTransformer(ToyTransformerConfig(vocab_size=30, d_model=16, n_layer=1, n_head=2, max_len=32)).eval()
    prompts, segments = [[1, 11, 12], [1, 13]], [[5, 6], [6], [5, 5, 6]]
    allowed = torch.zeros(3, 30, dtype=torch.bool)
    allowed[:, [4, 5, 6]] = True
    for al in (None, allowed):
        got = cross_scores(pol, prompts, segments, allowed_at=al)
        assert got.shape == (3, 2)
        for i, z in enumerate(segments):
            for j, p in enumerate(prompts):
                seq = torch.tensor([p + z])
                a = None if al is None else torch.cat([torch.ones(len(p), 30, dtype=torch.bool), al[:len(z)]])[None]
                lp, _ = pol.logprobs(seq, torch.ones_like(seq, dtype=torch.bool), allowed=a)
                assert got[i, j].item() == pytest.approx(lp[0, len(p):].sum().item(), abs=1e-5)
    assert not torch.allclose(cross_scores(pol, prompts, segments), cross_scores(pol, prompts, segments,
                                                                                  allowed_at=allowed))


def test_design_is_one_factor_at_a_time():
    cells = design()
    assert cells[0] == BASE and len(cells) == 1 + sum(len(v) - 1 for v in DIALS.values()) == 13
    for c in cells[1:]:
        assert sum(c[d] != BASE[d] for d in DIALS) == 1
    assert len({tuple(c.values()) for c in cells}) == 13
    assert len(design("full")) == 3 * 6 * 3 * 4
    with pytest.raises(ValueError):
        design("latin")
    cfg = cell_config({**BASE, "filter": "starpo_s"}, steps=7)
    assert cfg["filters"] == ["starpo_s"] and cfg["steps"] == 7 and cfg["staleness"] == 2


def test_summary_bootstrap_stays_in_range_and_pairs_by_seed():
    s = summary([0.0, 0.0, 1.0])
    assert s["mean"] == pytest.approx(1 / 3, abs=1e-4) and 0.0 <= s["ci95"][0] < s["ci95"][1] <= 1.0
    e = paired_effect([1.0, 2.0, 3.0], [0.5, 1.5, 2.5])
    assert e["mean"] == 0.5 and e["ci95"] == [0.5, 0.5]
    assert summary([float("nan")])["mean"] is None


def _made_up_run(collapse: bool):
    steps = 30
    rm = [0.1 + 0.02 * t for t in range(15)] + ([0.0] * 15 if collapse else [0.4] * 15)
    rs = [0.4] * 12 + ([0.05] * 18 if collapse else [0.4] * 18)
    g = [1.0] * steps
    g[5] = 50.0                                                          # one spike (> 10 x the median)
    return {"seed": 0, "time_s": 1.0,
            "series": {"reward_mean": rm, "reward_std": rs, "success_rate": rm, "grad_norm": g,
                       "format_valid_rate": [1.0] * steps},
            "diag": {"step": [0, 30], "mi": [0.0, 0.1], "mi_seq": [0.0, 0.2], "cond_entropy": [1.0, 0.5],
                     "retrieval_acc": [0.1, 0.3], "mi_upper_bound": [2.0, 2.0]}}


def test_run_metrics_reads_collapse_spikes_and_the_last_probe():
    m = run_metrics(_made_up_run(True))
    assert m["collapsed"] == 1.0 and 15 <= m["t_collapse"] <= 20
    assert m["spike_rate"] == pytest.approx(1 / 30) and m["log10_max_grad"] == pytest.approx(math.log10(50))
    assert m["mi_seq"] == 0.2 and m["cond_entropy"] == 0.5 and m["format_valid"] == 1.0
    h = run_metrics(_made_up_run(False))
    assert h["collapsed"] == 0.0 and math.isnan(h["t_collapse"]) and h["final_success"] == pytest.approx(0.4)


def test_collapse_of_names_its_rule_and_the_legacy_rule_recomputes_old_cards():
    from toyrl.lab.scorecard import LEGACY_RULE, collapse_of
    fall = {"reward_mean": [.8] * 10 + [0.0] * 10, "reward_std": [.4] * 5 + [0.0] * 15, "grad_norm": [1.0] * 20}
    new, old = collapse_of(fall), collapse_of(fall, LEGACY_RULE)               # the docstring's example
    assert (new["collapsed"], new["t_collapse"], new["t_std_drop"]) == (1.0, 12.0, 7.0) and new["frozen"] == 0.0
    assert (old["collapsed"], old["t_collapse"]) == (1.0, 12.0) and "frozen" not in old
    frozen = {**fall, "grad_norm": [1.0] * 5 + [0.0] * 15}                    # the fall happened on a zero gradient
    assert collapse_of(frozen)["collapsed"] == 0.0 and collapse_of(frozen, LEGACY_RULE)["collapsed"] == 1.0
    with pytest.raises(ValueError, match="rule must be"):
        collapse_of(fall, "collapse-v0")


def test_a_record_is_summarized_with_the_rule_its_meta_names():
    """A meta naming no rule (the shipped card) keeps the legacy rule; a new run names collapse-v2 and gains a
    freeze rate. Run: learns, then 20 steps of zero gradient with a noisy mean that ends low."""
    from toyrl.collapse import RULE_NAME
    run = _made_up_run(False)
    rm = [.1, .3, .5, .75] + [.75, .5, 1.0, .75, .5, .75, .75, .5, 1.0, .5, .75, .5, .75, .75, .5, .75, .25, .25,
                              .25, .25]
    run["series"] = {**run["series"], "reward_mean": rm, "reward_std": [.3] * 24, "success_rate": rm,
                     "grad_norm": [1.0] * 4 + [0.0] * 20, "format_valid_rate": [1.0] * 24}
    meta = {"env": "gridworld", "steps": 24, "quick": True, "diag_every": 30, "workers": 1, "backend": "process",
            "run_time_s": 1.0, "command": "toyrl scorecard"}
    old = build_record({"grpo/ppo/token-mean/none": [run]}, meta)
    new = build_record({"grpo/ppo/token-mean/none": [run]}, {**meta, "collapse_rule": RULE_NAME})
    assert old["setting"]["collapse_rule"] == "collapse-v1" and new["setting"]["collapse_rule"] == RULE_NAME
    assert old["cells"][0]["collapse_rate"]["mean"] == 1.0 and "freeze_rate" not in old["cells"][0]
    assert new["cells"][0]["collapse_rate"]["mean"] == 0.0 and new["cells"][0]["freeze_rate"]["mean"] == 1.0


def test_build_record_effects_are_paired_differences_with_the_base():
    base, sapo = cell_config(BASE), {**BASE, "clip": "sapo"}
    runs = {"grpo/ppo/token-mean/none": [{**_made_up_run(False), "seed": s} for s in range(3)],
            "grpo/sapo/token-mean/none": [{**_made_up_run(True), "seed": s} for s in range(3)]}
    meta = {"env": "gridworld", "steps": 30, "quick": True, "diag_every": 30, "workers": 1, "backend": "process",
            "run_time_s": 1.0, "command": "toyrl scorecard"}
    rec = build_record(runs, meta)
    assert [c["name"] for c in rec["cells"]] == list(runs) and base["clip"] == "ppo"
    c1 = rec["cells"][1]
    assert c1["clip"] == sapo["clip"] and c1["collapse_rate"]["mean"] == 1.0 and c1["seeds"] == [0, 1, 2]
    assert effect_sign(rec, "clip", "sapo", "collapsed") == 1
    assert effect_sign(rec, "clip", "sapo", "final_success") == -1
    (d, lv, m, lo, hi), = marginal_effects(rec, "final_success")
    assert (d, lv) == ("clip", "sapo") and m == pytest.approx(c1["final_success"]["mean"]
                                                              - rec["cells"][0]["final_success"]["mean"], abs=1e-3)
    names, metrics, values = heatmap_data(rec)
    assert values.shape == (2, len(metrics)) and values[1, metrics.index("collapse_rate")] == 1.0
    fig = write_figure(rec)
    assert len(fig.axes) == 2 + 1 and "staleness 2" in fig._suptitle.get_text()   # one colour bar, one scale
    assert_figure_standard(fig, "gridworld", "staleness 2", "30 steps", "3 seeds/cell")
    assert fig.axes[0].get_images()[0].get_array()[1, 0] == 0.0          # colour: goodness, 1 - collapse rate 1


def test_two_cell_slice_end_to_end(tmp_path):
    rec = run_scorecard(seeds=2, cells=2, steps=3, diag_every=3, out_dir=tmp_path, progress=False)
    card = json.loads((tmp_path / "scorecard.json").read_text())
    assert (tmp_path / "scorecard.png").stat().st_size > 10_000
    assert [c["estimator"] for c in card["cells"]] == ["grpo", "gigpo"]
    for c in card["cells"]:
        for key in ("clip", "agg", "filter", "seeds", "collapse_rate", "final_success", "auc_success", "t_collapse",
                    "spike_rate", "format_valid", "mi", "cond_entropy", "regime"):
            assert key in c
        assert c["seeds"] == [0, 1] and c["format_valid"]["mean"] == 1.0 and c["regime"] in REGIMES + ("n/a",)
        assert c["cond_entropy"]["n"] == 2                               # the probe scored reasoning in both seeds
    assert {e["dial"] for e in card["effects"]} == {"estimator"}
    record, runs = load_scorecard(tmp_path)
    assert cell_series(runs, "gigpo/ppo/token-mean/none").shape == (2, 3)
    assert runs["grpo/ppo/token-mean/none"][0]["diag"]["step"] == [0, 3]
    assert len(plot_cell(record, runs, "grpo/ppo/token-mean/none").axes) == 3
    again = rebuild(tmp_path, figure=False)                              # re-summarized from runs.json: same card
    assert again["cells"] == rec["cells"] and again["effects"] == rec["effects"]
    assert card["meta"]["collapse_rule"] == card["setting"]["collapse_rule"] == "collapse-v2"
    assert "freeze_rate" in card["cells"][0]


def test_probe_does_not_change_the_training_run():
    from toyrl.lab.scorecard import run_one
    cfg = cell_config(BASE, steps=2)
    a, b = run_one((cfg, 0, 1)), run_one((cfg, 0, 0))
    assert a["series"] == b["series"] and len(a["diag"]["step"]) == 3 and b["diag"] == {"step": []}


def test_cli_scorecard_unknown_env_is_one_line_exit_2(capsys):
    from toyrl.cli import main
    assert main(["scorecard", "--env", "nope"]) == 2
    err = capsys.readouterr().err
    assert "valid scorecard envs: gridworld, bandit_chain" in err and err.strip().count("\n") == 0
    assert main(["scorecard", "--seeds", "0"]) == 2


def test_select_cells_by_count_or_name():
    from toyrl.lab.scorecard import select_cells
    assert select_cells(2) == design()[:2] and len(select_cells()) == 13
    got = select_cells(["grpo/ppo/token-mean/none", "grpo/sapo/token-mean/none"])
    assert [c["clip"] for c in got] == ["ppo", "sapo"]
    with pytest.raises(ValueError, match="unknown cell 'grpo/nope/token-mean/none'"):
        select_cells(["grpo/nope/token-mean/none"])


def test_notebook_11_exercises():
    from toyrl.exercises import check
    assert check("11.mi", math.log(0.9 / 0.5)) and not check("11.mi", math.log(0.9))
    assert check("11.regime", "low-entropy collapse") and not check("11.regime", "template collapse")


def test_cli_scorecard_writes_the_card(tmp_path, capsys, monkeypatch):
    """Under ./toyrl-results/scorecard/ by default: the shipped card is replaced only with --update-shipped."""
    from toyrl.cli import main
    from toyrl.lab.scorecard import REPO
    shipped = {p: p.read_bytes() for p in (REPO / "data" / "scorecard").iterdir() if p.is_file()}   # not .runcache/
    monkeypatch.chdir(tmp_path)
    assert main(["scorecard", "--cells", "1", "--seeds", "1", "--steps", "2", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "grpo/ppo/token-mean/none" in out and "backend process" in out
    card_dir = tmp_path / "toyrl-results" / "scorecard"
    card = json.loads((card_dir / "scorecard.json").read_text())
    assert card["command"] == "toyrl scorecard --seeds 1 --env gridworld --cells 1 --steps 2 --workers 1"
    assert card["seeds"] == [0] and (card_dir / "scorecard.png").stat().st_size > 1000
    assert sorted(p.name for p in card_dir.iterdir()) == [".runcache", LOCK, "runs.json", "scorecard.json", "scorecard.png"]
    assert {p: p.read_bytes() for p in (REPO / "data" / "scorecard").iterdir() if p.is_file()} == shipped


def test_shipped_scorecard_is_the_default_and_follows_from_its_runs():
    from toyrl.lab.scorecard import REPO, cell_name
    record, runs = load_scorecard(REPO / "data" / "scorecard")
    assert [c["name"] for c in record["cells"]] == [cell_name(c) for c in design()]
    assert record["seeds"] == list(range(10)) and record["setting"]["steps"] == 50 and not record["setting"]["quick"]
    assert record["command"].startswith("toyrl scorecard --seeds 10") and record["run_time_s"] <= 30 * 60
    assert (REPO / "data" / "scorecard" / "scorecard.png").exists()
    again = build_record(runs, record["meta"])                         # the summaries are recomputed from the runs
    assert again["cells"] == record["cells"] and again["effects"] == record["effects"]


def test_shipped_scorecard_summaries_follow_todays_rule():
    """The drift check: every stored summary (collapse and freeze rates, regimes, effects) equals the one today's
    code and collapse rule compute from the stored series; a change of rule or cut-off fails here until the card
    is rebuilt (``rebuild(REPO / "data" / "scorecard", rule=RULE_NAME)``)."""
    from toyrl.collapse import RULE_NAME
    from toyrl.lab.scorecard import REPO, rejudge
    stored, _ = load_scorecard(REPO / "data" / "scorecard")
    now, runs = rejudge(REPO / "data" / "scorecard")
    assert stored["setting"]["collapse_rule"] == now["setting"]["collapse_rule"] == RULE_NAME
    assert stored["setting"] == json.loads(json.dumps(now["setting"]))        # tuples stored as lists
    for a, b in zip(stored["cells"], now["cells"]):
        assert a == b, f"{a['name']}: the stored summary drifted from today's rule"
    assert stored["effects"] == now["effects"]
    cells = {c["clip"]: c for c in now["cells"] if c["estimator"] == "grpo" and c["agg"] == "token-mean"
             and c["filter"] == "none"}
    assert cells["turn_ppo"]["collapse_rate"]["mean"] == 0.0 and cells["cispo"]["collapse_rate"]["mean"] == 0.5
    assert cells["cispo"]["regime"] == "low-entropy collapse" and cells["turn_ppo"]["regime"] == "template collapse"


def test_rejudge_reads_the_rule_it_is_given(tmp_path):
    """rejudge with rule None keeps the rule runs.json names (legacy where none); with a rule, that one."""
    from toyrl.lab.scorecard import LEGACY_RULE, REPO, rejudge
    stored = json.loads((REPO / "data" / "scorecard" / "runs.json").read_text())
    meta = {k: v for k, v in stored["meta"].items() if k != "collapse_rule"}
    (tmp_path / "runs.json").write_text(json.dumps({"meta": meta, "cells": stored["cells"]}))
    old, _ = rejudge(tmp_path, rule=None)
    new, _ = rejudge(tmp_path)
    assert old["setting"]["collapse_rule"] == LEGACY_RULE and new["setting"]["collapse_rule"] == "collapse-v2"
    name = "grpo/turn_ppo/token-mean/none"
    rate = lambda r: next(c for c in r["cells"] if c["name"] == name)["collapse_rate"]["mean"]   # noqa: E731
    assert rate(old) == 0.4 and rate(new) == 0.0           # the dips the old rule counted do not persist


def test_shipped_scorecard_figures_meet_the_standard():
    """The figures of notebook 11 on the shipped scorecard: a title naming the setting, labelled axes, no overlap."""
    from toyrl.lab.scorecard import REPO
    record, runs = load_scorecard(REPO / "data" / "scorecard")
    st, n = record["setting"], len(record["seeds"])
    assert_figure_standard(write_figure(record), st["env"], f"{st['steps']} steps", f"{n} seeds/cell")
    name = "grpo/sapo/token-mean/none"
    fig = plot_cell(record, runs, name, "clip_frac")
    assert_figure_standard(fig, name, st["env"], f"{st['steps']} steps", f"{n} seeds", "staleness")
    left, _, probe = fig.axes
    lines = line_data(left)                                                 # seeds unlabelled, their mean labelled
    assert left.get_ylabel() == "clip fraction" and list(lines) == ["mean over seeds"]
    from toyrl.lab.scorecard.plot import cell_series
    assert np.allclose(lines["mean over seeds"][1], np.nanmean(cell_series(runs, name, "clip_frac"), 0), equal_nan=True)
    assert [t.get_text() for t in probe.get_legend().get_texts()][:2] == ["I(X;Z) per sequence", "H(Z|X) per token"]
    assert {ln.get_linestyle() for ln in probe.get_lines() if ln.get_marker() in ("o", "s")} == {"-"}   # no dashes
    assert {ln.get_linestyle() for ln in left.get_lines()} <= {"-", "--"}   # dashed: only the collapse marks
    assert sum(ln.get_linestyle() == "--" for ln in left.get_lines()) == sum(
        t is not None for t in next(c for c in record["cells"] if c["name"] == name)["t_collapse"]["per_seed"])
