"""``python -m devtools build`` (``nox -s build``): compile the matrix cells this host can
build, then assemble dist/.

By default every cell of this host's platform: the abi3 cells (one library per
torch minor, backend and ABI serves every CPython >= 3.9 with the GIL, so the
Python running this command does not matter) and the free-threaded ones.

Per cell: a cached folder holding that torch release (installed ``--no-deps`` for
one CPython the torch minor supports, never imported; :func:`devtools.envs.torchenv.torch_tree`:
its headers and libraries are the same in every CPython's wheel, so no other
interpreter is needed), one compile through the driver
(:func:`_torch_c_dlpack_ext_core.driver.compile_library`, which audits the ABI, the
stable ABI of abi3 libraries with abi3audit, and skips unchanged targets by its cache
key). An abi3 cell compiles against the running CPython's headers with
``Py_LIMITED_API``; a free-threaded cell (``-cp314t``) against that interpreter's
headers and its own torch wheel. Cells this host cannot build are skipped with the
reason: another OS or architecture, an index that does not answer (checked with a short
timeout), no ROCm toolchain, no free-threaded CPython. An empty ``--cells`` is an error
before any work, and a run that builds none of the cells it selected fails (exit 13).

Libraries land in ``build/cells/<platform>-abi3/`` (``<platform>-cp314t/``) with a
manifest (each entry names its ``python``); then :mod:`devtools.build.wheels` packs the
combined, variant and universal wheels, the variants index and the sdist into
``dist/``. A report (``build-report.json``) goes beside the output folder, never into
it (dist/ holds only what gets published): ``build/build-report.json`` by default,
``<DIR>/../build-report.json`` with ``--out DIR``, or wherever ``--report`` says.

``--libs-dir DIR`` (with ``--no-assemble``: CI's per-job build, cibuildwheel's
``before-build``) also copies the selected cells' libraries and their manifest into
DIR, for the backend's ``libs-dir=``; every selected cell must then be built.

``--platform NAME`` builds the cells of another matrix platform, cross-compiled with
that target's toolchain (the driver's ``platform=``, a registry entry like any other:
``linux_aarch64`` on a Linux host uses Debian's ``aarch64-linux-gnu-g++``) against
its torch wheels (:func:`~devtools.envs.torchenv.torch_tree`'s ``platform``); its abi3 cells
only (a free-threaded cell needs that platform's interpreter). On a host of that
platform it is a native build.

``--assemble-from DIR`` skips compiling: it merges the single-job wheels CI's
cibuildwheel runs produced into the same artifacts.

On GitHub Actions each cell's build is a group of the log, a failed cell an ``::error``
annotation, and the table of cells goes, as Markdown, into the job summary
(``$GITHUB_STEP_SUMMARY``; :mod:`devtools.base.ghactions`).
"""

from __future__ import annotations

import argparse
import json
import platform as host_platform
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from _torch_c_dlpack_ext_core.errors import ConfigError
from _torch_c_dlpack_ext_core.files import atomic_write_bytes
from devtools.base import ghactions
from devtools.base.errors import CellsNotBuiltError
from devtools.base.paths import ROOT
from devtools.build import cellbuild as build
from devtools.build import cellresults
from devtools.build.host import host_platform_name
from devtools.matrix.cells import Cell, PortableCell, group_dir, portable_cells
from devtools.matrix.model import Matrix
from devtools.matrix.reader import load_matrix

