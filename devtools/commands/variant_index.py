"""``python -m devtools variant-index DIST OUT``: write the release's own PEP 503 index
(every wheel, the sdist and the variants file of DIST, which must list exactly the
variant wheels' labels) as static files under OUT, for a static host
(:mod:`devtools.release.variantindex`; docs/releasing.md)."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dist", type=Path)
    parser.add_argument("out", type=Path, help="folder to write; its simple/ is the index URL")


def run(args: argparse.Namespace) -> int:
    from devtools.release.distfiles import collect
    from devtools.release.variantcheck import check_variant_metadata
    from devtools.release.variantindex import release_files, write_simple_pages

    # collect: one version, this project's files only (a stale file is refused); the
    # variants file must list exactly the variant wheels' labels (uv would otherwise
    # install the combined wheel, silently, for a label it lacks).
    files = collect(args.dist)
    check_variant_metadata(args.dist, files.wheels)
    print(
        write_simple_pages(
            release_files([w.path for w in files.wheels], files.sdists, files.variants_index),
            args.out,
        )
    )
    return 0
