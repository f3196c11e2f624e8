"""Checkers of notebook 04 (void turns): every correct form accepted, the plausible near-misses rejected."""
import numpy as np
import torch

from toyrl.exercises import nb04
from toyrl.viz.prototype import RUNS_DIR, load_sweep


def test_void_rate_accepts_numpy_torch_and_list_answers():
    def ref(void, mask):
        return ((void & mask).sum(0).double() / mask.sum(0).clamp(min=1).double()).numpy()
    assert nb04._void_rate(ref)[0]
    assert nb04._void_rate(lambda v, m: torch.as_tensor(ref(v, m)))[0]
    assert nb04._void_rate(lambda v, m: ref(v, m).tolist())[0]


def test_void_rate_rejects_unmasked_and_wrong_denominators():
    assert not nb04._void_rate(lambda v, m: (v.sum(0).double() / m.sum(0).clamp(min=1)).numpy())[0]   # padding counted
    assert not nb04._void_rate(lambda v, m: ((v & m).sum(0).double() / v.shape[0]).numpy())[0]       # over all rows
    assert not nb04._void_rate(lambda v, m: ((v & m).float().mean(1)).numpy())[0]                    # per row


def test_keep_accepts_simpletir_in_its_forms():
    assert nb04._keep(lambda v, m: ~(v & m).any(1))[0]
    assert nb04._keep(lambda v, m: ((v & m).sum(1) == 0).numpy())[0]
    assert nb04._keep(lambda v, m: [not any(a and b for a, b in zip(r, q)) for r, q in zip(v.tolist(), m.tolist())])[0]


def test_keep_rejects_near_misses():
    assert not nb04._keep(lambda v, m: ~v.any(1))[0]                   # ignores validity (void flags on padding)
    assert not nb04._keep(lambda v, m: (v & m).any(1))[0]              # the drop mask, not the keep mask
    assert not nb04._keep(lambda v, m: ~(v & m).all(1))[0]             # all void, not any void
    assert not nb04._keep(lambda v, m: ~(v & m)[:, 0])[0]              # the first turn only


def test_masked_frac_is_the_last_10_steps():
    sweep, _ = load_sweep(RUNS_DIR / "void" / "filter.json")
    kept = np.asarray(sweep["GRPO + void filter"]["kept_frac"], float)
    assert nb04._masked_frac(1 - np.nanmean(kept[:, -10:]))[0]
    assert nb04._masked_frac(float(np.nanmean(1 - kept[:, -10:])))[0]
    for wrong in (1 - np.nanmean(kept), np.nanmean(kept[:, -10:]), 1 - np.nanmean(kept[:, :10])):
        assert not nb04._masked_frac(wrong)[0], wrong
