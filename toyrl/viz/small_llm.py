"""Notebook 9 (a small language-model policy): its precomputed GRPO / GiGPO runs of TinyLM and the reply panel.

``SMALL_LLM_RUNS`` names each run's ``TrainConfig`` fields; ``run_small_llm`` trains one and adds to every
row the text-level Echo Trap signals of the step's rollout (RAGEN, arXiv 2504.20073): the template
entropy H and mutual information MI of the replies (``toyrl.diagnostics.text_template_stats``) and the
repetition rate. ``load_small_llm`` reads the stored runs of ``data/runs/small_llm/`` (or recomputes
them); ``reply_panel`` is the temperature slider's pure function.

    runs = load_small_llm(["grid4x4_bc_grpo"])            # {name: rows}
    reply_panel(0.0)["void_rate"]                         # greedy replies of the shipped checkpoint

The pair: TinyLM and a real pretrained LLM (SmolLM2-135M-Instruct, ``toyrl models fetch smollm2``) through one
pipeline on an env neither has seen (``PAIR``: bandit_chain, its instruction as the system message, P=2 x G=4,
full context): the format-valid rate before and after a behaviour-cloning warm start (``warm_start``), then GRPO
steps (``run_pair``, stored as ``data/runs/small_llm/pair_POLICY__seedS.json`` with the threads and the load it
ran at; ``load_pair`` reads it).

    tr, warm = warm_start("smollm2", bc_steps=2, group_size=2, prompts_per_step=1, max_turns=2)   # a CPU slice
    warm["valid_before"], warm["valid_after"]

RL on SmolLM2, live: ``DOORS`` is the lesson's run (Doors, 2 rooms x 3 colours, from the shipped format-only warm
start ``doors_smollm2``); ``door_choices`` reads P(door | light) from the policy without sampling and
``light_reading`` its entropy H(door) and mutual information I(light; door), the template-collapse pair on a
real model's replies; ``plot_door_choices`` draws the matrices.

    tr = Trainer(TrainConfig(**DOORS, steps=8))
    light_reading(door_choices(tr.policy, tr.codec, 2, 3))      # {"right": ..., "H": ..., "mi": ...}
"""
from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from ..envs import make_core
from ..policies.tinylm import DEFAULT_CHECKPOINT, TinyLM
from ..train.pretrain import PRETRAIN_ENVS
from ..rollout.play import rollout
from ..diagnostics import repetition_rate, text_template_stats
from ..codecs.text import turn_texts
from ..train import TrainConfig, Trainer
from ..train.runlog import encode
from ..lab.bench.smollm2 import SYSTEM, format_valid
from ..train.warmstart import WARMSTARTS

__all__ = ["RUNS_DIR", "SMALL_LLM_RUNS", "run_small_llm", "load_small_llm", "reply_panel", "PAIR", "PAIR_STEPS",
           "quiet_transformers", "warm_start", "run_pair", "load_pair", "TWINS", "twin_verdicts", "DOORS",
           "DOORS_STEPS", "door_choices", "light_reading", "plot_door_choices", "run_doors", "load_doors"]

RUNS_DIR = Path(__file__).resolve().parents[2] / "data" / "runs" / "small_llm"
_GRID = dict(env="gridworld", env_kwargs={"map_name": "4x4"}, max_turns=8, group_size=8, prompts_per_step=2)
_RAND = dict(env="gridworld", env_kwargs={"size": 4}, max_turns=8, group_size=8, prompts_per_step=4)
_SEARCH = dict(env="mock_search", env_kwargs=PRETRAIN_ENVS["mock_search"], max_turns=5, group_size=8,
               prompts_per_step=4)
