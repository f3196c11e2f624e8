"""The step's floor: FLOPs and bytes counted by hand on tiny models, the rate lookup, and the clock's accounting
of a real step (its update positions are the batch's real tokens)."""
import pytest

from toyrl.lab.bench.floor import Dims, Rates, adamw_bytes, backward_flops, linear_shapes

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    from conftest import make_local_model
    return make_local_model(tmp_path_factory.mktemp("llama"), "llama", chat=True)


def test_dims_of_a_tiny_llama_by_hand(llama):
    """d 32, f 64, 2 layers, 2 heads of 16, 1 KV head: q 32x32, k and v 32x16, o 32x32, gate / up / down 32x64
    -> 1024 + 512 + 512 + 1024 + 3 x 2048 = 9216 a layer, 18432 in all."""
    model = transformers.AutoModelForCausalLM.from_pretrained(llama)
    d = Dims.of(model)
    assert (d.layers, d.d_attn, d.linear, d.d_head_in) == (2, 32, 18432, 32)
    assert d.head == model.config.vocab_size * 32 and d.bytes_per_weight == 4
    assert sorted(d.layer_shapes) == sorted([(32, 32), (32, 16), (32, 16), (32, 32), (32, 64), (32, 64), (64, 32)])
    assert d.weight_bytes == 4 * (18432 + d.head)


def test_dims_of_a_tiny_gpt2_count_its_conv1d_layers(tmp_path):
    """GPT-2's Conv1D: c_attn 32 -> 96, c_proj 32 -> 32, c_fc 32 -> 128, mlp c_proj 128 -> 32: 12288 a layer."""
    from conftest import make_local_model
    model = transformers.AutoModelForCausalLM.from_pretrained(make_local_model(tmp_path, "gpt2"))
    assert Dims.of(model).linear == 2 * 12288
    assert sorted(linear_shapes(model.get_decoder().h[0])) == [(32, 32), (32, 96), (32, 128), (128, 32)]


def test_flops_and_bytes_by_hand():
    d = Dims(layers=2, d_attn=4, linear=10, head=40, d_head_in=4)
    assert d.linear_flops(3) == 60 and d.attention_flops(3) == 96 and d.head_flops(2) == 160
    assert backward_flops(10, 1, 2, full=False) == 14 and backward_flops(10, 1, 2, full=True) == 26
    assert adamw_bytes(1000) == 28000


def test_floor_is_the_larger_bound_at_the_nearest_measured_rows():
    r = Rates(gemm={16: 1e9, 1024: 1e11}, bandwidth=1e10)
    assert r.rate(100) == 1e9 and r.rate(200) == 1e11 and r.rate(1) == 1e9 and r.rate(10 ** 6) == 1e11
    assert r.floor(2e9, 16) == pytest.approx(2.0)                    # compute-bound
    assert r.floor(1e6, 16, bytes_read=5e10) == pytest.approx(5.0)   # memory-bound: the weights read once


def test_rates_measured_are_positive_and_cover_the_rows():
    d = Dims(layers=1, d_attn=8, linear=8 * 16 + 16 * 8, head=0, d_head_in=8, layer_shapes=[(8, 16), (16, 8)])
    r = Rates.measure(d, rows=(4, 64), reps=1)
    assert set(r.gemm) == {4, 64} and all(v > 0 for v in r.gemm.values()) and r.bandwidth > 0


def test_the_clock_counts_the_real_positions_of_a_real_step(llama):
    """Through one Trainer step on doors, the clock's forward positions are the batch's real tokens (unpadded; two
    groups of one row: no prompt is shared), its decode calls feed one token a row, and the policy's and the trainer's
    own methods come back after the steps."""
    from toyrl.lab.bench.floor import Rates
    from toyrl.lab.bench.smollm2 import PhaseMeter, StepClock, step_setting, timed_steps
    from toyrl.train import TrainConfig, Trainer
    tr = Trainer(TrainConfig(**{**step_setting(), "policy": f"hf:{llama}", "prompts_per_step": 2, "group_size": 1,
                                "lora_r": 4}, steps=1, progress=False))
    dims = Dims.of(tr.policy.model)
    clock = StepClock(tr.policy, dims, Rates(gemm={1: 1e9}, bandwidth=1e9))
    _, _, ro = timed_steps(tr, clock, PhaseMeter(), 1)
    b = ro.batch
    fw = clock.calls["forward"]
    assert fw["positions"] == int((b.turn_id >= 0).sum()) and fw["padded"] >= fw["positions"]
    assert fw["linear"] == dims.linear_flops(fw["positions"])
    dec = clock.calls["decode"]
    assert dec["padded"] == 2 * (dec["calls"] // 2) and dec["positions"] <= dec["padded"]  # B 2, one token a row
    assert clock.calls["prefill"]["floor"] > 0
    assert "_decoder" not in vars(tr.policy) and "_head" not in vars(tr.policy)          # the policy's own again
    assert not {"collect", "minibatch_loss", "update"} & set(vars(tr))                   # the trainer's own again
