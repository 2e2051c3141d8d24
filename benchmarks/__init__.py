"""Benchmarks of torch-c-dlpack-ext: exchange overhead, import overhead, build cost, size.

Run them with ``nox -s bench`` (see ``python -m benchmarks --help``).
"""
