"""Build the policy and the codec a run uses from one name (``TrainConfig.policy`` / ``--policy``).

- a toy preset ("tiny", "small", "base"): the toy transformer over ``ToyCodec`` tokens (thinking,
  action and observation tokens of the env's token view);
- "tinylm": TinyLM from the shipped BC checkpoint ``data/checkpoints/tinylm.pt``; "tinylm:PATH" from
  another checkpoint; "tinylm:scratch" randomly initialized (no warm start). Text in, text out
  through ``TextCodec``;
- "hf:PATH": any local Hugging Face causal LM + tokenizer directory (``HFPolicy``), chat-style text;
- a zoo name ("smollm2"): the directory ``toyrl models fetch NAME`` wrote (``toyrl.policies.zoo``), as hf:PATH.

Text policies take an instruction (``system``, before the first observation); hf policies LoRA adapters
(``lora_r``) and gradient checkpointing (``grad_ckpt``), see ``policy_kwargs``.

``autocast="bf16"`` runs the policy's forward passes under bf16 autocast (CPU or CUDA).
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from ..policies.toy import PRESETS
from ..policies.zoo import ZOO, resolve_model

__all__ = ["build_policy", "policy_names", "is_policy_name", "check_policy_name", "check_text_options",
           "check_grad_ckpt", "policy_kwargs", "is_hf_policy"]

PRESETS_MAX_LEN = 192
"""the smallest context a toy preset gets"""
TEXT_MAX_NEW = {"tinylm": 8, "hf": 24}
"""reply tokens of a text policy's codec before reasoning is added"""


def policy_names() -> list[str]:
    """The valid values of ``--policy`` (patterns shown as such)."""
    return sorted(PRESETS) + ["tinylm", "tinylm:scratch", "tinylm:PATH"] + sorted(ZOO) + ["hf:PATH"]


def check_policy_name(name: str) -> None:
    """ValueError saying what is wrong with the policy name ``name``, if anything: an unknown name
    (with the valid ones), or a ``tinylm:PATH`` / ``hf:PATH`` whose PATH does not exist locally (for
    ``hf:``, also a PATH that is not a model directory with a ``config.json``), or a zoo model not fetched yet.

    Example: "hf:/no/such/dir" -> "policy 'hf:/no/such/dir': path /no/such/dir does not exist".
    """
    if not isinstance(name, str):
        raise ValueError(f"policy must be a name (str), got {name!r}")
    if name in PRESETS or name == "tinylm:scratch":
        return
    if name in ZOO:
        resolve_model(name)                    # "policy 'smollm2': not fetched (...); run `toyrl models fetch smollm2`"
        return
    if name == "tinylm":
        from ..policies.tinylm import DEFAULT_CHECKPOINT
        if not DEFAULT_CHECKPOINT.exists():
            raise ValueError(f"policy 'tinylm': the shipped checkpoint {DEFAULT_CHECKPOINT} does not exist "
                             "(make it with `toyrl pretrain`)")
        return
    for prefix in ("tinylm:", "hf:"):
        if name.startswith(prefix) and len(name) > len(prefix):
            path = Path(name[len(prefix):]).expanduser()
            if not path.exists():
                raise ValueError(f"policy {name!r}: path {path} does not exist")
            if prefix == "tinylm:" and path.is_dir():
                raise ValueError(f"policy {name!r}: path {path} is a directory, not a TinyLM checkpoint file "
                                 "(written by `toyrl pretrain --out PATH`)")
            if prefix == "hf:" and not (path / "config.json").is_file():
                what = "is not a directory" if not path.is_dir() else "has no config.json"
                raise ValueError(f"policy {name!r}: path {path} {what} (hf:PATH needs a local Hugging Face model "
                                 "directory: config.json, the weights and the tokenizer files)")
            return
    raise ValueError(f"unknown policy {name!r}; valid: {', '.join(policy_names())}")


def is_policy_name(name: str) -> bool:
    """True if ``build_policy`` knows ``name`` (``check_policy_name`` finds nothing wrong with it)."""
    try:
        check_policy_name(name)
    except ValueError:
        return False
    return True


