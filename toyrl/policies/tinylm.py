"""TinyLM: a word/character-level language-model policy that reads env text and writes replies.

Dimension legend: N training examples (turns), L positions of one example, V vocabulary, d width.

The network is nanoGPT's (the toy transformer of ``toy.py``: pre-LN blocks, tied head, KV-cache
generation, positions from the padding mask); what makes it a *language* policy is its
vocabulary (``WordTokenizer``: env words and characters) and its codec (``TextCodec``): it reads
``render_text`` and its reply is parsed by ``parse_action``, so a malformed reply is a void turn.

Behaviour cloning (``pretrain``) is next-token prediction on the replies of the shipped
demonstrations (``data/demos/*.jsonl``: each episode's task and actions, replayed through the env
so every observation is rendered by the same codec the RL rollouts use):

    L_BC = - sum_{turns} sum_{t in reply} log pi(y_t | context, y_<t) / #reply tokens

``toyrl pretrain`` (``main`` below) writes the shipped checkpoint ``data/checkpoints/tinylm.pt``:

    toyrl pretrain --steps 1000 --threads 1        # = python -m toyrl.policies.tinylm ...
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch

from ..textcodec import TextCodec, TextExpert, WordTokenizer
from .toy import ToyTransformer, ToyTransformerConfig

__all__ = ["TinyLM", "TINYLM_PRESET", "DEFAULT_CHECKPOINT", "PRETRAIN_ENVS", "PRETRAIN_CONTEXT", "build_tokenizer",
           "bc_examples", "pretrain", "greedy_success", "SMALL_LLM_RUNS", "run_small_llm", "load_small_llm",
           "reply_panel", "main"]

DATA = Path(__file__).resolve().parents[2] / "data"
DEFAULT_CHECKPOINT = DATA / "checkpoints" / "tinylm.pt"
TINYLM_PRESET = dict(d_model=64, n_layer=2, n_head=4, max_len=1024)
# env settings of the BC data: the shipped demos (GridWorld: random 4x4 maps) replayed with these kwargs
# MockSearch with 4 distractor sentences a result (~60 words, ~150 tokens): the passages the shipped
# checkpoint was trained on; its default 200-word passages outgrow TinyLM's 1024-token context
PRETRAIN_ENVS = {"gridworld": {"size": 4, "max_turns": 10}, "mock_search": {"noise_sentences": 4}}
PRETRAIN_CONTEXT = {"context": "last_k", "context_k": 1}
"""what the BC data's turns read (the prompt and the last turn); saved in the checkpoint's meta, and the
context a run of the checkpoint gets unless its TrainConfig names one (``TinyLM.trained_context``)"""


def build_tokenizer() -> WordTokenizer:
    """The vocabulary of every shipped env text: demo transcripts, and the whole MockSearch KB
    (documents, questions, distractors and every action), so each entity name is one token."""
    from ..demos import load_demos
    from ..envs import make_core
    texts = []
    for env in ("gridworld", "bandit_chain", "mock_search"):
        for ep in load_demos(env):
            texts += [t["observation"] + " " + t["action"] for t in ep["turns"]]
    core = make_core("mock_search", 1)
    texts += core.noise_pool + core.questions + [s for d in core.docs for s in d]
    texts += [core.action_text(a) for a in range(core.n_actions)]
    return WordTokenizer.from_corpus(texts)


class TinyLM(ToyTransformer):
    """The toy transformer with a tokenizer: a TokenPolicy whose ids are words and characters."""

    def __init__(self, cfg: ToyTransformerConfig, tokenizer: WordTokenizer):
        super().__init__(cfg)
        self.tokenizer = tokenizer
        self.autocast_dtype: Optional[torch.dtype] = None
        """torch.bfloat16 / float16: run the blocks under autocast (the head and the softmax stay fp32)"""

    def _trunk(self, tokens, pos, attn_mask, caches=None):
        """The toy trunk, under autocast when ``autocast_dtype`` is set; returns fp32 (B, T, C)."""
        if self.autocast_dtype is None:
            return super()._trunk(tokens, pos, attn_mask, caches)
        with torch.autocast(self.device.type, dtype=self.autocast_dtype):
            return super()._trunk(tokens, pos, attn_mask, caches).float()

    @classmethod
    def from_scratch(cls, tokenizer: Optional[WordTokenizer] = None, seed: Optional[int] = None,
                     **overrides) -> "TinyLM":
        """A randomly initialized TinyLM (``TINYLM_PRESET`` with ``overrides``)."""
        tok = tokenizer or build_tokenizer()
        cfg = ToyTransformerConfig(vocab_size=tok.vocab_size, pad_id=tok.pad_id, **{**TINYLM_PRESET, **overrides})
        with torch.random.fork_rng(devices=[]):
            if seed is not None:
                torch.manual_seed(seed)
            return cls(cfg, tok)

    def codec(self, **kw) -> TextCodec:
        """The TextCodec matching this model: compact renders, "> " prompts, replies end at "]"."""
        return TextCodec(self.tokenizer, **{"max_new": 8, **kw})

    @property
    def trained_context(self) -> Optional[tuple]:
        """(context, context_k) the checkpoint was trained with (its meta), None if it does not say."""
        meta = getattr(self, "meta", None) or {}
        return (meta["context"], int(meta.get("context_k", 1))) if meta.get("context") else None

    def save(self, path, meta: Optional[dict] = None) -> Path:
        """Weights (fp16, a few MB at most), config, vocabulary and ``meta`` in one torch file."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().cpu().half() for k, v in self.state_dict().items() if k != "lm_head.weight"}
        torch.save({"config": asdict(self.config), "words": self.tokenizer.words, "state_dict": state,
                    "meta": meta or {}}, path)
        return path

    @classmethod
    def load(cls, path=DEFAULT_CHECKPOINT, device="cpu") -> "TinyLM":
        """A TinyLM from ``save``'s file (fp32 weights on ``device``)."""
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"no TinyLM checkpoint at {path} (make one with `toyrl pretrain`)")
        ck = torch.load(path, map_location="cpu", weights_only=True)
        model = cls(ToyTransformerConfig(**ck["config"]), WordTokenizer(ck["words"]))
        state = {k: v.float() for k, v in ck["state_dict"].items()}
        state["lm_head.weight"] = state["wte.weight"]
        model.load_state_dict(state)
        model.meta = ck.get("meta", {})
        return model.to(device)


