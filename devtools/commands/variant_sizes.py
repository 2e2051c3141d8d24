"""``python -m devtools variant-sizes REPORT --machine TEXT``: copy the ``variant_sizes``
of a ``nox -s build`` report into the record ``docs/variant-sizes.json`` (dated today,
UTC, with the machine) and re-render docs/building.md's sizes table, a generated section
(:mod:`devtools.build.sizes`, :mod:`devtools.base.generated`; ``nox -s map`` re-renders
it from the record alone)."""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path

from devtools.base.paths import ROOT


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("report", type=Path, help="a nox -s build report")
    parser.add_argument("--machine", required=True, help="what the build ran on, for the record")


def run(args: argparse.Namespace) -> int:
    from _torch_c_dlpack_ext_core.errors import ConfigError
    from devtools.base.generated import regenerate
    from devtools.build.sizes import RECORD, write_record

    if not args.machine.strip():
        raise ConfigError("variant-sizes needs --machine: what the build ran on, for the record")
    today = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    write_record(args.report, RECORD, measured=today, machine=args.machine)
    page = ROOT / "docs" / "building.md"
    regenerate([page])
    print(f"recorded {RECORD.relative_to(ROOT)} and rendered it into {page.relative_to(ROOT)}")
    return 0