# name -> TrainConfig fields of notebook 9's runs (all: last_k context of 1 turn, lr 3e-4)
SMALL_LLM_RUNS = {
    "grid4x4_bc_grpo": dict(_GRID, policy="tinylm", estimator="grpo", steps=15),
    "grid4x4_scratch_grpo": dict(_GRID, policy="tinylm:scratch", estimator="grpo", steps=15),
    "grid4x4_bc_grpo_nomask": dict(_GRID, policy="tinylm", estimator="grpo", steps=15, mask_env_tokens=False),
    "gridrand_bc_grpo": dict(_RAND, policy="tinylm", estimator="grpo", steps=20),
    "gridrand_bc_gigpo": dict(_RAND, policy="tinylm", estimator="gigpo", steps=20),
    "search_bc_grpo": dict(_SEARCH, policy="tinylm", estimator="grpo", steps=20),
    "search_bc_gigpo": dict(_SEARCH, policy="tinylm", estimator="gigpo", steps=20),
}


def run_small_llm(name: str, seed: int = 0, out_dir=None, steps: Optional[int] = None,
                  progress: bool = True) -> list[dict]:
    """Train notebook 9's run ``name`` (``SMALL_LLM_RUNS``) and return its rows; each row also holds the
    text-level Echo Trap signals of its rollout (``text_template_H`` / ``text_template_MI`` of the
    replies, ``repetition_rate``) and three sample replies. Written to ``out_dir/name__seedS.jsonl``.
    ``progress``: a tqdm bar over the steps."""
    from tqdm.auto import tqdm
    kw = dict(SMALL_LLM_RUNS[name])
    kw["steps"] = steps or kw["steps"]
    tr = Trainer(TrainConfig(context="last_k", context_k=1, lr=3e-4, seed=seed, progress=False, **kw))
    last, rows = {}, []
    sample = tr.sample

    def keep(*a, **k):                        # remember the step's rollout for the text signals
        last["ro"] = sample(*a, **k)
        return last["ro"]
    tr.sample = keep
    for _ in tqdm(range(kw["steps"]), desc=f"{name}, seed {seed}", disable=not progress):
        row = tr.step()
        texts = turn_texts(last["ro"], tr.codec)
        flat = [t for ep in texts for t in ep]
        group = last["ro"].batch.group.tolist()
        h, mi = text_template_stats(flat, [group[b] for b, ep in enumerate(texts) for _ in ep])
        row.update(text_template_H=h, text_template_MI=mi, repetition_rate=repetition_rate(texts),
                   sample_replies=flat[:3])
        rows.append({k: _plain(v) for k, v in row.items()})
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        with open(Path(out_dir) / f"{name}__seed{seed}.jsonl", "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    return rows


def _plain(v):
    """A row value as plain JSON-ready Python: tensors and numpy scalars unwrapped, non-finite floats None."""
    if isinstance(v, torch.Tensor):
        v = v.detach().cpu().tolist()
    if isinstance(v, (np.floating, np.integer)):
        v = v.item()
    return None if isinstance(v, float) and not np.isfinite(v) else v


def load_small_llm(names=None, seed: int = 0, live: bool = False, out_dir=RUNS_DIR) -> dict:
    """{name: rows} of notebook 9's runs: read from ``data/runs/small_llm/`` (``live``: recomputed now)."""
    out = {}
    for name in names or SMALL_LLM_RUNS:
        path = Path(out_dir) / f"{name}__seed{seed}.jsonl"
        if live or not path.exists():
            out[name] = run_small_llm(name, seed, out_dir)
        else:
            out[name] = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return out


@torch.no_grad()
def reply_panel(temperature: float, seed: int = 0, n: int = 16, path=DEFAULT_CHECKPOINT) -> dict:
    """What the shipped TinyLM writes on the GridWorld 4x4 map at ``temperature`` (0 = greedy): the
    void-turn rate, the success rate of ``n`` episodes and the first episode's replies. Pure: loads
    the checkpoint, seeds its own generator."""
    model = TinyLM.load(path)
    core = make_core("gridworld", n, seed=seed, map_name="4x4", max_turns=8)
    tasks = core.sample_tasks(np.random.default_rng(seed), n)
    ro = rollout(model, core, tasks, np.zeros(n, int), codec=model.codec(), context="last_k", context_k=1,
                 temperature=max(temperature, 1e-3), greedy=temperature <= 0,
                 generator=torch.Generator().manual_seed(seed))
    b = ro.batch
    return {"void_rate": float(b.void_turn[b.turn_mask].float().mean()), "success": float(ro.success.float().mean()),
            "replies": [model.tokenizer.decode(t.gen) for t in ro.episodes[0].turns]}


_BANDIT = dict(env="bandit_chain", system=SYSTEM, group_size=4, prompts_per_step=2, context="full")
PAIR = {"tinylm": dict(_BANDIT, policy="tinylm", bc_steps=60, lr=3e-4),
        "smollm2": dict(_BANDIT, policy="smollm2", lora_r=8, bc_steps=8)}
"""policy -> TrainConfig fields of the pair's runs. TinyLM (0.2M parameters, pretrained on GridWorld and MockSearch
text) clones at 3e-3 and takes RL steps at 3e-4 (at its default 3e-3 its replies lose the format within 4 RL steps
on this env: pilots, seeds 100-101); SmolLM2 trains LoRA adapters of rank 8 at its own rates (BC 1e-3, RL 1e-4,
``toyrl.train.optim``). Each gets the warm start it needs to write the format: 60 BC steps for TinyLM, 8 for
SmolLM2."""
PAIR_STEPS = 20
"""GRPO steps of a stored pair run"""


@contextmanager
def quiet_transformers():
    """transformers' own stderr output while a Hugging Face policy is loaded and first decodes: its "Loading
    weights" progress bar and its once-only notice that SmolLM2's BPE tokenizer ignores
    ``clean_up_tokenization_spaces`` (harmless: the cleanup is skipped, which is what a BPE tokenizer needs). Both
    are switched off inside the block and restored after it; without transformers, nothing to do."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:
        yield
        return
    level, bar = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bar:
            hf_logging.enable_progress_bar()


def warm_start(policy: str, seed: int = 0, bc_steps: Optional[int] = None, **fields) -> tuple:
    """A Trainer of ``PAIR[policy]`` (``fields`` override it, e.g. a smaller batch) and what its warm start did:
    {"valid_before", "valid_after": format-valid turn rate of one sampled batch before and after behaviour
    cloning, "replies_before", "replies_after": the replies of its first episode, "bc_losses", "bc_s_per_step":
    seconds per BC step}. ``bc_steps`` None: the pair's own."""
    kw = {**PAIR[policy], **fields, **({} if bc_steps is None else {"bc_steps": bc_steps})}
    bc_steps = kw["bc_steps"]
    with quiet_transformers():                     # the load and the first decode: transformers' stderr notices
        tr = Trainer(TrainConfig(**kw, seed=seed, steps=PAIR_STEPS, progress=False))
        ro = tr.sample()
    replies = lambda ro: [tr.codec.decode(t.gen) for t in ro.episodes[0].turns]     # noqa: E731 (the first episode)
    warm = {"valid_before": format_valid(ro), "replies_before": replies(ro)}
    t0 = time.perf_counter()
    warm["bc_losses"] = tr.behaviour_clone(bc_steps)
    warm["bc_s_per_step"] = (time.perf_counter() - t0) / max(bc_steps, 1)
    ro = tr.sample()
    warm.update(valid_after=format_valid(ro), replies_after=replies(ro))
    return tr, warm


def run_pair(policy: str, seed: int = 0, steps: int = PAIR_STEPS, out_dir=RUNS_DIR, name: Optional[str] = None,
             **fields) -> dict:
    """The pair's run of ``policy`` (``fields`` override its config, e.g. device="cuda"): its warm start, then
    ``steps`` GRPO steps. Returns (and writes to ``out_dir/NAME__seedS.json``, NAME default ``pair_POLICY``;
    out_dir None: nowhere) {"config": the Trainer's resolved config, "warm": ``warm_start``'s figures, "rows": the
    run-log rows, "threads", "load": torch threads and the 1-minute load average at the end, "seconds": wall time}."""
    t0 = time.perf_counter()
    tr, warm = warm_start(policy, seed, **fields)
    sync = torch.cuda.synchronize if tr.device.type == "cuda" else (lambda: None)
    rows = []
    for _ in range(steps):
        rows.append({k: _plain(v) for k, v in tr.step().items()})
        sync()
    out = {"config": encode(asdict(tr.cfg)), "warm": warm, "rows": rows,
           "threads": torch.get_num_threads(), "load": os.getloadavg()[0], "seconds": time.perf_counter() - t0}
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / f"{name or 'pair_' + policy}__seed{seed}.json").write_text(json.dumps(out, indent=1) + "\n")
    return out


