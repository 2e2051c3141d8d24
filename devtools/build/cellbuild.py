"""The per-cell builds of ``python -m devtools build`` (``nox -s build``; the command line,
its options and the report: :mod:`devtools.commands.build`).

Per cell: a cached folder holding that torch release (:func:`devtools.envs.torchenv.torch_tree`,
never imported), one compile through the driver
(:func:`_torch_c_dlpack_ext_core.driver.compile_library`, which audits the ABI and the
stable ABI of abi3 libraries, and skips unchanged targets by its cache key); a cell this
host cannot build is skipped with the reason (:func:`devtools.build.host.skip_reason`).
Libraries land in ``build/cells/<platform>-abi3/`` (``<platform>-cp314t/``,
:func:`devtools.matrix.cells.group_dir`) with a manifest per group, each entry naming its cell
id (what a cell's build produced, the progress lines and the manifests:
:mod:`devtools.build.cellresults`).

On GitHub Actions each cell's build is a group of the log and a failed cell an
``::error`` annotation, at the compiler's ``file:line`` when its output names one
(:func:`devtools.base.ghactions.compiler_location`).
"""

from __future__ import annotations

import concurrent.futures
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from _torch_c_dlpack_ext_core.manifest import ManifestEntry
from _torch_c_dlpack_ext_core.naming import Backend
from devtools.base import ghactions
from devtools.base.errors import HANDLED, ProvisionError
from devtools.build.cellresults import (
    CellResult,
    annotate_failed,
    progress_line,
    write_group_manifests,
)
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

if TYPE_CHECKING:
    from devtools.envs.torchenv import EnvObserver

__all__ = ["build_cells", "build_one", "build_portable_cells", "build_portable_one"]


def build_one(
    cell: Cell, build_dir: Path, cross: str | None = None, observer: EnvObserver | None = None
) -> CellResult:
    """Provision the cell's torch and compile its library (a cache hit compiles nothing);
    ``cross``: the cross target (:func:`cross_target`), whose torch wheels the tree holds
    and whose toolchain compiles. The library's manifest entry names the cell (its id),
    which is how wheel assembly finds the cell again. ``observer``: told of the cell's
    torch tree (:func:`devtools.envs.torchenv.torch_tree`'s)."""
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
            observer=observer,
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
    write_group_manifests(cells, {r.cell: r for r in results}, build_dir)
    return results


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
        progress_line(len(finished), len(cells), started, finished, to_build=len(todo), jobs=jobs)
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
    write_group_manifests(cells, results, build_dir)
    return [results[cell.id] for cell in cells]
