"""Benchmark: a real pretrained LLM (SmolLM2-135M-Instruct) as the policy on CPU, each phase of its RL step beside
this machine's floor for it, measured in the same run.

    toyrl bench smollm2 [--steps 2] [--bc-steps 4] [--lora-r 8] [--threads 2] [--no-peer]

Setting (``STEP``): doors (3 rooms, 3 colours, up to 6 turns), 2 tasks x 8 rollouts = batch 16, the model's KV
cache kept across turns, replies of at most 8 tokens, rank-8 LoRA adapters at the policy's own learning rates,
after a format warm start (``--bc-steps`` of behaviour cloning on random valid replies, ``bc_noise`` 1). From one run:

- the floor (``toyrl.lab.bench.floor``): GEMM FLOPS on the model's own linear shapes at the row counts the step
  uses, and the read bandwidth over a buffer larger than the cache; each model call's floor is
  max(FLOPs / rate, weight bytes / bandwidth), from its real (unpadded) positions;
- per RL step, every phase with its time, its floor and their ratio: prefill (model calls of more than one new
  token while rolling out), decode (one token a row), the rest of the rollout (sampling, the env, text), the
  teacher-forced forward of the update (its loss included), the backward, the AdamW step; the update's padded
  positions; 100 steps at the measured pace and at the floor's;
- the format-valid turn rate before and after the warm start, and success per step;
- peak resident memory of the rollout and of the update (``PhaseMeter``);
- sampling speed on one batch: ``HFPolicy.generate`` beside the model's own ``model.generate``;
- a single-turn GRPO step (bandit_chain with one stage) in toyrl and in TRL's ``GRPOTrainer`` (same model, batch
  2 x 4, 24-token replies, lr 1e-5, full fine-tune, no KL), each in its own subprocess (``--no-peer`` skips it).

Without the model it prints why and what to run (``toyrl models fetch smollm2``), and exits 0.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from contextlib import contextmanager

SYSTEM = ("You play a game of arms numbered from 0. Each turn, reply with exactly one action written as pull[N], "
          "where N is an arm number, and nothing else.")
"""the instruction of the single-turn comparison's bandit runs (and of the slow end-to-end test)"""
SETTING = dict(env="bandit_chain", policy="smollm2", system=SYSTEM, group_size=4, prompts_per_step=2,
               context="full", lr=1e-5)
"""TrainConfig fields of the single-turn comparison with TRL (batch 8; lr 1e-5: a full fine-tune of a pretrained
model)"""
SINGLE = dict(env_kwargs={"stages": 1}, max_turns=1)
"""what turns SETTING's episode into the single-turn step compared with TRL: one stage, one reply"""
REPLY = 24
"""reply cap in tokens of the single-turn comparison and of the sampling-speed batch"""


def step_setting() -> dict:
    """TrainConfig fields of the multi-turn step the benchmark measures (doors, batch 16, LoRA r 8)."""
    from toyrl.envs.doors import instruction
    return dict(env="doors", env_kwargs={"rooms": 3, "colours": 3}, policy="smollm2", system=instruction(3),
                prompts_per_step=2, group_size=8, reply_tokens=8, lora_r=8, bc_noise=1.0, context="full")


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


