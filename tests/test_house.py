"""README's module table is generated from the registries (toyrl.lab.house) and must match the code."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from toyrl.lab.house import counts, module_table, readme_table

ROOT = Path(__file__).resolve().parents[1]


def test_counts_follow_the_registries():
    from toyrl.envs import ENVS
    from toyrl.objectives import CLIP_SCHEMES
    c = counts()
    assert c["clip schemes"] == len(CLIP_SCHEMES) and c["envs"] == len(ENVS) >= 4 and c["estimators"] >= 24


def test_readme_module_table_is_the_generated_one():
    """After a change to a registry, paste ``module_table()`` between README's markers."""
    assert readme_table(ROOT / "README.md") == module_table()


def test_readme_counts_agree_with_the_registries():
    """Every "N <thing>" the README states for a registry equals its size."""
    text = (ROOT / "README.md").read_text()
    c = counts()
    said = {(int(n), what) for n, what in re.findall(
        r"\b(\d+) (envs|advantage estimators|clipping schemes|aggregations|KL estimators|filters)\b", text)}
    key = {"advantage estimators": "estimators", "clipping schemes": "clip schemes"}
    wrong = sorted((n, w) for n, w in said if n != c[key.get(w, w)])
    assert said and not wrong, f"README counts that disagree with the registries {c}: {wrong}"


def test_a_run_time_registration_does_not_change_the_table():
    from toyrl.credit import ESTIMATORS, register_estimator
    before = module_table()

    @register_estimator("house_probe", level="turn")
    def probe(batch):
        """A stand-in registered at run time."""
        return batch.turn_reward
    try:
        probe.fn.__module__ = "user_code"
        assert module_table() == before and "house_probe" in ESTIMATORS
    finally:
        del ESTIMATORS["house_probe"]


def test_the_notebook_example_estimator_is_not_counted():
    import toyrl.viz.prototype  # noqa: F401  (registers notebook 10's loo_turn on import)
    from toyrl.credit import ESTIMATORS
    assert "loo_turn" in ESTIMATORS and counts()["estimators"] == len(ESTIMATORS) - 1


def test_readme_table_needs_its_markers(tmp_path):
    (tmp_path / "R.md").write_text("no table")
    with pytest.raises(ValueError, match="readme"):
        readme_table(tmp_path / "R.md")
