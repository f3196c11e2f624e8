"""Per-turn credit inside a real verl job: the ``compute_advantage`` piece verl 0.9.1 lacks.

Dimension legend: N verl rows, L response tokens, B trajectories, H turns.

verl's ``ray_trainer.compute_advantage`` hands an estimator rewards, mask, ``uid`` and config only, so
per-turn state keys never reach it. ``patch_compute_advantage()`` (one call, idempotent) wraps it: for an
estimator registered as ``toyrl_<name>`` it passes ``data.non_tensor_batch`` on; every other estimator runs
verl's own code unchanged.

    from toyrl.port.verl import register_with_verl
    from toyrl.port.verl_advantage import patch_compute_advantage
    register_with_verl(("gigpo",)); patch_compute_advantage()       # then algorithm.adv_estimator=toyrl_gigpo

Two layouts of ``non_tensor_batch`` (``turn_batch_from_verl``):
- one row per trajectory: each run of response-mask ones is a turn; ``state_key`` holds each row's per-turn
  keys (a list per row, or an (N, H) array); ``turn_rewards`` (a list per row) overrides the token rewards
  summed over each turn;
- one row per turn (``traj_uid`` present): the rows of one ``traj_uid`` are its turns in order (or by
  ``turn_index``); ``state_key`` holds one key per row, the turn's reward is the row's token rewards (or
  ``turn_rewards``, one number per row); turn-level estimators only.
Keys may be any hashable values (observation strings, ints). An input the estimator needs (GiGPO: state_key;
turn GAE: values) that is missing raises ``ValueError`` naming it: never a fallback to another method.
Example: two trajectories of uid "a" with keys [[1, 2], [1, 3]] share GiGPO's anchor (a, 1) at turn 0.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np
import pandas as pd
import torch

from ..batch import TurnBatch
from ..credit import ESTIMATORS, token_advantages
from .verl_credit import MULTI_TURN, _cfg, batch_from_verl
from .verl_loader import load_core_algos

__all__ = ["REQUIRES", "required_inputs", "turn_batch_from_verl", "toyrl_advantage", "verl_estimator",
           "register_with_verl", "patch_compute_advantage", "load_verl_trainer"]

REQUIRES = {"gigpo": ("state_key",), "tree_grpo": ("node",)}
"""estimator -> the per-turn inputs it reads besides rewards and uid (with the ``needs`` of its registry entry)"""
_NEED_FIELDS = ("values", "info_gain", "turn_signal", "node", "void_turn")   # needs that are per-turn fields
_TURN_FIELDS = ("state_key", "node", "info_gain", "turn_signal", "values", "void_turn")
_DATA = _TURN_FIELDS + ("uid", "traj_uid", "turn_index", "turn_rewards")    # read from non_tensor_batch
_VERL_ONLY = ("batch", "reward_baselines", "sum_pi_squared", "old_log_probs", "rollout_is_weights")


def required_inputs(name: str, extra: tuple = ()) -> tuple:
    """The ``non_tensor_batch`` keys estimator ``name`` cannot run without: ``REQUIRES``, its registry
    ``needs`` that are per-turn fields, and ``extra``. Example: required_inputs("turn_gae") -> ("values",)."""
    need = tuple(REQUIRES.get(name, ())) + tuple(n for n in ESTIMATORS[name].needs if n in _NEED_FIELDS)
    return tuple(dict.fromkeys(need + tuple(extra)))


def _codes(values) -> torch.Tensor:
    """Any hashable labels (N,) as int64 codes, equal label -> equal code (``pandas.factorize``)."""
    arr = np.asarray(values, dtype=object) if not isinstance(values, np.ndarray) else values
    codes, _ = pd.factorize(arr.reshape(-1))
    if (codes < 0).any():
        raise ValueError("non_tensor_batch: a missing label (None or NaN) among the ids or state keys")
    return torch.from_numpy(codes.astype(np.int64))


def _ragged(values, n_turns: torch.Tensor, H: int, what: str, *, codes: bool) -> torch.Tensor:
    """Per-row lists (or an (N, >= H) array) -> (N, H) padded, checked against each row's turn count."""
    rows = list(values) if not (isinstance(values, np.ndarray) and values.ndim == 2) else list(values)
    if len(rows) != len(n_turns):
        raise ValueError(f"non_tensor_batch[{what!r}]: expected {len(n_turns)} rows, got {len(rows)}")
    flat = []
    for i, (row, k) in enumerate(zip(rows, n_turns.tolist())):
        row = list(row)
        if len(row) < k:
            raise ValueError(f"non_tensor_batch[{what!r}]: row {i} has {len(row)} values for {k} turns")
        flat.extend(row[:k])
    vals = _codes(flat) if codes else torch.tensor([float(x) for x in flat], dtype=torch.float64)
    out = torch.zeros(len(rows), H, dtype=vals.dtype)
    out[torch.arange(H)[None] < n_turns[:, None]] = vals                    # row-major fill of the valid turns
    return out


