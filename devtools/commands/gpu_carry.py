"""``python -m devtools gpu-carry [--dest DIR]``: gather the wheels the offline GPU machine
lacks for the GPU check (``tests/gpu/gpu_run.py``) and apache-tvm-ffi's sdist for its tests
into one folder (what and why: :mod:`devtools.envs.gpu_carry`), then print the one line that
installs them there and runs the check."""

from __future__ import annotations

import argparse
from pathlib import Path

from devtools.base.paths import ROOT
from devtools.envs.gpu_carry import CARRY_DIR, gather, install_line


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dest", type=Path, default=ROOT / CARRY_DIR, help=f"default: <checkout>/{CARRY_DIR}"
    )


def run(args: argparse.Namespace) -> int:
    gather(args.dest)
    try:
        folder = args.dest.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        folder = str(args.dest.resolve())
    print(install_line(folder))
    return 0
