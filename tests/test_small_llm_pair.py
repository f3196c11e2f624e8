"""Notebook 9's pair (TinyLM and SmolLM2 through one pipeline): the warm-start figures, the stored run's record,
and the stored runs themselves (the GPU benchmark's SmolLM2 section: tests/test_bench.py)."""
import json

import pytest
import torch

from toyrl.train.defaults import BC_LR, LR
from toyrl.viz.small_llm import PAIR, PAIR_STEPS, RUNS_DIR, load_pair, run_pair, warm_start

SLICE = dict(group_size=2, prompts_per_step=1, max_turns=2)


def test_pair_is_one_pipeline():
    """The two runs differ only in the policy and what it needs (LoRA, its warm start's length, TinyLM's RL rate)."""
    own = {"policy", "lora_r", "bc_steps", "lr"}
    shared = {k: v for k, v in PAIR["tinylm"].items() if k not in own}
    assert shared == {k: v for k, v in PAIR["smollm2"].items() if k not in own}
    assert shared["env"] == "bandit_chain" and shared["system"] and shared["context"] == "full"


def test_warm_start_measures_before_and_after():
    tr, warm = warm_start("tinylm", seed=100, bc_steps=3, **SLICE)
    assert tr.B == 2 and tr.cfg.bc_steps == 3 and tr.cfg.lr == PAIR["tinylm"]["lr"]
    assert len(warm["bc_losses"]) == 3 and warm["bc_s_per_step"] > 0
    assert 0.0 <= warm["valid_before"] <= 1.0 and 0.0 <= warm["valid_after"] <= 1.0


def test_run_pair_record(tmp_path):
    rec = run_pair("tinylm", seed=100, steps=2, out_dir=tmp_path, name="x", bc_steps=2, **SLICE)
    assert len(rec["rows"]) == 2 and rec["threads"] == torch.get_num_threads() and rec["seconds"] > 0
    assert rec["config"]["lr"] == 3e-4 and rec["config"]["bc_lr"] == BC_LR["scratch"]    # the resolved rates
    assert json.loads((tmp_path / "x__seed100.json").read_text()) == json.loads(json.dumps(rec))
    assert {"format_valid_rate", "success_rate", "time_rollout", "time_update"} <= set(rec["rows"][0])
    with pytest.raises(FileNotFoundError, match="python -m toyrl.viz.small_llm"):
        load_pair(out_dir=tmp_path)


def test_stored_pair_runs_are_the_registered_setting():
    runs = load_pair()
    for policy, rec in runs.items():
        cfg = rec["config"]
        assert all(cfg[k] == v for k, v in PAIR[policy].items()), policy
        assert cfg["seed"] == 0 and len(rec["rows"]) == PAIR_STEPS and len(rec["warm"]["bc_losses"]) == cfg["bc_steps"]
    assert runs["smollm2"]["config"]["lr"] == LR["hf_lora"] and runs["smollm2"]["config"]["bc_lr"] == BC_LR["hf_lora"]
    assert (RUNS_DIR / "pair_smollm2__seed0.json").exists()
