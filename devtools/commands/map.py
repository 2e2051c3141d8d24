"""``python -m devtools map [--check] [--file FILE]``: CONTRIBUTING.md's map of the code
(layers, the core, the face, the build backend, devtools' rooms and modules), regenerated
from the docstrings (:mod:`devtools.docmap`); ``--check`` changes nothing and exits 1 when
the map is stale."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from devtools.base.paths import ROOT


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--file", type=Path, default=ROOT / "CONTRIBUTING.md", help="default: CONTRIBUTING.md"
    )
    parser.add_argument("--check", action="store_true", help="only say whether it is current")


def run(args: argparse.Namespace) -> int:
    from _torch_c_dlpack_ext_core.files import atomic_write_bytes
    from devtools.docmap import render, replace_map

    text = args.file.read_text(encoding="utf-8")
    updated = replace_map(text, render())
    if updated == text:
        print(f"{args.file.name}: the map is current", file=sys.stderr)
        return 0
    if args.check:
        print(
            f"{args.file.name}: the map differs from the docstrings; run `nox -s map`",
            file=sys.stderr,
        )
        return 1
    atomic_write_bytes(args.file, updated.encode("utf-8"))
    print(f"{args.file.name}: map rewritten", file=sys.stderr)
    return 0
