"""One-shot GPU benchmark: rollout and update throughput of TinyLM and of a ~100M-parameter random
Hugging Face model (Llama-style, built and saved locally: nothing is downloaded).

    python benchmarks/llm_gpu.py                      # needs CUDA; fp32 and bf16 autocast
    python benchmarks/llm_gpu.py --device cpu --small # a quick functional check without a GPU

For each policy and precision it runs a few GRPO steps of 8 tasks x 8 rollouts (GridWorld 4x4 up to
5 turns, last_k context) through ``toyrl.train.Trainer`` and prints the median tokens/s of the
rollout (generated tokens / rollout time) and of the update (generated tokens / recompute +
backward time, per policy token trained).
"""
import argparse
import statistics
import tempfile
import time

import torch

from toyrl.train import TrainConfig, Trainer


def make_random_hf(path: str, hidden: int = 768, layers: int = 12, vocab: int = 8000) -> int:
    """Save a random Llama-style causal LM (~100M parameters at the defaults) and a byte-level BPE
    tokenizer trained on env texts to ``path``; returns the parameter count."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    from toyrl.demos import load_demos
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


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--small", action="store_true", help="a 2-layer HF model instead of ~100M parameters")
    a = p.parse_args(argv)
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run with --device cpu --small for a functional check")
    if a.device.startswith("cuda"):
        print(torch.cuda.get_device_name(0))
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


if __name__ == "__main__":
    main()