# ---- behaviour cloning -----------------------------------------------------------------------------
def bc_examples(env: str, codec: TextCodec, *, env_kwargs: Optional[dict] = None, repeats: int = 1,
                context: str = "last_k", context_k: int = 1, seed: int = 0) -> list[tuple[list, list]]:
    """(context ids, reply ids) of every expert turn of the shipped ``env`` demos, replayed ``repeats``
    times through a core built with ``env_kwargs`` (different seeds redraw MockSearch's distractors)."""
    from ..demos import load_demos, replay_chooser
    from ..envs import make_core
    from ..rollout import rollout
    demos = load_demos(env)
    tasks = np.array([d["task"] for d in demos])
    out = []
    for r in range(repeats):
        core = make_core(env, len(demos), seed=seed + r, **(env_kwargs or {}))
        expert = TextExpert(core, codec, replay_chooser([d["actions"] for d in demos]))
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
            print(f"bc step {s:5d}  loss {np.mean(losses[-log_every:]):.4f}  {time.perf_counter() - t0:6.1f}s", flush=True)
    model.eval()
    return losses


@torch.no_grad()
def greedy_success(model, env: str, env_kwargs: dict, n: int = 64, seed: int = 1234, context_k: int = 1,
                   codec: Optional[TextCodec] = None) -> float:
    """Success rate of greedy replies on ``n`` tasks drawn with ``seed``."""
    from ..envs import make_core
    from ..rollout import rollout
    core = make_core(env, n, seed=seed, **env_kwargs)
    tasks = core.sample_tasks(np.random.default_rng(seed), n)
    ro = rollout(model, core, tasks, np.arange(n), codec=codec or model.codec(), context="last_k",
                 context_k=context_k, greedy=True)
    return float(ro.success.float().mean())


