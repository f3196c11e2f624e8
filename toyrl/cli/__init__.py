"""The ``toyrl`` command line (``commands``), its flags generated from ``TrainConfig`` (``args``,
``trainflags``), the result-writing commands (``results``) and the run-log plots (``runplot``).

``toyrl = "toyrl.cli:main"`` (pyproject.toml) and ``python -m toyrl`` both run ``main``.
"""
from .commands import main

__all__ = ["main"]
