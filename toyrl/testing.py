"""The checks a prototyper runs on a new estimator: the ones toyrl's own estimators pass, public.

Dimension legend: B rollouts, T tokens, H turns.

    from toyrl.testing import random_batch, assert_matches_reference, check_estimator
    b = random_batch(12, 4, seed=0)                          # a valid TurnBatch: ragged turns, observation gaps
    assert_matches_reference(my_fast, my_loop)               # vectorized == plain loops on many random batches
    check_estimator(ESTIMATORS["my_loo_turn"])               # the registry's properties (below)

``check_estimator``'s properties, each a one-line AssertionError naming it:
- shape: (B, H) for a turn-level estimator, (B, T) for a token-level one; finite;
- masked: 0 on invalid turns (turn level), and ``token_advantages`` 0 off the policy tokens;
- labels: renaming the group ids or the state keys (any one-to-one map) changes nothing;
- rows: permuting the rollouts permutes the advantages (tensor keywords with B rows permuted alike);
- grouped (``Estimator.grouped``): a group (and task) of one rollout gets advantage 0;
- degenerate: one rollout with no valid turn gives finite advantages.
``check_env`` (``toyrl.rollout.contract``) runs the env contract on an env core.
"""
from __future__ import annotations

from typing import Callable, Iterable, Optional

import torch

from .batch import TurnBatch
from .credit.registry import ESTIMATORS, Estimator, token_advantages
from .rollout.contract import check_env

__all__ = ["random_batch", "reference_batches", "assert_matches_reference", "check_estimator", "check_env"]


