"""The one-file examples learn: GRPO and GiGPO on GridWorld, written without the Trainer, raise their success rate
on a fixed seed within a few steps; GiGPO's file reuses GRPO's loop and swaps only the advantage."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def example(name: str):
    """The module examples/NAME.py, imported as a script beside its siblings would import it."""
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    return importlib.import_module(name)


grpo_gridworld, gigpo_gridworld = example("grpo_gridworld"), example("gigpo_gridworld")

STEPS = 20


@pytest.mark.parametrize("advantage", [grpo_gridworld.grpo_advantage, gigpo_gridworld.gigpo_advantage],
                         ids=["grpo", "gigpo"])
def test_example_learns(advantage, capsys):
    curve = grpo_gridworld.train(grpo_gridworld.parse_args(["--steps", str(STEPS)]), advantage=advantage)
    assert len(curve) == STEPS and capsys.readouterr().out.count("success") == STEPS   # the printed curve
    first, last = sum(curve[:5]) / 5, sum(curve[-5:]) / 5
    assert last > first + 0.02, f"success did not rise: first 5 steps {first:.3f}, last 5 {last:.3f}"


def test_examples_are_one_short_file_each_and_differ_in_the_advantage_only():
    assert gigpo_gridworld.train is grpo_gridworld.train
    for name in ("grpo_gridworld.py", "gigpo_gridworld.py"):
        assert len((EXAMPLES / name).read_text().splitlines()) <= 200
