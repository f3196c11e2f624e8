"""Benchmark: a real pretrained LLM (SmolLM2-135M-Instruct) as the policy on CPU, beside ``model.generate`` and TRL.

    toyrl bench smollm2 [--steps 1] [--bc-steps 8] [--lora-r 8] [--threads 2] [--no-peer]

Setting: bandit_chain (4 stages, 4 arms, up to 8 turns), 2 tasks x 4 rollouts = batch 8, full context with the model's
KV cache kept across turns (each turn feeds only the env's new tokens, ``toyrl.policies.hf.HFPast``), replies of
up to 24 tokens, the instruction ``SYSTEM`` as the chat's system message, full fine-tune at lr 1e-5. From one run:

- the format-valid turn rate (replies that parse as ``pull[N]``) before and after ``--bc-steps`` of behaviour
  cloning on the expert's turns (at ``toyrl.train.optim.BC_LR``);
- per multi-turn RL step (GRPO): the rollout and the update (recompute + backward + AdamW), each with its time and
  its peak resident memory (``PhaseMeter``: the kernel's high-water mark, reset at the start of each phase);
- sampling speed on one batch: ``HFPolicy.generate`` beside the model's own ``model.generate`` on the same 8 prompts,
  24 new tokens each, no stop token, the same process and threads (tokens per second, best of two);
- the update beside a teacher-forced forward (no gradient) of the same batch;
- the same single-turn GRPO step (bandit_chain with one stage: one reply per episode) in toyrl and in TRL's
  ``GRPOTrainer`` (same model, batch 2 x 4, 24-token replies, lr 1e-5, full fine-tune, no KL), each in its own
  subprocess so each peak memory is its own (model load included), best step time of ``--peer-steps``.

Without the model it prints why and what to run (``toyrl models fetch smollm2``), and exits 0.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from contextlib import contextmanager

SYSTEM = ("You play a game of arms numbered from 0. Each turn, reply with exactly one action written as pull[N], "
          "where N is an arm number, and nothing else.")
"""the instruction of the benchmark's runs (and of the slow end-to-end test)"""
SETTING = dict(env="bandit_chain", policy="smollm2", system=SYSTEM, group_size=4, prompts_per_step=2,
               context="full", lr=1e-5)
"""TrainConfig fields of the benchmark (batch 8; lr 1e-5: an RL step must not undo a pretrained model)"""
SINGLE = dict(env_kwargs={"stages": 1}, max_turns=1)
"""what turns the benchmark's episode into the single-turn step compared with TRL: one stage, one reply"""
REPLY = 24
"""reply cap in tokens (the TextCodec's ``max_new`` for hf policies, and TRL's ``max_completion_length``)"""


def format_valid(ro) -> float:
    """The fraction of a rollout's valid turns whose reply parsed (not void). Example: 3 of 4 turns parsed -> 0.75."""
    b = ro.batch
    n = int(b.turn_mask.sum())
    return float((~b.void_turn & b.turn_mask).sum()) / n if n else 0.0


def skip_reason(policy: str = "smollm2") -> str:
    """Why the benchmark cannot run here ("" when it can): the model not fetched, or transformers missing."""
    from toyrl.policies.zoo import is_fetched, missing_message
    try:
        import transformers  # noqa: F401
    except ImportError:
        return "smollm2 bench skipped: transformers is missing (pip install 'toyrl[smollm2]')"
    if policy != "smollm2" or is_fetched("smollm2"):
        return ""
    return f"smollm2 bench skipped: {missing_message('smollm2')}"


def peak_rss_gb(reset: bool = False) -> float:
    """This process's peak resident memory in GB (``VmHWM``); ``reset=True`` first lowers that mark to the current
    resident size (Linux: ``/proc/self/clear_refs``). Elsewhere: ``ru_maxrss``, the peak since the process began."""
    try:
        if reset:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
        with open("/proc/self/status") as f:
            kb = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
        return kb / 1e6
    except (OSError, StopIteration):
        scale = 1e9 if sys.platform == "darwin" else 1e6             # bytes on macOS, KB on Linux
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / scale


