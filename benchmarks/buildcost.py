"""Build cost: seconds and peak RSS per compiled cell, the no-op rebuild, and (``--full``)
the whole local matrix with one and two parallel jobs.

Cells are compiled one at a time: the machine is shared, and a benchmark that runs two
heavy compiles at once measures the contention, not the build.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from torch_c_dlpack_ext._run import run
from torch_c_dlpack_ext.errors import TorchCDLPackExtError

from .report import Table
from .stats import Target
from .subjects import (
    OLD_TORCH,
    ROOT,
    BenchContext,
    old_torch_env,
    running_torch_dir,
    subprocess_env,
)

__all__ = ["run_build"]


def _probe(torch_dir: Path, backend: str, python: Path, scratch: Path) -> dict[str, Any]:
    """Compile one cell into a fresh directory in a fresh process."""
    output_dir = Path(tempfile.mkdtemp(prefix="cell-", dir=scratch))
    try:
        proc = run(
            [
                python,
                "-m",
                "benchmarks.compile_probe",
                "--torch",
                torch_dir,
                "--backend",
                backend,
                "--output-dir",
                output_dir,
            ],
            cwd=ROOT,
            env=subprocess_env(pythonpath=(ROOT / "python", ROOT), keep_settings=True),
        )
    finally:
        shutil.rmtree(output_dir, ignore_errors=True)
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _cells(ctx: BenchContext) -> list[tuple[str, Path, str]]:
    """(label, torch dir, backend) of the cells to compile."""
    cells: list[tuple[str, Path, str]] = []
    env = old_torch_env(OLD_TORCH)
    cells.append((f"torch {OLD_TORCH} cpu", env.torch_dir, "cpu"))
    if not ctx.quick:
        cells.append(("torch (running) cpu", running_torch_dir(), "cpu"))
    if ctx.full:
        cells.append((f"torch {OLD_TORCH} cuda", env.torch_dir, "cuda"))
    return cells


def _matrix_wall_time(ctx: BenchContext, jobs: int) -> dict[str, Any]:
    """Wall time of ``nox -s build`` over the local matrix with ``jobs`` parallel compiles,
    starting from an empty driver cache so every cell really compiles."""
    cache = Path(tempfile.mkdtemp(prefix=f"matrix-jobs{jobs}-", dir=ctx.work_dir))
    try:
        started = time.perf_counter()
        run(
            [sys.executable, "-m", "nox", "-s", "build", "--", "--jobs", str(jobs)],
            cwd=ROOT,
            env=subprocess_env(
                pythonpath=(), keep_settings=True, TORCH_C_DLPACK_EXT_CACHE_DIR=str(cache)
            ),
        )
        return {"jobs": jobs, "seconds": time.perf_counter() - started}
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def run_build(ctx: BenchContext) -> tuple[dict[str, Any], list[Table], list[Target]]:
    """Compile each cell once, fresh, then again as a no-op; optionally the whole matrix."""
    scratch = ctx.work_dir / "build-cost"
    scratch.mkdir(parents=True, exist_ok=True)
    cells: dict[str, Any] = {}
    errors: dict[str, str] = {}
    try:
        selected = _cells(ctx)
    except (TorchCDLPackExtError, ImportError) as exc:
        errors["cells"] = f"{type(exc).__name__}: {exc}"
        selected = []
    for label, torch_dir, backend in selected:
        ctx.progress(f"build: compiling the {label} cell from scratch")
        try:
            cells[label] = _probe(torch_dir, backend, Path(sys.executable), scratch)
        except TorchCDLPackExtError as exc:
            errors[label] = f"{type(exc).__name__}: {exc}"
            ctx.progress(f"build: {label} failed: {errors[label]}")
    rows = tuple(
        (
            label,
            cell["torch_build"],
            cell["toolchain"],
            f"{cell['seconds']:.1f}",
            f"{cell['child_cpu_seconds']:.1f}",
            f"{cell['peak_rss_mib']:.0f}",
            f"{cell['noop_seconds'] * 1000:.1f}",
        )
        for label, cell in cells.items()
    )
    tables = [
        Table(
            title="Build cost per cell (fresh compile, then a no-op rebuild)",
            headers=(
                "cell",
                "torch",
                "compiler",
                "wall s",
                "compiler CPU s",
                "peak RSS MiB",
                "no-op rebuild ms",
            ),
            rows=rows,
        )
    ]
    matrix: list[dict[str, Any]] = []
    if ctx.full:
        for jobs in (1, 2):
            ctx.progress(f"build: whole local matrix with --jobs {jobs} (long)")
            try:
                matrix.append(_matrix_wall_time(ctx, jobs))
            except TorchCDLPackExtError as exc:
                errors[f"matrix-jobs{jobs}"] = f"{type(exc).__name__}: {exc}"
        tables.append(
            Table(
                title="Whole local matrix (`nox -s build`), empty cache",
                headers=("jobs", "wall s"),
                rows=tuple((str(m["jobs"]), f"{m['seconds']:.0f}") for m in matrix),
            )
        )
    data = {
        "cells": cells,
        "matrix": matrix,
        "torch_versions": sorted({c["torch_build"] for c in cells.values()}),
        "errors": errors,
    }
    return data, tables, []
