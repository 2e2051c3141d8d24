"""Build cost: seconds and peak RSS per compiled cell, the build pipeline's fresh build and
no-op rebuild (one cell; ``--full``: the whole local matrix with one and two jobs), and the
report of the last ``nox -s build`` in this tree.

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

from _torch_c_dlpack_ext_core.errors import ConfigError, TorchCDLPackExtError
from _torch_c_dlpack_ext_core.run import run

from .report import Table, format_bytes
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


def _pipeline_cell_id() -> str:
    """The matrix id of the torch 2.8 CPU cell (abi3) on this host."""
    from devtools.build.host import host_platform_name
    from devtools.matrix.reader import load_matrix

    matrix = load_matrix()
    host = host_platform_name(matrix)
    wanted = tuple(int(part) for part in OLD_TORCH.split(".")[:2])
    for cell in matrix.select(python=["abi3"], platform=[host] if host else []):
        if cell.torch.version == wanted and cell.backend.value == "cpu":
            return cell.id
    raise ConfigError(f"matrix.toml has no torch {OLD_TORCH} cpu cell (abi3) on {host}")


def _pipeline(build_dir: Path, *, jobs: int, cells: str | None) -> dict[str, Any]:
    """Run the build pipeline (what ``nox -s build`` runs, without wheel assembly) and
    return its report plus the wall time seen from outside."""
    command: list[str | Path] = [
        sys.executable,
        "-m",
        "devtools",
        "build",
        "--no-assemble",
        "--jobs",
        str(jobs),
        "--build-dir",
        build_dir,
    ]
    if cells is not None:
        command += ["--cells", cells]
    started = time.perf_counter()
    run(
        command,
        cwd=ROOT,
        env=subprocess_env(pythonpath=(ROOT / "python", ROOT), keep_settings=True),
    )
    wall = time.perf_counter() - started
    report = json.loads((build_dir.parent / "build-report.json").read_text(encoding="utf-8"))
    statuses = [cell["status"] for cell in report["cells"]]
    return {
        "jobs": jobs,
        "wall_seconds": wall,
        "cells": len(statuses),
        "built": statuses.count("built"),
        "cached": statuses.count("cached"),
        "skipped": statuses.count("skipped"),
        "failed": statuses.count("failed"),
        "report": report,
    }


def _pipeline_runs(ctx: BenchContext, errors: dict[str, str]) -> list[dict[str, Any]]:
    """Fresh build then no-op rebuild, of one cell (default) or of the local matrix with
    one and then two jobs (``--full``), each in a fresh build directory."""
    scenarios: list[tuple[str, int, str | None]]
    if ctx.full:
        scenarios = [("local matrix, fresh", 1, None), ("local matrix, fresh", 2, None)]
    else:
        scenarios = [(f"one cell ({_pipeline_cell_id()}), fresh", 1, _pipeline_cell_id())]
    runs: list[dict[str, Any]] = []
    for label, jobs, cells in scenarios:
        root = ctx.work_dir / "pipeline" / f"jobs{jobs}"
        shutil.rmtree(root, ignore_errors=True)
        build_dir = root / "cells"
        ctx.progress(f"build: {label} with --jobs {jobs}")
        try:
            runs.append({"scenario": label, **_pipeline(build_dir, jobs=jobs, cells=cells)})
            ctx.progress(f"build: {label.replace('fresh', 'no-op rebuild')}")
            runs.append(
                {
                    "scenario": label.replace("fresh", "no-op rebuild"),
                    **_pipeline(build_dir, jobs=jobs, cells=cells),
                }
            )
        except TorchCDLPackExtError as exc:
            errors[f"{label} jobs {jobs}"] = f"{type(exc).__name__}: {exc}"
            ctx.progress(f"build: {label} failed: {errors[f'{label} jobs {jobs}']}")
    return runs


def _last_build_report() -> tuple[dict[str, Any] | None, Table | None]:
    """The report of the last ``nox -s build`` in this tree, if there is one."""
    path = ROOT / "build" / "build-report.json"
    if not path.is_file():
        return None, None
    report: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    rows = tuple(
        (cell["cell"], cell["status"], f"{cell['seconds']:.1f}", format_bytes(cell.get("size")))
        for cell in report.get("cells", [])
        if cell["status"] != "skipped"
    )
    table = Table(
        title=f"Last `nox -s build` in this tree (--jobs {report.get('jobs')}, "
        f"wall {report.get('wall_seconds')} s; cells other hosts build are left out)",
        headers=("cell", "status", "seconds", "library size"),
        rows=rows,
    )
    return report, table


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
            (
                "n/a (csrc/ changed meanwhile)"
                if cell.get("noop_rebuilt")
                else f"{cell['noop_seconds'] * 1000:.1f}"
            ),
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
    try:
        pipeline = _pipeline_runs(ctx, errors)
    except (TorchCDLPackExtError, ImportError) as exc:
        errors["pipeline"] = f"{type(exc).__name__}: {exc}"
        pipeline = []
    tables.append(
        Table(
            title="Build pipeline (`nox -s build` without wheel assembly)",
            headers=("scenario", "jobs", "cells", "built", "cached", "skipped", "failed", "wall s"),
            rows=tuple(
                (
                    p["scenario"],
                    str(p["jobs"]),
                    str(p["cells"]),
                    str(p["built"]),
                    str(p["cached"]),
                    str(p["skipped"]),
                    str(p["failed"]),
                    f"{p['wall_seconds']:.1f}",
                )
                for p in pipeline
            ),
        )
    )
    last_report, last_table = _last_build_report()
    if last_table is not None:
        tables.append(last_table)
    data = {
        "cells": cells,
        "pipeline": pipeline,
        "last_build_report": last_report,
        "torch_versions": sorted({c["torch_build"] for c in cells.values()}),
        "errors": errors,
    }
    return data, tables, []
