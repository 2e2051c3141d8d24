"""``python -m devtools matrix`` (``nox -s matrix``): CI's job matrix as JSON, from
matrix.toml; ``--list`` prints the cell ids instead.

One entry per cibuildwheel job (platform x torch flavour, plus one per free-threaded
Python the release builds), each with the fields the release workflow uses (``id``,
``runner``, ``python``, ``cibw_build``, ``arch``, ``image``, ``toolkit``,
``allow_failure``), the CPythons each of its torch minors serves (``torch``) and the cell
ids it builds (``cells``): the workflow passes exactly those, comma-joined, to the job's
``python -m devtools build --cells`` (``TCDE_JOB_CELLS``), so ``--only`` limits the build
to the cells it names, not to whole jobs.

``--github-output FILE`` also appends the release workflow's job outputs to FILE
(``$GITHUB_OUTPUT``): ``cells=`` the build matrix, ``verify=`` the verify matrix (each
torch minor on its oldest and newest CPython, the free-threaded wheels on theirs).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from _torch_c_dlpack_ext_core.files import atomic_write_bytes
from devtools.base.errors import MatrixError
from devtools.matrix.reader import load_matrix


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--only", default="", help="comma-separated cell/job ids or patterns")
    parser.add_argument("--output", default=None, help="write the JSON here instead of stdout")
    parser.add_argument("--list", action="store_true", help="print one cell id per line")
    parser.add_argument(
        "--github-output",
        type=Path,
        default=None,
        help="append the build and verify matrices here as cells=/verify= lines ($GITHUB_OUTPUT)",
    )


def run(args: argparse.Namespace) -> int:
    matrix = load_matrix()
    cells = matrix.select([p for p in args.only.split(",") if p.strip()])
    if args.list:
        for cell in cells:
            print(cell.id)
        return 0
    jobs = matrix.jobs(cells)
    if not jobs:
        reasons = sorted({c.not_released for c in cells})
        raise MatrixError(
            f"the release builds none of the {len(cells)} selected cell(s): " + "; ".join(reasons)
        )
    text = json.dumps({"include": jobs}, indent=2) + "\n"
    if args.output:
        atomic_write_bytes(Path(args.output), text.encode())
    else:
        sys.stdout.write(text)
    if args.github_output is not None:
        from devtools.base.hostenv import requires_python
        from devtools.release.cisteps import github_output_lines

        lines = github_output_lines({"include": jobs}, requires_python=requires_python())
        # Appended, never replaced: the file holds the other steps' outputs too.
        with args.github_output.open("a", encoding="utf-8") as output:
            output.write("".join(line + "\n" for line in lines))
    return 0
