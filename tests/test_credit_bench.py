"""toyrl bench credit: the table, the floor, GiGPO against the seed loop and the verl race print in one run."""
from __future__ import annotations

from toyrl.lab.bench.credit import main, race_inputs
from toyrl.port.verl_loader import load_core_algos


def test_bench_credit_quick_prints_the_race_blocks(capsys):
    rows = main(["--quick", "--reps", "1", "--rounds", "1", "--only", "gigpo", "gae", "--race"])
    out = capsys.readouterr().out
    assert [r["name"] for r in rows] == ["gigpo", "gae"] and all(r["ms"] > 0 and r["speedup"] > 0 for r in rows)
    assert "torch threads 1" in out and "malloc default" in out
    assert "memory-bound floor" in out and "x the floor" in out
    assert "gigpo vs the seed article's loop" in out
    if load_core_algos() is not None:
        assert "toyrl / verl" in out and out.count("toyrl.port.verl") == 4
        assert out.count("uid str") == 2 and out.count("int ids") == 2


def test_race_inputs_are_verl_shaped():
    r, m, index = race_inputs(64, 16, 8)
    assert r.shape == m.shape == (64, 16) and len(set(index)) == 8
    assert ((r != 0).sum(1) <= 1).all() and (r * (1 - m) == 0).all()        # one reward, on a response token