def turn_batch_from_verl(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index,
                         non_tensor_batch: dict, required: tuple = ()) -> tuple[TurnBatch, Optional[tuple]]:
    """A TurnBatch from verl's inputs in either layout (module docstring) -> (batch, rows); ``rows`` is None for
    one row per trajectory, else (traj (N,), turn (N,)): where each verl row sits in the batch's (B, H).
    ``required``: keys that must be in ``non_tensor_batch`` (a ValueError naming the first missing one)."""
    nt = dict(non_tensor_batch or {})
    for k in required:
        if nt.get(k) is None:
            raise ValueError(f"non_tensor_batch has no {k!r}: this estimator needs it per turn "
                             f"(keys there: {sorted(nt) or 'none'})")
    if "traj_uid" not in nt:                                                # one row per trajectory
        probe = batch_from_verl(token_level_rewards, response_mask, index)
        n, H = probe.turn_mask.sum(1), probe.H
        kw = {k: _ragged(nt[k], n, H, k, codes=(k in ("state_key", "node")))
              for k in _TURN_FIELDS if nt.get(k) is not None}
        if nt.get("turn_rewards") is not None:
            kw["turn_reward"] = _ragged(nt["turn_rewards"], n, H, "turn_rewards", codes=False).to(probe.turn_reward)
        if "state_key" not in kw:
            kw["state_key"] = probe.state_key                               # unique per turn: read by no estimator here
        kw = {k: v.to(probe.turn_reward.dtype) if v.is_floating_point() else v for k, v in kw.items()}
        return probe.replace(**kw), None
    traj = _codes(nt["traj_uid"])                                           # (N,) one row per turn
    N = traj.numel()
    if nt.get("turn_index") is not None:
        turn = torch.as_tensor(np.asarray(nt["turn_index"], dtype=np.int64))
    else:                                                                   # order of the rows within a trajectory
        order = torch.argsort(traj, stable=True)
        first = torch.zeros(int(traj.max()) + 1, dtype=torch.long).scatter_reduce(
            0, traj, torch.arange(N), "amin", include_self=False)
        rank = torch.empty(N, dtype=torch.long)
        rank[order] = torch.arange(N)
        turn = rank - rank[first[traj]]
    B, H = int(traj.max()) + 1, int(turn.max()) + 1
    if torch.zeros(B, H, dtype=torch.long).index_put_((traj, turn), torch.ones(N, dtype=torch.long),
                                                     accumulate=True).max() > 1:
        raise ValueError("non_tensor_batch['turn_index']: two rows of one traj_uid hold the same turn")
    dt = token_level_rewards.dtype
    R = (torch.as_tensor(np.asarray(nt["turn_rewards"], dtype=np.float64)).to(dt) if nt.get("turn_rewards")
         is not None else token_level_rewards.sum(-1))                      # (N,) each turn's reward
    grid = lambda v, fill=0: torch.full((B, H), fill, dtype=v.dtype).index_put_((traj, turn), v)   # noqa: E731
    turn_mask = grid(torch.ones(N, dtype=torch.bool), False)                # (B, H)
    if not bool((turn_mask.cumsum(1) == torch.arange(1, H + 1)).logical_or(~turn_mask).all()):
        raise ValueError("non_tensor_batch['turn_index']: a trajectory's turns must be 0, 1, ..., k - 1")
    uid = _codes(index) if index is not None else traj
    group = torch.zeros(B, dtype=torch.long).index_put_((traj,), uid)       # (B,) one uid per trajectory
    kw = {k: grid(_codes(nt[k]) if k in ("state_key", "node") else
                  torch.as_tensor(np.asarray(nt[k], dtype=np.float64)).to(dt))
          for k in _TURN_FIELDS if nt.get(k) is not None}
    kw.setdefault("state_key", torch.arange(B * H).view(B, H))
    pos = torch.arange(2 * H)                                               # one policy then one other token a turn
    batch = TurnBatch(tokens=torch.zeros(B, 2 * H, dtype=torch.long), policy_mask=(pos % 2 == 0)[None].expand(B, -1)
                      & turn_mask.repeat_interleave(2, 1), turn_id=(pos // 2)[None].expand(B, -1).clone(),
                      old_logp=torch.zeros(B, 2 * H, dtype=dt), turn_mask=turn_mask, turn_reward=grid(R),
                      group=group, **kw)
    return batch, (traj, turn)


def toyrl_advantage(name: str, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index=None,
                    non_tensor_batch: Optional[dict] = None, hyper: Optional[dict] = None,
                    requires: tuple = ()) -> torch.Tensor:
    """toyrl estimator ``name`` on verl's inputs in either layout -> token advantages (N, L), zero off the mask."""
    est = ESTIMATORS[name]
    batch, rows = turn_batch_from_verl(token_level_rewards, response_mask, index, non_tensor_batch,
                                       required_inputs(name, requires))
    with torch.no_grad():
        adv = est(batch, **(hyper or {}))
    if rows is None:
        return token_advantages(batch, adv, est.level).to(token_level_rewards.dtype)
    if est.level != "turn":
        raise ValueError(f"estimator {name!r} is token-level: one row per turn (traj_uid) needs a turn-level one")
    traj, turn = rows
    return adv[traj, turn].to(token_level_rewards.dtype)[:, None] * response_mask    # (N, L)


def verl_estimator(name: str, requires: tuple = ()):
    """A toyrl estimator (registered ``name``) with verl's advantage-estimator signature:

        adv, ret = fn(token_level_rewards (N, L), response_mask (N, L), index=None, config=None,
                      non_tensor_batch=None, **kw)

    either layout (module docstring). Per-turn fields come from ``non_tensor_batch`` or keywords of those names;
    hyperparameters from ``config["toyrl_kwargs"]`` and the other keywords. A missing ``required_inputs(name,
    requires)`` raises ValueError. verl's ``register_adv_est(key)(fn)`` accepts it as is."""
    est = ESTIMATORS[name]

    def compute_toyrl_advantage(token_level_rewards, response_mask, index=None, config=None, non_tensor_batch=None,
                                **kw):
        fields = dict(non_tensor_batch or {})
        fields.update({k: kw.pop(k) for k in list(kw) if k in _DATA or k in _VERL_ONLY})
        hyper = {**dict(_cfg(config, "toyrl_kwargs", None) or {}), **kw}
        adv = toyrl_advantage(name, token_level_rewards, response_mask, index, fields, hyper, tuple(requires))
        return adv, adv

    compute_toyrl_advantage.__name__ = f"compute_toyrl_{name}_advantage"
    compute_toyrl_advantage.__doc__ = f"toyrl {name!r} inside verl (toyrl.port.verl_advantage): {est.doc}"
    return compute_toyrl_advantage


_ADAPTERS: dict[str, tuple] = {}


def register_with_verl(names: Optional[tuple] = None, requires: Optional[dict] = None) -> list[str]:
    """Register toyrl's estimators ``names`` (default ``MULTI_TURN``) in verl's registry as ``toyrl_<name>``,
    only those; [] if verl is absent. Idempotent. Select with ``algorithm.adv_estimator=toyrl_gigpo``;
    hyperparameters from ``config.toyrl_kwargs``; per-turn fields from ``non_tensor_batch``, which verl's own
    ``compute_advantage`` passes only after ``patch_compute_advantage()``. ``requires`` (name -> keys): inputs a
    user's estimator cannot run without, e.g. {"my_loo_turn": ("state_key",)}; missing, they raise."""
    core_algos = load_core_algos()
    if core_algos is None:
        return []
    out = []
    for name in names or MULTI_TURN:
        key, need = f"toyrl_{name}", tuple((requires or {}).get(name, ()))
        if key not in _ADAPTERS or _ADAPTERS[key][0] != need:
            _ADAPTERS[key] = (need, verl_estimator(name, need))
        fn = _ADAPTERS[key][1]
        if core_algos.ADV_ESTIMATOR_REGISTRY.get(key) is not fn:
            core_algos.ADV_ESTIMATOR_REGISTRY.pop(key, None)
            core_algos.register_adv_est(key)(fn)
        out.append(key)
    return out


def load_verl_trainer() -> Optional[tuple]:
    """(verl.trainer.ppo.ray_trainer, verl.DataProto), or None where verl or what its trainer module imports
    (``toyrl[verl-cpu]``) is absent."""
    if load_core_algos() is None:
        return None
    import logging
    import warnings
    try:
        with warnings.catch_warnings():           # verl names, once per import, the engines a CPU job never uses
            warnings.simplefilter("ignore", UserWarning)
            logging.disable(logging.WARNING)      # and that no accelerator is present
            from verl import DataProto
            from verl.trainer.ppo import ray_trainer
    except Exception:
        return None
    finally:
        logging.disable(logging.NOTSET)
    return ray_trainer, DataProto


_ORIGINAL: dict[str, Any] = {}


def patch_compute_advantage(ray_trainer=None):
    """Wrap ``verl.trainer.ppo.ray_trainer.compute_advantage`` so estimators named ``toyrl_*`` receive
    ``non_tensor_batch`` (the per-turn keys, ``traj_uid``, ``turn_rewards``); idempotent; returns the wrapper.
    Other estimators run verl's function as it is."""
    if ray_trainer is None:
        if load_core_algos() is None:
            raise ImportError("verl is not importable: pip install 'toyrl[verl-cpu]' and verl==0.9.1 --no-deps")
        from verl.trainer.ppo import ray_trainer
    original = _ORIGINAL.setdefault(ray_trainer.__name__, ray_trainer.compute_advantage)

    def compute_advantage(data, adv_estimator, gamma: float = 1.0, lam: float = 1.0, num_repeat: int = 1,
                          norm_adv_by_std_in_grpo: bool = True, config=None):
        key = getattr(adv_estimator, "value", adv_estimator)
        if not (isinstance(key, str) and key.startswith("toyrl_")):
            return original(data, adv_estimator, gamma, lam, num_repeat, norm_adv_by_std_in_grpo, config)
        if "response_mask" not in data.batch.keys():
            data.batch["response_mask"] = ray_trainer.compute_response_mask(data)
        fn = ray_trainer.core_algos.get_adv_estimator_fn(key)
        adv, ret = fn(token_level_rewards=data.batch["token_level_rewards"],
                      response_mask=data.batch["response_mask"], index=data.non_tensor_batch.get("uid"),
                      config=config, non_tensor_batch=data.non_tensor_batch)
        data.batch["advantages"], data.batch["returns"] = adv, ret
        return data

    compute_advantage.__wrapped__ = original
    ray_trainer.compute_advantage = compute_advantage
    return compute_advantage
