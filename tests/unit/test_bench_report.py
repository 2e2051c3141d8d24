"""The benchmark's arithmetic and reporting: statistics, targets, tables, the generated
sections of docs/benchmarks.md and README.md."""

from __future__ import annotations

import json
import subprocess
import zipfile
from pathlib import Path

import pytest
from benchmarks.cli import KINDS, parse_only
from benchmarks.report import (
    Table,
    format_bytes,
    format_ns,
    format_ratio,
    read_result,
    render_results_section,
    write_result,
)
from benchmarks.size import code_breakdown, deflated_size, libraries_in_wheel
from benchmarks.stats import Target, ratio, summarize

from _torch_c_dlpack_ext_core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("samples", "expected_p90"),
    [
        ([5.0], 5.0),
        ([3.0, 1.0], 2.8),
        ([float(i) for i in range(1, 11)], 9.1),
        ([10.0, 1.0, 5.0], 9.0),
    ],
)
def test_summary_p90_interpolates_between_ranks(samples: list[float], expected_p90: float) -> None:
    assert summarize(samples).p90 == pytest.approx(expected_p90)


def test_summary_rejects_an_empty_sample() -> None:
    with pytest.raises(ValueError, match="empty"):
        summarize([])


def test_summary_median_is_robust_to_one_outlier() -> None:
    # One load spike on the shared machine must not move the reported number.
    summary = summarize([60.0, 61.0, 59.0, 62.0, 900.0])
    assert summary.median == 61.0
    assert summary.minimum == 59.0
    assert summary.maximum == 900.0
    assert summary.count == 5
    assert summary.p90 == pytest.approx(62.0 + (900.0 - 62.0) * 0.6)


def test_ratio_is_none_without_both_numbers() -> None:
    assert ratio(50.0, 100.0) == 0.5
    assert ratio(None, 100.0) is None
    assert ratio(50.0, None) is None
    assert ratio(50.0, 0.0) is None


@pytest.mark.parametrize(
    ("value", "limit", "comparison", "status"),
    [
        (0.9, 1.0, "<=", "met"),
        (1.0, 1.0, "<=", "met"),
        (1.01, 1.0, "<=", "missed"),
        (35.0, 20.0, ">=", "met"),
        (2.3, 20.0, ">=", "missed"),
        (None, 20.0, ">=", "n/a"),
    ],
)
def test_target_status(value: float | None, limit: float, comparison: str, status: str) -> None:
    target = Target(description="t", value=value, limit=limit, comparison=comparison, unit="x")
    assert target.status == status
    assert target.to_json()["limit"] == f"{comparison} {limit:g}x"


def test_target_rejects_unknown_comparison() -> None:
    with pytest.raises(ValueError, match="comparison"):
        Target(description="t", value=1.0, limit=1.0, comparison="<")


def test_formatting() -> None:
    assert format_ns(59.71) == "59.7"
    assert format_ns(2140.4) == "2,140"
    assert format_ns(None) == "n/a"
    assert format_ratio(0.8834) == "0.88x"
    assert format_ratio(35.8) == "36x"
    assert format_bytes(512) == "512 B"
    assert format_bytes(49_459) == "48.3 KiB"
    assert format_bytes(3 * 1024 * 1024) == "3.0 MiB"


TABLE = Table(
    title="Exchange",
    headers=("function", "ns", "ratio"),
    rows=(("from_py_object", "59.7", "0.88x"), ("to_py_object", "2,140", "36x")),
)


def test_text_table_aligns_numbers_right_and_text_left() -> None:
    lines = TABLE.to_text().splitlines()
    assert lines[0] == "Exchange"
    assert lines[1] == "function           ns  ratio"
    assert lines[2] == "--------------  -----  -----"
    assert lines[3] == "from_py_object   59.7  0.88x"
    assert lines[4] == "to_py_object    2,140    36x"


def test_markdown_table_escapes_and_aligns_numeric_columns() -> None:
    table = Table(title="T", headers=("a|b", "n"), rows=(("__dlpack__() *", "1.5"),))
    assert table.to_markdown().splitlines() == [
        "**T**",
        "",
        "| a\\|b | n |",
        "| --- | ---: |",
        "| \\_\\_dlpack\\_\\_() \\* | 1.5 |",
    ]


def test_table_rejects_ragged_rows() -> None:
    with pytest.raises(ValueError, match="expected 2"):
        Table(title="T", headers=("a", "b"), rows=(("only one",),))


def test_result_round_trip_and_readme_section(tmp_path: Path) -> None:
    machine = {"cpu_model": "Test CPU", "cores": 2, "load_average_1_5_15": [0.5, 0.4, 0.3]}
    target = Target(description="speed", value=0.9, limit=1.0, comparison="<=", unit="x")
    path = write_result(
        tmp_path,
        "exchange",
        machine=machine,
        options={"quick": True},
        data={"torch_versions": ["2.13.0+cpu"]},
        tables=[TABLE],
        targets=[target],
    )
    assert path == tmp_path / "exchange.json"
    assert not list(tmp_path.glob("*.tmp")), "the temporary file must be renamed away"
    document = read_result(path)
    assert Table.from_json(document["tables"][0]) == TABLE

    section = render_results_section([document])
    assert section.startswith("*exchange*: Test CPU")
    assert section.endswith("| met |\n")
    assert "Test CPU, 2 cores (load 0.50" in section
    assert "torch 2.13.0+cpu" in section
    assert TABLE.to_markdown() in section
    assert "| speed | 0.9 | <= 1x | met |" in section


def test_read_result_names_a_bad_file(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"not": "a result"}))
    with pytest.raises(ConfigError, match="not a benchmark result"):
        read_result(bad)


def test_parse_only() -> None:
    assert parse_only(None) == KINDS
    assert parse_only("size, exchange") == ("exchange", "size")
    with pytest.raises(ConfigError, match=r"unknown kind.*sizes.*choose from"):
        parse_only("exchange,sizes")
    with pytest.raises(ConfigError, match="none given"):
        parse_only(",")


def test_sizes_inside_a_wheel(tmp_path: Path) -> None:
    wheel = tmp_path / "demo-1.0-py3-none-any.whl"
    payload = b"\0" * 100_000
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("demo/libs/libdemo.so", payload)
        archive.writestr("demo/__init__.py", "")
    (library,) = libraries_in_wheel(wheel, "ours")
    assert library.name == "libdemo.so"
    assert library.size == 100_000
    assert library.compressed == deflated_size(payload)
    assert library.compressed < 1_000
    assert library.source == wheel.name
    # Zeros are no object file: no code to attribute, and no error either.
    assert library.code is None


def test_code_breakdown_attributes_pybind11_symbols(tmp_path: Path) -> None:
    source = tmp_path / "demo.cc"
    source.write_text(
        "namespace pybind11 { int helper(int x) { return x * 3 + 1; } }\n"
        "int exchange(int x) { return pybind11::helper(x) + 2; }\n"
    )
    library = tmp_path / "libdemo.so"
    subprocess.run(["c++", "-O0", "-shared", "-fPIC", str(source), "-o", str(library)], check=True)
    breakdown = code_breakdown(library.read_bytes())
    assert breakdown is not None
    total, pybind11 = breakdown
    assert 0 < pybind11 < total
