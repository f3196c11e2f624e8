"""The readers of ``toyrl doctor`` (``toyrl.port.doctor``, whose docstring has the table of fields): another
trainer's multi-turn batch, as verl ``DataProto`` fields, TRL ``GRPOTrainer`` inputs or toyrl names, read into one
``DoctorView`` (canonical names, (B, L) tensors, the policy / attention / tool masks), each field checked for its
shape and type with a one-line ValueError naming it.

    view = read(fields)                  # "auto": the format picked from the keys (detect_format)
    view = load_batch("batch.pt")        # a torch.save-d dict; trust=True for a pickled DataProto
"""
from __future__ import annotations

import pickle
import warnings
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch

from .doctor_view import DoctorView

__all__ = ["FORMATS", "VERL", "TRL", "DICT", "read", "from_verl", "from_trl", "from_dict", "from_dataproto",
           "load_batch", "detect_format"]

_TOKEN = ("policy", "rewards", "scores", "old_logp", "rollout_logp", "advantages", "returns", "values", "tool")
_ROW = ("group", "num_turns", "seq_reward", "turn_rewards")
VERL = {"tokens": ("responses",), "policy": ("response_mask",), "attention": ("attention_mask",),
        "rewards": ("token_level_rewards",), "scores": ("token_level_scores", "rm_scores"), "group": ("uid",),
        "old_logp": ("old_log_probs",), "rollout_logp": ("rollout_log_probs",), "advantages": ("advantages",),
        "returns": ("returns",), "values": ("values",), "tool": ("obs_mask",), "num_turns": ("__num_turns__",),
        "turn_rewards": ("turn_scores",)}
TRL = {"tokens": ("completion_ids",), "attention": ("completion_mask",), "seq_reward": ("rewards",),
       "group": ("uid",), "old_logp": ("old_per_token_logps",), "rollout_logp": ("sampling_per_token_logps",),
       "advantages": ("advantages",)}
DICT = {"tokens": ("tokens",), "policy": ("policy_mask",), "attention": ("attention_mask",), "rewards": ("rewards",),
        "scores": ("scores",), "seq_reward": ("seq_reward",), "group": ("group",), "old_logp": ("old_logp",),
        "rollout_logp": ("rollout_logp",), "advantages": ("advantages",), "returns": ("returns",),
        "values": ("values",), "tool": ("obs_mask",), "num_turns": ("num_turns",), "turn_rewards": ("turn_rewards",)}
FORMATS = {"verl": VERL, "trl": TRL, "dict": DICT}
"""format -> canonical field -> the names that format gives it (first present wins)"""


def _tensor(x, name: str) -> torch.Tensor:
    try:
        return x if isinstance(x, torch.Tensor) else torch.as_tensor(np.asarray(x))
    except (TypeError, ValueError, RuntimeError):
        raise ValueError(f"{name} must be a tensor or numeric array, got {type(x).__name__}") from None


def _fit(x: torch.Tensor, L: int) -> torch.Tensor:
    """A (B, L') tensor cut or zero-padded to L columns."""
    return x[:, :L] if x.shape[1] >= L else torch.cat([x, x.new_zeros(x.shape[0], L - x.shape[1])], 1)


def _groups(x, name: str) -> torch.Tensor:
    """Dense group ids (B,) from uid strings, numbers or a tensor."""
    arr = x.cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x, dtype=object)
    try:
        _, idx = np.unique(arr.astype(str).reshape(-1), return_inverse=True)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must hold one hashable group label per row") from None
    return torch.as_tensor(idx.reshape(-1), dtype=torch.long)


def _rows_field(key: str, x, name: str):
    if key == "group":
        return _groups(x, name)
    if key == "turn_rewards":
        return [list(np.asarray(t, dtype=float).reshape(-1)) if t is not None else [] for t in list(x)]
    t = _tensor(x, name).reshape(-1)
    return t.long() if key == "num_turns" else t.double()


def _found(d: Mapping, spec: dict) -> dict:
    """canonical -> the first of its names present in ``d``."""
    return {key: next(n for n in names if n in d) for key, names in spec.items() if any(n in d for n in names)}