class StepClock:
    """Every model call of an ``HFPolicy`` timed and costed by phase. The trainer's ``collect`` and
    ``minibatch_loss`` set the phase; a decoder call feeding one token a row is "decode", more is "prefill" (in the
    rollout) or "forward" (in the update); a head call belongs to the phase of the decoder call before it. For each
    phase: seconds, FLOPs (linear, attention, head), weight bytes read, floor seconds, real and padded positions."""

    def __init__(self, policy, dims, rates):
        self.dims, self.rates, self.where, self.last = dims, rates, None, None
        self.calls = {}
        dec, head = policy._decoder, policy._head

        def decoder(tokens, mask, position_ids, **kw):
            T = tokens.shape[1]
            new = mask[:, -T:].bool()
            keys = mask.bool().long().cumsum(1)[:, -T:]                        # keys each new position sees
            name = "decode" if self.where == "rollout" and T == 1 else \
                "prefill" if self.where == "rollout" else self.where
            self.last = name
            t0 = time.perf_counter()
            out = dec(tokens, mask, position_ids, **kw)
            n = int(new.sum())
            self._add(name, time.perf_counter() - t0, lin=dims.linear_flops(n),
                      att=dims.attention_flops(int((keys * new).sum())), head=0.0, rows=n,
                      bytes_read=dims.linear * dims.bytes_per_weight, padded=tokens.numel())
            return out

        def lm_head(h):
            t0 = time.perf_counter()
            z = head(h)
            n = h.shape[:-1].numel()
            self._add(self.last or "prefill", time.perf_counter() - t0, lin=0.0, att=0.0, head=dims.head_flops(n),
                      rows=n, bytes_read=dims.head * dims.bytes_per_weight, padded=0)
            return z
        self._restore = lambda: (delattr(policy, "_decoder"), delattr(policy, "_head"))
        policy._decoder, policy._head = decoder, lm_head

    def close(self):
        """Give the policy back its own methods."""
        self._restore()

    def _add(self, name, seconds, *, lin, att, head, rows, bytes_read, padded):
        c = self.calls.setdefault(name, dict(seconds=0.0, floor=0.0, linear=0.0, attention=0.0, head=0.0,
                                             positions=0, padded=0, calls=0))
        c["seconds"] += seconds
        c["floor"] += self.rates.floor(lin + att + head, rows, bytes_read)
        c["linear"] += lin
        c["attention"] += att
        c["head"] += head
        c["positions"] += rows if lin else 0
        c["padded"] += padded
        c["calls"] += 1

    @contextmanager
    def phase(self, where: str):
        self.where = where
        try:
            yield
        finally:
            self.where = None

    def reset(self):
        self.calls = {}


def phases_of(calls: dict, spent: dict, row: dict, rates, trainable: int, *, full: bool, grad_ckpt: bool) -> dict:
    """phase -> (seconds, floor seconds) of one RL step, from its ``StepClock`` calls, the forward and optimizer
    seconds ``spent`` and its run-log ``row``: the rollout's prefill, decode and the rest (no floor), the update's
    forward, backward (its floor from the forward's FLOPs, ``backward_flops``; a checkpointed model runs its forward
    again) and AdamW step (``adamw_bytes`` of ``trainable`` parameters at the read bandwidth)."""
    from .floor import adamw_bytes, backward_flops
    get = lambda name, key: calls.get(name, {}).get(key, 0.0)             # noqa: E731
    bwd = backward_flops(get("forward", "linear"), get("forward", "attention"), get("forward", "head"), full)
    fwd_floor = get("forward", "floor")
    return {
        "prefill": (get("prefill", "seconds"), get("prefill", "floor")),
        "decode": (get("decode", "seconds"), get("decode", "floor")),
        "rollout, outside the model": (row["time_rollout"] - get("prefill", "seconds") - get("decode", "seconds"), 0.0),
        "forward (teacher-forced, with the loss)": (spent["forward"], fwd_floor),
        "backward": (row["time_update"] - spent["optimizer"], bwd / rates.rate(max(int(get("forward", "positions")), 1))
                     + (fwd_floor if grad_ckpt else 0.0)),
        "optimizer (AdamW)": (spent["optimizer"], adamw_bytes(trainable) / rates.bandwidth),
    }


def timed_steps(tr, clock: "StepClock", meter: "PhaseMeter", steps: int):
    """Run ``steps`` RL steps of the Trainer ``tr`` with its rollout and update forward in ``clock``'s phases and
    ``meter``'s, its AdamW steps timed -> (run-log rows, the last step's {"forward", "optimizer"} seconds, the last
    rollout). The trainer's own methods come back after the steps, the clock's policy methods too."""
    import toyrl.train.trainer as trainer_mod
    spent, last = {"optimizer": 0.0, "forward": 0.0}, {}
    collect, mb_loss, step_fn = tr.collect, tr.minibatch_loss, trainer_mod.step_and_measure

    def timed_collect():
        with clock.phase("rollout"), meter.phase("rollout"):
            last["ro"] = collect()
        return last["ro"]

    def timed_loss(*a, **kw):
        t0 = time.perf_counter()
        with clock.phase("forward"):
            r = mb_loss(*a, **kw)
        spent["forward"] += time.perf_counter() - t0
        return r

    def timed_opt(opt):
        t0 = time.perf_counter()
        r = step_fn(opt)
        spent["optimizer"] += time.perf_counter() - t0
        return r
    tr.collect, tr.minibatch_loss = timed_collect, timed_loss
    meter.watch(tr, "update", "update")
    trainer_mod.step_and_measure = timed_opt
    rows = []
    try:
        for _ in range(steps):
            clock.reset()
            spent.update(optimizer=0.0, forward=0.0)
            rows.append(tr.step())
    finally:
        trainer_mod.step_and_measure = step_fn
        for name in ("collect", "minibatch_loss", "update"):
            vars(tr).pop(name, None)
        clock.close()
    return rows, spent, last.get("ro")