class PhaseMeter:
    """Times and peak memory of named phases: ``with meter.phase("rollout"): ...`` records (seconds, peak GB);
    a phase run several times keeps its last time and its highest peak."""

    def __init__(self):
        self.seconds, self.peak_gb = {}, {}

    @contextmanager
    def phase(self, name: str):
        peak_rss_gb(reset=True)
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = time.perf_counter() - t0
            self.peak_gb[name] = max(self.peak_gb.get(name, 0.0), peak_rss_gb())

    def watch(self, obj, method: str, name: str) -> None:
        """Record every call of ``obj.method`` as the phase ``name`` (an instance attribute wraps the method)."""
        inner = getattr(obj, method)

        def timed(*a, **kw):
            with self.phase(name):
                return inner(*a, **kw)
        setattr(obj, method, timed)


def sampling_speed(tr, reps: int = 2) -> dict:
    """Tokens per second of ``HFPolicy.generate`` and of the model's ``model.generate`` on one batch of the trainer's
    prompts (B rows, ``REPLY`` new tokens each, no stop token, plain sampling at temperature 1, the policy in eval
    mode); best of ``reps``."""
    import numpy as np
    import torch
    from toyrl.rollout.flatten import left_pad
    pol, core = tr.policy, tr.core
    pol.eval()                  # in training mode a checkpointed model's own generate would run without its KV cache
    core.reset(np.repeat(core.sample_tasks(np.random.default_rng(0), tr.cfg.prompts_per_step), tr.cfg.group_size, 0))
    ctx, mask = left_pad([tr.codec.prompt(core, i) for i in range(core.num_envs)], tr.codec.PAD, pol.device)
    hf_kw = dict(do_sample=True, max_new_tokens=REPLY, min_new_tokens=REPLY, top_k=0, top_p=1.0, temperature=1.0,
                 pad_token_id=pol.pad_id)
    runs = {"toyrl": lambda: pol.generate(ctx, mask, REPLY, 1.0),
            "hf": lambda: pol.model.generate(input_ids=ctx.masked_fill(~mask, pol.pad_id), attention_mask=mask.long(),
                                             **hf_kw)}
    best = {k: float("inf") for k in runs}
    with torch.no_grad():
        for _ in range(reps):
            for k, fn in runs.items():
                t0 = time.perf_counter()
                fn()
                best[k] = min(best[k], time.perf_counter() - t0)
    n = ctx.shape[0] * REPLY
    return {"gen_tok_s": n / best["toyrl"], "hf_generate_tok_s": n / best["hf"],
            "gen_over_hf": best["hf"] / best["toyrl"]}


def measure(steps: int, bc_steps: int, lora_r: int = 0, seed: int = 0, policy: str = "smollm2",
            grad_ckpt: bool = False) -> dict:
    """The multi-turn figures (see the module docstring) from one Trainer; ``grad_ckpt``: the model's blocks
    recompute their activations in backward instead of keeping them (``TrainConfig.grad_ckpt``)."""
    import numpy as np
    import torch
    from toyrl.rollout.flatten import recompute_logp
    from toyrl.train import TrainConfig, Trainer
    tr = Trainer(TrainConfig(**{**SETTING, "policy": policy}, lora_r=lora_r, grad_ckpt=grad_ckpt, bc_steps=bc_steps,
                             steps=steps, seed=seed, progress=False))
    out = {"valid_before": format_valid(tr.sample()), "max_turns": int(tr.core.max_turns),
           "lora_r": lora_r, "grad_ckpt": grad_ckpt}
    if bc_steps:
        t0 = time.perf_counter()
        out["bc_losses"] = tr.behaviour_clone(bc_steps)
        out["bc_s_per_step"] = (time.perf_counter() - t0) / bc_steps
        out["valid_after"] = format_valid(tr.sample())
    meter, rollouts = PhaseMeter(), []
    meter.watch(tr, "collect", "rollout")
    meter.watch(tr, "update", "update")
    collect = tr.collect
    tr.collect = lambda: rollouts.append(collect()) or rollouts[-1]
    rows = [tr.step() for _ in range(steps)]
    med = lambda k: float(np.median([r[k] for r in rows]))           # noqa: E731
    out.update(gen_s=med("time_rollout"), update_s=med("time_recompute") + med("time_update"),
               tokens=med("tokens_generated"), valid_rl=med("format_valid_rate"), grad_norm=med("grad_norm"),
               peak_gb=dict(meter.peak_gb))
    out["tok_per_s"] = out["tokens"] / out["gen_s"] if out["gen_s"] else float("nan")
    with torch.no_grad():                                   # the teacher-forced forward of the last batch, scoring
        t0 = time.perf_counter()                            # the tokens the update scores
        recompute_logp(tr.policy, rollouts[-1], tr.cfg.recompute, env_tokens=not tr.cfg.mask_env_tokens)
        out["forward_s"] = time.perf_counter() - t0
    out["update_over_forward"] = out["update_s"] / out["forward_s"]
    out["projected_100"] = 100 * (out["gen_s"] + out["update_s"])
    out.update(sampling_speed(tr))
    return out