def load_pair(seed: int = 0, out_dir=RUNS_DIR) -> dict:
    """{policy: run_pair's record} of the stored pair runs (a FileNotFoundError naming the command if one is
    missing: ``python -m toyrl.viz.small_llm POLICY``)."""
    out = {}
    for policy in PAIR:
        path = Path(out_dir) / f"pair_{policy}__seed{seed}.json"
        if not path.exists():
            raise FileNotFoundError(f"{path} is missing; make it with `python -m toyrl.viz.small_llm {policy}`")
        out[policy] = json.loads(path.read_text())
    return out


TWINS = ("bc_warmstart", "env_mask")
"""the toy's claims registered again with SmolLM2 as the policy (``toyrl.lab.claims.llm``: smollm2_NAME)"""


def twin_verdicts(names=TWINS, load=None) -> dict:
    """name -> policy ("toy", "smollm2") -> block ("seeds 0-9", "seeds 10-19") -> {"verdict", "tests": [(test name,
    mean, ci low, ci high, outcome)], "cpu_s": CPU seconds of the block's runs}, from the stored ledger records of
    NAME and smollm2_NAME. ``load(claim, heldout) -> record`` (default ``toyrl.viz.blind.record``)."""
    from ..lab.claims.report import LLM_PREFIX
    from .blind import BLOCKS, record
    load = record if load is None else load
    out = {}
    for name in names:
        out[name] = {}
        for policy, claim in (("toy", name), ("smollm2", LLM_PREFIX + name)):
            out[name][policy] = {}
            for block, held in BLOCKS:
                r = load(claim, held)
                tests = [(t["name"], t["effect"]["mean"], *t["effect"]["ci95"], t["outcome"]) for t in r["result"]["tests"]]
                out[name][policy][block] = {"verdict": r["verdict"], "tests": tests, "cpu_s": r.get("cpu_time_s")}
    return out