def measure(steps: int, bc_steps: int, lora_r: int = 8, seed: int = 0, policy: str = "smollm2",
            grad_ckpt: bool = False) -> dict:
    """The multi-turn figures (see the module docstring) of ``steps`` RL steps after ``bc_steps`` of format warm
    start, from one Trainer; the last step's phases are reported. ``grad_ckpt``: the model's blocks recompute their
    activations in backward (``TrainConfig.grad_ckpt``)."""
    import numpy as np
    from toyrl.train import TrainConfig, Trainer
    from .floor import Dims, Rates
    tr = Trainer(TrainConfig(**{**step_setting(), "policy": policy, "lora_r": lora_r}, grad_ckpt=grad_ckpt,
                             bc_steps=bc_steps, steps=steps, seed=seed, progress=False))
    out = {"policy": policy, "valid_before": format_valid(tr.sample()), "max_turns": int(tr.core.max_turns), "batch": tr.B,
           "lora_r": lora_r, "grad_ckpt": grad_ckpt}
    if bc_steps:
        t0 = time.perf_counter()
        out["bc_losses"] = tr.behaviour_clone(bc_steps)
        out["bc_s_per_step"] = (time.perf_counter() - t0) / bc_steps
        out["valid_after"] = format_valid(tr.sample())
    dims = Dims.of(tr.policy.model)
    B = tr.B
    rates = Rates.measure(dims, rows=(B, 64, 256, 1024, 4096))
    out["rates"] = {"gemm_gflops": {m: r / 1e9 for m, r in rates.gemm.items()}, "bandwidth_gbs": rates.bandwidth / 1e9}
    clock = StepClock(tr.policy, dims, rates)
    trainable = sum(p.numel() for p in tr.policy.parameters() if p.requires_grad)
    meter = PhaseMeter()
    rows, spent, _ = timed_steps(tr, clock, meter, steps)
    r, c = rows[-1], clock.calls
    phases = phases_of(c, spent, r, rates, trainable, full=lora_r == 0, grad_ckpt=grad_ckpt)
    names = list(phases)
    rollout_s, update_s = r["time_rollout"], r["time_recompute"] + r["time_update"]
    rollout_floor = phases["prefill"][1] + phases["decode"][1]
    update_floor = sum(phases[k][1] for k in names[3:])
    fw = c.get("forward", {})
    out.update(phases=phases, rollout_s=rollout_s, rollout_floor=rollout_floor, update_s=update_s,
               update_floor=update_floor, trainable=trainable,
               update_positions=fw.get("positions", 0), update_padded=fw.get("padded", 0),
               decode_calls=c.get("decode", {}).get("calls", 0),
               success=[float(x["success_rate"]) for x in rows], valid_rl=float(np.mean([x["format_valid_rate"]
                                                                                      for x in rows])),
               tokens=r["tokens_generated"], peak_gb=dict(meter.peak_gb))
    out["projected_100"] = 100 * (rollout_s + update_s)
    out["floor_100"] = 100 * (rollout_floor + update_floor)
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


def machine() -> str:
    """The CPU's model name and core count (Linux: /proc/cpuinfo), e.g. 'AMD EPYC 7B13, 2 cores'."""
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            name = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{name}, {os.cpu_count()} cores"


