"""The long-horizon credit claims and notebook 13's functions: steps_to_halve and turn_contrast by hand,
a trajectory advantage's zero contrast against GiGPO's on a real snake batch, the warm starts the claims load, and
gap_table on made-up series."""
import json

import numpy as np
import pytest
import torch

from toyrl.batch import TurnBatch
from toyrl.credit import ESTIMATORS
from toyrl.lab.claims import CLAIMS
from toyrl.lab.claims.horizon import HORIZON_CLAIMS, TASKS, steps_to_halve
from toyrl.lab.claims.spec import run_job
from toyrl.train import Trainer
from toyrl.train.warmstart import WARMSTARTS, load_warmstart
from toyrl.lab.results import REPO
from toyrl.viz.horizon import arm_table, gap_table, horizon_config, ledger_series, turn_contrast


def test_steps_to_halve_by_hand():
    assert steps_to_halve([0.5, 0.6, 0.8, 0.9], w=1) == 2                      # level 0.75: first reached at step 2
    assert steps_to_halve([0.5, 0.5], w=1) == 2                                # never: censored at the run length
    assert steps_to_halve([0.2, 1.0, 1.0], w=2) == 1                           # means [0.2, 0.6, 1.0], level 0.6
    assert steps_to_halve([1.0, 1.0]) == 0                                     # nothing left to halve


def batch_of(turn_reward, turn_mask):
    tr = torch.tensor(turn_reward, dtype=torch.float32)
    tm = torch.tensor(turn_mask, dtype=torch.bool)
    B, H = tr.shape
    return TurnBatch(tokens=torch.zeros(B, 2, dtype=torch.long), policy_mask=torch.ones(B, 2, dtype=torch.bool),
                     turn_id=torch.zeros(B, 2, dtype=torch.long), old_logp=torch.zeros(B, 2), turn_mask=tm,
                     turn_reward=tr, group=torch.zeros(B, dtype=torch.long), state_key=torch.zeros(B, H, dtype=torch.long))


def test_turn_contrast_by_hand():
    b = batch_of([[0, 0, 0], [0, 0, 0], [0, 0, 1]], [[1, 1, 1], [1, 1, 0], [1, 1, 1]])
    adv = torch.tensor([[-1.0, -1.0, -1.0], [0.1, -2.0, 0.0], [1.0, 1.0, 1.0]])
    got = turn_contrast(b, adv, max_turns=4)
    assert got["episodes"] == 2 and got["per_episode"] == pytest.approx([0.0, -2.1])   # the docstring's values
    assert turn_contrast(b, adv, max_turns=3)["episodes"] == 1                 # a 3-turn failure hit the limit
    assert np.isnan(turn_contrast(batch_of([[1.0]], [[True]]), torch.zeros(1, 1))["contrast"])


def test_grpo_blames_every_turn_alike_gigpo_singles_out_the_fatal_one():
    tr = Trainer(horizon_config(5, steps=0, seed=3))
    b = tr.sample().batch
    grpo = ESTIMATORS["grpo"](b)
    gigpo = ESTIMATORS["gigpo"](b)
    g, s = turn_contrast(b, grpo), turn_contrast(b, gigpo)
    assert g["episodes"] >= 5                                                   # the clone falls often enough
    assert max(abs(x) for x in g["per_episode"]) < 1e-6                       # one number per episode
    assert s["contrast"] < 0                              # measured: -0.04 to -0.20 on seeds 0-3 of snake 5x5 and 7x7


@pytest.mark.parametrize("name", ["snake5", "snake7", "snake9", "fork9"])
def test_credit_warm_starts_ship_and_load(name):
    ck = load_warmstart(name)
    assert ck["settings"] == WARMSTARTS[name] and ck["settings"]["bc_noise"] == 0.05
    assert 0.1 < ck["reasoning"]["intact"] < 0.9                               # competent and imperfect


@pytest.mark.parametrize("claim", [c.name for c in HORIZON_CLAIMS])
def test_every_arm_of_the_horizon_claims_runs(claim):
    c = CLAIMS[claim]
    for arm in c.arms:
        cfg = {**c.config(arm, quick=True), "steps": 2, "prompts_per_step": 2, "bc_steps": min(2, c.base.get("bc_steps", 0))}
        if cfg.get("eval_every"):
            cfg.update(eval_every=1, eval_episodes=4)
        s = run_job((cfg, 7, c.probe))
        m = c.metrics(s)
        assert np.isfinite(m["final_success"]) and 0 <= m["steps_to_halve"] <= 2, (arm, m)


def test_gap_table_on_made_up_series():
    up = {"success_rate": [0.5] + [0.9] * 9}
    flat = {"success_rate": [0.5] * 10}
    series = {"grpo_s5": {0: flat, 1: flat}, "gigpo_s5": {0: up, 1: up}}
    g = gap_table(series)
    assert list(g) == ["s5"] and g["s5"]["seeds"] == 2
    assert g["s5"]["gap"][0] == pytest.approx(0.4) and g["s5"]["gap"][1] < 0    # higher, and sooner
    assert set(TASKS) == {"s5", "s7", "s9", "fork"}


def test_arm_table_gives_the_ledgers_own_arm_means():
    record = json.loads((REPO / "data" / "claims" / "turn_critic.json").read_text())
    t = arm_table("turn_critic", ledger_series("turn_critic"), ("final_success", "steps_to_halve"))
    assert set(t) == set(record["result"]["arms"])
    for arm, (fin, steps) in t.items():
        m = record["result"]["arms"][arm]
        assert fin == pytest.approx(m["final_success"]["mean"], abs=1e-4)
        assert steps == pytest.approx(m["steps_to_halve"]["mean"], abs=1e-4)
    with pytest.raises(ValueError, match="name"):
        arm_table("no_such_claim", {})
