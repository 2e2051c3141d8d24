"""``nox -s build``: compile the matrix cells this host can build, then assemble dist/.

Per cell: a cached environment holding that torch release (installed
``--no-deps``, never imported; :mod:`devtools.torchenv`), one compile through
the driver (:func:`_torch_c_dlpack_ext_core.driver.compile_library`, which audits
the ABI and skips unchanged targets by its cache key). Cells this host cannot
build are skipped with the reason: another OS or architecture, an index that
does not answer (checked with a short timeout), no ROCm toolchain, no such
Python interpreter.

Libraries land in ``build/cells/<cpXY>-<platform>/`` with a manifest (each entry
names its target ``python``); then :mod:`devtools.wheels` packs the combined,
variant and universal wheels, the variants index and the sdist into ``dist/``. A
report (``build-report.json``) goes beside the output folder, never into it (dist/
holds only what gets published):
``build/build-report.json`` by default, ``<DIR>/../build-report.json`` with
``--out DIR``, or wherever ``--report`` says.

``--libs-dir DIR`` (with ``--no-assemble``: CI's per-job build, cibuildwheel's
``before-build``) also copies the selected cells' libraries and their manifest into
DIR, for the backend's ``libs-dir=``; every selected cell must then be built.

``--assemble-from DIR`` skips compiling: it merges the single-job wheels CI's
cibuildwheel runs produced into the same artifacts.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import functools
import json
import os
import platform as host_platform
import shutil
import sys
import textwrap
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _torch_c_dlpack_ext_core.errors import CommandError, ConfigError
from _torch_c_dlpack_ext_core.manifest import ManifestEntry, atomic_write_bytes, write_manifest
from _torch_c_dlpack_ext_core.naming import MANIFEST_NAME, Backend
from _torch_c_dlpack_ext_core.run import run
from devtools import ROOT
from devtools.errors import HANDLED, CellsNotBuiltError
from devtools.errors import report as report_error
from devtools.matrix import Cell, Matrix, load_matrix

__all__ = [
    "CellResult",
    "build_cells",
    "copy_libs",
    "host_platform_name",
    "main",
    "skip_reason",
]

#: Seconds to wait for an index before calling it unreachable.
INDEX_TIMEOUT_S = 5.0
DEFAULT_BUILD_DIR = ROOT / "build" / "cells"
DEFAULT_OUT = ROOT / "dist"
REPORT_NAME = "build-report.json"
#: Width of the note column of the final table (and of a progress line's detail).
NOTE_WIDTH = 90


@dataclasses.dataclass(frozen=True)
class CellResult:
    """What happened to one cell."""

    cell: str
    status: str  # built | cached | skipped | failed
    seconds: float = 0.0
    size: int = 0
    reason: str = ""
    entry: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def host_platform_name(matrix: Matrix) -> str | None:
    """The matrix platform this host builds for (by OS and machine), or ``None``."""
    system = {"linux": "linux", "win32": "windows", "darwin": "macos"}.get(sys.platform)
    machine = host_platform.machine()
    for name, plat in matrix.platforms.items():
        if plat.os == system and plat.machine.lower() == machine.lower():
            return name
    return None


_INDEX_CACHE: dict[str, str | None] = {}


def index_unreachable(url: str, timeout: float = INDEX_TIMEOUT_S) -> str | None:
    """``None`` when ``url`` answers within ``timeout``, else why not (cached per run)."""
    if url in _INDEX_CACHE:
        return _INDEX_CACHE[url]
    reason: str | None = None
    probe = url.rstrip("/") + "/torch/"
    try:
        request = urllib.request.Request(probe, method="HEAD")
        with urllib.request.urlopen(request, timeout=timeout):
            pass
    except urllib.error.HTTPError as exc:
        if exc.code >= 500:
            reason = f"index {url} answered HTTP {exc.code}"
    except (urllib.error.URLError, OSError) as exc:
        cause = getattr(exc, "reason", exc)
        reason = f"index {url} unreachable within {timeout:.0f} s ({cause})"
    _INDEX_CACHE[url] = reason
    return reason


def _rocm_missing() -> str | None:
    for var in ("ROCM_PATH", "ROCM_HOME"):
        if os.environ.get(var) and (Path(os.environ[var]) / "include" / "hip").is_dir():
            return None
    if Path("/opt/rocm/include/hip").is_dir():
        return None
    return "no ROCm toolchain (set ROCM_PATH to a ROCm installation with include/hip)"


def _python_missing(python: str) -> str | None:
    if python == f"{sys.version_info[0]}.{sys.version_info[1]}":
        return None
    from devtools.torchenv import find_uv

    try:
        run([find_uv(), "python", "find", "--no-python-downloads", python], echo=False)
    except CommandError:
        return f"no Python {python} interpreter on this host (uv python find {python})"
    return None


@functools.cache
def _requires_python() -> str | None:
    """``[project] requires-python``, read once per run rather than once per cell."""
    from build_backend._metadata import load_pyproject

    value = load_pyproject(ROOT).get("project", {}).get("requires-python")
    return str(value) if value is not None else None


def _outside_requires_python(python: str) -> str | None:
    from packaging.specifiers import SpecifierSet

    spec = _requires_python()
    if spec and f"{python}.0" not in SpecifierSet(spec):
        return f"Python {python} is outside requires-python {spec} (torch supports it, we do not)"
    return None


def skip_reason(cell: Cell, host: str | None) -> str | None:
    """Why this host cannot build ``cell`` (``None``: it can)."""
    outside = _outside_requires_python(cell.python)
    if outside:
        return outside
    if cell.platform.name != host:
        return f"builds on {cell.platform.name}, this host is {host or 'not in matrix.toml'}"
    if cell.backend is Backend.ROCM:
        missing = _rocm_missing()
        if missing:
            return missing
    unreachable = index_unreachable(cell.wheel.index_url)
    if unreachable:
        return unreachable
    return _python_missing(cell.python)


def group_dir(build_dir: Path, cell: Cell) -> Path:
    """Where a cell's library goes: one directory per Python x platform."""
    return build_dir / f"{cell.python_tag}-{cell.platform.name}"


