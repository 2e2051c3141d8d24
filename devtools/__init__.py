"""Developer-only tools shared by nox sessions, CI, tests and benchmarks (never shipped).

Run them from the repository root through their one command line, ``python -m devtools
<command>`` (:mod:`devtools.cli`; ``--help`` lists the commands), which puts the
checkout's ``python/`` (the shipped building blocks) first on ``sys.path``
(:mod:`devtools.__main__`); imported as a library, they need it importable
(``PYTHONPATH=python``, which the nox sessions and the release workflow set; pytest's
``pythonpath`` does it for the tests). They import
``_torch_c_dlpack_ext_core`` and ``build_backend``, never the package
``torch_c_dlpack_ext`` itself, whose import runs the selector.
"""

from __future__ import annotations

from pathlib import Path

#: The repository root (the directory holding ``pyproject.toml``).
ROOT = Path(__file__).resolve().parents[1]
