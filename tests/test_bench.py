"""The benchmark scripts: the GPU one exits cleanly without CUDA, the train bench reports its ratios."""
import importlib.util
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def load_gpu_bench():
    spec = importlib.util.spec_from_file_location("llm_gpu", ROOT / "benchmarks" / "llm_gpu.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA path")
def test_gpu_bench_exits_cleanly_without_cuda(capsys):
    assert load_gpu_bench().main([]) == 0
    assert "no CUDA device" in capsys.readouterr().out


def test_gpu_bench_credit_batch_layout():
    b = load_gpu_bench().credit_batch("cpu", B=16, H=3, n_pol=2, n_obs=1, G=4)
    assert (b.B, b.T, b.H) == (16, 9, 3)
    assert b.policy_mask[0].tolist() == [True, True, False] * 3 and b.turn_id[0].tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert (b.turn_reward[:, :-1] == 0).all() and b.group.tolist() == [i // 4 for i in range(16)]


def test_train_bench_reports_ratios(capsys):
    from toyrl.lab.bench.train import main
    out = main(["--think", "2", "--steps", "1"])
    m = out[2]
    assert m["per_turn"] >= 1 and m["gen_over_fwd"] > 0 and m["step_over_fb"] >= 1
    assert m["projected_200"] == pytest.approx(200 * m["step"])
    assert 0 < m["model"] < m["gen"] and m["model_over_fwd"] == pytest.approx(m["model"] / m["fwd"])
    assert m["calls"] > 16                          # one prefill per turn plus the decode steps
    assert 0 < m["sample"] < m["gen"] - m["model"] and m["sample_over_fwd"] == pytest.approx(m["sample"] / m["fwd"])
    out = capsys.readouterr().out
    assert "gen/fwd" in out and "sample/fwd" in out


def test_call_timer_restores_a_module_function():
    import toyrl.policies.toy as toy
    from toyrl.lab.bench.train import CallTimer
    original = toy.sample_step
    with CallTimer(toy, ("sample_step", "no_such_function")) as t:
        assert toy.sample_step is not original and t.names == ["sample_step"]
    assert toy.sample_step is original and t.calls == 0 and t.seconds == 0.0


def test_trunk_timer_counts_and_restores():
    import torch
    from toyrl.lab.bench.train import TrunkTimer
    from toyrl.policies.toy import PRESETS, ToyTransformer, ToyTransformerConfig
    pol = ToyTransformer(ToyTransformerConfig(vocab_size=12, max_len=16, **PRESETS["tiny"]))
    x, m = torch.ones(2, 3, dtype=torch.long), torch.ones(2, 3, dtype=torch.bool)
    with TrunkTimer(pol) as t:
        pol(x, m)
        pol(x, m)
    assert t.calls == 2 and t.seconds > 0
    assert "_trunk" not in vars(pol)                 # the method is back
    pol(x, m)
    assert t.calls == 2
    with TrunkTimer(pol) as t:                       # generation: one prefill, then one _direct per new token
        pol.generate(x, m, 3)
    assert t.calls == 3 and "_direct" not in vars(pol)


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


def test_smollm2_bench_report_structure(tmp_path, capsys):
    """The SmolLM2 bench on a tiny random Llama (hf:DIR): each phase of the doors step has a time, a floor and their
    ratio, the rollout and update totals are their phases' sums, the floor's rates are printed, and both
    single-turn steps ran (or say why not)."""
    pytest.importorskip("transformers")
    from conftest import make_local_model
    from toyrl.lab.bench import smollm2
    path = make_local_model(tmp_path / "m", "llama", chat=True)
    m = smollm2.main(["--policy", f"hf:{path}", "--steps", "1", "--bc-steps", "1", "--threads", "1",
                      "--peer-steps", "1"])
    ph = m["phases"]
    assert list(ph) == ["prefill", "decode", "rollout, outside the model", "forward (teacher-forced, with the loss)",
                        "backward", "optimizer (AdamW)"]
    assert all(t > 0 for t, _ in ph.values()) and all(f > 0 for k, (_, f) in ph.items() if "outside" not in k)
    assert m["rollout_s"] == pytest.approx(sum(ph[k][0] for k in list(ph)[:3]))
    assert m["rollout_floor"] == pytest.approx(ph["prefill"][1] + ph["decode"][1])
    assert m["update_floor"] == pytest.approx(sum(ph[k][1] for k in list(ph)[3:]))
    assert m["floor_100"] == pytest.approx(100 * (m["rollout_floor"] + m["update_floor"]))
    assert m["batch"] == 16 and 0 < m["update_positions"] <= m["update_padded"] and len(m["success"]) == 1
    assert set(m["peak_gb"]) == {"rollout", "update"} and m["gen_tok_s"] > 0 and m["hf_generate_tok_s"] > 0
    tr, toy = m["peer"]["trl"], m["peer"]["toyrl"]
    assert toy["step_s"] > 0 and toy["peak_gb"] > 0.05 and len(toy["prompts"]) == 2
    assert 1 <= toy["reply_tokens"] <= smollm2.REPLY
    assert ("error" in tr) != ("step_s" in tr)                   # a time and a peak, or why TRL did not run
    out = capsys.readouterr().out
    assert "| phase (last RL step) | seconds | floor | ratio |" in out and "| **rollout** |" in out
    assert "| **update** |" in out and "read bandwidth" in out and "GEMM GFLOPS" in out
    assert "at the floor" in out and "single-turn GRPO step, toyrl (own process)" in out
    assert "load " in out and "1 thread(s)" in out


def test_peak_rss_reset_and_phases():
    """A phase's peak covers what it allocated; the next phase's mark starts again from the current size."""
    import numpy as np
    from toyrl.lab.bench.smollm2 import PhaseMeter, peak_rss_gb
    meter = PhaseMeter()
    with meter.phase("big"):
        a = np.ones(50_000_000)                                  # 400 MB touched
        del a
    with meter.phase("small"):
        np.ones(1000).sum()
    assert meter.peak_gb["big"] - meter.peak_gb["small"] > 0.3 and meter.peak_gb["small"] <= peak_rss_gb() + 0.01
    assert set(meter.seconds) == {"big", "small"}