def _python_include(python: Path) -> Path:
    code = "import sysconfig; print(sysconfig.get_paths()['include'])"
    return Path(run([python, "-c", code], echo=False).stdout.strip())


def build_one(cell: Cell, build_dir: Path) -> CellResult:
    """Provision the cell's torch and compile its library (a cache hit compiles nothing)."""
    from _torch_c_dlpack_ext_core.driver import compile_library
    from devtools.torchenv import torch_env

    started = time.monotonic()
    out = group_dir(build_dir, cell)
    try:
        # CPU and GPU cells of one flavour share the env (same extras).
        env = torch_env(
            cell.torch.release,
            importable=False,
            python=cell.python,
            extra=cell.wheel.toolkit_requirements,
            index_url=None if cell.wheel.index == "pypi" else cell.wheel.index_url,
        )
        gpu_home = None
        if cell.backend is Backend.CUDA:
            # The pinned runtime headers of this torch, not whatever nvcc is on PATH.
            gpu_home = env.site_packages / "nvidia" / "cuda_runtime"
        target = out / cell.library
        before = target.stat().st_mtime_ns if target.is_file() else None
        entry = compile_library(
            torch=env.torch_dir,
            backend=cell.backend,
            output_dir=out,
            cxx11_abi=cell.cxx11_abi,
            gpu_home=gpu_home,
            python_include=_python_include(env.python),
        )
    except HANDLED as exc:
        return CellResult(
            cell=cell.id,
            status="failed",
            seconds=round(time.monotonic() - started, 1),
            reason=f"{type(exc).__name__}: {str(exc).strip()[-3000:]}",
        )
    status = "cached" if before == target.stat().st_mtime_ns else "built"
    return CellResult(
        cell=cell.id,
        status=status,
        seconds=round(time.monotonic() - started, 1),
        size=entry.size,
        entry=entry.to_json(),
    )


def _progress(done: int, total: int, started: float, result: CellResult, *, to_build: int) -> None:
    """One progress line; the ETA extrapolates from the cells compiled so far
    (skipped cells take no time and would make it meaningless)."""
    elapsed = time.monotonic() - started
    _BUILT.append(result.status != "skipped")
    built = sum(_BUILT)
    eta = elapsed / built * (to_build - built) if built else 0.0
    detail = clip(result.reason, 120) if result.reason else f"{result.size} bytes"
    print(
        f"[cell {done}/{total}] {result.cell}: {result.status} in {result.seconds:.1f} s "
        f"({detail}); elapsed {elapsed:.0f} s, ETA ~{eta:.0f} s",
        file=sys.stderr,
        flush=True,
    )


