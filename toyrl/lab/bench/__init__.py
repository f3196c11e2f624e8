"""Benchmarks run by ``toyrl bench NAME``: each module has ``main(argv=None)`` and prints ratios against a reference measured in the same run."""
