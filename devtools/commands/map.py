"""``python -m devtools map [--check] [--file FILE ...]``: every generated section of the
committed files (:data:`devtools.base.generated.FILES`: CONTRIBUTING.md's map of the code,
the benchmark figures on README.md and docs/benchmarks.md, the runtime's cost figures),
re-rendered by cog from its source; ``--check`` changes nothing and exits 1 when any is
stale."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--file",
        type=Path,
        action="append",
        help="a file with cog blocks (repeatable; default: every file of generated.FILES)",
    )
    parser.add_argument("--check", action="store_true", help="only say whether all are current")


def run(args: argparse.Namespace) -> int:
    from devtools.base.generated import StaleFiles, regenerate

    try:
        changed = regenerate(args.file, check=args.check)
    except StaleFiles as error:
        print(error, file=sys.stderr)
        return 1
    for path in changed:
        print(f"{path.name}: generated sections rewritten", file=sys.stderr)
    if not changed:
        print("generated sections: all current", file=sys.stderr)
    return 0
