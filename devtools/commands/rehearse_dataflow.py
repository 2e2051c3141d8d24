"""``python -m devtools rehearse-dataflow`` (``nox -s rehearse_dataflow``): the release
workflow's data flow, replayed on this machine (what it replays: :mod:`devtools.rehearse.dataflow`).
Prints a summary and ends "data flow ok", or exits 1 listing each problem."""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

from devtools.base.paths import ROOT
from devtools.base.steps import work_folder
from devtools.rehearse import dataflow


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--real-cells",
        default=",".join(dataflow.DEFAULT_REAL_CELLS),
        help="cell ids this host compiles for real (others get stand-ins)",
    )
    parser.add_argument("--fail-job", action="append", default=[], help="drop a job's artifact")
    parser.add_argument("--only", default="", help="the dispatch `cells` input")
    parser.add_argument("--workdir", type=Path, help="keep everything here")
    parser.add_argument("--build-dir", type=Path, help="compiled-library cache for real cells")


def run(args: argparse.Namespace) -> int:
    real = tuple(c.strip() for c in args.real_cells.split(",") if c.strip())
    with contextlib.ExitStack() as stack:
        work = work_folder(stack, args.workdir, "tcde-flow-")
        result = dataflow.rehearse_dataflow(
            work,
            real_cells=real,
            fail_jobs=args.fail_job,
            only=args.only,
            build_dir=args.build_dir or ROOT / "build" / "cells",
        )
        dataflow.print_summary(result)
    return 0 if result.ok else 1
