"""Notebook 02's population figure (``toyrl.viz.echo.plot_population``): counts read from the stored ledger runs,
bars that are those counts, and a figure that reads on a slide."""
from __future__ import annotations

import matplotlib
import numpy as np
import pytest
from conftest import assert_figure_standard, assert_projectable

from toyrl.viz import echo, style


@pytest.fixture(autouse=True)
def slides():
    with style.figure_style("slides"):
        yield
    matplotlib.pyplot.close("all")


def _table(forgot, collapsed, seeds=10):
    return {"seeds": seeds, "forgot": forgot, "collapsed": collapsed, "final": 0.5, "mi_fell": 0}


ROWS = (("c1", "grpo", "GRPO"), ("c1", "kl", "KL"), ("c2", "critic", "critic"))
TABLES = {"block A": {"c1": {"grpo": _table(5, 3), "kl": _table(2, 1)}, "c2": {"critic": _table(10, 8)}},
          "block B": {"c1": {"grpo": _table(7, 3), "kl": _table(3, 0)}, "c2": {"critic": _table(6, 7)}}}


def test_population_counts_reads_each_row():
    c = echo.population_counts(TABLES, ROWS)
    assert list(c) == ["block A", "block B"] and list(c["block A"]) == ["GRPO", "KL", "critic"]
    assert c["block A"]["critic"] == {"arm": "critic", "seeds": 10, "forgot": 10, "collapsed": 8}
    assert c["block B"]["KL"]["collapsed"] == 0
    with pytest.raises(ValueError, match="lacks"):
        echo.population_counts({"b": {"c1": {"grpo": _table(1, 1)}}}, ROWS)


def test_plot_population_draws_the_counts():
    c = echo.population_counts(TABLES, ROWS)
    fig = echo.plot_population(c)
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert len(axes) == 2 and axes[0].get_shared_y_axes().joined(axes[0], axes[1])
    for ax, rows in zip(axes, c.values()):
        widths = [p.get_width() for p in ax.patches]                       # forgot, collapsed per row, in order
        assert widths == [v for r in rows.values() for v in (r["forgot"], r["collapsed"])]
        colors = [matplotlib.colors.to_hex(p.get_facecolor()) for p in ax.patches[::2]]
        assert len(set(colors)) == len(rows)                               # one colour per arm, none shared
    assert_projectable(fig)
    assert_figure_standard(fig, "blind T-maze", "seeds")


def test_stored_population_matches_the_ledger():
    """The default figure reads the shipped runs: 8 arms x 10 seeds per block, and the GRPO forgetting count is
    the ledger's own per-seed 'forgot' share of blind_fixes."""
    import json
    from pathlib import Path
    c = echo.population_counts(echo.population_tables())
    assert all(r["seeds"] == 10 for rows in c.values() for r in rows.values()) and all(len(v) == 8 for v in c.values())
    for block, sub in (("seeds 0-9", ""), ("seeds 10-19", "heldout")):
        rec = json.loads((Path(echo.LEDGER_DIR) / sub / "blind_fixes.json").read_text())
        forgot = rec["result"]["arms"]["grpo"]["forgot"]["per_seed"]
        assert c[block]["GRPO (blind_fixes)"]["forgot"] == int(np.sum(forgot))
    fig = echo.plot_population()
    assert fig.get_size_inches()[0] <= style.figsize(10, 1)[0] + 1e-6
    assert_projectable(fig)
