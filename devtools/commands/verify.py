"""``python -m devtools verify DIST [--expect FILE] [--torch 2.8,2.9]``: every expected cell
is in the release exactly once (absent only where matrix.toml allows its job to fail);
then each wheel that fits this interpreter is installed with each torch it serves (or the
minors ``--torch`` names) into a fresh environment, and ``python -m torch_c_dlpack_ext
--json`` must report the decision the wheel promises."""

from __future__ import annotations

import argparse
from pathlib import Path

from _torch_c_dlpack_ext_core.errors import ConfigError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dist", type=Path)
    parser.add_argument("--expect", type=Path, help="nox -s matrix JSON: every cell must be there")
    parser.add_argument(
        "--no-install", dest="install", action="store_false", help="check contents only"
    )
    parser.add_argument(
        "--torch", default=None, help="comma-separated torch minors to install (default: all)"
    )


def run(args: argparse.Namespace) -> int:
    from devtools.release.contents import load_jobs
    from devtools.release.verify import verify

    expect = load_jobs(args.expect) if args.expect is not None else None
    torch = None
    if args.torch is not None:
        torch = [m.strip() for m in args.torch.split(",") if m.strip()]
        if not torch:
            raise ConfigError(f"--torch {args.torch!r} names no torch minor (e.g. 2.8,2.9)")
    verify(args.dist, expect=expect, install=args.install, torch=torch)
    return 0
