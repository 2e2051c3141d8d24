"""``python -m devtools github-matrix FILE``: ``nox -s matrix`` output -> ``$GITHUB_OUTPUT``
lines: the build jobs, and the verify jobs (each torch minor on its oldest and newest
CPython, the free-threaded wheels on theirs)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from devtools.errors import MatrixError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("matrix", type=Path, help="the JSON `nox -s matrix -- --output` wrote")


def run(args: argparse.Namespace) -> int:
    from devtools.cisteps import github_output_lines
    from devtools.hostenv import requires_python

    try:
        data = json.loads(args.matrix.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise MatrixError(f"{args.matrix}: not readable JSON ({exc})") from None
    for line in github_output_lines(data, requires_python=requires_python()):
        print(line)
    return 0
