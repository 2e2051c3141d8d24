"""``python -m devtools check-repaired DIR``: no wheel in DIR has libraries a repair tool
(auditwheel, delocate) grafted in: each bundles only its own."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("directory", type=Path)


def run(args: argparse.Namespace) -> int:
    from devtools.cisteps import check_repaired

    for path in check_repaired(args.directory):
        print(f"{path.name}: bundles only its own libraries")
    return 0
