"""Benchmark: a real pretrained LLM (SmolLM2-135M-Instruct) as the policy on CPU, and what a warm start buys.

    toyrl bench smollm2 [--steps 2] [--bc-steps 8] [--lora-r 8] [--threads 2]

Setting: bandit_chain (3 stages, 4 arms, 6 turns), 2 tasks x 4 rollouts = batch 8, full context with the model's
KV cache kept across turns (each turn feeds only the env's new tokens, ``toyrl.policies.hf.HFPast``), replies of
up to 24 tokens, the instruction ``SYSTEM`` as the chat's system message. It reports:

- the format-valid turn rate (turns whose reply parses as ``pull[N]``) of one batch before the warm start, after
  ``--bc-steps`` of behaviour cloning on the expert's turns in the model's own chat format (at
  ``toyrl.train.optim.BC_LR``: 1e-4 in full, 1e-3 with ``--lora-r``), and the BC loss and time per step;
- per RL step (GRPO): generation (rollout) seconds and tokens per second, the update (recompute + backward +
  AdamW) seconds, the format-valid rate and the gradient norm; and the projected time of 100 such steps.

Without the model it prints why and what to run (``toyrl models fetch smollm2``), and exits 0.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

SYSTEM = ("You play a game of arms numbered from 0. Each turn, reply with exactly one action written as pull[N], "
          "where N is an arm number, and nothing else.")
"""the instruction of the benchmark's runs (and of the slow end-to-end test)"""
SETTING = dict(env="bandit_chain", policy="smollm2", system=SYSTEM, group_size=4, prompts_per_step=2,
               context="full", lr=1e-5)
"""TrainConfig fields of the benchmark (batch 8; lr 1e-5: an RL step must not undo a pretrained model)"""


def format_valid(ro) -> float:
    """The fraction of a rollout's valid turns whose reply parsed (not void). Example: 3 of 4 turns parsed -> 0.75."""
    b = ro.batch
    n = int(b.turn_mask.sum())
    return float((~b.void_turn & b.turn_mask).sum()) / n if n else 0.0


def skip_reason() -> str:
    """Why the benchmark cannot run here ("" when it can): the model not fetched, or transformers missing."""
    from toyrl.policies.zoo import is_fetched, missing_message
    try:
        import transformers  # noqa: F401
    except ImportError:
        return "smollm2 bench skipped: transformers is missing (pip install 'toyrl[smollm2]')"
    return "" if is_fetched("smollm2") else f"smollm2 bench skipped: {missing_message('smollm2')}"


def measure(steps: int, bc_steps: int, lora_r: int = 0, seed: int = 0) -> dict:
    """The benchmark's figures (see the module docstring) from one Trainer."""
    from toyrl.train import TrainConfig, Trainer
    tr = Trainer(TrainConfig(**SETTING, lora_r=lora_r, bc_steps=bc_steps, steps=steps, seed=seed, progress=False))
    out = {"valid_before": format_valid(tr.sample())}
    if bc_steps:
        t0 = time.perf_counter()
        out["bc_losses"] = tr.behaviour_clone(bc_steps)
        out["bc_s_per_step"] = (time.perf_counter() - t0) / bc_steps
        out["valid_after"] = format_valid(tr.sample())
    rows = [tr.step() for _ in range(steps)]
    med = lambda k: float(np.median([r[k] for r in rows]))           # noqa: E731
    out.update(gen_s=med("time_rollout"), update_s=med("time_recompute") + med("time_update"),
               tokens=med("tokens_generated") if "tokens_generated" in rows[0] else float("nan"),
               valid_rl=med("format_valid_rate"), grad_norm=med("grad_norm"))
    out["tok_per_s"] = out["tokens"] / out["gen_s"] if out["gen_s"] else float("nan")
    out["projected_100"] = 100 * (out["gen_s"] + out["update_s"])
    return out


def report(m: dict, threads: int) -> str:
    """The benchmark's printed lines."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lines = [f"SmolLM2-135M on bandit_chain, batch 8 (2 x 4), KV cache across turns, {threads} thread(s), "
             f"load {load:.2f}",
             f"format-valid turns before the warm start: {m['valid_before']:.2f}"]
    if "valid_after" in m:
        lines.append(f"after {len(m['bc_losses'])} BC steps ({m['bc_s_per_step']:.1f} s each, loss "
                     f"{m['bc_losses'][0]:.2f} -> {m['bc_losses'][-1]:.2f}): {m['valid_after']:.2f}")
    lines.append(f"per RL step: generation {m['gen_s']:.1f} s ({m['tokens']:.0f} tokens, {m['tok_per_s']:.1f} tok/s), "
                 f"update {m['update_s']:.1f} s, format-valid {m['valid_rl']:.2f}, grad norm {m['grad_norm']:.3g}")
    lines.append(f"projected 100 steps: {m['projected_100'] / 60:.0f} min")
    return "\n".join(lines)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(prog="toyrl bench smollm2", description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=2, help="RL steps (medians are reported)")
    p.add_argument("--bc-steps", type=int, default=8, help="behaviour-cloning steps of the warm start (0: none)")
    p.add_argument("--lora-r", type=int, default=0, help="LoRA rank (0: every weight trains)")
    p.add_argument("--threads", type=int, default=2, help="torch threads, pinned")
    a = p.parse_args(argv)
    reason = skip_reason()
    if reason:
        print(reason)
        return {}
    import torch
    torch.set_num_threads(a.threads)
    m = measure(a.steps, a.bc_steps, a.lora_r)
    print(report(m, torch.get_num_threads()))
    return m


if __name__ == "__main__":
    main()
