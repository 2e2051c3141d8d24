"""The per-cell builds of ``python -m devtools build`` (``nox -s build``; the command line,
its options and the report: :mod:`devtools.commands.build`).

Per cell: a cached folder holding that torch release (:func:`devtools.envs.torchenv.torch_tree`,
never imported), one compile through the driver
(:func:`_torch_c_dlpack_ext_core.driver.compile_library`, which audits the ABI and the
stable ABI of abi3 libraries, and skips unchanged targets by its cache key); a cell this
host cannot build is skipped with the reason (:func:`devtools.build.host.skip_reason`).
Libraries land in ``build/cells/<platform>-abi3/`` (``<platform>-cp314t/``,
:func:`devtools.matrix.cells.group_dir`) with a manifest per group, each entry naming its cell
id; :func:`copy_libs` hands one job's cells to the backend's ``libs-dir=``.

On GitHub Actions each cell's build is a group of the log and a failed cell an
``::error`` annotation, at the compiler's ``file:line`` when its output names one
(:func:`devtools.base.ghactions.compiler_location`).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import shutil
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from _torch_c_dlpack_ext_core.errors import ConfigError
from _torch_c_dlpack_ext_core.files import write_manifest
from _torch_c_dlpack_ext_core.manifest import ManifestEntry
from _torch_c_dlpack_ext_core.naming import MANIFEST_NAME, Backend
from devtools.base import ghactions
from devtools.base.errors import HANDLED, CellsNotBuiltError, ProvisionError
from devtools.build.host import (
    Interpreter,
    cross_target,
    freethreaded_python,
    host_platform_name,
    portable_skip_reason,
    skip_reason,
    tree_python,
)
from devtools.matrix.cells import Cell, PortableCell, group_dir
from devtools.matrix.reader import load_matrix

__all__ = [
    "CellResult",
    "annotate_failed",
    "build_cells",
    "build_portable_cells",
    "clip",
    "copy_libs",
    "eta_seconds",
]

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
    #: The library's manifest entry (naming the cell); ``None`` unless built or cached.
    entry: ManifestEntry | None = None
    #: Of ``seconds``, the one-time set-up this cell happened to pay: its torch tree
    #: provisioned, a free-threaded CPython built from source (cached afterwards).
    setup_seconds: float = 0.0

    @classmethod
    def failed(
        cls, cell: str, exc: BaseException, started: float, setup: float | None = 0.0
    ) -> CellResult:
        """``cell`` failed with ``exc`` after starting at ``started`` (``time.monotonic()``),
        having paid ``setup`` seconds of set-up; ``None``: it failed during the set-up,
        so all its time is set-up."""
        elapsed = time.monotonic() - started
        return cls(
            cell=cell,
            status="failed",
            seconds=round(elapsed, 1),
            reason=f"{type(exc).__name__}: {str(exc).strip()[-3000:]}",
            setup_seconds=round(elapsed if setup is None else setup, 1),
        )

    def to_json(self) -> dict[str, object]:
        """The report's record: the fields, the entry as its manifest JSON."""
        data: dict[str, object] = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["entry"] = None if self.entry is None else self.entry.to_json()
        return data


def build_one(cell: Cell, build_dir: Path, cross: str | None = None) -> CellResult:
    """Provision the cell's torch and compile its library (a cache hit compiles nothing);
    ``cross``: the cross target (:func:`cross_target`), whose torch wheels the tree holds
    and whose toolchain compiles. The library's manifest entry names the cell (its id),
    which is how wheel assembly finds the cell again."""
    from _torch_c_dlpack_ext_core.driver import (
        BuildPolicy,
        BuildRequest,
        compile_library,
    )
    from _torch_c_dlpack_ext_core.headers import cuda_wheel_home
    from devtools.envs.torchenv import torch_tree

    started = time.monotonic()
    try:
        found = _freethreaded_interpreter(cell)
        interpreter = None if found is None else found.executable
        python_include = None if found is None else found.include
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
            # The pinned header wheels in this torch's tree, not whatever nvcc is on PATH.
            gpu_home = cuda_wheel_home(tree.site_packages, cell.toolkit)
    except HANDLED as exc:
        return CellResult.failed(cell.id, exc, started, setup=None)

    def compile_cell(out: Path) -> ManifestEntry:
        return compile_library(
            BuildRequest(
                torch=tree.torch_dir,
                backend=cell.backend,
                output_dir=out,
                cxx11_abi=cell.cxx11_abi,
                gpu_home=gpu_home,
                python_include=python_include,
                python=cell.python,
                platform=cross,
            ),
            BuildPolicy(stable_abi_audit=True),
        )

    return _compile_into_group(cell, build_dir, compile_cell, started=started)