_BUILT: list[bool] = []


def build_cells(cells: Sequence[Cell], build_dir: Path, *, jobs: int = 1) -> list[CellResult]:
    """Build ``cells`` (skipping what this host cannot build) and write each group's manifest."""
    matrix_host = host_platform_name(load_matrix())
    started = time.monotonic()
    results: dict[str, CellResult] = {}
    reasons = {cell.id: skip_reason(cell, matrix_host) for cell in cells}
    todo = [cell for cell in cells if reasons[cell.id] is None]
    _BUILT.clear()
    done = 0
    for cell in cells:
        reason = reasons[cell.id]
        if reason is not None:
            results[cell.id] = CellResult(cell=cell.id, status="skipped", reason=reason)
            done += 1
            _progress(done, len(cells), started, results[cell.id], to_build=len(todo))
    if jobs <= 1:
        for cell in todo:
            results[cell.id] = build_one(cell, build_dir)
            done += 1
            _progress(done, len(cells), started, results[cell.id], to_build=len(todo))
    else:
        with concurrent.futures.ProcessPoolExecutor(max_workers=jobs) as pool:
            futures = {pool.submit(build_one, cell, build_dir): cell for cell in todo}
            for future in concurrent.futures.as_completed(futures):
                result = future.result()
                results[result.cell] = result
                done += 1
                _progress(done, len(cells), started, result, to_build=len(todo))
    _write_group_manifests(cells, results, build_dir)
    return [results[cell.id] for cell in cells]


def _write_group_manifests(
    cells: Sequence[Cell], results: dict[str, CellResult], build_dir: Path
) -> None:
    groups: dict[Path, list[ManifestEntry]] = {}
    for cell in cells:
        result = results[cell.id]
        if result.entry is None:
            continue
        directory = group_dir(build_dir, cell)
        groups.setdefault(directory, []).append(ManifestEntry.from_json(result.entry))
    for directory, entries in groups.items():
        # Merge with libraries an earlier run built here (a run for a subset of cells
        # must not drop the others from the manifest).
        merged = {e.file: e for e in _read_manifest(directory)}
        merged.update({e.file: e for e in entries})
        write_manifest(directory / MANIFEST_NAME, merged.values())


def _read_manifest(directory: Path) -> list[ManifestEntry]:
    from _torch_c_dlpack_ext_core.errors import ManifestError
    from _torch_c_dlpack_ext_core.manifest import load_manifest

    try:
        entries = load_manifest(directory / MANIFEST_NAME)
    except ManifestError:
        return []
    return [e for e in entries if (directory / e.file).is_file()]


def copy_libs(
    cells: Sequence[Cell], results: Sequence[CellResult], build_dir: Path, libs_dir: Path
) -> list[ManifestEntry]:
    """Copy the built ``cells`` (one Python x platform) and their manifest into ``libs_dir``.

    What CI's per-job build hands to the backend's ``libs-dir=``: exactly the job's
    cells, so a cell that was skipped or failed is an error
    (:class:`~devtools.errors.CellsNotBuiltError`), never a smaller wheel.
    """
    missing = [r for r in results if r.entry is None]
    if missing:
        raise CellsNotBuiltError(
            "cells not built: " + "; ".join(f"{r.cell}: {r.status} ({r.reason})" for r in missing)
        )
    groups = {group_dir(build_dir, cell) for cell in cells}
    if len(groups) != 1:
        raise ConfigError(
            f"--libs-dir takes the cells of one Python and platform; the selection spans "
            f"{', '.join(sorted(g.name for g in groups))}"
        )
    (source,) = groups
    libs_dir.mkdir(parents=True, exist_ok=True)
    entries = []
    for result in results:
        assert result.entry is not None  # checked above
        entry = ManifestEntry.from_json(result.entry)
        shutil.copy2(source / entry.file, libs_dir / entry.file)
        entries.append(entry)
    write_manifest(libs_dir / MANIFEST_NAME, entries)
    return entries