def _masks(d: Mapping, src: dict, source: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, str]:
    """(policy as given or None, attention as given or None, the reference (B, L) field, its name)."""
    policy = _tensor(d[src["policy"]], src["policy"]) if "policy" in src else None
    attention = _tensor(d[src["attention"]], src["attention"]).bool() if "attention" in src else None
    ref_key = next((k for k in ("tokens", "policy", "rewards") if k in src), None)
    if policy is None and attention is None:
        need = {"verl": "response_mask or attention_mask", "trl": "completion_mask",
                "dict": "policy_mask or attention_mask"}[source]
        raise ValueError(f"batch: a {source} batch needs {need}; found {sorted(map(str, d))}")
    ref = _tensor(d[src[ref_key]], src[ref_key]) if ref_key else (attention if policy is None else policy)
    for name, x in ((src.get("policy"), policy), (src.get("attention"), attention), (src.get(ref_key), ref)):
        if x is not None and x.dim() != 2:
            raise ValueError(f"{name or 'mask'} must be 2-D (B, L), got shape {tuple(x.shape)}")
    if ref.shape[0] == 0:
        raise ValueError(f"batch: {src.get(ref_key) or 'the mask'} has no rows (B = 0)")
    return policy, attention, ref, src.get(ref_key) or src.get("policy") or src["attention"]


def _read(d: Mapping, source: str) -> DoctorView:
    """A DoctorView of the mapping ``d`` in ``source``'s field names (see the table above)."""
    if not isinstance(d, Mapping):
        raise ValueError(f"batch must be a dict of fields, got {type(d).__name__}")
    src = _found(d, FORMATS[source])
    policy, attention, ref, ref_name = _masks(d, src, source)
    B, L = ref.shape
    attended = _fit(attention[:, -L:], L) if attention is not None else torch.ones(B, L, dtype=torch.bool)
    view = DoctorView(source, policy=attended, attended=attended, attention=attention, names={"length": ref_name})
    if attention is not None and source != "verl":                      # verl's also covers the prompt
        view.token_shapes[src["attention"]] = tuple(attention.shape)
    for key in _TOKEN:
        if key in src:
            x = policy if key == "policy" else _tensor(d[src[key]], src[key])
            if key == "advantages" and x.dim() == 1:
                view.row_counts[src[key]] = x.shape[0]
                view.advantages = x.double() if x.shape[0] == B else None
                continue
            view.token_shapes[src[key]] = tuple(x.shape)
            if x.dim() == 2 and x.shape[0] == B:
                x = _fit(x, L)
                setattr(view, key, x.bool() if key in ("policy", "tool") else x.double())
    for key in _ROW:
        if key in src:
            x = _rows_field(key, d[src[key]], src[key])
            view.row_counts[src[key]] = len(x)
            if len(x) == B:
                setattr(view, key, x)
    view.names.update({k: n for k, n in src.items()})
    if attention is not None:
        view.names["attended"] = f"{src['attention']}" + ("[:, -L:]" if source == "verl" else "")
    if policy is None:
        view.names["policy"] = f"{src['attention']} (no response mask: verl derives it from attention_mask)"
    return view


def from_verl(fields: Mapping) -> DoctorView:
    """A DoctorView of verl DataProto fields (a dict of tensors and numpy arrays, e.g. batch | non_tensor_batch).

    Example: from_verl({"responses": ids, "response_mask": m, "attention_mask": a, "token_level_rewards": r,
    "uid": np.array(["p0", "p0"])}).policy -> m as bool.
    """
    return _read(fields, "verl")


def from_trl(fields: Mapping, num_generations: int = 0) -> DoctorView:
    """A DoctorView of TRL GRPOTrainer inputs: completion_ids, completion_mask, tool_mask (1 on model tokens), ...

    The policy mask is what TRL's loss uses, completion_mask * tool_mask; tool tokens are the attended ones the
    tool mask leaves out. Groups: ``uid`` if given, else consecutive blocks of ``num_generations`` rows (the key
    ``num_generations`` in ``fields`` too). Example: tool_mask (B, 14) beside completion_ids (B, 12) ->
    ``check_length_mismatch`` names both.
    """
    view = _read(fields, "trl")
    if "tool_mask" in fields:
        tm = _tensor(fields["tool_mask"], "tool_mask")
        view.token_shapes["tool_mask"] = tuple(tm.shape)
        if tm.dim() == 2 and tm.shape[0] == view.B:
            tm = _fit(tm, view.L).bool()
            view.policy, view.tool = view.attended & tm, view.attended & ~tm
            view.names.update(policy="completion_mask * tool_mask", tool="tool_mask == 0")
    G = int(fields.get("num_generations", num_generations) or 0)
    if view.group is None and G > 0:
        view.group = torch.arange(view.B) // G
        view.names["group"] = f"blocks of num_generations={G}"
    return view