def random_batch(B: int = 12, H: int = 4, *, n_groups: int = 3, n_keys: int = 3, seed: int = 0,
                 dtype=torch.float64, hash_keys: bool = False, optional: bool = True) -> TurnBatch:
    """A random valid TurnBatch: B rollouts with 0..H turns each (row 0 has H), turn k = 1-3 policy tokens then
    0-2 observation tokens after one prompt token; rewards in {0, 1, 2}; groups ``arange(B) % n_groups``; state
    keys in [0, n_keys) (``hash_keys``: 63-bit hashes of them); with ``optional`` every optional field (entropy,
    values, node ids shared by rows of one tree, info_gain, turn_signal, void_turn, ref_logp, task).
    Example: random_batch(4, 2, seed=1).turn_mask[0].all() -> True."""
    g = torch.Generator().manual_seed(seed)
    n_turns = torch.randint(0, H + 1, (B,), generator=g)
    n_turns[0] = H
    lens_a = torch.randint(1, 4, (B, H), generator=g)
    lens_o = torch.randint(0, 3, (B, H), generator=g)
    T = int(((lens_a + lens_o) * (torch.arange(H)[None] < n_turns[:, None])).sum(1).max()) + 2
    turn_id = torch.full((B, T), -1, dtype=torch.long)                          # (B, T)
    pmask = torch.zeros(B, T, dtype=torch.bool)
    for b in range(B):
        t = 1                                           # one prompt token (turn 0, not policy)
        turn_id[b, 0] = 0
        for k in range(int(n_turns[b])):
            turn_id[b, t:t + lens_a[b, k] + lens_o[b, k]] = k
            pmask[b, t:t + lens_a[b, k]] = True
            t += int(lens_a[b, k] + lens_o[b, k])
    turn_mask = torch.arange(H)[None] < n_turns[:, None]                        # (B, H)
    reward = torch.randint(0, 3, (B, H), generator=g).to(dtype) * turn_mask
    keys = torch.randint(0, n_keys, (B, H), generator=g)
    if hash_keys:
        keys = keys * 0x1F3A5C7E9B2D4F61 + 12345          # 63-bit-ish hashes (wrapping)
    kw = {}
    if optional:
        node = torch.randint(0, 2, (B, H), generator=g).cumsum(1) + \
            10 * torch.arange(B // 3 + 1).repeat_interleave(3)[:B, None]
        kw = dict(entropy=torch.rand(B, T, generator=g, dtype=dtype), values=torch.rand(B, H, generator=g, dtype=dtype),
                  node=node, info_gain=torch.randn(B, H, generator=g, dtype=dtype),
                  turn_signal=torch.randint(0, 2, (B, H), generator=g).to(dtype),
                  void_turn=torch.rand(B, H, generator=g) < 0.2, ref_logp=-torch.rand(B, T, generator=g, dtype=dtype),
                  task=torch.arange(B) % max(n_groups // 2, 1))
    return TurnBatch(tokens=torch.zeros(B, T, dtype=torch.long), policy_mask=pmask, turn_id=turn_id,
                     old_logp=-torch.rand(B, T, generator=g, dtype=dtype), turn_mask=turn_mask, turn_reward=reward,
                     group=torch.arange(B) % n_groups, state_key=keys, **kw)


def reference_batches(n: int = 24, seed: int = 0) -> list:
    """``n`` random batches of 1-14 rollouts, 1-5 turns, 1-4 groups, small or hashed state keys (float64)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        B, H, G = (int(torch.randint(lo, hi, (1,), generator=g)) for lo, hi in ((1, 15), (1, 6), (1, 5)))
        out.append(random_batch(B, H, n_groups=G, seed=seed * 1000 + i, hash_keys=bool(i % 2)))
    return out


def _where(got: torch.Tensor, want: torch.Tensor, atol: float, rtol: float) -> str:
    bad = ~torch.isclose(got, want, atol=atol, rtol=rtol, equal_nan=True)
    pos = tuple(int(i) for i in bad.nonzero()[0])
    return f"at {pos}: {float(got[pos])!r} against {float(want[pos])!r}"


def assert_matches_reference(fn: Callable, ref: Callable, *, batches: Optional[Iterable[TurnBatch]] = None,
                             kwargs: Optional[dict] = None, atol: float = 1e-9, rtol: float = 1e-9) -> int:
    """``fn(batch, **kwargs)`` equals ``ref(batch, **kwargs)`` on every batch (default ``reference_batches()``)
    within atol / rtol, or an AssertionError naming the batch and the first differing position; a ValueError
    from one must come from the other too. Returns the number of batches compared.
    Example: assert_matches_reference(ESTIMATORS["gigpo"], REFERENCE["gigpo"]) -> 24."""
    n = 0
    for i, b in enumerate(reference_batches() if batches is None else batches):
        where = f"batch {i} (B={b.B}, H={b.H}, T={b.T})"
        try:
            got = fn(b, **(kwargs or {}))
        except ValueError as e:
            try:
                ref(b, **(kwargs or {}))
            except ValueError:
                continue
            raise AssertionError(f"{where}: fn raised ValueError ({e}), the reference returned") from None
        want = ref(b, **(kwargs or {}))
        assert tuple(got.shape) == tuple(want.shape), f"{where}: shape {tuple(got.shape)}, reference {tuple(want.shape)}"
        assert torch.allclose(got.to(want.dtype), want, atol=atol, rtol=rtol, equal_nan=True), \
            f"{where}: differs from the reference {_where(got.to(want.dtype), want, atol, rtol)}"
        n += 1
    return n


def _permuted(b: TurnBatch, rows: torch.Tensor, kwargs: dict) -> tuple:
    """``b`` with its rows in the order ``rows`` and the tensor keywords with B rows permuted alike."""
    kw = {k: v[rows] if isinstance(v, torch.Tensor) and v.dim() and v.shape[0] == b.B else v
          for k, v in kwargs.items()}
    return b.select(rows), kw


def check_estimator(est, *, kwargs: Optional[Callable] = None, batches: Optional[Iterable[TurnBatch]] = None,
                    atol: float = 1e-9) -> None:
    """Every property of the module docstring, for ``est`` (an ``Estimator``, or its registered name) on
    ``batches`` (default: 6 random batches of 2-3 groups). ``kwargs(batch) -> dict`` makes the inputs it needs
    besides the batch (a critic's q and v, ReMax's baseline_reward, ...). AssertionError naming the property."""
    est = ESTIMATORS[est] if isinstance(est, str) else est
    if not isinstance(est, Estimator):
        raise ValueError(f"est must be a registered Estimator or its name, got {est!r}")
    make = kwargs or (lambda b: {})
    name = est.name
    for b in batches if batches is not None else [random_batch(12 + s, 4, n_groups=2 + s % 2, seed=s)
                                                  for s in range(6)]:
        kw = make(b)
        adv = est(b, **kw)
        want = (b.B, b.H) if est.level == "turn" else (b.B, b.T)
        assert tuple(adv.shape) == want, f"{name} shape: {tuple(adv.shape)}, level {est.level!r} wants {want}"
        assert torch.isfinite(adv).all(), f"{name} finite: a NaN or inf advantage"
        if est.level == "turn":
            assert not adv[~b.turn_mask].any(), f"{name} masked: non-zero advantage on an invalid turn"
        tok = token_advantages(b, adv, est.level)
        assert not tok[~b.policy_mask].any(), f"{name} masked: non-zero token advantage off the policy tokens"
        g = torch.randperm(int(b.group.max()) + 1, generator=torch.Generator().manual_seed(b.B))
        renamed = b.replace(group=g[b.group] * 7 + 3, state_key=b.state_key * 0x5851F42D4C957F2D + 11)
        assert torch.allclose(est(renamed, **kw), adv, atol=atol), f"{name} labels: renaming group ids or state " \
                                                                   "keys changed the advantages"
        rows = torch.randperm(b.B, generator=torch.Generator().manual_seed(b.B + 1))
        pb, pkw = _permuted(b, rows, kw)
        assert torch.allclose(est(pb, **pkw), adv[rows], atol=atol), f"{name} rows: permuting the rollouts did " \
                                                                      "not permute the advantages"
        if est.grouped:                                                       # one rollout per group and task
            alone = b.replace(group=torch.arange(b.B), task=None if b.task is None else torch.arange(b.B))
            assert not est(alone, **kw).any(), f"{name} grouped: a group of one rollout got a non-zero advantage"
    d = random_batch(1, 3, n_groups=1, seed=1)
    d = d.replace(turn_mask=torch.zeros_like(d.turn_mask), turn_reward=torch.zeros_like(d.turn_reward))
    assert torch.isfinite(est(d, **make(d))).all(), f"{name} degenerate: one rollout without a valid turn " \
                                                     "gave a non-finite advantage"