DOORS = dict({k: v for k, v in WARMSTARTS["doors_smollm2"].items() if k not in ("bc_steps", "bc_noise")},
             init="doors_smollm2", estimator="grpo", lr=3e-4)
"""lesson 9's live RL run of SmolLM2: Doors with 2 rooms x 3 colours and 3 turns, P=2 x G=8, LoRA r 8 from the
shipped format-only warm start (``toyrl warmstart doors_smollm2``: 4 BC steps on a teacher that picks doors at
random), GRPO at lr 3e-4 (three times the LoRA default, so a few steps move the policy)"""


@torch.no_grad()
def door_choices(policy, codec, rooms: int = 3, colours: int = 3) -> np.ndarray:
    """(colours, colours) P(door | light) of a text policy on Doors' first room: row c is the light's colour, column d
    a door; each entry is the policy's probability of the whole canonical reply go[DOOR] (the product of its token
    probabilities, teacher-forced after the first turn's prompt), normalized over the ``colours`` replies. The
    diagonal is the right door. No sampling: two calls on the same weights give the same matrix.

        P(d | c) = exp(log pi(reply_d | prompt_c)) / sum_d' exp(log pi(reply_d' | prompt_c))

    Example: a policy that always writes go[left] -> every row [1, 0, 0]; one that reads the light -> the identity.
    """
    core = make_core("doors", 1, rooms=rooms, colours=colours)
    seqs, spans = [], []
    for c in range(colours):
        core.reset(np.full((1, rooms), c, np.int64))                 # every room lit c: the first room's light is c
        prompt = codec.prompt(core, 0)
        for d in range(colours):
            reply = codec.action_ids(core, d, 0)
            seqs.append(prompt + reply)
            spans.append((len(prompt), len(prompt) + len(reply)))
    T = max(map(len, seqs))
    tokens = torch.full((len(seqs), T), codec.PAD, dtype=torch.long, device=policy.device)   # (C * C, T)
    mask = torch.zeros_like(tokens, dtype=torch.bool)
    for i, q in enumerate(seqs):
        tokens[i, :len(q)] = torch.tensor(q, device=policy.device)
        mask[i, :len(q)] = True
    was_training = policy.training
    policy.eval()
    logp, _ = policy.logprobs(tokens, mask)                           # (C * C, T)
    policy.train(was_training)
    reply_logp = torch.stack([logp[i, a:b].sum() for i, (a, b) in enumerate(spans)]).view(colours, colours)
    return torch.softmax(reply_logp.double(), 1).cpu().numpy()


