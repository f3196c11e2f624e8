"""The text side of ``HFPolicy``: a ``transformers`` tokenizer behind the interface ``TextCodec`` reads, the special
ids (BOS / EOS / pad) as the model's config and the tokenizer name them, and the chat template cut into the strings
a multi-turn text codec writes between turns.

    tok = HFTokenizer(AutoTokenizer.from_pretrained(path), model=model)
    head, to_assistant, to_user = chat_template_strings(tok.tok)
"""
from __future__ import annotations

from typing import Optional

from ..codecs.text import TEMPLATES

__all__ = ["HFTokenizer", "ROLES", "model_token_ids", "tokenizer_token_ids", "special_ids", "chat_template_strings",
           "system_head"]


class HFTokenizer:
    """Adapter of a ``transformers`` tokenizer to the interface ``TextCodec`` reads. Its special ids come from
    ``special_ids``: EOS and pad as the model's config names them, BOS only without a chat template."""

    def __init__(self, tok, vocab_size: Optional[int] = None, model=None):
        self.tok = tok
        self.vocab_size = int(vocab_size or len(tok))
        ids = special_ids(bool(getattr(tok, "chat_template", None)), model_token_ids(model), tokenizer_token_ids(tok))
        self.bos_id, self.eos_id, self.pad_id = ids["bos"], ids["eos"], ids["pad"]
        self.eos_ids = ids["eos_all"]
        """every id the model's config names as an end of sequence (each one ends a reply)"""

    def encode(self, text: str) -> list[int]:
        return self.tok(text, add_special_tokens=False)["input_ids"]

    def decode(self, ids) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=True)

    def id_texts(self) -> list[str]:
        n = len(self.tok)
        texts = [self.tok.convert_tokens_to_string([t]) if t is not None else ""
                 for t in self.tok.convert_ids_to_tokens(list(range(n)))]
        return texts + [""] * (self.vocab_size - n)


ROLES = ("bos", "eos", "pad")


def model_token_ids(model) -> dict:
    """{role: [ids]} the model's generation config, then its config, names for bos / eos / pad (a list of EOS
    ids kept in order, duplicates dropped); {} without a model. Example: a generation config eos [2, 0] and a
    config eos 2 -> {"eos": [2, 0], ...}."""
    out = {r: [] for r in ROLES}
    if model is None:
        return out
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    for source in (getattr(model, "generation_config", None), cfg):
        for r in ROLES:
            v = getattr(source, f"{r}_token_id", None)
            for i in (v if isinstance(v, (list, tuple)) else [v]):
                if isinstance(i, int) and i not in out[r]:
                    out[r].append(i)
    return out


def tokenizer_token_ids(tok) -> dict:
    """{role: id or None} of the tokenizer's own bos / eos / pad tokens."""
    return {r: getattr(tok, f"{r}_token_id", None) for r in ROLES}


def special_ids(has_template: bool, model_ids: dict, tok_ids: dict) -> dict:
    """The special ids a text codec uses, the model's config first and the tokenizer's when it names none:

        eos  = model's first EOS, else the tokenizer's           eos_all = every EOS id of either
        pad  = model's pad, else the tokenizer's, else eos, else 0
        bos  = None with a chat template (the template writes any BOS itself), else the model's BOS, else
               the tokenizer's, else None (a base model without its BOS degenerates: Gemma-3 writes "111 ...")

    Example: (False, {"bos": [1], "eos": [2], "pad": []}, {"bos": 1, "eos": 0, "pad": None}) ->
    {"bos": 1, "eos": 2, "eos_all": (2, 0), "pad": 2}; with has_template=True bos is None.
    """
    def first(role):
        mine = list(model_ids.get(role) or [])
        return mine[0] if mine else tok_ids.get(role)

    eos = first("eos")
    eos_all = tuple(dict.fromkeys(list(model_ids.get("eos") or []) + [tok_ids.get("eos")]))
    pad = first("pad")
    return {"bos": None if has_template else first("bos"), "eos": eos,
            "eos_all": tuple(int(i) for i in eos_all if i is not None),
            "pad": int(pad if pad is not None else (eos if eos is not None else 0))}


def chat_template_strings(tok) -> tuple[str, str, str]:
    """(head, to_assistant, to_user) cut out of the tokenizer's chat template by rendering
    [user U, assistant A, user O] with sentinels; TEMPLATES["plain"] when there is no template."""
    if not getattr(tok, "chat_template", None):
        return TEMPLATES["plain"]
    msgs = [{"role": "user", "content": "\x01U\x01"}, {"role": "assistant", "content": "\x01A\x01"},
            {"role": "user", "content": "\x01O\x01"}]
    try:
        s = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        head, rest = s.split("\x01U\x01")
        to_asst, rest = rest.split("\x01A\x01")
        to_user, _ = rest.split("\x01O\x01")
    except Exception:                            # an unusual template: fall back to plain text
        return TEMPLATES["plain"]
    return head, to_asst, to_user


def system_head(tok, system: str) -> Optional[str]:
    """The chat template's head with ``system`` as its system message (what comes before the first user text),
    None when there is no template or it takes no system role (then the instruction opens the user text).
    Example (SmolLM2): "Be brief." -> "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n"."""
    if not system or not getattr(tok, "chat_template", None):
        return None
    msgs = [{"role": "system", "content": "\x01S\x01"}, {"role": "user", "content": "\x01U\x01"}]
    try:
        head = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True).split("\x01U\x01")[0]
    except Exception:                            # a template that refuses a system role
        return None
    return head.replace("\x01S\x01", system) if head.count("\x01S\x01") == 1 else None
