"""``nox -s build``: compile the matrix cells this host can build, then assemble dist/.

By default every cell of this host's platform: the abi3 cells (one library per
torch minor, backend and ABI serves every CPython >= 3.9 with the GIL, so the
Python running this command does not matter) and the free-threaded ones.

Per cell: a cached folder holding that torch release (installed ``--no-deps`` for
one CPython the torch minor supports, never imported; :func:`devtools.torchenv.torch_tree`:
its headers and libraries are the same in every CPython's wheel, so no other
interpreter is needed), one compile through the driver
(:func:`_torch_c_dlpack_ext_core.driver.compile_library`, which audits the ABI, the
stable ABI of abi3 libraries with abi3audit, and skips unchanged targets by its cache
key). An abi3 cell compiles against the running CPython's headers with
``Py_LIMITED_API``; a free-threaded cell (``-cp314t``) against that interpreter's
headers and its own torch wheel (:func:`freethreaded_python`). Cells this host cannot
build are skipped with the reason: another OS or architecture, an index that does not
answer (checked with a short timeout), no ROCm toolchain, no free-threaded CPython.
An empty ``--cells`` is an error before any work, and a run that builds none of the
cells it selected fails (exit 13).

Libraries land in ``build/cells/<platform>-abi3/`` (``<platform>-cp314t/``) with a
manifest (each entry names its ``python`` and its cell id); then :mod:`devtools.wheels` packs the
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
its torch wheels (:func:`~devtools.torchenv.torch_tree`'s ``platform``); its abi3 cells
only (a free-threaded cell needs that platform's interpreter). On a host of that
platform it is a native build.

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
import sysconfig
import textwrap
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _torch_c_dlpack_ext_core.errors import ConfigError
from _torch_c_dlpack_ext_core.manifest import ManifestEntry, atomic_write_bytes, write_manifest
from _torch_c_dlpack_ext_core.naming import MANIFEST_NAME, Backend
from devtools import ROOT
from devtools.cells import Cell, group_dir
from devtools.errors import HANDLED, CellsNotBuiltError, ProvisionError
from devtools.errors import report as report_error
from devtools.hostenv import host_os
from devtools.matrix import load_matrix
from devtools.matrixmodel import Matrix

__all__ = [
    "CellResult",
    "build_cells",
    "copy_libs",
    "freethreaded_python",
    "host_platform_name",
    "main",
    "running_python",
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
    system = host_os()
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


@dataclasses.dataclass(frozen=True)
class Interpreter:
    """A CPython a cell compiles for: its executable and include dir."""

    executable: Path
    include: Path


def running_python() -> str:
    """``3.12``, or ``3.14t`` when this CPython is free-threaded."""
    free = "t" if sysconfig.get_config_var("Py_GIL_DISABLED") else ""
    return f"{sys.version_info[0]}.{sys.version_info[1]}{free}"


@functools.cache
def freethreaded_python(version: str) -> Interpreter | str:
    """The free-threaded CPython ``version`` (``"3.14t"``) to compile for, or why there
    is none on this host.

    This interpreter, when it is that one; else the developer tools' provisioner
    (``devtools.freethreaded``, which builds it once from Debian's CPython sources and
    caches it), where it exists and can provide it.
    """
    if running_python() == version:
        return Interpreter(Path(sys.executable), Path(sysconfig.get_paths()["include"]))
    import importlib

    try:
        provisioner = importlib.import_module("devtools.freethreaded")
    except ImportError:
        return (
            f"no free-threaded CPython {version} here (run this build with python{version}, "
            "or add the devtools.freethreaded provisioner)"
        )
    try:
        found = provisioner.free_threaded_python(version)
    except HANDLED as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"no free-threaded CPython {version}: {first}"
    return Interpreter(Path(found.executable), Path(found.include_dir))


def tree_python(cell: Cell) -> str:
    """The CPython whose torch wheel an abi3 cell's tree holds: the running one when the
    torch minor supports it (its wheel is then usually in uv's cache already), else the
    newest the torch minor supports on the platform."""
    running = running_python()
    if running in cell.pythons:
        return running
    return max(cell.pythons, key=lambda v: tuple(int(p) for p in v.split(".")))


def cross_target(cell: Cell, host: str | None, target: str | None) -> str | None:
    """The cross target ``cell`` is built for (its platform, when ``--platform`` named it
    and it is not the host's: the driver then uses that target's cross toolchain), or
    ``None`` for a native build."""
    name = cell.platform.name
    return name if target == name and name != host else None


def _cross_compiler_missing(target: str) -> str | None:
    from _torch_c_dlpack_ext_core.errors import CompilerNotFoundError
    from _torch_c_dlpack_ext_core.toolchains import toolchain_for

    try:
        toolchain_for(target).find_compiler(None, os.environ)
    except CompilerNotFoundError as exc:
        return str(exc).strip().splitlines()[0]
    return None


def _cross_skip_reason(cell: Cell, host: str | None, cross: str) -> str | None:
    """Why ``cell`` cannot be cross-compiled for ``cross`` here (``None``: it can)."""
    from _torch_c_dlpack_ext_core.naming import PLATFORM_TOOLCHAINS

    if cross not in PLATFORM_TOOLCHAINS:
        return f"builds on {cross}: no cross toolchain for it, this host is {host}"
    if cell.freethreaded:
        return (
            f"a cross build makes abi3 libraries only: a free-threaded cell needs a "
            f"{cell.python} CPython of {cross} (build it on {cross})"
        )
    return _cross_compiler_missing(cross)


def skip_reason(cell: Cell, host: str | None, target: str | None = None) -> str | None:
    """Why this host cannot build ``cell`` (``None``: it can). ``target``: the platform
    ``--platform`` chose (a cross target's cells are built with its cross toolchain)."""
    from _torch_c_dlpack_ext_core.naming import PLATFORM_TOOLCHAINS

    name = cell.platform.name
    cross = cross_target(cell, host, target)
    if name != host and cross is None:
        hint = f" (--platform {name} cross-compiles it)" if name in PLATFORM_TOOLCHAINS else ""
        return f"builds on {name}, this host is {host or 'not in matrix.toml'}{hint}"
    if cross is not None:
        reason = _cross_skip_reason(cell, host, cross)
        if reason:
            return reason
    if cell.backend is Backend.ROCM:
        missing = _rocm_missing()
        if missing:
            return missing
    if cell.freethreaded:
        found = freethreaded_python(cell.python)
        if isinstance(found, str):
            return found
    elif sysconfig.get_config_var("Py_GIL_DISABLED"):
        return (
            f"an abi3 library compiles against a CPython with the GIL; this is "
            f"{running_python()} (run the build with such a CPython)"
        )
    return index_unreachable(cell.wheel.index_url)


def build_one(cell: Cell, build_dir: Path, cross: str | None = None) -> CellResult:
    """Provision the cell's torch and compile its library (a cache hit compiles nothing);
    ``cross``: the cross target (:func:`cross_target`), whose torch wheels the tree holds
    and whose toolchain compiles. The library's manifest entry names the cell (its id),
    which is how wheel assembly finds the cell again."""
    from _torch_c_dlpack_ext_core.driver import compile_library
    from devtools.torchenv import torch_tree

    started = time.monotonic()
    out = group_dir(build_dir, cell)
    try:
        python_include: Path | None = None
        interpreter: Path | None = None
        if cell.freethreaded:
            found = freethreaded_python(cell.python)
            if isinstance(found, str):
                raise ProvisionError(found)
            interpreter, python_include = found.executable, found.include
        # CPU and GPU cells of one flavour share the tree (same extras).
        tree = torch_tree(
            cell.torch.release,
            python=cell.python if cell.freethreaded else tree_python(cell),
            interpreter=interpreter,
            extra=cell.wheel.toolkit_requirements,
            index_url=None if cell.wheel.index == "pypi" else cell.wheel.index_url,
            platform=cross,
        )
        gpu_home = None
        if cell.backend is Backend.CUDA:
            # The pinned runtime headers of this torch, not whatever nvcc is on PATH.
            gpu_home = tree.site_packages / "nvidia" / "cuda_runtime"
        target = out / cell.library
        before = target.stat().st_mtime_ns if target.is_file() else None
        entry = compile_library(
            torch=tree.torch_dir,
            backend=cell.backend,
            output_dir=out,
            cxx11_abi=cell.cxx11_abi,
            gpu_home=gpu_home,
            python_include=python_include,
            python=cell.python,
            stable_abi_audit=True,
            platform=cross,
        )._replace(cell=cell.id)
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


def build_cells(
    cells: Sequence[Cell], build_dir: Path, *, jobs: int = 1, target: str | None = None
) -> list[CellResult]:
    """Build ``cells`` (skipping what this host cannot build) and write each group's
    manifest; ``target``: the platform ``--platform`` chose (cross-compiled when it is not
    this host's)."""
    matrix_host = host_platform_name(load_matrix())
    started = time.monotonic()
    results: dict[str, CellResult] = {}
    reasons = {cell.id: skip_reason(cell, matrix_host, target) for cell in cells}
    cross = {cell.id: cross_target(cell, matrix_host, target) for cell in cells}
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
            results[cell.id] = build_one(cell, build_dir, cross[cell.id])
            done += 1
            _progress(done, len(cells), started, results[cell.id], to_build=len(todo))
    else:
        with concurrent.futures.ProcessPoolExecutor(max_workers=jobs) as pool:
            futures = {
                pool.submit(build_one, cell, build_dir, cross[cell.id]): cell for cell in todo
            }
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
    """Copy the built ``cells`` (one platform x Python ABI) and their manifest into ``libs_dir``.

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
            f"--libs-dir takes the cells of one platform and Python ABI (one wheel); the "
            f"selection spans {', '.join(sorted(g.name for g in groups))}"
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
    cells = select_cells(matrix, args.cells, args.platform)
    started = time.monotonic()
    print(f"building {len(cells)} cell(s) with --jobs {args.jobs}", file=sys.stderr)
    build_dir = args.build_dir.resolve()
    results = build_cells(cells, build_dir, jobs=args.jobs, target=args.platform)
    wall = round(time.monotonic() - started, 1)
    print_table(results)
    report: dict[str, Any] = {
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
            f"none of the {len(results)} selected cell(s) was built: "
            + "; ".join(f"{r.cell}: {r.status} ({clip(r.reason, 120)})" for r in results[:6])
            + (f"; and {len(results) - 6} more" if len(results) > 6 else "")
            + f" (report: {report_file})"
        )
    if args.libs_dir is not None:
        entries = copy_libs(cells, results, build_dir, args.libs_dir.resolve())
        print(f"copied {len(entries)} librar(y/ies) and their manifest to {args.libs_dir}")
    artifacts: list[Path] = []
    if not args.no_assemble:
        from devtools import wheels

        # Exactly the selected cells this run built or found cached: the group
        # directories also keep libraries of cells an earlier run selected.
        groups: dict[Path, set[str]] = {}
        for cell, result in zip(cells, results):
            if result.entry is not None:
                groups.setdefault(group_dir(build_dir, cell), set()).add(str(result.entry["file"]))
        artifacts = wheels.assemble_dist(groups, out, matrix=matrix, repair=not args.no_repair)
        report["artifacts"] = [
            {"file": p.name, "size": p.stat().st_size} for p in artifacts if p.is_file()
        ]
        for path in artifacts:
            print(f"wrote {path} ({path.stat().st_size} bytes)")
    _write_report(report_file, report)
    print(f"report: {report_file}; wall time {wall:.1f} s")
    return 1 if any(r.status == "failed" for r in results) else 0


def _write_report(path: Path, report: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, (json.dumps(report, indent=2) + "\n").encode())


if __name__ == "__main__":
    sys.exit(main())
