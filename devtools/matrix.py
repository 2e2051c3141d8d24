"""THE reader of ``matrix.toml`` (:func:`load_matrix`), and ``nox -s matrix`` (CI's job
matrix as JSON).

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
from collections.abc import Sequence
from pathlib import Path

from devtools import ROOT
from devtools.errors import HANDLED, MatrixError, report
from devtools.hostenv import requires_python
from devtools.matrixmodel import Matrix
from devtools.matrixtoml import parse_matrix

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.9/3.10 only
    import tomli as tomllib

__all__ = ["MATRIX_FILE", "load_matrix", "main"]

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


def main(argv: Sequence[str] | None = None) -> int:
    """``nox -s matrix``: print (or write) CI's job matrix; ``--list`` prints the cell ids.

    One entry per cibuildwheel job (platform x torch flavour, plus one per free-threaded
    Python the release builds), each with the fields the release workflow uses (``id``,
    ``runner``, ``python``, ``cibw_build``, ``arch``, ``image``, ``toolkit``,
    ``allow_failure``), the CPythons each of its torch minors serves (``torch``) and
    the cell ids it builds (``cells``): the workflow passes exactly those, comma-joined,
    to the job's ``python -m devtools.build --cells`` (``TCDE_JOB_CELLS``), so
    ``--only`` limits the build to the cells it names, not to whole jobs.
    """
    import argparse
    import json

    from _torch_c_dlpack_ext_core.manifest import atomic_write_bytes

    parser = argparse.ArgumentParser(
        prog="nox -s matrix --", description="CI's job matrix as JSON, from matrix.toml"
    )
    parser.add_argument("--only", default="", help="comma-separated cell/job ids or patterns")
    parser.add_argument("--output", default=None, help="write the JSON here instead of stdout")
    parser.add_argument("--list", action="store_true", help="print one cell id per line")
    args = parser.parse_args(argv)
    try:
        matrix = load_matrix()
        cells = matrix.select([p for p in args.only.split(",") if p.strip()])
    except HANDLED as exc:
        return report(exc)
    if args.list:
        for cell in cells:
            print(cell.id)
        return 0
    jobs = matrix.jobs(cells)
    if not jobs:
        reasons = sorted({c.not_released for c in cells})
        return report(
            MatrixError(
                f"the release builds none of the {len(cells)} selected cell(s): "
                + "; ".join(reasons)
            )
        )
    text = json.dumps({"include": jobs}, indent=2) + "\n"
    if args.output:
        atomic_write_bytes(Path(args.output), text.encode())
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
