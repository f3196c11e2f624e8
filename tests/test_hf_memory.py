"""What keeps an hf policy's update small: gradient checkpointing (``TrainConfig.grad_ckpt``, ``HFPolicy``'s
``grad_ckpt``) and the heap setting of ``toyrl.policies.hf_load.compact_heap``.

Checkpointing must change memory only: the same log-probs, entropies and gradients (within 1e-5), fewer bytes
kept for backward, and generation that still reads the KV cache in training mode.
"""
import sys

import pytest
import torch

from toyrl.policies import HFPolicy
from toyrl.policies.hf_load import HEAP_MMAP_THRESHOLD, compact_heap
from toyrl.train import TrainConfig
from toyrl.train.build import check_grad_ckpt, policy_kwargs

from conftest import make_local_model

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    return {k: make_local_model(tmp_path_factory.mktemp(k), k, chat=k == "llama") for k in ("gpt2", "llama")}


def batch():
    """Two rows, the first left-padded, the second with a hole: (tokens (2, 9), mask (2, 9))."""
    g = torch.Generator().manual_seed(3)
    tok = torch.randint(3, 200, (2, 9), generator=g)
    mask = torch.ones(2, 9, dtype=torch.bool)
    mask[0, :2] = False
    mask[1, 4] = False
    return tok, mask


def scored(policy, temperature=1.0):
    """(logp, entropy, {name: grad}) of ``batch()`` in training mode, and the bytes saved for backward. The seed
    is set first: GPT-2's dropout draws the same masks (checkpointing replays the random state it started with)."""
    policy.train()
    torch.manual_seed(0)
    policy.zero_grad(set_to_none=True)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.untyped_storage().nbytes()) or t,
                                                  lambda t: t):
        logp, ent = policy.logprobs(*batch(), temperature=temperature)
    (logp.sum() + 0.3 * ent.sum()).backward()
    grads = {n: p.grad.clone() for n, p in policy.named_parameters() if p.grad is not None}
    return logp.detach(), ent.detach(), grads, sum(saved)


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
@pytest.mark.parametrize("lora", [None, {"r": 4}])
def test_grad_ckpt_changes_memory_not_numbers(kind, lora, dirs):
    if lora is not None:
        pytest.importorskip("peft")
    plain = HFPolicy.from_pretrained(dirs[kind], lora=lora)
    ckpt = HFPolicy.from_pretrained(dirs[kind], lora=lora, grad_ckpt=True)
    assert ckpt.model.is_gradient_checkpointing and not plain.model.is_gradient_checkpointing
    ckpt.load_state_dict(plain.state_dict())                  # LoRA adapters start random: the same ones
    lp0, en0, g0, kept0 = scored(plain, temperature=0.7)
    lp1, en1, g1, kept1 = scored(ckpt, temperature=0.7)
    torch.testing.assert_close(lp1, lp0, atol=1e-5, rtol=0)
    torch.testing.assert_close(en1, en0, atol=1e-5, rtol=0)
    assert g0.keys() == g1.keys() and len(g0) > 0
    for n in g0:
        torch.testing.assert_close(g1[n], g0[n], atol=1e-5, rtol=1e-4, msg=n)
    assert kept1 < 0.7 * kept0, (kept1, kept0)               # the blocks' intermediates are not kept


def test_generation_keeps_its_cache_in_training_mode(dirs):
    """A checkpointed block drops the cache in training mode; generate switches to eval for the call, so a turn
    fed after ``past`` samples what it does in eval mode, and the training mode is restored."""
    policy = HFPolicy.from_pretrained(dirs["llama"], grad_ckpt=True)
    ctx, mask = batch()

    def two_turns():
        g = torch.Generator().manual_seed(0)
        first = policy.generate(ctx, mask, 4, generator=g)
        second = policy.generate(ctx[:, -3:], mask[:, -3:], 4, generator=g, past=first.past)
        return first.tokens, second.tokens

    policy.eval()
    want = two_turns()
    policy.train()
    got = two_turns()
    assert policy.model.training
    for a, b in zip(got, want):
        assert torch.equal(a, b)


