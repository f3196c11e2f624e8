"""Plug-ins: your envs, estimators and clip schemes in toyrl's registries, without a fork of toyrl.

Two ways in, both loaded by the CLI, by ``TrainConfig.validate`` and by every sweep worker process:

    toyrl train --import my_env --env keydoor          # my_env.py registers keydoor (``register_env``)
    toyrl sweep --import my_env --env keydoor --workers 2

    # or, in the pyproject.toml of your package (no --import needed):
    [project.entry-points."toyrl.envs"]
    keydoor = "my_pkg.keydoor:KeyDoorCore"             # a BatchedCore subclass
    [project.entry-points."toyrl.estimators"]
    my_loo = "my_pkg.credit:my_loo"                    # an Estimator (what @register_estimator returns)
    [project.entry-points."toyrl.clip_schemes"]
    my_clip = "my_pkg.clip:MY_CLIP"                    # a toyrl.objectives.Scheme

``--import`` takes a module name (found from the current directory, as ``python -m`` finds it) or a path to a
``.py`` file, and may be repeated. The modules are recorded in the environment variable ``TOYRL_IMPORT``
(``os.pathsep``-separated), which spawn workers inherit, so a worker imports them as plain modules: a user's
module needs no ``if __name__ == "__main__"`` guard, because it is never the main script of a worker.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path

from .credit.registry import ESTIMATORS, Estimator, register_estimator
from .envs import ENVS, BatchedCore, register_env
from .objectives.schemes import CLIP_SCHEMES, Scheme, register_clip_scheme

__all__ = ["GROUPS", "ENV_VAR", "import_module", "import_modules", "load_entry_points", "load_environment",
           "hint", "unknown"]

GROUPS = {"env": "toyrl.envs", "estimator": "toyrl.estimators", "clip": "toyrl.clip_schemes"}
"""registry kind -> the entry-point group that fills it"""
ENV_VAR = "TOYRL_IMPORT"
"""the modules ``--import`` loaded, for worker processes (os.pathsep-separated names or file paths)"""
_LOADED: dict = {}


def import_module(spec: str):
    """Import ``spec``, a module name (the current directory searched first, as with ``python -m``) or a path to
    a ``.py`` file, and add it to ``TOYRL_IMPORT`` so worker processes import it too; returns the module.

    ValueError naming ``spec`` when it cannot be found, with the error its import raised otherwise.
    Example: import_module("my_env") imports ./my_env.py; import_module("plugins/my_env.py") the same file by path.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"expected a module name or a .py file, got {spec!r}")
    path = Path(spec)
    if spec.endswith(".py") or os.sep in spec:
        if not path.is_file():
            raise ValueError(f"no file {spec!r}")
        key = str(path.resolve())
        if key not in _LOADED:
            mod_spec = importlib.util.spec_from_file_location(path.stem, key)
            module = importlib.util.module_from_spec(mod_spec)
            sys.modules[path.stem] = module
            mod_spec.loader.exec_module(module)
            _LOADED[key] = module
    else:
        key = spec
        if os.getcwd() not in sys.path and "" not in sys.path:
            sys.path.insert(0, os.getcwd())                 # what `python -m` does; spawn workers inherit sys.path
        if importlib.util.find_spec(spec) is None:
            raise ValueError(f"no module {spec!r} on the path (from {os.getcwd()}); give a module name importable "
                             "from here or a path to a .py file")
        _LOADED[key] = importlib.import_module(spec)
    listed = [m for m in os.environ.get(ENV_VAR, "").split(os.pathsep) if m]
    if key not in listed:
        os.environ[ENV_VAR] = os.pathsep.join(listed + [key])
    return _LOADED[key]


def import_modules(specs) -> list:
    """``import_module`` of each of ``specs`` in order -> the modules."""
    return [import_module(s) for s in specs or ()]


def load_environment() -> list:
    """Import the modules ``TOYRL_IMPORT`` names and load every entry point (what a worker process runs before
    its first job) -> the modules imported."""
    mods = import_modules([m for m in os.environ.get(ENV_VAR, "").split(os.pathsep) if m])
    load_entry_points()
    return mods


def _entry_points(group: str) -> list:
    from importlib.metadata import entry_points
    return list(entry_points(group=group))


def load_entry_points() -> dict:
    """Register every plug-in of the groups ``toyrl.envs``, ``toyrl.estimators`` and ``toyrl.clip_schemes``
    installed in this environment (idempotent) -> {kind: [names]}.

    An env's entry point names a ``BatchedCore`` subclass, an estimator's an ``Estimator`` (or a function of a
    TurnBatch returning (B, H) advantages, registered at turn level), a clip scheme's a ``Scheme``. A wrong
    kind of object is a ValueError naming the entry point.
    """
    out: dict = {}
    for kind, group in GROUPS.items():
        for ep in _entry_points(group):
            if (group, ep.name) in _LOADED:
                continue
            obj = ep.load()
            where = f"entry point {ep.name!r} ({ep.value}) in group {group}"
            if kind == "env":
                if not (isinstance(obj, type) and issubclass(obj, BatchedCore)):
                    raise ValueError(f"{where}: expected a BatchedCore subclass, got {obj!r}")
                register_env(ep.name, obj)
            elif kind == "estimator":
                if isinstance(obj, Estimator):
                    ESTIMATORS[ep.name] = obj
                elif callable(obj):
                    register_estimator(ep.name, level="turn")(obj)
                else:
                    raise ValueError(f"{where}: expected an Estimator or a function of a TurnBatch, got {obj!r}")
            else:
                if not isinstance(obj, Scheme):
                    raise ValueError(f"{where}: expected a toyrl.objectives.Scheme, got {obj!r}")
                register_clip_scheme(ep.name, obj)
            _LOADED[(group, ep.name)] = obj
            out.setdefault(kind, []).append(ep.name)
    return out


_HOW = {"env": "toyrl.envs.register_env(name, CoreClass)", "estimator": "@toyrl.credit.register_estimator(name)",
        "clip": "toyrl.objectives.register_clip_scheme(name, Scheme(...))"}


def hint(kind: str, cli: bool = False) -> str:
    """How to add a ``kind`` ("env", "estimator", "clip") of your own, in one clause.
    Example: hint("env", cli=True) -> "add one with --import MODULE (a module calling
    toyrl.envs.register_env(name, CoreClass)) or an entry point in group toyrl.envs (docs/your_env.md)"."""
    where = "docs/your_env.md" if kind == "env" else "docs/porting.md"
    how = f"--import MODULE (a module calling {_HOW[kind]})" if cli else _HOW[kind]
    return f"add one with {how} or an entry point in group {GROUPS[kind]} ({where})"


def unknown(kind: str, name: str, registry) -> bool:
    """True when ``name`` is still not in ``registry`` after loading the installed entry points (the lookup a
    registry check makes before it refuses a name)."""
    if name in registry:
        return False
    load_entry_points()
    return name not in registry
