"""The pages the benchmark figures are written into, and the user's table of paths.

Three places show measured figures, all rendered from ``benchmarks/results`` by cog blocks
(:mod:`devtools.base.generated`): every table in docs/benchmarks.md
(:func:`results_section`), on README.md (the PyPI page) the table of which torch gets which
path with its per-call cost (:func:`paths_section`), and the runtime's cost figures
(``torch_c_dlpack_ext/_costs.py``, :func:`cost_figures`). Nothing else on these pages is a
measurement.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .portable import PYTHON_ALLOCATION, PYTHON_EXPORT, SHIPPED, TORCH213
from .report import read_result, render_results_section

__all__ = [
    "KINDS",
    "PathRow",
    "cost_figures",
    "documents_in",
    "paths_section",
    "render_paths_table",
    "results_section",
    "write_pages",
]

#: The result kinds docs/benchmarks.md shows, in its order.
KINDS = ("exchange", "portable", "import", "build", "size")
#: The committed results folder.
COMMITTED = Path(__file__).resolve().parent / "results"


@dataclasses.dataclass(frozen=True, kw_only=True)
class PathRow:
    """One row of the user's table: whose torch, what it gets, where its cost comes from."""

    torch: str
    path: str
    #: ``(result kind, provider)`` whose medians are the cost, or None (``cost_text``).
    source: tuple[str, str] | None = None
    cost_text: str = ""


#: The selector's paths, first match wins (the order of its rules).
PATH_ROWS = (
    PathRow(
        torch="2.10 and later",
        path="**defer**: torch's own `__dlpack_c_exchange_api__`, nothing loaded",
        source=("exchange", "torch"),
    ),
    PathRow(
        torch="2.4-2.9 of PyPI's builds (CPU, CUDA, ROCm; the C++ ABI PyPI used)",
        path="**native**: our library built for that torch, bundled in the wheel",
        source=("exchange", "ours"),
    ),
    PathRow(
        torch="no bundled library matches, and `TORCH_C_DLPACK_EXT_JIT=1`",
        path="**JIT**: the native library, compiled once for it (a C++ compiler, torch's headers)",
        cost_text="as native",
    ),
    PathRow(
        torch="any other torch with `torch._C._to_dlpack` (such as 2.2-2.3, Debian's or NVIDIA's "
        "builds, ROCm or XPU builds, a GPU torch whose library is missing)",
        path="**portable table**: one torch-agnostic library that calls torch's "
        "Python-level DLPack functions",
        source=("portable", SHIPPED),
    ),
    PathRow(
        torch="a torch without `torch._C._to_dlpack`",
        path="**unavailable**: nothing published, one warning says why",
        source=("portable", "python path"),
    ),
)


def _ns(value: float) -> str:
    return f"{value:,.0f} ns"


def _medians(documents: dict[str, dict[str, Any]], kind: str, provider: str) -> tuple[float, float]:
    """(export, allocation) medians of ``provider`` in the result of ``kind``: the exchange
    benchmark's torch 2.13 comparison, or the portable benchmark's on the same torch."""
    data = documents[kind]["data"]
    if kind == "exchange":
        stats = data["current"]["providers"][provider]
        return stats["from_py_object"]["median"], stats["allocator"]["median"]
    comparison = data["comparisons"][TORCH213]
    if provider == "python path":
        python = comparison["python_path"]
        return python[PYTHON_EXPORT]["median"], python[PYTHON_ALLOCATION]["median"]
    stats = comparison["providers"][provider]
    return stats["from_py_object"]["median"], stats["allocator"]["median"]


def _cost(row: PathRow, documents: dict[str, dict[str, Any]]) -> str:
    if row.source is None:
        return row.cost_text
    export, allocation = _medians(documents, *row.source)
    cost = f"{_ns(export)} / {_ns(allocation)}"
    if row.source == ("portable", "python path"):
        return f"the Python path a consumer takes instead: {cost}"
    return cost


def _run_line(document: dict[str, Any]) -> str:
    machine = document.get("machine", {})
    cores = f", {machine['cores']} cores" if machine.get("cores") else ""
    return (
        f"{machine.get('cpu_model', 'unknown CPU')}{cores}, {str(machine.get('date_utc', ''))[:10]}"
    )