def test_trainconfig_switch_reaches_the_policy(dirs):
    from toyrl.train import Trainer
    cfg = TrainConfig(env="gridworld", env_kwargs={"map_name": "4x4"}, policy="hf:" + dirs["gpt2"], max_turns=2,
                      steps=1, group_size=2, prompts_per_step=2, lr=1e-3, context="last_k", context_k=1,
                      entropy_coef=0.01, grad_ckpt=True, progress=False)   # the entropy term: a gradient
    assert policy_kwargs(cfg)["grad_ckpt"] is True
    tr = Trainer(cfg)
    assert tr.policy.model.is_gradient_checkpointing
    row = tr.step()
    assert row["grad_norm"] > 0 and row["tokens_generated"] > 0
    assert "grad_ckpt" not in policy_kwargs(TrainConfig(policy="hf:" + dirs["gpt2"]))


def test_grad_ckpt_bad_values_name_the_argument(dirs):
    from toyrl.train import Trainer
    with pytest.raises(ValueError, match="grad_ckpt needs an hf policy"):
        Trainer(TrainConfig(policy="tiny", grad_ckpt=True, steps=1))
    with pytest.raises(ValueError, match="grad_ckpt must be true or false"):
        check_grad_ckpt("hf:" + dirs["gpt2"], "yes")
    with pytest.raises(ValueError, match="grad_ckpt must be True or False"):
        HFPolicy.from_pretrained(dirs["gpt2"], grad_ckpt=1)
    check_grad_ckpt("tiny", False)                            # off is fine for any policy


def test_cli_has_the_flag(capsys):
    from toyrl.cli import main as cli_main
    with pytest.raises(SystemExit):
        cli_main(["train", "--help"])
    assert "--grad-ckpt" in capsys.readouterr().out


def test_compact_heap():
    with pytest.raises(ValueError, match="threshold"):
        compact_heap(100)
    with pytest.raises(ValueError, match="threshold"):
        compact_heap(True)
    ok = compact_heap(HEAP_MMAP_THRESHOLD)
    if sys.platform.startswith("linux"):
        import ctypes.util
        libc = ctypes.util.find_library("c") or ""
        assert ok or "musl" in libc
    else:
        assert ok is False
    assert compact_heap(HEAP_MMAP_THRESHOLD) is ok            # a second call changes nothing


@pytest.mark.slow
def test_smollm2_lora_update_fits_the_budget():
    """SmolLM2-135M with LoRA r8 and gradient checkpointing: the update of a 2-turn multi-turn step (bench setting,
    batch 8) peaks under 2 GB resident in this process; glibc's default heap (no ``compact_heap``) kept over 2 GB at
    this length, and the budget for the 8-turn bench step is 2.5 GB."""
    from toyrl.lab.bench.smollm2 import SETTING, PhaseMeter
    from toyrl.policies.zoo import is_fetched
    from toyrl.train import Trainer
    if not is_fetched("smollm2"):
        pytest.skip("SmolLM2 is not fetched (run `toyrl models fetch smollm2`)")
    tr = Trainer(TrainConfig(**SETTING, lora_r=8, grad_ckpt=True, max_turns=2, steps=1, progress=False))
    meter = PhaseMeter()
    meter.watch(tr, "update", "update")
    row = tr.step()
    assert row["tokens_generated"] > 0 and meter.peak_gb["update"] < 2.0, meter.peak_gb


def test_heap_is_set_per_pass_on_cpu(dirs):
    """With ``grad_ckpt`` (the memory-first choice) a gradient pass hands mid-sized blocks back to the kernel and
    generation keeps them for the growing KV cache; without it the heap is left alone."""
    from toyrl.policies import hf_load
    assert not HFPolicy.from_pretrained(dirs["gpt2"]).heap
    policy = HFPolicy.from_pretrained(dirs["gpt2"], grad_ckpt=True)
    if not policy.heap:
        pytest.skip("no glibc here: the heap is left as it is")
    tok, mask = batch()
    with torch.no_grad():
        policy.logprobs(tok, mask)                             # no gradient: the setting is left as it was
    assert hf_load._heap_set["threshold"] == hf_load.DECODE_MMAP_THRESHOLD
    policy.logprobs(tok, mask)
    assert hf_load._heap_set["threshold"] == HEAP_MMAP_THRESHOLD
    policy.generate(tok, mask, 2)
    assert hf_load._heap_set["threshold"] == hf_load.DECODE_MMAP_THRESHOLD


def test_validate_names_grad_ckpt():
    """``TrainConfig.validate`` (the CLI's check before any work) rejects checkpointing on a toy policy and a non-bool."""
    from toyrl.train.checks import validate
    with pytest.raises(ValueError, match="grad_ckpt needs an hf policy"):
        validate(TrainConfig(grad_ckpt=True))
    with pytest.raises(ValueError, match="grad_ckpt must be true or false"):
        validate(TrainConfig(grad_ckpt="yes"))
