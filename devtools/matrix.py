"""``nox -s matrix``: CI's job matrix as JSON, from matrix.toml's one reader.

One entry per cibuildwheel job (Python x platform x backend group), each with
the fields the release workflow uses (``id``, ``runner``, ``python``,
``cibw_build``, ``arch``, ``image``, ``toolkit``, ``allow_failure``) and the
cell ids it builds (``cells``): the workflow passes exactly those, comma-joined,
to the backend as ``TORCH_C_DLPACK_EXT_CELLS``, so ``--only`` limits the build
to the cells it names, not to whole jobs.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from build_backend._matrix import load_matrix

from _torch_c_dlpack_ext_core.errors import TorchCDLPackExtError
from _torch_c_dlpack_ext_core.manifest import atomic_write_bytes

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Print (or write) the job matrix; ``--list`` prints the cell ids."""
    parser = argparse.ArgumentParser(prog="nox -s matrix --", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="comma-separated cell/job ids or patterns")
    parser.add_argument("--output", default=None, help="write the JSON here instead of stdout")
    parser.add_argument("--list", action="store_true", help="print one cell id per line")
    args = parser.parse_args(argv)
    try:
        matrix = load_matrix()
        cells = matrix.select([p for p in args.only.split(",") if p.strip()])
    except TorchCDLPackExtError as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return exc.exit_code
    if args.list:
        for cell in cells:
            print(cell.id)
        return 0
    text = json.dumps({"include": matrix.jobs(cells)}, indent=2) + "\n"
    if args.output:
        from pathlib import Path

        atomic_write_bytes(Path(args.output), text.encode())
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
