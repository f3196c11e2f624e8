"""Notebook 9 (a small language-model policy): its precomputed GRPO / GiGPO runs of TinyLM and the reply panel.

``SMALL_LLM_RUNS`` names each run's ``TrainConfig`` fields; ``run_small_llm`` trains one and adds to every
row the text-level Echo Trap signals of the step's rollout (RAGEN, arXiv 2504.20073): the template
entropy H and mutual information MI of the replies (``toyrl.diagnostics.text_template_stats``) and the
repetition rate. ``load_small_llm`` reads the stored runs of ``data/runs/small_llm/`` (or recomputes
them); ``reply_panel`` is the temperature slider's pure function.

    runs = load_small_llm(["grid4x4_bc_grpo"])            # {name: rows}
    reply_panel(0.0)["void_rate"]                         # greedy replies of the shipped checkpoint
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from ..envs import make_core
from ..policies.tinylm import DEFAULT_CHECKPOINT, TinyLM
from ..train.pretrain import PRETRAIN_ENVS
from ..rollout.engine import rollout
from ..diagnostics import repetition_rate, text_template_stats
from ..codecs.text import turn_texts
from ..train import TrainConfig, Trainer

__all__ = ["RUNS_DIR", "SMALL_LLM_RUNS", "run_small_llm", "load_small_llm", "reply_panel"]

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


def run_small_llm(name: str, seed: int = 0, out_dir=None, steps: Optional[int] = None) -> list[dict]:
    """Train notebook 9's run ``name`` (``SMALL_LLM_RUNS``) and return its rows; each row also holds the
    text-level Echo Trap signals of its rollout (``text_template_H`` / ``text_template_MI`` of the
    replies, ``repetition_rate``) and three sample replies. Written to ``out_dir/name__seedS.jsonl``."""
    kw = dict(SMALL_LLM_RUNS[name])
    kw["steps"] = steps or kw["steps"]
    tr = Trainer(TrainConfig(context="last_k", context_k=1, lr=3e-4, seed=seed, progress=False, **kw))
    last, rows = {}, []
    sample = tr.sample

    def keep(*a, **k):                        # remember the step's rollout for the text signals
        last["ro"] = sample(*a, **k)
        return last["ro"]
    tr.sample = keep
    for _ in range(kw["steps"]):
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
