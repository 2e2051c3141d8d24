"""``python -m devtools footprint [--check] [--results DIR] [--page FILE]``:
docs/test-footprint.md's tables, rendered from the runs recorded in
``docs/footprint/*.json`` (``pytest --footprint FILE`` writes one; the shards in the order
of tests/shards.py's CI jobs, the pull requests' first); ``--check`` changes nothing and
exits 1 when the page is stale. ``--summary RUN.json`` prints one run as Markdown instead
(a CI job's summary); ``--skips RUN.json`` lists its skips with their reasons and exits 1
when there are more than its committed record's (a CI job's skip check)."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

from devtools.base.errors import DevToolError
from devtools.base.paths import ROOT

#: The one list of shards (devtools does not import the test package: the file is read).
SHARDS_FILE = ROOT / "tests" / "shards.py"


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
    parser.add_argument("--check", action="store_true", help="only say whether it is current")
    parser.add_argument("--summary", type=Path, help="print this one run as Markdown instead")
    parser.add_argument(
        "--skips",
        type=Path,
        help="list this run's skips with their reasons; exit 1 when it skipped more than "
        "its record in --results",
    )


def shard_order(path: Path = SHARDS_FILE) -> tuple[str, ...]:
    """The CI jobs' shards in tests/shards.py's order (``CI_JOBS``)."""
    spec = importlib.util.spec_from_file_location("_tcde_shards", path)
    if spec is None or spec.loader is None:
        raise DevToolError(f"cannot read the shards from {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return tuple(shard.name for shard in module.CI_JOBS)


def run(args: argparse.Namespace) -> int:
    from _torch_c_dlpack_ext_core.files import atomic_write_bytes
    from devtools.testkit.footprint import (
        read_run,
        read_runs,
        record_path,
        render_docs,
        render_run,
        replace_generated,
        skip_report,
    )

    if args.summary is not None:
        sys.stdout.write(render_run(read_run(args.summary)))
        return 0
    if args.skips is not None:
        done = read_run(args.skips)
        recorded = record_path(args.results, done)
        if not recorded.is_file():
            raise DevToolError(
                f"no committed record {recorded} for {done.name}: rehearse the job "
                "(.ci/rehearse-shard) and commit its record"
            )
        ok, report = skip_report(done, read_run(recorded))
        sys.stdout.write(report)
        return 0 if ok else 1
    runs = read_runs(args.results, shard_order())
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
