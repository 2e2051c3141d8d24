"""``python -m devtools variant-index DIST OUT``: write the release's own PEP 503 index
(every wheel, the sdist and the variants file of DIST) as static files under OUT, for a
static host (:mod:`devtools.release.variantindex`; docs/releasing.md)."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dist", type=Path)
    parser.add_argument("out", type=Path, help="folder to write; its simple/ is the index URL")


def run(args: argparse.Namespace) -> int:
    from devtools.release.variantindex import write_index

    print(write_index(args.dist, args.out))
    return 0