def light_reading(P: np.ndarray) -> dict:
    """What a ``door_choices`` matrix says, lights drawn uniformly: {"right": the mean probability of the right
    door (the diagonal's mean; 1 / colours for a policy that ignores the light and spreads evenly), "H": the
    entropy in nats of the door chosen, H(door) (log(colours): every door equally often; 0: always one door),
    "mi": the mutual information in nats between light and door, I(light; door) = H(door) - H(door | light)
    (0: the door does not depend on the light; log(colours): it is a function of it)}. Template collapse (RAGEN-2,
    arXiv 2604.06268) is H falling while I stays near 0: replies narrow onto a template that ignores the input.
    Example: the identity (3 x 3) -> right 1.0, H = mi = log 3 = 1.099; every row [1, 0, 0] -> H = mi = 0."""
    P = np.asarray(P, float)
    C = P.shape[0]
    joint = P / C                                                      # p(c, d)
    pd = joint.sum(0)                                                  # p(d)
    with np.errstate(divide="ignore", invalid="ignore"):
        mi = np.where(joint > 0, joint * np.log(joint / (pd[None, :] / C)), 0.0).sum()
        H = -np.where(pd > 0, pd * np.log(pd), 0.0).sum()
    return {"right": float(np.trace(P) / C), "H": float(H), "mi": float(mi)}


def plot_door_choices(mats: dict, *, title: str):
    """One heatmap per named ``door_choices`` matrix ({"before RL": P, ...}): light colour down, door across, the
    probability in each cell and a shared colour bar; each panel's title gives ``light_reading``'s figures."""
    import matplotlib.pyplot as plt
    from ..envs.doors import COLOURS, DOORS as DOOR_NAMES
    from .style import figsize, font_size
    n = len(mats)
    fig, axes = plt.subplots(1, n, figsize=figsize(3.4 * n + 1.0, 3.4), layout="constrained", squeeze=False)
    for ax, (name, P) in zip(axes[0], mats.items()):
        C = len(P)
        im = ax.imshow(P, vmin=0.0, vmax=1.0, cmap="Greens")
        for c in range(C):
            for d in range(C):
                ax.text(d, c, f"{P[c][d]:.2f}", ha="center", va="center", fontsize=font_size("legend"),
                        color="white" if P[c][d] > 0.6 else "black")
        ax.set_xticks(range(C), [f"go[{DOOR_NAMES[d]}]" for d in range(C)])
        ax.set_yticks(range(C), [f"{COLOURS[c]} light" for c in range(C)])
        ax.set_xlabel("door the policy writes")
        ax.set_ylabel("light in the room")
        r = light_reading(P)
        ax.set_title(f"{name}\nright door {r['right']:.2f}, H(door) {r['H']:.2f}, MI {r['mi']:.2f} nats",
                     fontsize=font_size("title"))
    fig.colorbar(im, ax=list(axes[0]), label="P(door | light)")
    fig.suptitle(title, fontsize=font_size("suptitle"), wrap=True)
    return fig


