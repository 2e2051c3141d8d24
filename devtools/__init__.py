"""Developer-only tools shared by nox sessions, CI, tests and benchmarks (never shipped).

Run them from the repository root through their one command line, ``python -m devtools
<command>`` (:mod:`devtools.cli`; ``--help`` lists the commands), with the shipped
building blocks importable: ``PYTHONPATH=python`` (the nox sessions and the release
workflow set it; pytest's ``pythonpath`` does for the tests). They import
``_torch_c_dlpack_ext_core`` and ``build_backend``, never the package
``torch_c_dlpack_ext`` itself, whose import runs the selector.
"""

from __future__ import annotations

from pathlib import Path

#: The repository root (the directory holding ``pyproject.toml``).
ROOT = Path(__file__).resolve().parents[1]
