"""Notebook 02's blind-T-maze helpers: the reasoning check, the momentum trap, and the stored claim's table."""
import matplotlib
matplotlib.use("Agg")
import numpy as np
import pytest

from toyrl.viz.blind import (FIXES, claim_table, collapsed_seeds, momentum_trap, plot_claim_run, reasoning_check,
                             series_path)


def run(mean, std, grad, mi):
    return {"reward_mean": list(mean), "reward_std": list(std), "grad_norm": list(grad), "template_mi": list(mi),
            "success_rate": list(mean)}


def fake_series():
    n = 40
    crash = run([.9] * 10 + [.05] * 30, [.3] * 5 + [.05] * 35, [1.0] * n, [.6] * 10 + [.05] * 30)
    hold = run([.9] * n, [.3] * n, [1.0] * n, [.6] * n)
    frozen = run([.5] * n, [0.0] * n, [1.0] * 5 + [0.0] * 35, [.3] * n)
    return {"grpo": {0: crash, 1: hold}, "fix": {0: hold, 1: frozen}}


def test_claim_table_counts_by_hand():
    t = claim_table(fake_series())
    assert t["grpo"] == {"seeds": 2, "collapsed": 1, "std_first": 1, "frozen": 0, "mi_fell": 1, "forgot": 1,
                         "final": pytest.approx((.05 + .9) / 2)}
    assert t["fix"] == {"seeds": 2, "collapsed": 0, "std_first": 0, "frozen": 1, "mi_fell": 0, "forgot": 1,
                        "final": pytest.approx((.9 + .5) / 2)}
    assert collapsed_seeds("grpo", fake_series()) == [0] and collapsed_seeds("fix", fake_series()) == []


def test_plot_claim_run_titles_the_verdict_and_rejects_unknown_runs():
    fig = plot_claim_run("grpo", 0, fake_series())
    title = fig._suptitle.get_text()
    assert "collapsed" in title and "seed 0" in title and "T-maze" in title
    legend = lambda f: [t.get_text() for t in f.legends[0].get_texts()]          # noqa: E731  (below the panels)
    assert len(legend(fig)) >= 4                                                 # three curves and a mark
    assert fig.axes[1].get_ylabel() == "template MI (nats)"                      # the MI on its own axis
    with pytest.raises(ValueError, match="no stored run"):
        plot_claim_run("kl", 0, fake_series())
    fix = plot_claim_run("fix", 1, fake_series())
    assert "GRPO success, same seed" in legend(fix) and "froze" in fix._suptitle.get_text()
    assert "GRPO success, same seed" not in legend(fig)


def test_fixes_name_stored_arms_of_registered_claims():
    from toyrl.lab.claims import CLAIMS
    for fix, (claim, arm) in FIXES.items():
        assert claim in CLAIMS and arm in CLAIMS[claim].arms, fix
        assert series_path(claim).name == f"{claim}.series.json.gz" and series_path(claim, True).parent.name == "heldout"
    assert len(set(FIXES.values())) == len(FIXES)


def test_reasoning_check_shipped_tmaze():
    r = reasoning_check("tmaze", episodes=32)
    assert r["intact"] > 0.7 and r["scrambled"] < r["intact"]
    with pytest.raises(ValueError, match="name must be one of"):
        reasoning_check("maze")


def test_momentum_trap_moves_on_zero_gradients_unless_skipped():
    plain, skip = momentum_trap(steps=12), momentum_trap(steps=12, skip_zero_adv=True)
    assert (plain["grad_norm"] == 0).any() and (plain["update_norm"][plain["grad_norm"] == 0] > 0).all()
    assert (skip["grad_norm"] == 0).any() and (skip["update_norm"][skip["grad_norm"] == 0] == 0).all()
    with pytest.raises(ValueError, match="steps"):
        momentum_trap(steps=0)
