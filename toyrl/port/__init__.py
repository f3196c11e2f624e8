"""Adapters with verl 0.9.1's function names and signatures, backed by toyrl's own functions."""
