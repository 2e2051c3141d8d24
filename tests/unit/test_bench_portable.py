"""The portable benchmark's arithmetic: ratios taken repeat by repeat against the Python
path timed in the same repeats, its tables (bare calls, keyword forms, what abi3.12 gains)
and its targets, from a worker's output made up here (no torch, no compiler)."""

from __future__ import annotations

from typing import Any

import pytest
from benchmarks.exchange import summarize_worker_output
from benchmarks.portable import (
    ABI312,
    KEYWORD_ALLOCATION,
    KEYWORD_EXPORT,
    PYTHON_ALLOCATION,
    PYTHON_EXPORT,
    SHIPPED,
    TORCH_OWN,
    _ratios,
    _tables,
    _targets,
)
from benchmarks.report import Table
from benchmarks.stats import paired_ratios


def test_paired_ratios_divide_repeat_by_repeat() -> None:
    summary = paired_ratios([90.0, 200.0, 95.0], [100.0, 250.0, 100.0])
    assert summary is not None
    assert summary.median == pytest.approx(0.9)
    assert summary.minimum == pytest.approx(0.8)
    assert summary.maximum == pytest.approx(0.95)
    assert summary.count == 3


def test_paired_ratios_refuse_samples_of_other_repeats() -> None:
    with pytest.raises(ValueError, match="not taken in the same repeats"):
        paired_ratios([1.0, 2.0], [1.0])


@pytest.mark.parametrize("denominators", [[], [1.0, 0.0]])
def test_paired_ratios_without_a_positive_denominator_are_none(denominators: list[float]) -> None:
    assert paired_ratios([1.0] * len(denominators), denominators) is None


def _output(*, with_abi312: bool = True, keywords: bool = True) -> dict[str, Any]:
    """Three repeats. The machine's load hits the Python path alone in repeat 1 and the C
    calls alone in repeat 2: medians taken apart would pair 950 ns with 2,900 ns."""
    functions = ("from_py_object", "allocator", "current_work_stream")
    abi3 = {"from_py_object": [300.0, 320.0, 900.0], "allocator": [900.0, 950.0, 3000.0]}
    samples: dict[str, dict[str, list[float]]] = {
        TORCH_OWN: {name: [50.0, 50.0, 50.0] for name in functions},
        SHIPPED: {**abi3, "current_work_stream": [2.0, 2.0, 2.0]},
    }
    if with_abi312:
        samples[ABI312] = {
            "from_py_object": [270.0, 288.0, 810.0],
            "allocator": [900.0, 950.0, 3000.0],
            "current_work_stream": [2.0, 2.0, 2.0],
        }
    python = {
        PYTHON_EXPORT: [1000.0, 2900.0, 1000.0],
        PYTHON_ALLOCATION: [1000.0, 2900.0, 3100.0],
        "from_dlpack(capsule)": [800.0, 800.0, 800.0],
    }
    if keywords:
        python[KEYWORD_EXPORT] = [1500.0, 1500.0, 1500.0]
        python[KEYWORD_ALLOCATION] = [1800.0, 1900.0, 2000.0]
    return {
        "samples": samples,
        "python_path": python,
        "torch": "2.13.0+cpu",
        "python": "3.12.1",
        "tensors": [],
        "unsupported": {},
        "errors": {},
    }


def _run(output: dict[str, Any]) -> tuple[dict[str, Any], list[Table], list[Any]]:
    summary = summarize_worker_output(output)
    summary["ratios"] = _ratios(output)
    return summary, _tables(summary, 3), _targets(summary, 3)


def test_targets_are_medians_of_per_repeat_ratios() -> None:
    _, _, targets = _run(_output())
    by_name = {t.description: t for t in targets}
    allocator = by_name[
        f"{SHIPPED} on torch 2.13.0+cpu: allocator / {PYTHON_ALLOCATION} (median of 3 repeats)"
    ]
    # Per repeat: 0.9, 0.33, 0.97; the medians taken apart would say 950 / 2900 = 0.33.
    assert allocator.value == pytest.approx(0.9)
    assert allocator.limit == 1.0
    assert allocator.status == "met"
    export = by_name[
        f"{SHIPPED} on torch 2.13.0+cpu: from_py_object / {PYTHON_EXPORT} (median of 3 repeats)"
    ]
    assert export.value == pytest.approx(0.3)
    assert export.limit == 0.7
    # The abi3.12 build is held to the same targets where it runs.
    assert sum(ABI312 in t.description for t in targets) == 2


def test_the_tables_show_bare_calls_keyword_forms_and_the_abi312_gain() -> None:
    _, tables, _ = _run(_output())
    bare, keyword, gains = tables
    rows = {row[0]: row for row in bare.rows}
    assert rows["allocator: float32[16]"][-3:] == (
        f"2,900 {PYTHON_ALLOCATION}",
        "0.90x",
        "0.33x-0.97x",
    )
    assert rows["current_work_stream (CPU)"][-3:] == ("-", "n/a", "-")
    keyword_rows = {row[0]: row for row in keyword.rows}
    assert keyword_rows["allocator: float32[16]"][2:] == (
        f"1,900 {KEYWORD_ALLOCATION}",
        "0.50x",
        "0.50x-1.50x",
    )
    gain_rows = {row[0]: row for row in gains.rows}
    assert gain_rows["export: from_py + deleter"][1] == "0.90x"
    assert gain_rows["allocator: float32[16]"][1] == "1.00x"
    # A CPU stream never reaches Python: a ratio of 2 ns timings would be noise.
    assert "current_work_stream (CPU)" not in gain_rows


def test_without_abi312_or_a_keyword_form_those_parts_are_left_out() -> None:
    summary, tables, targets = _run(_output(with_abi312=False, keywords=False))
    assert len(tables) == 2  # no gains table
    assert "abi3.12 / abi3" not in summary["ratios"]
    assert {row[-2] for row in tables[1].rows} == {"n/a"}
    assert all(ABI312 not in t.description for t in targets)
    assert len(targets) == 2
