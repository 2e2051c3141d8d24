"""``python -m devtools check-repaired DIR [--cells IDS]``: no wheel in DIR has libraries
a repair tool (auditwheel, delocate) grafted in: each bundles only its own. With
``--cells`` (a release job's ``TCDE_JOB_CELLS``), the wheels' manifests must name exactly
those cells, each once."""

from __future__ import annotations

import argparse
from pathlib import Path

from _torch_c_dlpack_ext_core.errors import ConfigError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("directory", type=Path)
    parser.add_argument(
        "--cells", default=None, help="comma-separated cell ids the wheels must hold, each once"
    )


def run(args: argparse.Namespace) -> int:
    from devtools.release.cisteps import check_repaired

    cells = None
    if args.cells is not None:
        cells = [c.strip() for c in args.cells.split(",") if c.strip()]
        if not cells:
            # TCDE_JOB_CELLS unset: the same refusal as the job's build gives.
            raise ConfigError(f"--cells {args.cells!r} names no cell")
    for path in check_repaired(args.directory, cells):
        print(f"{path.name}: bundles only its own libraries")
    if cells is not None:
        print(f"the job's {len(cells)} cell(s), each once")
    return 0
