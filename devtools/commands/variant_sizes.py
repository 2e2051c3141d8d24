"""``python -m devtools variant-sizes REPORT --machine TEXT``: copy the ``variant_sizes``
of a ``nox -s build`` report into the record ``docs/variant-sizes.json`` (dated today,
UTC, with the machine) and render docs/building.md's sizes table from it
(:mod:`devtools.build.sizes`). ``--render-only`` re-renders the table from the record."""

from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path

from devtools.base.paths import ROOT


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("report", type=Path, nargs="?", help="a nox -s build report")
    parser.add_argument("--machine", default="", help="what the build ran on, for the record")
    parser.add_argument("--record", type=Path, default=ROOT / "docs" / "variant-sizes.json")
    parser.add_argument("--page", type=Path, default=ROOT / "docs" / "building.md")
    parser.add_argument("--render-only", action="store_true", help="only re-render the table")


def run(args: argparse.Namespace) -> int:
    from _torch_c_dlpack_ext_core.errors import ConfigError
    from _torch_c_dlpack_ext_core.files import atomic_write_bytes
    from devtools.build.sizes import render_table, replace_table, write_record

    if args.render_only:
        record = json.loads(args.record.read_text("utf-8"))
    else:
        if args.report is None or not args.machine.strip():
            raise ConfigError("variant-sizes needs a build report and --machine (or --render-only)")
        today = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
        record = write_record(args.report, args.record, measured=today, machine=args.machine)
    page = args.page.read_text("utf-8")
    atomic_write_bytes(args.page, replace_table(page, render_table(record)).encode())
    print(f"rendered {args.record} into {args.page}")
    return 0