def single_turn_toyrl(policy: str, steps: int, seed: int = 0) -> dict:
    """The single-turn GRPO step in toyrl (``SETTING`` with ``SINGLE``): best step seconds, peak GB, prompt texts."""
    from toyrl.train import TrainConfig, Trainer
    tr = Trainer(TrainConfig(**{**SETTING, **SINGLE, "policy": policy}, steps=steps, seed=seed, progress=False))
    times, replies = [], []
    for _ in range(steps):
        t0 = time.perf_counter()
        row = tr.step()
        times.append(time.perf_counter() - t0)
        replies.append(row["tokens_generated"] / tr.B)
    tr.core.reset(tr.core.sample_tasks(tr.rng, tr.core.num_envs))
    prompts = [tr.policy.tokenizer.decode(tr.codec.prompt(tr.core, i)) for i in range(tr.cfg.prompts_per_step)]
    return {"step_s": min(times), "peak_gb": peak_rss_gb(), "prompts": prompts,
            "reply_tokens": sum(replies) / len(replies)}


def single_turn_trl(path: str, prompts: list, steps: int, seed: int = 0) -> dict:
    """The same step in TRL's GRPOTrainer: ``prompts`` (the toyrl step's texts, chat template applied), 4 replies
    each, ``REPLY`` tokens at most, lr 1e-5, no KL, full fine-tune on CPU; best step seconds and peak GB."""
    import tempfile
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    class Clock(TrainerCallback):
        times: list = []

        def on_step_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            self.times.append(time.perf_counter() - self.t0)

    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    G = SETTING["group_size"]
    with tempfile.TemporaryDirectory() as out:
        cfg = GRPOConfig(output_dir=out, per_device_train_batch_size=len(prompts) * G, num_generations=G,
                         max_completion_length=REPLY, learning_rate=SETTING["lr"], max_steps=steps, beta=0.0,
                         temperature=1.0, top_k=0, top_p=1.0, use_cpu=True, report_to=[], save_strategy="no",
                         logging_steps=1, disable_tqdm=True, seed=seed, dataloader_num_workers=0)
        clock = Clock()
        trainer = GRPOTrainer(model=model, processing_class=tok, args=cfg, callbacks=[clock],
                              reward_funcs=lambda completions, **kw: [float("pull[" in c) for c in completions],
                              train_dataset=Dataset.from_dict({"prompt": prompts * steps}))
        trainer.train()
    lengths = [r["completions/mean_length"] for r in trainer.state.log_history if "completions/mean_length" in r]
    return {"step_s": min(clock.times), "peak_gb": peak_rss_gb(),
            "reply_tokens": sum(lengths) / len(lengths) if lengths else float("nan")}


def peer(policy: str, path: str, steps: int, threads: int) -> dict:
    """The single-turn step in toyrl, then in TRL, each in its own subprocess: {"toyrl": {...}, "trl": {...}}.
    TRL's entry is {"error": why} when it cannot run (trl not installed, or its run failed)."""
    def child(kind: str, extra: list) -> dict:
        cmd = [sys.executable, "-m", "toyrl.lab.bench.smollm2", "--worker", kind, "--policy", policy, "--path", path,
               "--peer-steps", str(steps), "--threads", str(threads)] + extra
        run = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
        lines = [ln for ln in run.stdout.splitlines() if ln.startswith("RESULT ")]
        if run.returncode or not lines:
            return {"error": (run.stderr.strip().splitlines() or ["no output"])[-1]}
        return json.loads(lines[-1][len("RESULT "):])
    out = {"toyrl": child("toyrl", [])}
    try:
        import trl  # noqa: F401
    except ImportError:
        out["trl"] = {"error": "trl is not installed (pip install trl)"}
        return out
    out["trl"] = child("trl", ["--prompts", json.dumps(out["toyrl"].get("prompts", []))])
    return out