def _load(document: dict[str, Any]) -> list[float]:
    """The 1-minute load averages when the result's run started and ended."""
    before = document.get("machine", {}).get("load_average_1_5_15") or []
    after = document.get("load_average_after") or []
    return [float(load[0]) for load in (before, after) if load]


def _runs(exchange: dict[str, Any], portable: dict[str, Any]) -> str:
    """Where the figures were measured: one machine and day when both results share them
    (one `nox -s bench` run), else each result's; with the load the machine had (a
    shared machine's load lengthens every figure)."""
    loads = _load(exchange) + _load(portable)
    load = f", load {min(loads):.1f}-{max(loads):.1f}" if loads else ""
    if _run_line(exchange) == _run_line(portable):
        return f"one run: {_run_line(exchange)}{load}"
    return (
        f"torch's own and native: {_run_line(exchange)}; the portable table and the Python "
        f"path: {_run_line(portable)}{load}"
    )


def render_paths_table(documents: Sequence[dict[str, Any]]) -> str | None:
    """README's table of paths with their per-call cost (export: ``from_py_object``;
    allocation: the allocator), or None without both the exchange and the portable result.
    """
    by_kind = {document["kind"]: document for document in documents}
    if not {"exchange", "portable"} <= by_kind.keys():
        return None
    portable = by_kind["portable"]["data"]["comparisons"][TORCH213]
    lines = [
        "| your torch | what `import torch_c_dlpack_ext` gives it "
        "| per call: export / allocation |",
        "|---|---|---|",
    ]
    lines += [f"| {row.torch} | {row.path} | {_cost(row, by_kind)} |" for row in PATH_ROWS]
    lines += [
        "",
        f"Medians of `nox -s bench` on torch {portable['torch']}, CPython "
        f"{portable['python']} ({_runs(by_kind['exchange'], by_kind['portable'])}); the "
        f"portable table is its abi3 build as shipped. The Python path is the bare "
        f"`x.{PYTHON_EXPORT}` and `{PYTHON_ALLOCATION}`.",
    ]
    return "\n".join(lines) + "\n"


def documents_in(results_dir: Path | str) -> list[dict[str, Any]]:
    """The result of each of :data:`KINDS` in ``results_dir``, or where it has none the
    committed one (so a run of some kinds re-renders the pages with the others as they
    are)."""
    documents = []
    for kind in KINDS:
        for folder in (Path(results_dir), COMMITTED):
            if (folder / f"{kind}.json").is_file():
                documents.append(read_result(folder / f"{kind}.json"))
                break
    return documents


def results_section(results_dir: Path | str = COMMITTED) -> str:
    """docs/benchmarks.md's generated tables (its cog block)."""
    return render_results_section(documents_in(results_dir))


def paths_section(results_dir: Path | str = COMMITTED) -> str:
    """README's table of paths (its cog block); empty without both results."""
    return render_paths_table(documents_in(results_dir)) or ""


def cost_figures(results_dir: Path | str = COMMITTED) -> str:
    """The Python text of ``torch_c_dlpack_ext/_costs.py``'s generated part: the per-call
    medians of the native library (the exchange benchmark's "ours") and the shipped
    portable table (its torch 2.13 comparison), export / allocation in ns, and the machine
    they were measured on."""
    by_kind = {document["kind"]: document for document in documents_in(results_dir)}
    native = _medians(by_kind, "exchange", "ours")
    portable = _medians(by_kind, "portable", SHIPPED)
    torch = by_kind["portable"]["data"]["comparisons"][TORCH213]["torch"]
    machine = _run_line(by_kind["portable"])
    figures = {
        "native_export_ns": native[0],
        "native_allocator_ns": native[1],
        "portable_export_ns": portable[0],
        "portable_allocator_ns": portable[1],
    }
    lines = ["PORTABLE_COST = {"]
    lines += [f"    {json.dumps(name)}: {round(value)}," for name, value in figures.items()]
    lines += ["}", f"MEASURED_ON = {json.dumps(f'torch {torch}, {machine}')}"]
    return "\n".join(lines) + "\n"


def write_pages(results_dir: Path) -> list[Path]:
    """Re-render every generated section (the pages' figures and the runtime's cost
    figures among them) from ``results_dir`` (the committed results for kinds it lacks);
    the files that changed."""
    from devtools.base.generated import regenerate

    return regenerate(results_dir=results_dir)