def from_dict(fields: Mapping) -> DoctorView:
    """A DoctorView of a plain dict in toyrl's names (tokens, policy_mask, attention_mask, rewards, group, ...)."""
    return _read(fields, "dict")


def from_dataproto(data) -> DoctorView:
    """A DoctorView of a verl ``DataProto``: its tensor batch and non-tensor batch as verl fields."""
    if getattr(data, "batch", None) is None or not hasattr(data, "non_tensor_batch"):
        raise ValueError(f"data must be a verl DataProto with a tensor batch, got {type(data).__name__}")
    return from_verl({**{k: data.batch[k] for k in data.batch.keys()}, **dict(data.non_tensor_batch)})


def detect_format(fields: Mapping) -> str:
    """verl, trl or dict from the keys (``completion_mask`` -> trl, ``response_mask`` / ``responses`` -> verl)."""
    keys = set(map(str, fields))
    for fmt, marks in (("trl", {"completion_ids", "completion_mask"}), ("dict", {"policy_mask"}),
                       ("verl", {"response_mask", "responses", "token_level_rewards"})):
        if keys & marks:
            return fmt
    raise ValueError(f"batch: cannot tell the format from its keys {sorted(keys)}; expected verl (response_mask, "
                     "responses), trl (completion_ids, completion_mask) or dict (policy_mask)")


def read(obj, format: str = "auto") -> DoctorView:
    """A DoctorView of a DataProto or a dict of fields in ``format`` (auto, verl, trl, dict)."""
    if format not in ("auto", *FORMATS):
        raise ValueError(f"format must be one of auto, {', '.join(FORMATS)}; got {format!r}")
    if hasattr(obj, "non_tensor_batch") and format in ("auto", "verl"):
        return from_dataproto(obj)
    if not isinstance(obj, Mapping):
        raise ValueError(f"batch must be a dict of fields or a verl DataProto, got {type(obj).__name__}")
    fmt = detect_format(obj) if format == "auto" else format
    return {"verl": from_verl, "trl": from_trl, "dict": from_dict}[fmt](obj)


def _numpy_globals() -> list:
    """numpy's array reconstruction, for ``torch.load(weights_only=True)`` of uid / __num_turns__ arrays."""
    core = getattr(np, "_core", None) or np.core
    return [core.multiarray._reconstruct, np.ndarray, np.dtype] + [
        getattr(np.dtypes, n) for n in dir(np.dtypes) if n.endswith("DType")]


def load_batch(path, format: str = "auto", *, trust: bool = False) -> DoctorView:
    """A DoctorView of a file: a ``torch.save``-d dict of tensors / lists / numpy arrays, or with ``trust=True`` any
    pickle (a ``DataProto.save_to_disk`` file; unpickling runs code from the file, so only for files you trust)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"path: no such file {path}")
    try:
        with torch.serialization.safe_globals(_numpy_globals()), warnings.catch_warnings():
            warnings.simplefilter("ignore")                                   # a plain pickle's protocol note
            obj = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        if not trust:
            raise ValueError(f"{path} holds objects beyond tensors, lists and numpy arrays (e.g. a pickled "
                             "DataProto); load it with --trust (trust=True) only if you trust the file") from e
        obj = _load_trusted(path)
    except Exception as e:
        if not trust:
            raise ValueError(f"{path} is not a torch.save file ({type(e).__name__}); a pickle needs --trust") from None
        obj = _load_trusted(path)
    return read(obj, format)


def _load_trusted(path: Path):
    try:
        try:
            return torch.load(path, map_location="cpu", weights_only=False)
        except Exception:
            with open(path, "rb") as f:
                return pickle.load(f)
    except ModuleNotFoundError as e:
        raise ValueError(f"{path} needs the module {e.name!r} to load (a DataProto needs verl: "
                         "pip install 'toyrl[verl]')") from None
    except Exception as e:
        raise ValueError(f"{path} could not be read ({type(e).__name__}: {e})".splitlines()[0]) from None
