"""``python -m devtools assemble`` (``nox -s assemble``): the release workflow's
``assemble`` job in one call, from the jobs' wheels to what the release keeps.

1. merge the job wheels in ``--cells`` (as download-artifact lays out the jobs'
   artifacts: one ``cell-<job id>/`` folder each, since their wheels share names) into
   ``--dist``: the combined, variant and universal wheels, the variants index and the
   sdist, as ``nox -s build -- --assemble-from`` does;
2. the release's contents cell by cell (present, or absent and why) against
   ``--matrix`` (``nox -s matrix`` JSON): ``release-contents.json`` and ``NOTES.md`` in
   ``--notes``, the notes printed and, with ``--summary FILE``, appended there (the job
   summary, ``$GITHUB_STEP_SUMMARY``);
3. ``twine check --strict`` of ``--dist``, as ``nox -s release -- --check-only``;
4. the variant wheels and the variants index moved into ``--variants``, since no
   index accepts them yet (PEP 825 support is pending).

Absent cells are reported, not fatal here: ``verify --expect`` decides whether the
release may go on, so the notes are written especially then. On GitHub Actions each
step above is a group of the log; a summary file that cannot be written is a note, not
a failure.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from devtools.base import ghactions


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cells", type=Path, required=True, help="the jobs' artifacts, one cell-<job>/ each"
    )
    parser.add_argument("--matrix", type=Path, required=True, help="nox -s matrix JSON")
    parser.add_argument("--dist", type=Path, required=True, help="the uploadable dists go here")
    parser.add_argument(
        "--variants", type=Path, required=True, help="variant wheels and variants.json go here"
    )
    parser.add_argument("--notes", type=Path, required=True, help="release notes and contents")
    parser.add_argument("--summary", type=Path, help="append the notes here ($GITHUB_STEP_SUMMARY)")


def run(args: argparse.Namespace) -> int:
    from devtools.build import wheels
    from devtools.matrix.reader import load_matrix
    from devtools.release import contents, distfiles, publish

    with ghactions.group(f"assemble: the job wheels into {args.dist}"):
        for path in wheels.assemble_from_wheels(args.cells, args.dist):
            print(f"wrote {path}", file=sys.stderr)
    with ghactions.group("assemble: the release's contents and notes"):
        statuses = contents.write_contents(
            args.matrix, [args.dist], matrix=load_matrix(), cells_dir=args.cells, out=args.notes
        )
    if args.summary is not None:
        ghactions.step_summary(contents.release_notes(statuses), args.summary)
    with ghactions.group("assemble: twine check --strict"):
        publish.publish(args.dist, repository_url=None, check_only=True)
    with ghactions.group(f"assemble: the variant wheels into {args.variants}"):
        for path in distfiles.split_variants(args.dist, args.variants):
            print(f"moved {path}", file=sys.stderr)
    return 0
