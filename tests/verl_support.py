"""verl 0.9.1 for the parity tests: ``load_core_algos()`` returns its ``core_algos`` module or None (skip)."""
from toyrl.port.verl_loader import load_core_algos

__all__ = ["load_core_algos"]
