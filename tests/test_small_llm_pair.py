"""Notebook 9's pair (TinyLM and SmolLM2 through one pipeline): the warm-start figures, the stored run's record,
the stored runs themselves, and the GPU benchmark's SmolLM2 section (its no-model path and what it prints)."""
import importlib.util
import json
from pathlib import Path

import pytest
import torch

from toyrl.train.optim import BC_LR, LR
from toyrl.viz.small_llm import PAIR, PAIR_STEPS, RUNS_DIR, load_pair, run_pair, warm_start

ROOT = Path(__file__).resolve().parents[1]
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


def load_gpu_bench():
    spec = importlib.util.spec_from_file_location("llm_gpu", ROOT / "benchmarks" / "llm_gpu.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_gpu_bench_smollm2_without_the_model(monkeypatch, capsys):
    import toyrl.policies.zoo as zoo
    monkeypatch.setattr(zoo, "is_fetched", lambda name: False)
    assert load_gpu_bench().bench_smollm2("cpu", 1, "unused") == []
    assert "SmolLM2 skipped: " in capsys.readouterr().out


def test_gpu_bench_smollm2_runs_lora_and_full(monkeypatch, capsys, tmp_path):
    """Both runs go to run_pair with the device, a name each and their LoRA rank; the cost line is their medians."""
    import toyrl.policies.zoo as zoo
    import toyrl.viz.small_llm as small_llm
    monkeypatch.setattr(zoo, "is_fetched", lambda name: True)
    calls = []

    def fake(policy, steps, out_dir, name, **fields):
        calls.append((policy, steps, out_dir, name, fields))
        rows = [{"time_rollout": 9.0, "time_recompute": 9.0, "time_update": 9.0, "success_rate": 0.0}] + \
               [{"time_rollout": 1.0, "time_recompute": 0.5, "time_update": 1.5, "success_rate": 0.5}] * 10
        return {"warm": {"valid_before": 0.1, "valid_after": 0.9}, "rows": rows}
    monkeypatch.setattr(small_llm, "run_pair", fake)
    recs = load_gpu_bench().bench_smollm2("cpu", 11, str(tmp_path))
    assert [c[3] for c in calls] == ["pair_smollm2_gpu", "pair_smollm2_gpu_full"] and len(recs) == 2
    assert [c[4] for c in calls] == [{"device": "cpu", "lora_r": 8}, {"device": "cpu", "lora_r": 0}]
    out = capsys.readouterr().out
    assert "generation 1.00 s, update 2.00 s; 100 steps 5.0 min; success last 10 steps 0.50" in out
