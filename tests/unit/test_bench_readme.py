"""The pages' figures are generated from benchmarks/results: docs/benchmarks.md's tables
and the per-call costs in README.md's table of paths. No drift, and one run writes both."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from benchmarks.cli import KINDS
from benchmarks.pages import PATHS_END, PATHS_START, render_paths_table, write_pages
from benchmarks.portable import PYTHON_ALLOCATION, SHIPPED, TORCH213
from benchmarks.report import SECTION_END, SECTION_START, read_result, render_results_section

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
REGENERATE = "run `nox -s bench -- --readme-only` (or python -m benchmarks --readme-only)"


def _documents() -> list[dict[str, Any]]:
    documents = [
        read_result(RESULTS / f"{kind}.json")
        for kind in KINDS
        if (RESULTS / f"{kind}.json").is_file()
    ]
    assert documents, "benchmarks/results/ holds no result; run `nox -s bench`"
    return documents


def _between(text: str, start: str, end: str) -> str:
    return text[text.index(start) : text.index(end) + len(end)]


def test_committed_benchmarks_page_matches_committed_results() -> None:
    """docs/benchmarks.md's tables are generated: they must not drift from the results."""
    page = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert _between(page, SECTION_START, SECTION_END) == render_results_section(_documents()), (
        f"docs/benchmarks.md's tables differ from benchmarks/results; {REGENERATE}"
    )


def test_committed_readme_costs_match_committed_results() -> None:
    """README's table of paths, with each path's per-call cost, is generated too."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = render_paths_table(_documents())
    assert table is not None, "benchmarks/results lacks exchange.json or portable.json"
    assert _between(readme, PATHS_START, PATHS_END) == table, (
        f"README.md's per-call costs differ from benchmarks/results; {REGENERATE}"
    )


def test_the_readme_costs_are_the_cost_figures_the_runtime_prints() -> None:
    """The native and portable figures README shows are PORTABLE_COST's, rounded alike."""
    from torch_c_dlpack_ext._decide import PORTABLE_COST

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


def test_one_run_rewrites_both_pages(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    shutil.copyfile(ROOT / "docs" / "benchmarks.md", tmp_path / "docs" / "benchmarks.md")
    stale = f"{PATHS_START}\n| stale |\n{PATHS_END}"
    (tmp_path / "README.md").write_text(f"# P\n\n{stale}\n\n## Next\n", encoding="utf-8")
    bench = (tmp_path / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    old = _between(bench, SECTION_START, SECTION_END)
    (tmp_path / "docs" / "benchmarks.md").write_text(
        bench.replace(old, f"{SECTION_START}\nstale\n{SECTION_END}"), encoding="utf-8"
    )

    written = write_pages(_documents(), tmp_path)

    assert written == [tmp_path / "docs" / "benchmarks.md", tmp_path / "README.md"]
    readme = (tmp_path / "README.md").read_text(encoding="utf-8")
    assert "stale" not in readme
    assert readme.endswith("\n\n## Next\n")
    assert (tmp_path / "docs" / "benchmarks.md").read_text(encoding="utf-8") == bench


def test_a_run_without_the_exchange_result_leaves_readme_alone(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    shutil.copyfile(ROOT / "docs" / "benchmarks.md", tmp_path / "docs" / "benchmarks.md")
    (tmp_path / "README.md").write_text("# P\n", encoding="utf-8")
    documents = [d for d in _documents() if d["kind"] != "exchange"]

    assert write_pages(documents, tmp_path) == [tmp_path / "docs" / "benchmarks.md"]
    assert (tmp_path / "README.md").read_text(encoding="utf-8") == "# P\n"


def test_the_runtimes_cost_figures_are_the_committed_benchmarks() -> None:
    """``PORTABLE_COST`` (what status() and the diagnostics print) is the medians of the
    committed results: the native library from exchange.json, the shipped abi3 portable
    build on the same torch 2.13 from portable.json. A benchmark run that moves them fails
    here until copied."""
    from torch_c_dlpack_ext._decide import PORTABLE_COST

    results = ROOT / "benchmarks" / "results"
    native = read_result(results / "exchange.json")["data"]["current"]["providers"]["ours"]
    portable = read_result(results / "portable.json")["data"]["comparisons"][TORCH213]
    shipped = portable["providers"][SHIPPED]
    measured = {
        "native_export_ns": native["from_py_object"]["median"],
        "native_allocator_ns": native["allocator"]["median"],
        "portable_export_ns": shipped["from_py_object"]["median"],
        "portable_allocator_ns": shipped["allocator"]["median"],
    }
    # The figures are printed rounded to what a reader can use: within 1% (or 1 ns).
    for name, value in measured.items():
        assert abs(PORTABLE_COST[name] - value) <= max(1.0, value / 100), (
            f"PORTABLE_COST[{name!r}] is {PORTABLE_COST[name]}, the benchmark says "
            f"{value:.0f}: copy it from benchmarks/results into _decide.py"
        )


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
