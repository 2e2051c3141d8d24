"""``python -m devtools split-variants DIST DEST``: move the variant wheels and the variants
index out of the files PyPI accepts today, into DEST."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dist", type=Path)
    parser.add_argument("dest", type=Path)


def run(args: argparse.Namespace) -> int:
    from devtools.release.distfiles import split_variants

    for path in split_variants(args.dist, args.dest):
        print(path)
    return 0