def build_portable_one(cell: PortableCell, build_dir: Path, cross: str | None = None) -> CellResult:
    """Compile the portable table of ``cell``'s group (no torch: the driver's C plan,
    audited torch-free and, for abi3, by abi3audit) into the group folder."""
    from _torch_c_dlpack_ext_core.driver import (
        BuildPolicy,
        PortableRequest,
        compile_portable_library,
    )

    started = time.monotonic()
    try:
        found = _freethreaded_interpreter(cell)
    except HANDLED as exc:
        return CellResult.failed(cell.id, exc, started, setup=None)
    python_include = None if found is None else found.include

    def compile_cell(out: Path) -> ManifestEntry:
        return compile_portable_library(
            PortableRequest(
                output_dir=out, python_include=python_include, python=cell.python, platform=cross
            ),
            BuildPolicy(stable_abi_audit=True),
        )

    return _compile_into_group(cell, build_dir, compile_cell, started=started)


def _freethreaded_interpreter(cell: Cell | PortableCell) -> Interpreter | None:
    """The free-threaded CPython a free-threaded ``cell`` compiles for (``None`` for an
    abi3 cell); raises :class:`ProvisionError` saying why this host has none."""
    if not cell.freethreaded:
        return None
    found = freethreaded_python(cell.python)
    if isinstance(found, str):
        raise ProvisionError(found)
    return found


def _compile_into_group(
    cell: Cell | PortableCell,
    build_dir: Path,
    compile_cell: Callable[[Path], ManifestEntry],
    *,
    started: float,
) -> CellResult:
    """Compile ``cell``'s library into its group folder with ``compile_cell(folder)`` and
    name the cell in its entry; the time since ``started`` before this call is the
    cell's set-up. A library the driver left untouched is ``cached``."""
    setup = time.monotonic() - started
    out = group_dir(build_dir, cell)
    target = out / cell.library
    before = target.stat().st_mtime_ns if target.is_file() else None
    try:
        entry = compile_cell(out)._replace(cell=cell.id)
    except HANDLED as exc:
        return CellResult.failed(cell.id, exc, started, setup=setup)
    return CellResult(
        cell=cell.id,
        status="cached" if before == target.stat().st_mtime_ns else "built",
        seconds=round(time.monotonic() - started, 1),
        size=entry.size,
        entry=entry,
        setup_seconds=round(setup, 1),
    )


def build_portable_cells(
    cells: Sequence[PortableCell], build_dir: Path, *, target: str | None = None
) -> list[CellResult]:
    """Build the portable ``cells`` (a few seconds each: one C file) and add them to their
    groups' manifests."""
    host = host_platform_name(load_matrix())
    results = []
    for cell in cells:
        reason = portable_skip_reason(cell, host, target)
        with ghactions.group(f"portable {cell.id}"):
            if reason is not None:
                results.append(CellResult(cell=cell.id, status="skipped", reason=reason))
            else:
                cross = cell.platform.name if target == cell.platform.name != host else None
                results.append(build_portable_one(cell, build_dir, cross))
            print(f"[portable] {cell.id}: {results[-1].status}", file=sys.stderr, flush=True)
        annotate_failed(results[-1])
    _write_group_manifests(cells, {r.cell: r for r in results}, build_dir)
    return results


def eta_seconds(finished: Sequence[CellResult], remaining: int, jobs: int) -> float:
    """Seconds until the ``remaining`` cells to build are done, ``jobs`` at a time.

    The mean compile time of the cells finished so far (their seconds less their
    set-up) times the remaining cells, over the jobs that can run at once. Set-up is a
    one-time cost: a free-threaded CPython built from source (~15 minutes each on 2
    cores) or a torch downloaded, paid by whichever cell needs it first, then cached;
    counting it as every cell's time made the ETA ten hours with ten minutes left.
    Skipped cells take no time and are not counted. 0 when nothing is left or no cell
    has finished yet.
    """
    timed = [r for r in finished if r.status != "skipped"]
    if remaining <= 0 or not timed:
        return 0.0
    per_cell = sum(max(r.seconds - r.setup_seconds, 0.0) for r in timed) / len(timed)
    return per_cell * remaining / max(1, min(jobs, remaining))


