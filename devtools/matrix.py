"""THE reader of ``matrix.toml`` (:func:`load_matrix`); ``python -m devtools matrix``
(``nox -s matrix``, :mod:`devtools.commands.matrix`) prints CI's job matrix from it.

``nox -s build``, ``nox -s matrix``, the release tools, the dataflow rehearsal and the
tests all call :func:`load_matrix`; a source build never does (the sdist carries
neither this file nor ``matrix.toml``). The file is validated on read
(:mod:`devtools.matrixtoml`: an unknown key, platform, backend or index raises
:class:`~devtools.errors.MatrixError` with a "did you mean" hint); a selection that
matches nothing is a bad argument (:class:`~_torch_c_dlpack_ext_core.errors.ConfigError`).
The result is a :class:`~devtools.matrixmodel.Matrix`, whose cells
(:class:`~devtools.cells.Cell`, with their ids, job ids and labels) it derives.
"""

from __future__ import annotations

import sys
from pathlib import Path

from devtools import ROOT
from devtools.errors import MatrixError
from devtools.hostenv import requires_python
from devtools.matrixmodel import Matrix
from devtools.matrixtoml import parse_matrix

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.9/3.10 only
    import tomli as tomllib

__all__ = ["MATRIX_FILE", "load_matrix"]

#: ``matrix.toml`` at the repository root.
MATRIX_FILE = ROOT / "matrix.toml"


def load_matrix(path: Path | None = None) -> Matrix:
    """Read and validate ``matrix.toml`` (default: the one at the repository root).

    The ``pyproject.toml`` next to it, when there is one, supplies ``requires-python``.
    """
    path = MATRIX_FILE if path is None else path
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise MatrixError(f"cannot read {path}: {exc.strerror}") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise MatrixError(f"{path} is not valid TOML: {exc}") from None
    return parse_matrix(data, path, requires_python=requires_python(path.parent / "pyproject.toml"))