def report(m: dict, threads: int) -> str:
    """The benchmark's printed lines, a markdown table of the figures the README quotes among them."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lines = [f"SmolLM2-135M on bandit_chain, batch 8 (2 x 4), KV cache across turns, "
             f"{'LoRA r=' + str(m['lora_r']) if m['lora_r'] else 'full fine-tune'}"
             f"{', gradient checkpointing' if m['grad_ckpt'] else ''}, {threads} thread(s), load {load:.2f}",
             f"format-valid turns before the warm start: {m['valid_before']:.2f}"]
    if "valid_after" in m:
        lines.append(f"after {len(m['bc_losses'])} BC steps ({m['bc_s_per_step']:.1f} s each, loss "
                     f"{m['bc_losses'][0]:.2f} -> {m['bc_losses'][-1]:.2f}): {m['valid_after']:.2f}")
    pk = m["peak_gb"]
    rows = [(f"multi-turn rollout ({m['max_turns']} turns at most)", f"{m['gen_s']:.1f} s, {m['tok_per_s']:.1f} tok/s",
             f"{pk['rollout']:.2f}"),
            ("multi-turn update (recompute + backward + AdamW)", f"{m['update_s']:.1f} s", f"{pk['update']:.2f}"),
            ("teacher-forced forward, same batch", f"{m['forward_s']:.1f} s "
             f"(update = {m['update_over_forward']:.1f}x)", ""),
            ("HFPolicy.generate, 8 x 24 tokens", f"{m['gen_tok_s']:.1f} tok/s ({m['gen_over_hf']:.2f}x generate)", ""),
            ("model.generate, same prompts", f"{m['hf_generate_tok_s']:.1f} tok/s", "")]
    for name in ("toyrl", "trl"):
        p = m.get("peer", {}).get(name)
        if p is not None:
            label = f"single-turn GRPO step, {'toyrl' if name == 'toyrl' else 'TRL GRPOTrainer'} (own process)"
            rows.append((label, f"{p['step_s']:.1f} s (replies {p.get('reply_tokens', float('nan')):.1f} tokens "
                                f"on average)", f"{p['peak_gb']:.2f}") if "error" not in p
                        else (label, f"not run: {p['error']}", ""))
    lines += ["", "| what | time | peak RSS (GB) |", "|---|---|---|"] + [f"| {a} | {b} | {c} |" for a, b, c in rows]
    lines.append(f"\nper RL step: {m['tokens']:.0f} tokens, format-valid {m['valid_rl']:.2f}, grad norm "
                 f"{m['grad_norm']:.3g}; projected 100 steps: {m['projected_100'] / 60:.0f} min")
    return "\n".join(lines)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(prog="toyrl bench smollm2", description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=1, help="multi-turn RL steps (medians are reported)")
    p.add_argument("--bc-steps", type=int, default=8, help="behaviour-cloning steps of the warm start (0: none)")
    p.add_argument("--lora-r", type=int, default=0, help="LoRA rank (0: every weight trains)")
    p.add_argument("--threads", type=int, default=2, help="torch threads, pinned")
    p.add_argument("--grad-ckpt", action="store_true", help="recompute the blocks' activations in backward")
    p.add_argument("--peer-steps", type=int, default=2, help="single-turn steps of toyrl and of TRL (best is reported)")
    p.add_argument("--no-peer", action="store_true", help="skip the single-turn toyrl / TRL comparison")
    p.add_argument("--policy", default="smollm2", help=argparse.SUPPRESS)      # tests: a tiny hf:DIR model
    p.add_argument("--worker", choices=("toyrl", "trl"), help=argparse.SUPPRESS)
    p.add_argument("--path", help=argparse.SUPPRESS)
    p.add_argument("--prompts", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    for name, v in (("--steps", a.steps), ("--peer-steps", a.peer_steps), ("--threads", a.threads)):
        if v < 1:
            raise ValueError(f"{name} must be >= 1, got {v}")
    reason = skip_reason(a.policy)
    if reason:
        print(reason)
        return {}
    import torch
    torch.set_num_threads(a.threads)
    if a.worker:                                                      # one side of the single-turn comparison
        r = (single_turn_toyrl(a.policy, a.peer_steps) if a.worker == "toyrl"
             else single_turn_trl(a.path, json.loads(a.prompts), a.peer_steps))
        print("RESULT " + json.dumps(r))
        return r
    from toyrl.policies.zoo import ZOO, resolve_model
    m = measure(a.steps, a.bc_steps, a.lora_r, policy=a.policy, grad_ckpt=a.grad_ckpt)
    if not a.no_peer:
        path = resolve_model(a.policy) if a.policy in ZOO else a.policy[len("hf:"):]
        m["peer"] = peer(a.policy, str(path), a.peer_steps, a.threads)
    print(report(m, torch.get_num_threads()))
    return m


if __name__ == "__main__":
    main()
