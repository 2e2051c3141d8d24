"""``python -m devtools contents --matrix FILE --dist DIST [--cells DIR] [--out DIR]``: the
release's contents, cell by cell (present, or absent and why), as JSON
(``release-contents.json``) and Markdown notes."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--matrix", type=Path, required=True, help="nox -s matrix JSON")
    parser.add_argument("--dist", type=Path, action="append", required=True)
    parser.add_argument("--cells", type=Path, help="the downloaded job artifacts (cell-<job>/)")
    parser.add_argument("--out", type=Path, help="write release-contents.json and NOTES.md")


def run(args: argparse.Namespace) -> int:
    from devtools.matrix.reader import load_matrix
    from devtools.release.contents import write_contents

    matrix = load_matrix()
    write_contents(args.matrix, args.dist, matrix=matrix, cells_dir=args.cells, out=args.out)
    return 0