DOORS_STEPS = 8
"""GRPO steps of lesson 9's live run and of each stored Doors run"""


def run_doors(seed: int = 0, steps: int = DOORS_STEPS, out_dir=RUNS_DIR, progress: bool = False, **fields) -> dict:
    """``DOORS`` (``fields`` override it) for ``steps`` steps, ``door_choices`` read before and after each. Returns
    (and writes to ``out_dir/doors__seedS.json``; out_dir None: nowhere) {"config", "rows": the run-log rows,
    "choices": the (colours, colours) matrices, [0] the start, "reads": their ``light_reading``, "threads", "load",
    "seconds"}. ``progress``: a bar over the steps (lesson 9's live cell)."""
    from tqdm.auto import tqdm
    t0 = time.perf_counter()
    with quiet_transformers():                  # the load and the first reply: transformers' stderr notices
        tr = Trainer(TrainConfig(**{**DOORS, **fields}, steps=steps, seed=seed, progress=False))
        K, C = tr.core.K, tr.core.C
        mats, rows = [door_choices(tr.policy, tr.codec, K, C)], []
        for _ in tqdm(range(steps), desc="GRPO steps of SmolLM2", disable=not progress):
            rows.append({k: _plain(v) for k, v in tr.step().items()})
            mats.append(door_choices(tr.policy, tr.codec, K, C))
    out = {"config": encode(asdict(tr.cfg)), "rows": rows, "choices": [m.tolist() for m in mats],
           "reads": [light_reading(m) for m in mats], "threads": torch.get_num_threads(), "load": os.getloadavg()[0],
           "seconds": time.perf_counter() - t0}
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / f"doors__seed{seed}.json").write_text(json.dumps(out, indent=1) + "\n")
    return out


def load_doors(seeds=range(4), out_dir=RUNS_DIR) -> dict:
    """{seed: run_doors' record} of the stored Doors runs (a FileNotFoundError naming the command if one is
    missing: ``python -m toyrl.viz.small_llm doors --seed S``)."""
    out = {}
    for seed in seeds:
        path = Path(out_dir) / f"doors__seed{seed}.json"
        if not path.exists():
            raise FileNotFoundError(f"{path} is missing; make it with "
                                    f"`python -m toyrl.viz.small_llm doors --seed {seed}`")
        out[seed] = json.loads(path.read_text())
    return out


if __name__ == "__main__":              # python -m toyrl.viz.small_llm smollm2 | tinylm | doors [--seed S]
    import argparse
    ap = argparse.ArgumentParser(description="store notebook 9's pair run of one policy, or a Doors run of SmolLM2")
    ap.add_argument("what", choices=sorted(PAIR) + ["doors"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if a.what == "doors":
        rec = run_doors(a.seed)
        first, last = rec["reads"][0], rec["reads"][-1]
        print(f"doors seed {a.seed}: H(door) {first['H']:.3f} -> {last['H']:.3f}, MI {first['mi']:.3f} -> "
              f"{last['mi']:.3f}; {rec['seconds']:.0f} s at {rec['threads']} threads, load {rec['load']:.2f}")
    else:
        rec = run_pair(a.what, a.seed)
        print(f"{a.what}: valid {rec['warm']['valid_before']:.2f} -> {rec['warm']['valid_after']:.2f} after BC; "
              f"{rec['seconds']:.0f} s at {rec['threads']} threads, load {rec['load']:.2f}")