# ---- notebook 9: precomputed runs and the reply panel ------------------------------------------------
RUNS_DIR = DATA / "runs" / "small_llm"
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
    from ..textcodec import repetition_rate, text_template_stats, turn_texts
    from ..train import TrainConfig, Trainer
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
        import json
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        with open(Path(out_dir) / f"{name}__seed{seed}.jsonl", "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    return rows


def _plain(v):
    if isinstance(v, torch.Tensor):
        v = v.detach().cpu().tolist()
    if isinstance(v, (np.floating, np.integer)):
        v = v.item()
    return None if isinstance(v, float) and not np.isfinite(v) else v


def load_small_llm(names=None, seed: int = 0, live: bool = False, out_dir=RUNS_DIR) -> dict:
    """{name: rows} of notebook 9's runs: read from ``data/runs/small_llm/`` (``live``: recomputed now)."""
    import json
    out = {}
    for name in names or SMALL_LLM_RUNS:
        path = Path(out_dir) / f"{name}__seed{seed}.jsonl"
        if live or not path.exists():
            out[name] = run_small_llm(name, seed, out_dir)
        else:
            out[name] = [json.loads(line) for line in open(path) if line.strip()]
    return out


@torch.no_grad()
def reply_panel(temperature: float, seed: int = 0, n: int = 16, path=DEFAULT_CHECKPOINT) -> dict:
    """What the shipped TinyLM writes on the GridWorld 4x4 map at ``temperature`` (0 = greedy): the
    void-turn rate, the success rate of ``n`` episodes and the first episode's replies. Pure: loads
    the checkpoint, seeds its own generator."""
    from ..envs import make_core
    from ..rollout import rollout
    model = TinyLM.load(path)
    core = make_core("gridworld", n, seed=seed, map_name="4x4", max_turns=8)
    tasks = core.sample_tasks(np.random.default_rng(seed), n)
    ro = rollout(model, core, tasks, np.zeros(n, int), codec=model.codec(), context="last_k", context_k=1,
                 temperature=max(temperature, 1e-3), greedy=temperature <= 0,
                 generator=torch.Generator().manual_seed(seed))
    b = ro.batch
    return {"void_rate": float(b.void_turn[b.turn_mask].float().mean()), "success": float(ro.success.float().mean()),
            "replies": [model.tokenizer.decode(t.gen) for t in ro.episodes[0].turns]}


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
    a = p.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    model = TinyLM.from_scratch(seed=a.seed).to(a.device)
    print(f"TinyLM: {model.num_params() / 1e6:.2f}M parameters, vocabulary {model.vocab_size}")
    t0, c0 = time.perf_counter(), time.process_time()
    losses = pretrain(model, steps=a.steps, batch_size=a.batch_size, lr=a.lr, seed=a.seed)
    minutes, cpu_minutes = (time.perf_counter() - t0) / 60, (time.process_time() - c0) / 60
    evals = {} if a.no_eval else {"greedy_success_gridworld_4x4": greedy_success(model, "gridworld", {"map_name": "4x4", "max_turns": 10}),
             "greedy_success_gridworld_random4": greedy_success(model, "gridworld", {"size": 4, "max_turns": 10}),
             "greedy_success_mock_search": greedy_success(model, "mock_search", PRETRAIN_ENVS["mock_search"])}
    meta = {"command": "toyrl pretrain " + " ".join(sys.argv[1:] if argv is None else argv), "steps": a.steps,
            "final_loss": float(np.mean(losses[-50:])), "minutes": minutes, "cpu_minutes": cpu_minutes,
            "threads": torch.get_num_threads(), "load_average": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
            **PRETRAIN_CONTEXT, **evals}
    path = TinyLM.save(model, a.out, meta)
    print(f"saved {path} ({path.stat().st_size / 1e6:.2f} MB) after {minutes:.1f} min: " +
          ", ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in meta.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
