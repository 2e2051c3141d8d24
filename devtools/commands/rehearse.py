"""``python -m devtools rehearse`` (``nox -s rehearse``): the release rehearsal against a
real package index on 127.0.0.1 (what it checks: :mod:`devtools.rehearse.rehearsal`). Prints one
table and exits 1 if a check failed."""

from __future__ import annotations

import argparse
from pathlib import Path

from _torch_c_dlpack_ext_core.errors import ConfigError
from devtools.rehearse import rehearsal as rehearse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    cells = ",".join(rehearse.DEFAULT_CELLS)
    parser.add_argument(
        "--cells", default=cells, help=f"cells to build, comma-separated (default: {cells})"
    )
    parser.add_argument("--dist", type=Path, help="use these built dists instead of building")
    parser.add_argument(
        "--old-torch",
        default=rehearse.DEFAULT_OLD_TORCH,
        help="real old torch to install (X.Y.Z)",
    )
    parser.add_argument("--workdir", type=Path, help="keep scratch files here")
    parser.add_argument("--budget", type=float, default=5400.0, help="overall limit, seconds")


def run(args: argparse.Namespace) -> int:
    cells = tuple(c.strip() for c in args.cells.split(",") if c.strip())
    if not cells and args.dist is None:
        raise ConfigError("--cells selects nothing; name at least one cell or pass --dist")
    checks = rehearse.rehearse(
        rehearse.RehearsalOptions(
            cells=cells,
            dist=args.dist,
            old_torch=args.old_torch,
            workdir=args.workdir,
            budget=args.budget,
        )
    )
    rehearse.print_table(checks)
    failed = [c for c in checks if not c.ok]
    print(f"{len(checks) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0