def build_policy(name: str, core, device, *, n_think: int = 2, think_max: int = 0, think_min: int = 0, seed=None,
                 autocast: Optional[str] = None, **kw):
    """(policy, codec) for the policy ``name`` playing the env ``core``.

    Extra keywords go to ``HFPolicy.from_pretrained`` (e.g. ``lora={"r": 8}``) or to the text codec
    of TinyLM (e.g. ``render="full"``). Toy presets: ``n_think`` reasoning tokens in the vocabulary,
    up to ``think_max`` per turn, and a context sized to the longest episode (``episode_token_bound``).
    Text policies: ``think_max`` extra reply tokens for free-text reasoning before the action.
    """
    from ..rollout.play import episode_token_bound
    from ..codecs.toy import ToyCodec
    from ..policies import make_policy
    if name in PRESETS:
        codec = ToyCodec.for_core(core, n_think, think_max, think_min)
        if _dtype(autocast) is not None:
            raise ValueError("autocast applies to the language-model policies (tinylm, hf:PATH), not toy presets")
        max_len = max(PRESETS_MAX_LEN, episode_token_bound(core, codec))        # the context grows with the turns
        return make_policy(name, codec.size, device, seed=seed, max_len=max_len), codec
    if think_max:                                     # text policies: room for free-text reasoning
        kw["max_new"] = kw.get("max_new", TEXT_MAX_NEW["hf" if is_hf_policy(name) else "tinylm"]) + think_max
    if name == "tinylm" or name.startswith("tinylm:"):
        from ..policies.tinylm import DEFAULT_CHECKPOINT, TinyLM
        path = name[len("tinylm:"):] if name.startswith("tinylm:") else str(DEFAULT_CHECKPOINT)
        policy = TinyLM.from_scratch(seed=seed) if path == "scratch" else TinyLM.load(Path(path).expanduser())
        policy = policy.to(device)
        policy.autocast_dtype = _dtype(autocast)
        return policy, policy.codec(**kw)
    if is_hf_policy(name):
        from ..policies.hf import HFPolicy
        codec_kw = {k: kw.pop(k) for k in ("render", "max_new", "system") if k in kw}
        path = resolve_model(name) if name in ZOO else name[3:]
        policy = HFPolicy.from_pretrained(path, device=device, autocast=autocast, **kw)
        return policy, policy.codec(**codec_kw)
    raise ValueError(f"unknown policy {name!r}; valid: {', '.join(policy_names())}")


def is_hf_policy(name) -> bool:
    """True for a Hugging Face policy's name: hf:PATH or a zoo model. Example: "smollm2" -> True, "tinylm" -> False."""
    return isinstance(name, str) and (name in ZOO or (name.startswith("hf:") and len(name) > 3))


def check_text_options(policy: str, system: str, lora_r: int) -> None:
    """ValueError if ``system`` (an instruction: text policies only) or ``lora_r`` (LoRA adapters: hf policies
    only) is set for a policy that cannot take it. Example: ("tiny", "Reply briefly.", 0) -> "system needs a text
    policy (tinylm, hf:PATH or a zoo model), got policy='tiny'"."""
    if not isinstance(system, str):
        raise ValueError(f"system must be a string (an instruction), got {system!r}")
    if system and policy in PRESETS:
        raise ValueError(f"system needs a text policy (tinylm, hf:PATH or a zoo model), got policy={policy!r}")
    if lora_r and not is_hf_policy(policy):
        raise ValueError(f"lora_r needs an hf policy (hf:PATH or a zoo model: {', '.join(ZOO)}), got policy={policy!r}")


def policy_kwargs(cfg) -> dict:
    """The keywords ``build_policy`` gets from a TrainConfig besides its own arguments: the instruction
    (``system``) of a text policy, the LoRA adapters (``lora_r``, alpha = 2 r) and gradient checkpointing
    (``grad_ckpt``, checked by ``validate`` with ``check_grad_ckpt``) of an hf policy, the reply cap (``reply_tokens``)
    of a text policy.
    Example: TrainConfig(policy="smollm2", system="Be brief.", lora_r=8) -> {"system": "Be brief.",
    "lora": {"r": 8, "alpha": 16}}; a toy preset -> {}."""
    kw = {}
    if cfg.system:
        kw["system"] = cfg.system
    if cfg.reply_tokens:
        kw["max_new"] = int(cfg.reply_tokens)
    if cfg.lora_r:
        kw["lora"] = {"r": int(cfg.lora_r), "alpha": 2 * int(cfg.lora_r)}
    if cfg.grad_ckpt:
        kw["grad_ckpt"] = True
    return kw


def check_grad_ckpt(policy: str, grad_ckpt) -> None:
    """ValueError if ``grad_ckpt`` is not a bool, or is True for a policy that is not hf (gradient checkpointing
    is the Hugging Face model's own). Example: ("tiny", True) -> "grad_ckpt needs an hf policy (hf:PATH or a zoo
    model: smollm2), got policy='tiny'"."""
    if not isinstance(grad_ckpt, bool):
        raise ValueError(f"grad_ckpt must be true or false, got {grad_ckpt!r}")
    if grad_ckpt and not is_hf_policy(policy):
        raise ValueError(f"grad_ckpt needs an hf policy (hf:PATH or a zoo model: {', '.join(ZOO)}), "
                         f"got policy={policy!r}")


def _dtype(autocast: Optional[str]):
    import torch
    if autocast in (None, "", "none", "fp32"):
        return None
    if autocast not in ("bf16", "fp16"):
        raise ValueError(f"autocast must be None, 'bf16' or 'fp16', got {autocast!r}")
    return torch.bfloat16 if autocast == "bf16" else torch.float16
