"""Behaviour cloning of TinyLM on the shipped demonstrations, and ``toyrl pretrain`` that ships its checkpoint.

Dimension legend: N training examples (turns), L positions of one example.

The data are the replies of ``data/demos/*.jsonl`` (each episode's task and actions), replayed through
the env so every observation is rendered by the same codec the RL rollouts use; the loss is
next-token prediction on the reply tokens only:

    L_BC = - sum_{turns} sum_{t in reply} log pi(y_t | context, y_<t) / #reply tokens

``main`` writes the shipped checkpoint ``data/checkpoints/tinylm.pt``:

    toyrl pretrain --steps 1000 --threads 1        # = python -m toyrl.train.pretrain --steps 1000 --threads 1

The model itself (network, tokenizer, checkpoint format) is ``toyrl.policies.tinylm``; this module sits
beside the trainer (``toyrl.train``), above the policies it trains.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Optional, Sequence

import numpy as np
import torch

from ..policies.scripted import ScriptedPolicy, replay_chooser
from ..envs.experts import load_demos
from ..envs import make_core
from ..policies.tinylm import DEFAULT_CHECKPOINT, TinyLM
from ..rollout.play import rollout
from ..codecs.text import TextCodec

__all__ = ["PRETRAIN_ENVS", "PRETRAIN_CONTEXT", "CHECKPOINT_EVALS", "bc_examples", "pretrain", "greedy_success", "main"]

# env settings of the BC data: the shipped demos (GridWorld: random 4x4 maps) replayed with these kwargs
# MockSearch with 4 distractor sentences a result (~60 words, ~150 tokens): the passages the shipped
# checkpoint was trained on; its default 200-word passages outgrow TinyLM's 1024-token context
PRETRAIN_ENVS = {"gridworld": {"size": 4, "max_turns": 10}, "mock_search": {"noise_sentences": 4}}
PRETRAIN_CONTEXT = {"context": "last_k", "context_k": 1}
"""what the BC data's turns read (the prompt and the last turn); saved in the checkpoint's meta, and the
context a run of the checkpoint gets unless its TrainConfig names one (``TinyLM.trained_context``)"""
# the greedy success checks ``main`` stores in a fresh checkpoint's meta: name -> (env, env kwargs)
CHECKPOINT_EVALS = {"greedy_success_gridworld_4x4": ("gridworld", {"map_name": "4x4", "max_turns": 10}),
                    "greedy_success_gridworld_random4": ("gridworld", {"size": 4, "max_turns": 10}),
                    "greedy_success_mock_search": ("mock_search", PRETRAIN_ENVS["mock_search"])}


def bc_examples(env: str, codec: TextCodec, *, env_kwargs: Optional[dict] = None, repeats: int = 1,
                context: str = "last_k", context_k: int = 1, seed: int = 0) -> list[tuple[list, list]]:
    """(context ids, reply ids) of every expert turn of the shipped ``env`` demos, replayed ``repeats``
    times through a core built with ``env_kwargs`` (different seeds redraw MockSearch's distractors)."""
    demos = load_demos(env)
    tasks = np.array([d["task"] for d in demos])
    out = []
    for r in range(repeats):
        core = make_core(env, len(demos), seed=seed + r, **(env_kwargs or {}))
        expert = ScriptedPolicy(core, codec, replay_chooser([d["actions"] for d in demos]))
        ro = rollout(expert, core, tasks, np.arange(len(demos)), codec=codec, context=context, context_k=context_k)
        out += [(t.context, t.gen) for ep in ro.episodes for t in ep.turns]
    return out


def _bc_batch(examples: list, idx: np.ndarray, pad: int, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded (tokens, attn_mask, reply_mask), each (n, L), of examples ``idx``."""
    seqs = [examples[i][0] + examples[i][1] for i in idx]
    L = max(len(s) for s in seqs)
    tok = np.full((len(seqs), L), pad, np.int64)                                # (n, L)
    att = np.zeros((len(seqs), L), bool)
    rep = np.zeros((len(seqs), L), bool)
    for j, i in enumerate(idx):
        c, g = len(examples[i][0]), len(examples[i][1])
        tok[j, :c + g] = seqs[j]
        att[j, :c + g] = True
        rep[j, c:c + g] = True
    t = lambda x: torch.from_numpy(x).to(device)                                 # noqa: E731
    return t(tok), t(att), t(rep)


def pretrain(model: TinyLM, *, steps: int = 1000, batch_size: int = 64, lr: float = 3e-3, envs: Optional[dict] = None,
             repeats: Optional[dict] = None, seed: int = 0, log_every: int = 100, verbose: bool = True) -> list[float]:
    """BC of ``model`` on the shipped demos of ``envs`` (default ``PRETRAIN_ENVS``): each step one
    minibatch of turns of one env, envs in turn (short GridWorld turns are not padded to long
    MockSearch ones; MockSearch batches are half size), AdamW with warm-up and cosine decay.
    Returns the loss of every step."""
    envs = PRETRAIN_ENVS if envs is None else envs
    repeats = {"mock_search": 8, **(repeats or {})}
    codec = model.codec()
    data = [bc_examples(env, codec, env_kwargs=kw, repeats=repeats.get(env, 1), seed=seed, **PRETRAIN_CONTEXT)
            for env, kw in envs.items()]
    sizes = [batch_size if max(len(c) + len(g) for c, g in ex) <= 96 else batch_size // 2 for ex in data]
    rng = np.random.default_rng(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.98))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 50) * 0.5 * (1 + np.cos(np.pi * min(s, steps) / steps)))
    model.train()
    losses, t0 = [], time.perf_counter()
    for s in range(steps):
        ex = data[s % len(data)]
        tok, att, rep = _bc_batch(ex, rng.choice(len(ex), sizes[s % len(data)]), model.pad_id, model.device)
        logp, _ = model.logprobs(tok, att)                                       # (n, L)
        loss = -(logp * rep).sum() / rep.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if verbose and (s % log_every == 0 or s == steps - 1):
            print(f"bc step {s:5d}  loss {np.mean(losses[-log_every:]):.4f}  {time.perf_counter() - t0:6.1f}s",
                  flush=True)
    model.eval()
    return losses


@torch.no_grad()
def greedy_success(model, env: str, env_kwargs: dict, n: int = 64, seed: int = 1234, context_k: int = 1,
                   codec: Optional[TextCodec] = None) -> float:
    """Success rate of greedy replies on ``n`` tasks drawn with ``seed``."""
    core = make_core(env, n, seed=seed, **env_kwargs)
    tasks = core.sample_tasks(np.random.default_rng(seed), n)
    ro = rollout(model, core, tasks, np.arange(n), codec=codec or model.codec(), context="last_k",
                 context_k=context_k, greedy=True)
    return float(ro.success.float().mean())


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``toyrl pretrain``: BC a fresh TinyLM on the shipped demos and save the checkpoint."""
    p = argparse.ArgumentParser(prog="toyrl pretrain", description="behaviour-clone TinyLM on data/demos/")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", default=str(DEFAULT_CHECKPOINT))
    p.add_argument("--no-eval", action="store_true", help="skip the greedy success check after training")
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--"]:                     # `toyrl pretrain -- --steps 10`: argparse.REMAINDER keeps the "--"
        argv = argv[1:]
    a = p.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    model = TinyLM.from_scratch(seed=a.seed).to(a.device)
    print(f"TinyLM: {model.num_params() / 1e6:.2f}M parameters, vocabulary {model.vocab_size}")
    t0, c0 = time.perf_counter(), time.process_time()
    losses = pretrain(model, steps=a.steps, batch_size=a.batch_size, lr=a.lr, seed=a.seed)
    minutes, cpu_minutes = (time.perf_counter() - t0) / 60, (time.process_time() - c0) / 60
    evals = {} if a.no_eval else {k: greedy_success(model, env, kw) for k, (env, kw) in CHECKPOINT_EVALS.items()}
    meta = {"command": "toyrl pretrain " + " ".join(argv), "steps": a.steps,
            "final_loss": float(np.mean(losses[-50:])), "minutes": minutes, "cpu_minutes": cpu_minutes,
            "threads": torch.get_num_threads(),
            "load_average": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
            **PRETRAIN_CONTEXT, **evals}
    path = TinyLM.save(model, a.out, meta)
    print(f"saved {path} ({path.stat().st_size / 1e6:.2f} MB) after {minutes:.1f} min: " +
          ", ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in meta.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
