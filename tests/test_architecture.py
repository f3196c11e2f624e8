"""docs/architecture.md's walk of one GRPO step matches the code: each function lives in the file it is listed
under, one tiny GRPO step calls them in the listed order, and the walk stays within 8 files and 15 hops."""
from __future__ import annotations

import importlib
import inspect
import re
import sys
from pathlib import Path

import pytest

from toyrl.train import TrainConfig, Trainer

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
ROW = re.compile(r"^\| *(\d+) *\| *(toyrl/[\w/]+\.py) *\| *([\w.]+) *\|", re.M)


def walk() -> list:
    """[(file, qualified name)] of the walk's table, in its order."""
    rows = ROW.findall(DOC.read_text())
    assert [int(n) for n, _, _ in rows] == list(range(1, len(rows) + 1)), "walk rows must be numbered 1, 2, ..."
    return [(path, name) for _, path, name in rows]


def resolve(path: str, name: str):
    """The function ``name`` (``Class.method`` or ``function``) of the module at ``path``."""
    obj = importlib.import_module(path[:-3].replace("/", "."))
    for part in name.split("."):
        obj = getattr(obj, part)
    return inspect.unwrap(obj)                          # through decorators such as torch.no_grad


def test_walk_is_short():
    steps = walk()
    files = {path for path, _ in steps}
    assert len(steps) >= 2
    assert len(files) <= 8, f"the walk enters {len(files)} files: {sorted(files)}"
    assert len(steps) - 1 <= 15, f"the walk takes {len(steps) - 1} hops"


@pytest.mark.parametrize("path, name", walk())
def test_each_function_lives_where_the_walk_says(path, name):
    fn = resolve(path, name)
    assert Path(inspect.getsourcefile(fn)).resolve() == (ROOT / path).resolve(), f"{name} is defined elsewhere"


def test_one_grpo_step_calls_the_walk_in_order():
    steps = walk()
    codes = {resolve(p, n).__code__: (p, n) for p, n in steps}
    tr = Trainer(TrainConfig(estimator="grpo", clip="ppo", steps=1, prompts_per_step=2, group_size=4, seed=0))
    order = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code in codes and codes[frame.f_code] not in order:
            order.append(codes[frame.f_code])

    sys.setprofile(profile)
    try:
        tr.step()
    finally:
        sys.setprofile(None)
    missing = [s for s in steps if s not in order]
    assert not missing, f"listed but not called in one GRPO step: {missing}"
    assert order == steps, f"called in this order instead: {order}"