def report(m: dict, threads: int, load: tuple) -> str:
    """The benchmark's printed lines: the setting and the machine, then a markdown table of each phase beside its
    floor (the table the README quotes), then the totals."""
    rates = m["rates"]
    gemm = ", ".join(f"{g:.0f} at {k} rows" for k, g in sorted(rates["gemm_gflops"].items()))
    lines = [f"{m['policy']} on doors (3 rooms, 3 colours, {m['max_turns']} turns at most), batch {m['batch']} "
             f"(2 x 8), KV cache across turns, replies <= 8 tokens, "
             f"{'LoRA r=' + str(m['lora_r']) if m['lora_r'] else 'full fine-tune'}"
             f"{', gradient checkpointing' if m['grad_ckpt'] else ''}",
             f"machine: {machine()}; {threads} thread(s); load {load[0]:.2f} before, {load[1]:.2f} after",
             f"floor measured now: GEMM GFLOPS on the model's linear shapes {gemm}; "
             f"read bandwidth {rates['bandwidth_gbs']:.1f} GB/s",
             f"format-valid turns before the warm start: {m['valid_before']:.2f}"]
    if "valid_after" in m:
        lines.append(f"after {len(m['bc_losses'])} format warm-start steps ({m['bc_s_per_step']:.1f} s each, loss "
                     f"{m['bc_losses'][0]:.2f} -> {m['bc_losses'][-1]:.2f}): {m['valid_after']:.2f}")
    ratio = lambda t, f: f"{t / f:.1f}x" if f > 0 else "-"                       # noqa: E731
    rows = [(k, f"{t:.2f}", f"{f:.2f}" if f > 0 else "-", ratio(t, f)) for k, (t, f) in m["phases"].items()]
    rows.insert(3, ("**rollout**", f"{m['rollout_s']:.2f}", f"{m['rollout_floor']:.2f}",
                    ratio(m["rollout_s"], m["rollout_floor"])))
    rows.append(("**update**", f"{m['update_s']:.2f}", f"{m['update_floor']:.2f}",
                 ratio(m["update_s"], m["update_floor"])))
    pk = m["peak_gb"]
    lines += ["", "| phase (last RL step) | seconds | floor | ratio |", "|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    pad, real = m["update_padded"], m["update_positions"]
    waste = f" ({1 - real / pad:.0%} padding)" if pad else ""
    lines += ["",
              f"update: {real} real positions of {pad} computed{waste}; "
              f"decode: {m['decode_calls']} calls; {m['tokens']:.0f} tokens generated; peak RSS rollout "
              f"{pk.get('rollout', float('nan')):.2f} GB, update {pk.get('update', float('nan')):.2f} GB",
              f"success per RL step: {', '.join(f'{x:.2f}' for x in m['success'])}; format-valid {m['valid_rl']:.2f}",
              f"100 RL steps: {m['projected_100'] / 60:.0f} min at this pace; {m['floor_100'] / 60:.0f} min at the "
              f"floor",
              f"HFPolicy.generate {m['gen_tok_s']:.1f} tok/s, model.generate {m['hf_generate_tok_s']:.1f} tok/s "
              f"({m['gen_over_hf']:.2f}x), {m['batch']} rows x {REPLY} tokens"]
    for name in ("toyrl", "trl"):
        p = m.get("peer", {}).get(name)
        if p is not None:
            label = f"single-turn GRPO step, {'toyrl' if name == 'toyrl' else 'TRL GRPOTrainer'} (own process)"
            lines.append(f"{label}: {p['step_s']:.1f} s, replies {p.get('reply_tokens', float('nan')):.1f} tokens "
                         f"on average, peak RSS {p['peak_gb']:.2f} GB" if "error" not in p
                         else f"{label}: not run: {p['error']}")
    return "\n".join(lines)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(prog="toyrl bench smollm2", description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=2, help="multi-turn RL steps (the last one's phases are reported)")
    p.add_argument("--bc-steps", type=int, default=4, help="format warm-start steps (0: none)")
    p.add_argument("--lora-r", type=int, default=8, help="LoRA rank (0: every weight trains)")
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
    load0 = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    m = measure(a.steps, a.bc_steps, a.lora_r, policy=a.policy, grad_ckpt=a.grad_ckpt)
    if not a.no_peer:
        path = resolve_model(a.policy) if a.policy in ZOO else a.policy[len("hf:"):]
        m["peer"] = peer(a.policy, str(path), a.peer_steps, a.threads)
    load1 = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(report(m, torch.get_num_threads(), (load0, load1)))
    return m


if __name__ == "__main__":
    main()
