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
    assert "gen/fwd" in capsys.readouterr().out


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
