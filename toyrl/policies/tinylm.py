"""TinyLM: a word/character-level language-model policy that reads env text and writes replies.

The network is nanoGPT's (the toy transformer of ``toy.py``: pre-LN blocks, tied head, KV-cache
generation, positions from the padding mask); what makes it a *language* policy is its
vocabulary (``WordTokenizer``: env words and characters) and its codec (``TextCodec``): it reads
``render_text`` and its reply is parsed by ``parse_action``, so a malformed reply is a void turn.

The shipped checkpoint ``data/checkpoints/tinylm.pt`` (``TinyLM.load``) is behaviour-cloned on the
shipped demonstrations by ``toyrl pretrain`` (``toyrl.train.pretrain``, beside the trainer); notebook 9's
runs of it live in ``toyrl.viz.small_llm``.
"""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Optional

import torch

from ..codecs.text import TextCodec, WordTokenizer
from .toy import ToyTransformer, ToyTransformerConfig

__all__ = ["TinyLM", "TINYLM_PRESET", "DEFAULT_CHECKPOINT", "build_tokenizer"]

DATA = Path(__file__).resolve().parents[2] / "data"
DEFAULT_CHECKPOINT = DATA / "checkpoints" / "tinylm.pt"
TINYLM_PRESET = dict(d_model=64, n_layer=2, n_head=4, max_len=1024)


def build_tokenizer() -> WordTokenizer:
    """The vocabulary of every shipped env text: demo transcripts, and the whole MockSearch KB
    (documents, questions, distractors and every action), so each entity name is one token."""
    from ..envs.experts import load_demos
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
        """(context, context_k) the checkpoint was trained with (its meta: ``toyrl.train.pretrain.PRETRAIN_CONTEXT``
        for the shipped one), None if it does not say."""
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
