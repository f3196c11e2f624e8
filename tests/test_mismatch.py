"""The engine-trainer gap (toyrl.rollout.mismatch) and its figures (toyrl.viz.engine): hand-computed tiny
batches, the identity, a plain-loop reference, the probability bins, bad input, and the figure standard."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import assert_figure_standard, line_data
from toyrl.testing import random_batch

from toyrl.objectives.rollout_correction import rollout_correction
from toyrl.rollout.mismatch import PROB_BINS, ROW_KEYS, engine_mismatch, mismatch_row
from toyrl.viz.engine import (ENGINE_PRESETS, PANEL_CORRECTIONS, SETTING, bin_centers, engine_arms, engine_batch,
                              plot_engine_runs, plot_ratio_vs_prob, preset_panel, run_bands, train_arms)


def tiny():
    old = torch.tensor([[-1.0, -1.0, -3.0, 0.0]])
    rollout = torch.tensor([[-1.0, -2.0, -1.0, -5.0]])
    mask = torch.tensor([[True, True, True, False]])
    turn_id = torch.tensor([[0, 0, 1, 1]])
    return old, rollout, mask, turn_id


def test_hand_computed_example():
    m = engine_mismatch(*tiny())                      # d = [0, 1, -2] on the mask; the 4th token is off it
    k3 = [0.0, math.e - 2, math.exp(-2) + 1]
    assert m["n_tokens"] == 3
    assert m["kl_k3"] == pytest.approx(sum(k3) / 3)
    assert m["kl_k3_turn"] == pytest.approx([k3[1] / 2, k3[2]]) and m["tokens_turn"] == [2, 1]
    assert m["ratio_min"] == pytest.approx(math.exp(-2)) and m["ratio_max"] == pytest.approx(math.e)
    assert m["ratio_p50"] == pytest.approx(1.0)
    assert m["frac_far"] == pytest.approx(1 / 3)      # only |d| = 2 is beyond 1 nat
    # exp(-1) = 0.37 -> [0.1, 0.5) twice (|d| 0 and 1); exp(-3) = 0.05 -> [0.01, 0.1)
    assert m["count_by_prob"] == [0, 0, 1, 2, 0, 0]
    assert m["gap_by_prob"] == pytest.approx([0.0, 0.0, 2.0, 0.5, 0.0, 0.0])
    assert m["bin_edges"] == list(PROB_BINS)


def test_kl_direction_is_engine_to_trainer():
    """Tokens drawn from the engine: mean k3 estimates KL(engine || trainer), not the reverse."""
    g = torch.Generator().manual_seed(0)
    engine = torch.tensor([0.5, 0.45, 0.05]).log()
    trainer = torch.tensor([0.9, 0.05, 0.05]).log()
    y = torch.multinomial(engine.exp(), 200_000, replacement=True, generator=g)[None]    # (1, T)
    m = engine_mismatch(trainer[y].double(), engine[y].double(), torch.ones_like(y, dtype=torch.bool),
                        torch.zeros_like(y))
    kl_et = float((engine.exp() * (engine - trainer)).sum())
    kl_te = float((trainer.exp() * (trainer - engine)).sum())
    assert kl_et - kl_te > 0.25                                        # 0.695 vs 0.419: the directions differ
    assert m["kl_k3"] == pytest.approx(kl_et, abs=0.01)


def test_identity_when_engine_is_trainer():
    b = random_batch(B=8, H=4, seed=1)
    m = engine_mismatch(b.old_logp, b.old_logp.clone(), b.policy_mask, b.turn_id)
    assert m["kl_k3"] == 0.0 and m["frac_far"] == 0.0
    assert m["ratio_min"] == m["ratio_max"] == m["ratio_p01"] == m["ratio_p99"] == 1.0
    assert m["kl_k3_turn"] == [0.0] * 4 and sum(m["tokens_turn"]) == int(b.policy_mask.sum())
    assert m["gap_by_prob"] == [0.0] * 6 and sum(m["count_by_prob"]) == int(b.policy_mask.sum())
    row = mismatch_row(b.old_logp, b.old_logp, b.policy_mask, b.turn_id)
    assert tuple(row) == ROW_KEYS
    assert row["engine_kl"] == 0.0 and row["engine_ratio_min"] == row["engine_ratio_max"] == 1.0


def reference(old, rollout, mask, turn_id, H, edges, far=1.0):
    """A plain loop over tokens, numpy quantiles."""
    d_all, k3_turn, n_turn = [], [0.0] * H, [0] * H
    gap, cnt = [0.0] * (len(edges) - 1), [0] * (len(edges) - 1)
    B, T = old.shape
    for b in range(B):
        for t in range(T):
            if not mask[b, t]:
                continue
            lo, d = max(float(old[b, t]), -1e3), max(float(old[b, t]), -1e3) - max(float(rollout[b, t]), -1e3)
            d_all.append(d)
            dc = min(max(d, -20.0), 20.0)
            k = int(turn_id[b, t])
            if k >= 0:
                k3_turn[k] += math.exp(dc) - 1 - dc
                n_turn[k] += 1
            p = math.exp(lo)
            j = max(i for i in range(len(edges) - 1) if p >= edges[i] or i == 0)
            gap[j] += abs(d)
            cnt[j] += 1
    d = np.array(d_all)
    dc = d.clip(-20, 20)
    rho = np.exp(dc)
    q = np.quantile(rho, [0.01, 0.5, 0.99])
    return {"kl_k3": float(np.mean(np.exp(dc) - 1 - dc)), "ratio_min": rho.min(), "ratio_max": rho.max(),
            "ratio_p01": q[0], "ratio_p50": q[1], "ratio_p99": q[2],
            "frac_far": float(np.mean(np.abs(d) > far)), "kl_k3_turn": [s / max(n, 1) for s, n in zip(k3_turn, n_turn)],
            "tokens_turn": n_turn, "gap_by_prob": [s / max(n, 1) for s, n in zip(gap, cnt)], "count_by_prob": cnt}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_vectorized_equals_loop(seed):
    b = random_batch(B=10, H=4, seed=seed)
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(b.old_logp.shape, generator=g, dtype=torch.float64) * 9        # p down to 1e-4
    rollout = old + 1.5 * torch.randn(old.shape, generator=g, dtype=torch.float64)
    old[0, 1], rollout[0, 2] = -math.inf, -math.inf                              # floored, never NaN
    mask = b.policy_mask.clone()
    mask[0, 1:3] = True
    turn_id = b.turn_id.clone()
    turn_id[1, mask[1]] = -1                                                     # a row left out of the turn lists
    got = engine_mismatch(old, rollout, mask, turn_id, H=5, bins=PROB_BINS)
    want = reference(old, rollout, mask, turn_id, 5, PROB_BINS)
    for k, v in want.items():
        assert got[k] == pytest.approx(v, rel=1e-9, abs=1e-12), k
    assert got["tokens_turn"][4] == 0 and got["kl_k3_turn"][4] == 0.0           # an empty turn: 0, not NaN
    assert all(np.isfinite(got["gap_by_prob"])) and got["ratio_max"] <= math.exp(20) * (1 + 1e-12)


def test_bins_edges_and_custom_bins():
    p = torch.tensor([[5e-4, 1e-3, 0.05, 0.3, 0.5, 0.9, 1.0]], dtype=torch.float64)   # an edge: the upper bin
    old = torch.log(p)
    ones = torch.ones_like(old, dtype=torch.bool)
    m = engine_mismatch(old, old - 0.5, ones, torch.zeros_like(old, dtype=torch.long))
    assert m["count_by_prob"] == [1, 1, 1, 1, 1, 2]
    assert m["gap_by_prob"] == pytest.approx([0.5] * 6)
    m2 = engine_mismatch(old, old, ones, torch.zeros_like(old, dtype=torch.long), bins=(0.0, 0.5, 1.0))
    assert m2["count_by_prob"] == [4, 3] and m2["gap_by_prob"] == [0.0, 0.0]
    np.testing.assert_allclose(bin_centers((0.0, 1e-3, 0.1, 1.0)), [10 ** -3.5, 1e-2, 0.1 ** 0.5])


def test_empty_mask_is_the_identity():
    old, rollout, mask, turn_id = tiny()
    m = engine_mismatch(old, rollout, torch.zeros_like(mask), turn_id)
    assert m["n_tokens"] == 0 and m["kl_k3"] == 0.0 and m["ratio_min"] == m["ratio_max"] == 1.0
    assert m["kl_k3_turn"] == [] and m["count_by_prob"] == [0] * 6 and m["gap_by_prob"] == [0.0] * 6


@pytest.mark.parametrize("kw, match", [
    (dict(rollout_logp=torch.zeros(1, 3)), "rollout_logp"),
    (dict(mask=torch.ones(1, 4)), "mask"),
    (dict(turn_id=torch.zeros(1, 4)), "turn_id"),
    (dict(old_logp=torch.zeros(4)), "old_logp"),
    (dict(bins=(0.0, 0.5, 0.4, 1.0)), "bins"),
    (dict(bins=(0.1, 1.0)), "bins"),
    (dict(H=1), "H=1"),
    (dict(H=-1), "H"),
    (dict(far=0.0), "far"),
    (dict(rollout_logp=torch.tensor([[float("nan"), 0.0, 0.0, 0.0]])), "NaN"),
])
def test_bad_input_names_the_argument(kw, match):
    old, rollout, mask, turn_id = tiny()
    args = dict(old_logp=old, rollout_logp=rollout, mask=mask, turn_id=turn_id) | kw
    with pytest.raises(ValueError, match=match):
        engine_mismatch(**args)


def test_nan_off_the_mask_is_ignored():
    old, rollout, mask, turn_id = tiny()
    rollout[0, 3] = float("nan")
    assert engine_mismatch(old, rollout, mask, turn_id)["kl_k3"] == pytest.approx(engine_mismatch(*tiny())["kl_k3"])


# ---- figures --------------------------------------------------------------------------------------
def test_plot_ratio_vs_prob_draws_the_bins():
    b = random_batch(B=10, H=4, seed=3)
    g = torch.Generator().manual_seed(3)
    old = -torch.rand(b.old_logp.shape, generator=g, dtype=torch.float64) * 8
    rollout = old + torch.randn(old.shape, generator=g, dtype=torch.float64) * (0.05 - old / 8)
    fig = plot_ratio_vs_prob(old, rollout, b.policy_mask, title="Bandit chain, noise engine")
    ax, mag = fig.axes[:2]                                   # signed log rho per token; its magnitude per bin
    m = engine_mismatch(old, rollout, b.policy_mask, torch.zeros_like(b.turn_id), 1)
    has = (np.asarray(m["count_by_prob"]) > 0) & (np.asarray(m["gap_by_prob"]) > 0)
    x, y = line_data(mag)["mean |log rho| per probability bin"]
    np.testing.assert_allclose(x, bin_centers()[has])
    np.testing.assert_allclose(y, np.asarray(m["gap_by_prob"])[has])
    assert mag.get_yscale() == "log" and "|log rho|" in mag.get_ylabel() and "signed" in ax.get_ylabel()
    assert len(ax.collections[0].get_offsets()) == int(b.policy_mask.sum()) and ax.get_xscale() == "log"
    assert {t.get_text() for t in ax.get_legend().get_texts()} == {"one policy token: log rho"}
    assert_figure_standard(fig, "Bandit chain", "noise engine", "KL")
    w, keep = rollout_correction("mis", old, rollout, b.policy_mask)          # weight 0 where rho > 2
    fig = plot_ratio_vs_prob(old, rollout, b.policy_mask, title="Bandit chain", weights=w, keep=keep, correction="mis")
    drop = b.policy_mask & (~keep | (w == 0))
    crosses = [c for c in fig.axes[0].collections if c.get_label().startswith("dropped by mis")]
    assert int(drop.sum()) > 0 and len(crosses[0].get_offsets()) == int(drop.sum())
    assert_figure_standard(fig, "Bandit chain")


def test_plot_ratio_vs_prob_subsamples_and_checks_input():
    old = -torch.rand(1, 50, dtype=torch.float64) * 3
    fig = plot_ratio_vs_prob(old, old, torch.ones(1, 50, dtype=torch.bool), title="x", max_points=10)
    assert len(fig.axes[0].collections[0].get_offsets()) == 10
    with pytest.raises(ValueError, match="mask"):
        plot_ratio_vs_prob(old, old, torch.ones(1, 50), title="x")


def test_run_bands_and_plot_engine_runs():
    logs = [[{"success_rate": 1.0}, {"success_rate": 2.0}], [{"success_rate": 3.0}, {"success_rate": 6.0},
                                                             {"success_rate": 1.0}]]
    r = run_bands(logs, "success_rate")
    np.testing.assert_allclose(r["mean"], [2.0, 4.0, 1.0])
    np.testing.assert_allclose(r["lo"], [1.0, 2.0, 1.0])
    np.testing.assert_allclose(r["hi"], [3.0, 6.0, 1.0])
    iqr = run_bands(logs, "success_rate", band="iqr")
    np.testing.assert_allclose(iqr["lo"], [1.5, 3.0, 1.0])
    arms = {"exact": logs, "int4": [[{"success_rate": 0.5}] * 3], "int4 + tis": logs[:1]}
    fig = plot_engine_runs(arms, "success_rate", title="Bandit chain, GRPO", smooth_w=2)
    ax = fig.axes[0]
    drawn = line_data(ax)
    assert list(drawn) == list(arms)
    np.testing.assert_allclose(drawn["exact"][1], run_bands(logs, "success_rate", smooth_w=2)["mean"])
    assert "min-max over 1/2 seeds" in ax.get_legend().get_title().get_text()
    assert_figure_standard(fig, "Bandit chain", "success rate")
    with pytest.raises(ValueError, match="band"):
        run_bands(logs, "success_rate", band="std")
    with pytest.raises(ValueError, match="logs_by_arm"):
        plot_engine_runs({}, title="x")


# ---- notebook 12's experiments ----------------------------------------------------------------------
def test_engine_batch_exact_is_the_identity():
    b = engine_batch("exact", train_steps=0, prompts_per_step=2).batch
    pm = b.policy_mask
    assert pm.any() and torch.equal(b.rollout_logp[pm], b.old_logp[pm])
    b = engine_batch("noise", 1.0, train_steps=0, prompts_per_step=2).batch
    assert engine_mismatch(b.old_logp, b.rollout_logp, b.policy_mask, b.turn_id)["kl_k3"] > 0.01


PANEL_CASES = [(e, PANEL_CORRECTIONS[k % len(PANEL_CORRECTIONS)], k % 3) for k, e in enumerate(ENGINE_PRESETS)] + \
    [("noise sigma 2", c, 2) for c in PANEL_CORRECTIONS[len(ENGINE_PRESETS):]]


def test_panel_cases_cover_every_slider_value():
    assert {e for e, _, _ in PANEL_CASES} == set(ENGINE_PRESETS) and {s for _, _, s in PANEL_CASES} == {0, 1, 2}
    assert {c for _, c, _ in PANEL_CASES} == set(PANEL_CORRECTIONS) and "opsm" not in PANEL_CORRECTIONS


@pytest.mark.parametrize("engine, correction, seed", PANEL_CASES)
def test_preset_panel_range(engine, correction, seed, capsys):
    """Every engine, correction and seed of the widget, each at least once (small batches, 2 training steps)."""
    fig = preset_panel(engine, correction, seed, train_steps=2, prompts_per_step=2)
    mode, strength = ENGINE_PRESETS[engine]
    assert_figure_standard(fig, SETTING, f"{mode}{'' if strength is None else f' {strength:g}'} engine", f"seed {seed}")
    out = capsys.readouterr().out
    assert "engine_kl=" in out and "engine_gap_by_prob=" in out and "correction_weight_max=" in out


def test_preset_panel_bad_engine():
    with pytest.raises(ValueError, match="engine"):
        preset_panel("vllm")


def test_engine_arms_and_train_arms():
    arms = engine_arms("int4", None, "icepop", steps=2)
    assert list(arms) == ["exact engine", "int4 engine", "int4 engine + icepop"]
    assert [(c.engine, c.correction) for c in arms.values()] == [("exact", "none"), ("int4", "none"),
                                                                 ("int4", "icepop")]
    logs = train_arms({k: c for k, c in arms.items() if k != "int4 engine"}, seeds=(0, 1))
    assert [len(v) for v in logs.values()] == [2, 2] and all(len(r.rows) == 2 for v in logs.values() for r in v)
    assert np.all(logs["exact engine"][0].column("engine_kl") == 0.0)
    assert np.all(logs["int4 engine + icepop"][1].column("engine_kl") > 0.0)
    assert_figure_standard(plot_engine_runs(logs, "engine_kl", title=SETTING), SETTING, "KL")
