"""One-shot GPU benchmark: credit estimators on 1M tokens against the device's memory-bandwidth
floor, and rollout / update throughput of TinyLM and of a ~100M-parameter random Hugging Face model
(Llama-style, built and saved locally: nothing is downloaded).

    python benchmarks/llm_gpu.py                      # needs CUDA; fp32 and bf16 autocast
    python benchmarks/llm_gpu.py --device cpu --small # a quick functional check without a GPU

Credit: a TurnBatch of 8192 rollouts x 128 tokens (16 turns of 4 policy + 4 observation tokens,
groups of 8, 63-bit state keys) on the device; each estimator's median time is printed beside the
floor measured in the same run: one ``torch.cumsum`` over a (B, T) float tensor (a read and a
write of 4 MB), and the bandwidth it implies.

Training: for each policy and precision a few GRPO steps of 8 tasks x 8 rollouts (GridWorld 4x4 up
to 5 turns, last_k context) through ``toyrl.train.Trainer``; prints the median tokens/s of the
rollout (generated tokens / rollout time) and of the update (generated tokens / recompute +
backward time, per policy token trained). Without CUDA (and without ``--device cpu``) it prints
a message and exits with code 0.

SmolLM2 (``--smollm2``; needs ``toyrl models fetch smollm2`` first): notebook 9's pair run of the real pretrained
LLM (``toyrl.viz.small_llm.run_pair``: bandit_chain, P=2 x G=4, 8 LoRA BC steps, then GRPO) for ``--smollm2-steps``
steps (default 100) on the device, LoRA r 8 and every weight in full, each stored as
``OUT/pair_smollm2_gpu[_full]__seed0.json`` (``--out``, default ``data/runs/small_llm``), and what a step and 100
steps cost. The device machines reach no package index: the model directory must be there already.
"""
import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from toyrl.train import TrainConfig, Trainer


