"""Exercise checkers for the notebooks: ``check(exercise_id, answer)`` says whether an answer is right
and, when it is not, gives a hint instead of the solution.

Each notebook's exercises live in a module beside this one (``nb01.py`` ...) that registers its
checkers with ``@exercise("01.gamma")``. A checker takes the learner's answer and returns
``(ok, message)``; ``check`` prints the message and returns ``ok``, and never raises on a wrong or
missing answer (an unanswered exercise cell must not break ``pytest --nbval-lax``).
"""
from __future__ import annotations

import importlib
import pkgutil
from typing import Any, Callable

__all__ = ["exercise", "check", "matches", "CHECKS"]

CHECKS: dict[str, Callable[[Any], tuple[bool, str]]] = {}


def exercise(exercise_id: str) -> Callable:
    """Decorator registering a checker ``fn(answer) -> (ok, message)`` under ``exercise_id``."""
    def deco(fn):
        CHECKS[exercise_id] = fn
        return fn
    return deco


def matches(got: Any, want: Any, atol: float = 1e-6) -> bool:
    """True when an answer ``got`` (list, array or tensor) has ``want``'s shape and values within ``atol``.

    Example: matches([0.5, 0.5], np.array([0.5, 0.5])) -> True; matches([0.5], np.array([0.5, 0.5])) -> False.
    """
    import numpy as np
    as_array = lambda x: np.asarray(x.detach().cpu() if hasattr(x, "detach") else x, dtype=float)  # noqa: E731
    got, want = as_array(got), as_array(want)
    return got.shape == want.shape and bool(np.allclose(got, want, atol=atol))


def _load_all() -> None:
    for mod in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{mod.name}")


def check(exercise_id: str, answer: Any) -> bool:
    """Check ``answer`` for exercise ``exercise_id``; print a verdict with a hint; return True if right."""
    if exercise_id not in CHECKS:
        _load_all()
    if exercise_id not in CHECKS:
        raise ValueError(f"unknown exercise {exercise_id!r}; known: {', '.join(sorted(CHECKS))}")
    if answer is None or answer is Ellipsis:
        print(f"[{exercise_id}] not answered yet: replace the `...` / None with your answer.")
        return False
    try:
        ok, message = CHECKS[exercise_id](answer)
    except Exception as e:  # a malformed answer is feedback, not a crash
        ok, message = False, f"could not check this answer ({type(e).__name__}: {e})"
    print(f"[{exercise_id}] {'correct' if ok else 'not yet'}: {message}")
    return bool(ok)