def _progress(
    done: int, total: int, started: float, finished: Sequence[CellResult], *, to_build: int,
    jobs: int,
) -> None:  # fmt: skip
    """One progress line for the last of ``finished``: its status, the time so far, the
    set-up paid so far and the ETA of the rest (:func:`eta_seconds`)."""
    result = finished[-1]
    elapsed = time.monotonic() - started
    timed = [r for r in finished if r.status != "skipped"]
    eta = eta_seconds(finished, to_build - len(timed), jobs)
    setup = sum(r.setup_seconds for r in finished)
    detail = clip(result.reason, 120) if result.reason else f"{result.size} bytes"
    setup_note = f" (set-up {setup:.0f} s, not in the ETA)" if setup >= 1 else ""
    print(
        f"[cell {done}/{total}] {result.cell}: {result.status} in {result.seconds:.1f} s "
        f"({detail}); elapsed {elapsed:.0f} s{setup_note}, ETA ~{eta:.0f} s",
        file=sys.stderr,
        flush=True,
    )


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
    finished: list[CellResult] = []

    def record(result: CellResult) -> None:
        results[result.cell] = result
        finished.append(result)
        _progress(len(finished), len(cells), started, finished, to_build=len(todo), jobs=jobs)
        if result.status == "failed" and ghactions.on_github():
            # The whole reason (the progress line clips it), in the cell's group.
            print(result.reason, file=sys.stderr, flush=True)

    for cell in cells:
        reason = reasons[cell.id]
        if reason is not None:
            record(CellResult(cell=cell.id, status="skipped", reason=reason))
    if jobs <= 1:
        for cell in todo:
            with ghactions.group(f"build {cell.id}"):
                result = build_one(cell, build_dir, cross[cell.id])
                record(result)
            annotate_failed(result)
    else:
        # The workers' lines interleave: no group while they run; each cell's result
        # (with a failure's whole reason) is a group of its own once it is in.
        with concurrent.futures.ProcessPoolExecutor(max_workers=jobs) as pool:
            with ghactions.no_groups():
                futures = {
                    pool.submit(build_one, cell, build_dir, cross[cell.id]): cell for cell in todo
                }
            for future in concurrent.futures.as_completed(futures):
                result = future.result()
                with ghactions.group(f"build {result.cell}: {result.status}"):
                    record(result)
                annotate_failed(result)
    _write_group_manifests(cells, results, build_dir)
    return [results[cell.id] for cell in cells]


def annotate_failed(result: CellResult) -> None:
    """A failed cell as an ``::error`` annotation on GitHub Actions: its reason, at the
    compiler's ``file:line`` when the output names one."""
    if result.status != "failed":
        return
    where = ghactions.compiler_location(result.reason)
    kind = result.reason.split(":", 1)[0]
    ghactions.error(
        result.reason,
        file=where[0] if where else None,
        line=where[1] if where else None,
        title=f"cell {result.cell} failed ({kind})",
    )


def _write_group_manifests(
    cells: Sequence[Cell | PortableCell], results: dict[str, CellResult], build_dir: Path
) -> None:
    groups: dict[Path, list[ManifestEntry]] = {}
    for cell in cells:
        result = results[cell.id]
        if result.entry is None:
            continue
        directory = group_dir(build_dir, cell)
        groups.setdefault(directory, []).append(result.entry)
    for directory, entries in groups.items():
        # Merge with libraries an earlier run built here (a run for a subset of cells
        # must not drop the others from the manifest).
        merged = {e.file: e for e in _read_manifest(directory)}
        merged.update({e.file: e for e in entries})
        write_manifest(directory / MANIFEST_NAME, merged.values())


def _read_manifest(directory: Path) -> list[ManifestEntry]:
    from _torch_c_dlpack_ext_core.errors import ManifestError
    from _torch_c_dlpack_ext_core.files import load_manifest

    try:
        entries = load_manifest(directory / MANIFEST_NAME)
    except ManifestError:
        return []
    return [e for e in entries if (directory / e.file).is_file()]


def copy_libs(
    cells: Sequence[Cell | PortableCell],
    results: Sequence[CellResult],
    build_dir: Path,
    libs_dir: Path,
) -> list[ManifestEntry]:
    """Copy the built ``cells`` (one platform x Python ABI) and their manifest into ``libs_dir``.

    What CI's per-job build hands to the backend's ``libs-dir=``: exactly the job's
    cells, so a cell that was skipped or failed is an error
    (:class:`~devtools.base.errors.CellsNotBuiltError`), never a smaller wheel.
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
        entry = result.entry
        assert entry is not None  # checked above
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
