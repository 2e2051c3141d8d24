"""The figures users see are generated from benchmarks/results by one mechanism (cog
blocks, devtools/base/generated.py): docs/benchmarks.md's tables, the per-call costs in
README.md's table of paths, and the runtime's cost figures (torch_c_dlpack_ext/_costs.py,
which status() and the diagnostics print). No drift, no hand copy, and one run writes all."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from benchmarks.pages import KINDS, render_paths_table
from benchmarks.portable import PYTHON_ALLOCATION, SHIPPED, TORCH213
from benchmarks.report import read_result
from devtools.base import generated
from devtools.base.generated import StaleFiles, regenerate

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
#: The files whose cog blocks render benchmark figures.
FIGURE_FILES = ("README.md", "docs/benchmarks.md", "python/torch_c_dlpack_ext/_costs.py")


def _documents() -> list[dict[str, Any]]:
    documents = [
        read_result(RESULTS / f"{kind}.json")
        for kind in KINDS
        if (RESULTS / f"{kind}.json").is_file()
    ]
    assert documents, "benchmarks/results/ holds no result; run `nox -s bench`"
    return documents


def _copies(tmp_path: Path) -> list[Path]:
    """Copies of the figure files, each generated section replaced by "stale"."""
    copies = []
    for name in FIGURE_FILES:
        text = (ROOT / name).read_text(encoding="utf-8")
        parts = text.split("[[[end]]]")
        for i, part in enumerate(parts[:-1]):
            code, _, _output = part.rpartition("]]]")
            stale = " -->\nstale\n<!-- " if name.endswith(".md") else "\nstale = 1\n# "
            parts[i] = f"{code}]]]{stale}"
        copy = tmp_path / name.replace("/", "_")
        copy.write_text("[[[end]]]".join(parts), encoding="utf-8")
        copies.append(copy)
    return copies


def test_every_generated_section_is_current() -> None:
    """CONTRIBUTING's map, the pages' figures and the runtime's figures match their sources
    (what ``nox -s lint`` checks)."""
    assert regenerate(check=True) == [], "run `nox -s map`"
    assert set(FIGURE_FILES) <= set(generated.FILES)


def test_a_stale_section_fails_the_check_and_one_run_rewrites_all(tmp_path: Path) -> None:
    copies = _copies(tmp_path)
    before = [copy.read_text(encoding="utf-8") for copy in copies]
    with pytest.raises(StaleFiles, match="run `nox -s map`"):
        regenerate(copies, check=True)
    assert [copy.read_text(encoding="utf-8") for copy in copies] == before  # check writes nothing

    assert regenerate(copies) == copies
    for copy, name in zip(copies, FIGURE_FILES):
        assert "stale" not in copy.read_text(encoding="utf-8")
        assert copy.read_text(encoding="utf-8") == (ROOT / name).read_text(encoding="utf-8")


def test_a_new_benchmark_result_moves_the_runtimes_figures(tmp_path: Path) -> None:
    """A run that measures another native cost rewrites _costs.py (no hand copy), and a
    results folder lacking a kind renders it from the committed results."""
    exchange = json.loads((RESULTS / "exchange.json").read_text(encoding="utf-8"))
    ours = exchange["data"]["current"]["providers"]["ours"]
    ours["from_py_object"]["median"] = 12345.4
    exchange["machine"]["cpu_model"] = "Elsewhere CPU"
    (tmp_path / "exchange.json").write_text(json.dumps(exchange), encoding="utf-8")
    costs = tmp_path / "_costs.py"
    shutil.copyfile(ROOT / "python" / "torch_c_dlpack_ext" / "_costs.py", costs)

    assert regenerate([costs], results_dir=tmp_path) == [costs]
    namespace: dict[str, Any] = {}
    exec(costs.read_text(encoding="utf-8"), namespace)
    assert namespace["PORTABLE_COST"]["native_export_ns"] == 12345
    # The portable figures came from the committed portable.json (this folder has none).
    from torch_c_dlpack_ext._costs import PORTABLE_COST

    assert namespace["PORTABLE_COST"]["portable_export_ns"] == PORTABLE_COST["portable_export_ns"]


def test_the_readme_costs_are_the_cost_figures_the_runtime_prints() -> None:
    """The native and portable figures README shows are PORTABLE_COST's, rounded alike, and
    the runtime names the machine they came from."""
    from torch_c_dlpack_ext._costs import MEASURED_ON, PORTABLE_COST
    from torch_c_dlpack_ext._wording import cost_line

    table = render_paths_table(_documents())
    assert table is not None
    rows = {line.split(" | ")[1].split(":")[0]: line for line in table.splitlines() if "**" in line}
    native = (
        f"{PORTABLE_COST['native_export_ns']:,} ns / {PORTABLE_COST['native_allocator_ns']:,} ns"
    )
    portable = (
        f"{PORTABLE_COST['portable_export_ns']:,} ns / "
        f"{PORTABLE_COST['portable_allocator_ns']:,} ns"
    )
    assert rows["**native**"].endswith(f"| {native} |")
    assert rows["**portable table**"].endswith(f"| {portable} |")
    portable_result = read_result(RESULTS / "portable.json")
    assert portable_result["machine"]["cpu_model"] in MEASURED_ON
    assert MEASURED_ON in cost_line()


def test_the_runtimes_cost_figures_are_the_committed_benchmarks() -> None:
    """``PORTABLE_COST`` is the medians of the committed results, rounded: the native
    library from exchange.json, the shipped abi3 portable build on the same torch 2.13
    from portable.json."""
    from torch_c_dlpack_ext._costs import PORTABLE_COST

    native = read_result(RESULTS / "exchange.json")["data"]["current"]["providers"]["ours"]
    portable = read_result(RESULTS / "portable.json")["data"]["comparisons"][TORCH213]
    shipped = portable["providers"][SHIPPED]
    measured = {
        "native_export_ns": native["from_py_object"]["median"],
        "native_allocator_ns": native["allocator"]["median"],
        "portable_export_ns": shipped["from_py_object"]["median"],
        "portable_allocator_ns": shipped["allocator"]["median"],
    }
    assert {name: round(value) for name, value in measured.items()} == PORTABLE_COST


def _footnote(table: str) -> str:
    return next(line for line in table.splitlines() if line.startswith("Medians"))


def test_the_readme_figures_come_from_one_run_and_the_bare_python_calls() -> None:
    """Native and portable figures measured on one machine on one day (they once came from
    two), with the machine's load; the last row is the bare Python path, the footnote says so."""
    documents = _documents()
    table = render_paths_table(documents)
    assert table is not None
    portable = next(d for d in documents if d["kind"] == "portable")
    exchange = next(d for d in documents if d["kind"] == "exchange")
    # The footnote names what the results say: each run's machine and day, and the load
    # range of both; the machine named once when both results are one run's.
    footnote = _footnote(table)
    for document in (exchange, portable):
        machine = document["machine"]
        assert footnote.count(machine["cpu_model"]) == 1, footnote
        assert str(machine["date_utc"])[:10] in footnote
    loads = [document["machine"]["load_average_1_5_15"][0] for document in (exchange, portable)]
    loads += [document["load_average_after"][0] for document in (exchange, portable)]
    assert f"{min(loads):.1f}-{max(loads):.1f}" in footnote
    # Seeded: the portable result from another machine is named beside the exchange one.
    moved = {**portable, "machine": {**portable["machine"], "cpu_model": "Another CPU"}}
    other = render_paths_table([exchange, moved])
    assert other is not None
    assert "Another CPU" in _footnote(other)
    assert exchange["machine"]["cpu_model"] in _footnote(other)
    python = portable["data"]["comparisons"][TORCH213]["python_path"]
    export, allocation = (python[name]["median"] for name in ("__dlpack__()", PYTHON_ALLOCATION))
    last = next(line for line in table.splitlines() if "**unavailable**" in line)
    assert last.endswith(f"instead: {export:,.0f} ns / {allocation:,.0f} ns |")