def clip(text: str, width: int = NOTE_WIDTH) -> str:
    """The first line of ``text`` in at most ``width`` characters, cut at a word
    boundary with an ellipsis (a single word longer than that is cut inside it)."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    if len(line) <= width:
        return line
    short = textwrap.shorten(line, width=width, placeholder=" \N{HORIZONTAL ELLIPSIS}")
    if short.strip() == "\N{HORIZONTAL ELLIPSIS}":  # no word boundary early enough
        return line[: width - 1] + "\N{HORIZONTAL ELLIPSIS}"
    return short


def print_table(results: Sequence[CellResult]) -> None:
    """The final table: cell, status, seconds, size, and the note clipped at a word."""
    width = max([len(r.cell) for r in results] + [4])
    print(f"{'cell':<{width}}  {'status':<8} {'seconds':>8} {'size':>10}  note")
    for r in results:
        note = clip(r.reason) if r.reason else ""
        size = f"{r.size}" if r.size else "-"
        print(f"{r.cell:<{width}}  {r.status:<8} {r.seconds:>8.1f} {size:>10}  {note}")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nox -s build --", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--cells", default="", help="comma-separated cell ids, job ids or patterns (*-t26_*)"
    )
    parser.add_argument(
        "--python", action="append", default=[], help="3.11 (repeatable; default: this one)"
    )
    parser.add_argument("--all-pythons", action="store_true", help="every Python of the matrix")
    parser.add_argument("--jobs", type=int, default=1, help="cells built in parallel (processes)")
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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Command line (what ``nox -s build`` runs)."""
    args = _parser().parse_args(argv)
    try:
        return _main(args)
    except HANDLED as exc:
        return report_error(exc)


def report_path(args: argparse.Namespace, build_dir: Path) -> Path:
    """Where the report goes: ``--report``; else beside ``--out`` (never inside it,
    dist/ holds only what gets published); else ``build/build-report.json``."""
    if args.report is not None:
        return Path(args.report).resolve()
    if args.out is not None and Path(args.out).resolve() != DEFAULT_OUT.resolve():
        return Path(args.out).resolve().parent / REPORT_NAME
    return build_dir.parent / REPORT_NAME


def _main(args: argparse.Namespace) -> int:
    if args.jobs < 1:
        raise ConfigError(f"--jobs {args.jobs}: must be 1 or more")
    from build_backend._options import source_date_epoch

    # The backend's one check, before any cell is compiled: a bad value would otherwise
    # fail only when the first archive is written (here, or in the backend that packs
    # --libs-dir).
    source_date_epoch()
    out = Path(args.out) if args.out is not None else DEFAULT_OUT
    if args.assemble_from is not None:
        from devtools import wheels

        made = wheels.assemble_from_wheels(args.assemble_from, out)
        for path in made:
            print(f"wrote {path}")
        return 0
    matrix = load_matrix()
    started = time.monotonic()
    patterns = [p for p in args.cells.split(",") if p.strip()]
    pythons = (
        []
        if args.all_pythons
        else (args.python or ([] if patterns else [f"{sys.version_info[0]}.{sys.version_info[1]}"]))
    )
    host = host_platform_name(matrix)
    platforms = [] if patterns or host is None else [host]
    cells = matrix.select(patterns, python=pythons, platform=platforms)
    if not cells:
        raise ConfigError("the selection holds no cell; `nox -s matrix -- --list` lists them")
    print(f"building {len(cells)} cell(s) with --jobs {args.jobs}", file=sys.stderr)
    build_dir = args.build_dir.resolve()
    results = build_cells(cells, build_dir, jobs=args.jobs)
    wall = round(time.monotonic() - started, 1)
    print_table(results)
    if args.libs_dir is not None:
        entries = copy_libs(cells, results, build_dir, args.libs_dir.resolve())
        print(f"copied {len(entries)} librar(y/ies) and their manifest to {args.libs_dir}")
    report: dict[str, Any] = {
        "jobs": args.jobs,
        "wall_seconds": wall,
        "cells": [r.to_json() for r in results],
    }
    artifacts: list[Path] = []
    if not args.no_assemble:
        from devtools import wheels

        groups = sorted(
            {group_dir(build_dir, c) for c in cells if group_dir(build_dir, c).is_dir()}
        )
        artifacts = wheels.assemble_dist(groups, out, matrix=matrix, repair=not args.no_repair)
        report["artifacts"] = [
            {"file": p.name, "size": p.stat().st_size} for p in artifacts if p.is_file()
        ]
        for path in artifacts:
            print(f"wrote {path} ({path.stat().st_size} bytes)")
    path = report_path(args, build_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, (json.dumps(report, indent=2) + "\n").encode())
    print(f"report: {path}; wall time {wall:.1f} s")
    return 1 if any(r.status == "failed" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