def make_random_hf(path: str, hidden: int = 768, layers: int = 12, vocab: int = 8000) -> int:
    """Save a random Llama-style causal LM (~100M parameters at the defaults) and a byte-level BPE
    tokenizer trained on env texts to ``path``; returns the parameter count."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    from toyrl.envs.experts import load_demos
    texts = [t["observation"] + " " + t["action"] for env in ("gridworld", "mock_search") for ep in load_demos(env)
             for t in ep["turns"]]
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<|endoftext|>"],
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=int(hidden * 8 / 3) // 64 * 64,
                      num_hidden_layers=layers, num_attention_heads=max(1, hidden // 64),
                      num_key_value_heads=max(1, hidden // 64), max_position_embeddings=2048,
                      bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id)
    model = LlamaForCausalLM(cfg)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return sum(p.numel() for p in model.parameters())


def credit_batch(device: str, B: int = 8192, H: int = 16, n_pol: int = 4, n_obs: int = 4, G: int = 8):
    """A (B, H * (n_pol + n_obs)) TurnBatch: every turn n_pol policy then n_obs observation tokens."""
    from toyrl.batch import TurnBatch
    g = torch.Generator().manual_seed(0)
    per = n_pol + n_obs
    T = H * per
    turn_id = (torch.arange(T) // per).expand(B, T).contiguous()                     # (B, T)
    policy_mask = (torch.arange(T) % per < n_pol).expand(B, T).contiguous()
    reward = torch.zeros(B, H)
    reward[:, -1] = (torch.rand(B, generator=g) < 0.5).float()                       # sparse outcome
    keys = torch.randint(0, 2**62, (B // G, H), generator=g).repeat_interleave(G, 0)
    keys = torch.where(torch.rand(B, H, generator=g) < 0.3, torch.randint(0, 2**62, (B, H), generator=g), keys)
    b = TurnBatch(tokens=torch.zeros(B, T, dtype=torch.long), policy_mask=policy_mask, turn_id=turn_id,
                  old_logp=torch.zeros(B, T), turn_mask=torch.ones(B, H, dtype=torch.bool), turn_reward=reward,
                  group=torch.arange(B) // G, state_key=keys, values=torch.rand(B, H, generator=g))
    return b.to(device)


def timed(fn, device: str, rounds: int = 7) -> float:
    """Median seconds of ``fn()`` (after one warm-up call), synchronizing CUDA around each call."""
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    fn()
    out = []
    for _ in range(rounds):
        sync()
        t = time.perf_counter()
        fn()
        sync()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def bench_credit(device: str) -> None:
    from toyrl.credit import ESTIMATORS
    b = credit_batch(device)
    x = torch.rand(b.B, b.T, device=device)
    floor = timed(lambda: torch.cumsum(x, 1), device)
    gbs = 2 * x.numel() * 4 / floor / 1e9
    print(f"credit on {b.B} x {b.T} = {b.B * b.T / 1e6:.2f}M tokens ({device}); floor: torch.cumsum over the "
          f"same (B, T) float32 tensor {1e3 * floor:.3f} ms ({gbs:.0f} GB/s read + write)")
    for name in ("grpo", "rloo", "gigpo", "reinforce_pp", "gae", "bilevel_gae", "turn_gae"):
        t = timed(lambda: ESTIMATORS[name](b), device)
        print(f"  {name:14s} {1e3 * t:8.3f} ms  = {t / floor:6.1f} x the floor")


def bench(policy: str, device: str, autocast, steps: int) -> dict:
    cfg = TrainConfig(env="gridworld", env_kwargs={"map_name": "4x4"}, policy=policy, max_turns=5, context="last_k",
                      context_k=1, group_size=8, prompts_per_step=8, lr=1e-5, steps=steps, device=device,
                      progress=False)
    tr = Trainer(cfg)
    if autocast:
        tr.policy.autocast_dtype = torch.bfloat16
    rows = []
    for _ in range(steps + 1):
        rows.append(tr.step())
        if device.startswith("cuda"):
            torch.cuda.synchronize()
    rows = rows[1:]
    med = statistics.median
    return {"rollout_s": med(r["time_rollout"] for r in rows),
            "rollout_tok_s": med(r["tokens_generated"] / r["time_rollout"] for r in rows),
            "update_s": med(r["time_recompute"] + r["time_update"] for r in rows),
            "update_tok_s": med(r["tokens_generated"] / (r["time_recompute"] + r["time_update"]) for r in rows)}


def bench_smollm2(device: str, steps: int, out_dir: str) -> list:
    """notebook 9's SmolLM2 pair run on ``device``, with LoRA and in full; prints per-step seconds and the cost of
    100 steps; returns the records (empty, saying why, when the model is not fetched)."""
    from toyrl.policies.zoo import is_fetched, missing_message
    from toyrl.viz.small_llm import run_pair
    if not is_fetched("smollm2"):
        print(f"SmolLM2 skipped: {missing_message('smollm2')}")
        return []
    out = []
    for tag, lora_r in (("", 8), ("_full", 0)):
        if device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()                        # each run's own peak
        rec = run_pair("smollm2", steps=steps, out_dir=out_dir, name=f"pair_smollm2_gpu{tag}", device=device,
                       lora_r=lora_r)
        rows = rec["rows"][1:] or rec["rows"]                            # the first step warms the kernels up
        gen = statistics.median(r["time_rollout"] for r in rows)
        upd = statistics.median(r["time_recompute"] + r["time_update"] for r in rows)
        mem = torch.cuda.max_memory_allocated() / 2**30 if device.startswith("cuda") else float("nan")
        print(f"SmolLM2 {'LoRA r 8' if lora_r else 'full'} on {device}: format-valid "
              f"{rec['warm']['valid_before']:.2f} -> {rec['warm']['valid_after']:.2f} after BC; per step "
              f"generation {gen:.2f} s, update {upd:.2f} s; 100 steps {100 * (gen + upd) / 60:.1f} min; "
              f"success last 10 steps {statistics.mean(r['success_rate'] for r in rec['rows'][-10:]):.2f}; "
              f"peak memory {mem:.1f} GiB")
        out.append(rec)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--small", action="store_true", help="a 2-layer HF model instead of ~100M parameters")
    p.add_argument("--smollm2", action="store_true", help="also notebook 9's SmolLM2 pair run (model fetched)")
    p.add_argument("--smollm2-steps", type=int, default=100, help="GRPO steps of each SmolLM2 run")
    p.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "data" / "runs" / "small_llm"),
                   help="where the SmolLM2 runs are written")
    a = p.parse_args(argv)
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA device here: nothing to measure (run with --device cpu --small for a functional check)")
        return 0
    if a.device.startswith("cuda"):
        print(torch.cuda.get_device_name(0))
    bench_credit(a.device)
    with tempfile.TemporaryDirectory() as d:
        n = make_random_hf(d, *((128, 2, 2000) if a.small else ()))
        print(f"random HF model: {n / 1e6:.1f}M parameters")
        for name, policy in (("TinyLM", "tinylm"), ("HF random", f"hf:{d}")):
            for autocast in (False, True):
                t = time.perf_counter()
                r = bench(policy, a.device, autocast, a.steps)
                print(f"{name:10s} {'bf16' if autocast else 'fp32'}: rollout {r['rollout_s']:.2f} s "
                      f"({r['rollout_tok_s']:.0f} generated tokens/s), update {r['update_s']:.2f} s "
                      f"({r['update_tok_s']:.0f} policy tokens/s); "
                      f"{a.steps + 1} steps in {time.perf_counter() - t:.1f} s")
    if a.smollm2:
        bench_smollm2(a.device, a.smollm2_steps, a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
