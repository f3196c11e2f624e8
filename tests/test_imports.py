"""Every module of toyrl imports from what pyproject.toml declares (CI runs this in a fresh venv).

Optional parts (transformers for hf: policies, peft for LoRA, verl for the port's parity, ray for the ray
backend) are imported inside the functions that use them, so every module itself must import here.
"""
from __future__ import annotations

import importlib
import pkgutil
import re
import sys
from pathlib import Path

import pytest

import toyrl

ROOT = Path(__file__).resolve().parents[1]
MODULES = sorted(m.name for m in pkgutil.walk_packages(toyrl.__path__, "toyrl.")
                 if not m.name.endswith(".__main__"))                  # `python -m toyrl` runs the CLI on import


def test_the_walk_finds_the_package():
    assert len(MODULES) > 50 and "toyrl.train" in MODULES and "toyrl.lab.claims.stats" in MODULES


@pytest.mark.parametrize("name", MODULES)
def test_module_imports(name):
    module = importlib.import_module(name)
    assert module.__name__ == name and sys.modules[name] is module


def _declared() -> set[str]:
    try:
        import tomllib
    except ImportError:                                          # Python 3.10
        import tomli as tomllib
    proj = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = list(proj["dependencies"]) + [d for ds in proj["optional-dependencies"].values() for d in ds]
    return {re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0].strip().lower().replace("_", "-") for d in deps}


def test_every_third_party_import_is_declared():
    """The distributions behind every non-stdlib import in toyrl/ are in dependencies or an extra."""
    import ast
    from importlib.metadata import packages_distributions
    dists, declared, missing = packages_distributions(), _declared(), set()
    for f in (ROOT / "toyrl").rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module.split(".")[0]]
            else:
                continue
            for n in names:
                if n in sys.stdlib_module_names or n == "toyrl":
                    continue
                ds = {d.lower().replace("_", "-") for d in dists.get(n, [n])}
                if not ds & declared:
                    missing.add(f"{n} ({f.relative_to(ROOT)})")
    assert not missing, f"undeclared imports: {sorted(missing)}"
