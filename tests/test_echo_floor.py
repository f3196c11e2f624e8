"""The blind T-maze's floor (scrambled-reasoning success) and the post-hoc view of stored runs under both rules."""
import numpy as np
import pytest

from toyrl.lab.claims.echo import floor_view, task_floor


def _run(success, grad=1.0):
    s = np.asarray(success, float)
    return {"success_rate": s, "reward_mean": s, "reward_std": np.full(len(s), 0.3), "grad_norm": np.full(len(s), grad)}


def test_floor_view_counts_forgetting_as_a_floor_collapse():
    forgot = _run([0.95] * 10 + [0.5] * 30)          # the cue lost: at the floor, above 0.5 x peak
    held = _run([0.95] * 40)
    crashed = _run([0.95] * 10 + [0.1] * 30)          # below both lines
    v = floor_view({"grpo": {0: forgot, 1: held, 2: crashed}}, 0.5)["grpo"]
    assert v == {"seeds": 3, "collapsed": 1, "collapsed_floor": 2, "forgot": 2, "final": pytest.approx((0.5 + 0.95 + 0.1) / 3)}
    assert floor_view({"a": {0: forgot}}, 0.0)["a"]["collapsed_floor"] == 0      # floor 0: the plain line


def test_task_floor_is_below_the_intact_success():
    f = task_floor("tmaze", episodes=64)
    assert 0.2 < f["floor"] < f["intact"]             # scrambling the reasoning costs the cue
    with pytest.raises(ValueError, match="name"):
        task_floor("nope")


def test_floor_collapsed_uses_the_ledger_rule_from_the_floor():
    from toyrl.lab.claims.echo import TMAZE_FLOOR, floor_collapsed
    s, g = np.array([0.95] * 10 + [0.5] * 30), np.ones(40)
    assert floor_collapsed(s, g, 0.5) is not None and floor_collapsed(s, g, 0.0) is None
    assert floor_collapsed(s, np.zeros(40), 0.5) is None            # no gradient in the fall: not a collapse
    assert floor_collapsed(np.full(40, 0.6), g) is None              # never above the floor by min_gain
    assert 0.5 < TMAZE_FLOOR < 0.6


def test_task_floor_matches_the_registered_constant():
    from toyrl.lab.claims.echo import TMAZE_FLOOR
    assert task_floor("tmaze", episodes=512, seed=0)["floor"] == pytest.approx(TMAZE_FLOOR, abs=5e-4)


def test_critic_delay_warm_metrics_read_a_run_log():
    from toyrl.lab.claims import CLAIMS
    c = CLAIMS["critic_delay_warm"]
    run = {**_run([0.95] * 20 + [0.5] * 40), "zero_var_frac": np.zeros(60), "template_mi": np.zeros(60)}
    m = c.metrics(run)
    assert m["collapsed_floor"] == 1.0 and m["collapsed"] == 0.0 and m["forgot"] == 1.0
    assert 15 <= m["t_floor_collapse"] <= 25
    assert c.config("warm_critic", False)["critic_warmup_steps"] == 30 and c.config("critic", False)["estimator"] == "gae"
