"""Release steps: check and publish ``dist/``, plus the small steps the release
workflow runs between nox sessions.

``nox -s release -- --repository-url URL`` calls :func:`publish`; ``nox -s rehearse``
calls the same function against a local index. Subcommands (``python -m
devtools.release --help``):

- ``upload``: ``twine check --strict``, then ``twine upload`` of the wheels and the
  sdist; the variants index (``{name}-{version}-variants.json``) goes to
  ``--variants-dir`` when given (a directory an index serves), because no
  upload API takes it yet (PyPI's PEP 825 support is pending);
- ``check-tag TAG``: the pushed tag names the version in ``version.py``;
- ``publish-target --event E --ref R --publish BOOL``: where this run may publish
  (the publish guard): PyPI only from a pushed tag ``v<version>``, TestPyPI at
  most from a manual run, nothing otherwise; ``$GITHUB_OUTPUT`` lines;
- ``github-matrix FILE``: turn ``nox -s matrix`` output into ``$GITHUB_OUTPUT`` lines
  (the build jobs, and the verify jobs: each torch minor on its oldest and newest
  CPython, the free-threaded wheels on theirs);
- ``check-repaired DIR``: no wheel in DIR has libraries a repair tool grafted in;
- ``contents --matrix FILE --dist DIST [--cells DIR] [--out DIR]``: the release's
  contents, cell by cell (present, or absent and why), as JSON and Markdown notes;
- ``split-variants DIST DEST``: move the variant wheels and the variants index out
  of the files PyPI accepts today;
- ``test-installed``: cibuildwheel's test command for one job's wheel;
- ``verify DIST [--expect FILE] [--torch 2.8,2.9]``: every expected cell is in the
  release exactly once (absent only where matrix.toml allows its job to fail), then
  install each wheel that fits this interpreter with each torch it serves (or the
  minors ``--torch`` names) into a fresh environment and check what ``python -m
  torch_c_dlpack_ext --json`` decides.

Credentials come only from the environment (``TWINE_USERNAME`` /
``TWINE_PASSWORD``, or Trusted Publishing in CI) and are never printed.

The steps live in their own modules: :mod:`devtools.distfiles` (what ``dist/``
holds), :mod:`devtools.publish` (twine, the tag check, the publish guard),
:mod:`devtools.contents` (cell by cell, release notes), :mod:`devtools.verify`
(installing and diagnosing) and :mod:`devtools.cisteps` (the workflow's matrices, the
repair check, cibuildwheel's test command). This module is their command line only.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from _torch_c_dlpack_ext_core.errors import ConfigError
from devtools import ROOT
from devtools.errors import HANDLED, MatrixError

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="release", description=__doc__.split("\n\n")[0])
    parser.add_argument("--traceback", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", required=True)

    upload = sub.add_parser("upload", help="twine check --strict, then twine upload")
    upload.add_argument("--dist", type=Path, default=ROOT / "dist")
    upload.add_argument("--repository-url", help="upload endpoint of the index")
    upload.add_argument("--check-only", action="store_true", help="run twine check only")
    upload.add_argument(
        "--skip-existing", action="store_true", help="skip files the index already has"
    )
    upload.add_argument(
        "--variants-dir", type=Path, help="directory the index serves; gets variants.json"
    )
    upload.add_argument(
        "--no-variant-wheels",
        dest="variant_wheels",
        action="store_false",
        help="leave PEP 825 variant wheels out (indexes that reject their names)",
    )

    tag = sub.add_parser("check-tag", help="the tag is v<version of version.py>")
    tag.add_argument("tag")

    target = sub.add_parser("publish-target", help="where this run may publish (the guard)")
    target.add_argument("--event", required=True, help="github.event_name")
    target.add_argument("--ref", required=True, help="github.ref")
    target.add_argument("--publish", default="false", help="the dispatch input (true/false)")

    gh = sub.add_parser("github-matrix", help="nox -s matrix JSON -> $GITHUB_OUTPUT lines")
    gh.add_argument("matrix", type=Path)

    repaired = sub.add_parser("check-repaired", help="no wheel in DIR has grafted libraries")
    repaired.add_argument("directory", type=Path)

    contents = sub.add_parser("contents", help="cell by cell: what the release holds, and why not")
    contents.add_argument("--matrix", type=Path, required=True, help="nox -s matrix JSON")
    contents.add_argument("--dist", type=Path, action="append", required=True)
    contents.add_argument("--cells", type=Path, help="the downloaded job artifacts (cell-<job>/)")
    contents.add_argument("--out", type=Path, help="write release-contents.json and NOTES.md")

    split = sub.add_parser(
        "split-variants", help="move variant wheels and variants.json out of dist/"
    )
    split.add_argument("dist", type=Path)
    split.add_argument("dest", type=Path)

    ver = sub.add_parser("verify", help="install each wheel with its torch; check the selector")
    ver.add_argument("dist", type=Path)
    ver.add_argument("--expect", type=Path, help="nox -s matrix JSON: every cell must be there")
    ver.add_argument(
        "--no-install", dest="install", action="store_false", help="check contents only"
    )
    ver.add_argument(
        "--torch", default=None, help="comma-separated torch minors to install (default: all)"
    )

    sub.add_parser(
        "test-installed", help="cibuildwheel test: install the cell's torch, run diagnostics"
    )
    return parser


def _cmd_upload(args: argparse.Namespace) -> None:
    from devtools.publish import publish

    publish(
        args.dist,
        repository_url=args.repository_url,
        skip_existing=args.skip_existing,
        variants_dir=args.variants_dir,
        variant_wheels=args.variant_wheels,
        check_only=args.check_only,
    )


def _cmd_check_tag(args: argparse.Namespace) -> None:
    from devtools.publish import check_tag

    check_tag(args.tag)


def _cmd_publish_target(args: argparse.Namespace) -> None:
    from devtools.publish import publish_target

    flag = args.publish.strip().lower()
    if flag not in ("true", "false", ""):
        raise ConfigError(f"--publish {args.publish!r}: expected true or false")
    for line in publish_target(args.event, args.ref, flag == "true").output_lines():
        print(line)


def _cmd_github_matrix(args: argparse.Namespace) -> None:
    from devtools.cisteps import github_matrix
    from devtools.hostenv import requires_python

    try:
        data = json.loads(args.matrix.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise MatrixError(f"{args.matrix}: not readable JSON ({exc})") from None
    for key, value in github_matrix(data, requires_python=requires_python()).items():
        print(f"{key}={json.dumps(value, separators=(',', ':'))}")


def _cmd_check_repaired(args: argparse.Namespace) -> None:
    from devtools.cisteps import check_repaired

    for path in check_repaired(args.directory):
        print(f"{path.name}: bundles only its own libraries")


def _cmd_contents(args: argparse.Namespace) -> None:
    from devtools.contents import write_contents

    write_contents(args.matrix, args.dist, cells_dir=args.cells, out=args.out)


def _cmd_split_variants(args: argparse.Namespace) -> None:
    from devtools.distfiles import split_variants

    for path in split_variants(args.dist, args.dest):
        print(path)


def _cmd_verify(args: argparse.Namespace) -> None:
    from devtools.contents import load_jobs
    from devtools.verify import verify

    expect = load_jobs(args.expect) if args.expect is not None else None
    torch = None
    if args.torch is not None:
        torch = [m.strip() for m in args.torch.split(",") if m.strip()]
        if not torch:
            raise ConfigError(f"--torch {args.torch!r} names no torch minor (e.g. 2.8,2.9)")
    verify(args.dist, expect=expect, install=args.install, torch=torch)


def _cmd_test_installed(args: argparse.Namespace) -> None:
    from devtools.cisteps import check_installed_job

    print(check_installed_job(Path(sys.executable)))


_COMMANDS: dict[str, Callable[[argparse.Namespace], None]] = {
    "upload": _cmd_upload,
    "check-tag": _cmd_check_tag,
    "publish-target": _cmd_publish_target,
    "github-matrix": _cmd_github_matrix,
    "check-repaired": _cmd_check_repaired,
    "contents": _cmd_contents,
    "split-variants": _cmd_split_variants,
    "verify": _cmd_verify,
    "test-installed": _cmd_test_installed,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; errors become one line and a stable exit code."""
    args = _parser().parse_args(argv)
    try:
        _COMMANDS[args.command](args)
    except HANDLED as exc:
        if args.traceback:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
