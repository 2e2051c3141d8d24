"""``python -m devtools footprint [--check]``: docs/test-footprint.md's tables, a generated
section (devtools/base/generated.py) rendered from the runs recorded in
``docs/footprint/*.json`` (``pytest --footprint FILE`` writes one; the shards in the order
of tests/shards.py's CI jobs, the pull requests' first); ``--check`` changes nothing and
exits 1 when the page is stale (``nox -s map`` re-renders it with every generated section).
``--summary RUN.json`` prints one run as Markdown instead (a CI job's summary); ``--skips
RUN.json [ROOT_RUN.json]`` lists the skips of a job's steps (the runner's, its sudo step's)
with their reasons and exits 1 when together they skipped more than the job's committed
records in ``--results`` (a CI job's skip check)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from devtools.base.errors import DevToolError
from devtools.base.paths import ROOT

PAGE = ROOT / "docs" / "test-footprint.md"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--results",
        type=Path,
        default=ROOT / "docs" / "footprint",
        help="folder of recorded runs --skips compares with (default: docs/footprint)",
    )
    parser.add_argument("--check", action="store_true", help="only say whether it is current")
    parser.add_argument("--summary", type=Path, help="print this one run as Markdown instead")
    parser.add_argument(
        "--skips",
        type=Path,
        nargs="+",
        metavar="RUN.json",
        help="list the skips of one job's runs (its runner's step, its sudo step's) with "
        "their reasons; exit 1 when together they skipped more than its records in --results",
    )


def run(args: argparse.Namespace) -> int:
    from devtools.base.generated import StaleFiles, regenerate
    from devtools.testkit.footprint import job_records, read_run
    from devtools.testkit.footprinttables import render_run, skip_report

    if args.summary is not None:
        sys.stdout.write(render_run(read_run(args.summary)))
        return 0
    if args.skips is not None:
        done = [read_run(path) for path in args.skips]
        shards = sorted({run.shard for run in done})
        if len(shards) != 1:
            raise DevToolError(f"--skips: runs of one job's shard, not of {', '.join(shards)}")
        ok, report = skip_report(done, job_records(args.results, shards[0]))
        sys.stdout.write(report)
        return 0 if ok else 1
    try:
        changed = regenerate([PAGE], check=args.check)
    except StaleFiles:
        print(
            f"{PAGE.name}: the tables differ from docs/footprint; run "
            "`python -m devtools footprint` (nox -s footprint)",
            file=sys.stderr,
        )
        return 1
    print(f"{PAGE.name}: {'tables rewritten' if changed else 'the tables are current'}",
          file=sys.stderr)  # fmt: skip
    return 0
