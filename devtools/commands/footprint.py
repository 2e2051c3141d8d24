"""``python -m devtools footprint [--check] [--results DIR] [--page FILE] [--order A,B]``:
docs/test-footprint.md's tables, rendered from the shard runs recorded in
``docs/footprint/*.json`` (``pytest --footprint FILE`` writes one); ``--check`` changes
nothing and exits 1 when the page is stale. ``--summary RUN.json`` prints one run as
Markdown instead (a CI job's summary)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from devtools.base.paths import ROOT

#: The shards in the order of tests/shards.py (devtools does not import the tests).
SHARD_ORDER = ("core", "old", "main", "abi3", "newer", "freethreaded")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--results",
        type=Path,
        default=ROOT / "docs" / "footprint",
        help="folder of recorded runs (default: docs/footprint)",
    )
    parser.add_argument(
        "--page",
        type=Path,
        default=ROOT / "docs" / "test-footprint.md",
        help="default: docs/test-footprint.md",
    )
    parser.add_argument("--order", default=",".join(SHARD_ORDER), help="shard order of the tables")
    parser.add_argument("--check", action="store_true", help="only say whether it is current")
    parser.add_argument("--summary", type=Path, help="print this one run as Markdown instead")


def run(args: argparse.Namespace) -> int:
    from _torch_c_dlpack_ext_core.files import atomic_write_bytes
    from devtools.envs.footprint import (
        read_run,
        read_runs,
        render_docs,
        render_run,
        replace_generated,
    )

    if args.summary is not None:
        sys.stdout.write(render_run(read_run(args.summary)))
        return 0
    runs = read_runs(args.results, [name for name in args.order.split(",") if name])
    text = args.page.read_text(encoding="utf-8")
    updated = replace_generated(text, render_docs(runs))
    if updated == text:
        print(f"{args.page.name}: the tables are current", file=sys.stderr)
        return 0
    if args.check:
        print(
            f"{args.page.name}: the tables differ from {args.results}; run "
            "`python -m devtools footprint` (nox -s footprint)",
            file=sys.stderr,
        )
        return 1
    atomic_write_bytes(args.page, updated.encode("utf-8"))
    print(f"{args.page.name}: tables rewritten from {len(runs)} runs", file=sys.stderr)
    return 0