DEFAULT_BUILD_DIR = ROOT / "build" / "cells"
DEFAULT_OUT = ROOT / "dist"
REPORT_NAME = "build-report.json"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cells",
        default=None,
        help="comma-separated cell ids, job ids or patterns (*-t26_*; default: every cell "
        "of this host's platform); an empty value is an error",
    )
    parser.add_argument(
        "--platform",
        default=None,
        help="the matrix platform to build for (default: this host's); another one is "
        "cross-compiled with its cross toolchain (linux_aarch64 on a Linux host: "
        "apt-get install g++-aarch64-linux-gnu)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="cells built in parallel (processes; default: one per CPU, as many as the "
        "available memory holds at 1.5 GiB per compile)",
    )
    parser.add_argument(
        "--no-freethreaded",
        action="store_true",
        help="leave out the free-threaded cells (*-cp313t, *-cp314t): on a fresh machine "
        "their CPythons are first compiled from source (~15 minutes each on 2 cores)",
    )
    parser.add_argument("--build-dir", type=Path, default=DEFAULT_BUILD_DIR)
    parser.add_argument(
        "--out", type=Path, default=None, help="where the wheels and the sdist go (default: dist/)"
    )
    parser.add_argument(
        "--report",
        type=Path,
        default=None,
        help="the JSON report (default: build/build-report.json, or beside --out DIR)",
    )
    parser.add_argument("--no-assemble", action="store_true", help="compile only")
    parser.add_argument(
        "--libs-dir",
        type=Path,
        default=None,
        help="also copy the cells' libraries + manifest here (for the backend's libs-dir=)",
    )
    parser.add_argument("--no-repair", action="store_true", help="skip auditwheel repair")
    parser.add_argument(
        "--assemble-from", type=Path, default=None, help="merge CI's single-job wheels from DIR"
    )
    parser.add_argument(
        "--summary",
        type=Path,
        default=None,
        help="append the table of cells as Markdown here (default on GitHub Actions: "
        "$GITHUB_STEP_SUMMARY)",
    )


def report_path(args: argparse.Namespace, build_dir: Path) -> Path:
    """Where the report goes: ``--report``; else beside ``--out`` (never inside it,
    dist/ holds only what gets published); else ``build/build-report.json``."""
    if args.report is not None:
        return Path(args.report).resolve()
    if args.out is not None and Path(args.out).resolve() != DEFAULT_OUT.resolve():
        return Path(args.out).resolve().parent / REPORT_NAME
    return build_dir.parent / REPORT_NAME


def select_cells(
    matrix: Matrix, value: str | None, platform: str | None = None
) -> tuple[Cell, ...]:
    """The cells a run builds: ``--cells`` (ids or patterns, comma-separated), else
    every cell of ``platform`` (``--platform``; default this host's). With both, the
    cells ``--cells`` names on ``platform``. A given but empty ``--cells`` (``""``,
    commas, blanks: ``TCDE_JOB_CELLS`` unset in a release job) is a :class:`ConfigError`:
    it would otherwise mean "everything" and compile the whole matrix."""
    if platform is not None and platform not in matrix.platforms:
        raise ConfigError(
            f"--platform {platform!r} is no platform of matrix.toml; one of "
            f"{', '.join(matrix.platforms)}"
        )
    if value is not None:
        patterns = [p.strip() for p in value.split(",") if p.strip()]
        if not patterns:
            raise ConfigError(
                f"--cells {value!r} names no cell; pass cell ids or patterns (`nox -s matrix "
                "-- --list` lists them), or leave --cells out to build every cell of this "
                "host's platform"
            )
        cells = matrix.select(patterns)
        if platform is not None:
            cells = tuple(cell for cell in cells if cell.platform.name == platform)
    elif platform is not None:
        cells = matrix.select(platform=[platform])
    else:
        host = host_platform_name(matrix)
        if host is None:
            raise ConfigError(
                f"this host ({sys.platform}, {host_platform.machine()}) is no platform of "
                "matrix.toml; pass --cells to choose cells"
            )
        cells = matrix.select(platform=[host])
    if not cells:
        raise ConfigError("the selection holds no cell; `nox -s matrix -- --list` lists them")
    return cells


def print_table(results: Sequence[cellresults.CellResult]) -> None:
    """The final table: cell, status, seconds, size, and the note clipped at a word."""
    width = max([len(r.cell) for r in results] + [4])
    print(f"{'cell':<{width}}  {'status':<8} {'seconds':>8} {'size':>10}  note")
    for r in results:
        note = cellresults.clip(r.reason) if r.reason else ""
        size = f"{r.size}" if r.size else "-"
        print(f"{r.cell:<{width}}  {r.status:<8} {r.seconds:>8.1f} {size:>10}  {note}")


def markdown_table(results: Sequence[cellresults.CellResult], *, title: str) -> str:
    """:func:`print_table`'s table as Markdown under a ``title`` heading (the job
    summary): the whole first line of each note, ``|`` escaped."""

    def cell(text: str) -> str:
        return text.replace("\\", "\\\\").replace("|", "\\|")

    lines = [
        f"### {title}",
        "",
        "| cell | status | seconds | size | note |",
        "| --- | --- | ---: | ---: | --- |",
    ]
    for r in results:
        note = cellresults.clip(r.reason, 300) if r.reason else ""
        size = f"{r.size}" if r.size else "-"
        lines.append(f"| `{r.cell}` | {r.status} | {r.seconds:.1f} | {size} | {cell(note)} |")
    return "\n".join(lines) + "\n\n"


def without_freethreaded(cells: Sequence[Cell]) -> tuple[Cell, ...]:
    """``--no-freethreaded``: ``cells`` less the free-threaded ones; a selection of
    free-threaded cells only is a :class:`ConfigError` (it would build nothing)."""
    kept = tuple(cell for cell in cells if not cell.freethreaded)
    if not kept:
        raise ConfigError(
            "--no-freethreaded leaves none of the selected cells (all are free-threaded); "
            "drop one of --no-freethreaded and --cells"
        )
    return kept


def run(args: argparse.Namespace) -> int:
    if args.jobs is None:
        from devtools.build.host import default_jobs

        args.jobs = default_jobs()
    if args.jobs < 1:
        raise ConfigError(f"--jobs {args.jobs}: must be 1 or more")
    from build_backend._options import source_date_epoch

    # The backend's one check, before any cell is compiled: a bad value would otherwise
    # fail only when the first archive is written (here, or in the backend that packs
    # --libs-dir).
    source_date_epoch()
    out = Path(args.out) if args.out is not None else DEFAULT_OUT
    if args.assemble_from is not None:
        from devtools.build import wheels

        with ghactions.group(f"assemble {out} from {args.assemble_from}"):
            made = wheels.assemble_from_wheels(args.assemble_from, out)
        for path in made:
            print(f"wrote {path}")
        return 0
    matrix = load_matrix()
    cells = select_cells(matrix, args.cells, args.platform)
    if args.no_freethreaded:
        cells = without_freethreaded(cells)
    started = time.monotonic()
    print(f"building {len(cells)} cell(s) with --jobs {args.jobs}", file=sys.stderr)
    build_dir = args.build_dir.resolve()
    results = build.build_cells(cells, build_dir, jobs=args.jobs, target=args.platform)
    # The portable table of each group the selection touches; with --libs-dir (CI's
    # per-job build) only in the group's first job, so one job wheel carries it.
    of_group = {p.id: p for p in portable_cells(matrix.cells())}
    chosen = [
        of_group[p.id]
        for p in portable_cells(cells)
        if args.libs_dir is None or any(c.job_id == of_group[p.id].job_id for c in cells)
    ]
    portable = build.build_portable_cells(chosen, build_dir, target=args.platform)
    every: list[Cell | PortableCell] = [*cells, *chosen]
    results += portable
    wall = round(time.monotonic() - started, 1)
    print_table(results)
    # --summary, else $GITHUB_STEP_SUMMARY where set; else nothing.
    ghactions.step_summary(
        markdown_table(results, title=f"build: {len(results)} cell(s)"), args.summary
    )
    report: dict[str, object] = {
        "jobs": args.jobs,
        "wall_seconds": wall,
        "cells": [r.to_json() for r in results],
    }
    report_file = report_path(args, build_dir)
    if not any(r.entry is not None for r in results):
        _write_report(report_file, report)
        # Nothing to pack: a build of none of the requested cells is a failure, whatever
        # the reasons (another platform, a missing interpreter).
        raise CellsNotBuiltError(
            f"none of the {len(cells)} selected cell(s) was built"
            + (f" (nor the groups' {len(chosen)} portable table(s))" if chosen else "")
            + ": "
            + "; ".join(
                f"{r.cell}: {r.status} ({cellresults.clip(r.reason, 120)})" for r in results[:6]
            )
            + (f"; and {len(results) - 6} more" if len(results) > 6 else "")
            + f" (report: {report_file})"
        )
    if args.libs_dir is not None:
        entries = cellresults.copy_libs(every, results, build_dir, args.libs_dir.resolve())
        print(f"copied {len(entries)} librar(y/ies) and their manifest to {args.libs_dir}")
    if not args.no_assemble:
        from devtools.build import wheels
        from devtools.build.sizes import variant_sizes

        # Exactly the selected cells this run built or found cached: the group
        # directories also keep libraries of cells an earlier run selected.
        groups: dict[Path, set[str]] = {}
        for cell, result in zip(every, results):
            if result.entry is not None:
                groups.setdefault(group_dir(build_dir, cell), set()).add(result.entry.file)
        artifacts = wheels.assemble_dist(groups, out, matrix=matrix, repair=not args.no_repair)
        report["artifacts"] = [
            {"file": p.name, "size": p.stat().st_size} for p in artifacts if p.is_file()
        ]
        # What a variant saves against the combined wheel per install (docs/building.md).
        report["variant_sizes"] = variant_sizes(artifacts)
        for path in artifacts:
            print(f"wrote {path} ({path.stat().st_size} bytes)")
    _write_report(report_file, report)
    print(f"report: {report_file}; wall time {wall:.1f} s")
    return 1 if any(r.status == "failed" for r in results) else 0


def _write_report(path: Path, report: Mapping[str, object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, (json.dumps(report, indent=2) + "\n").encode())
