"""The portable table's cost per call, beside torch's own table and the Python path.

``python -m benchmarks.portable [--quick]`` (from the repository root, in the dev env):

* builds csrc/portable as shipped (abi3, ``Py_LIMITED_API=0x03090000``: no vectorcall) and
  as the full API of this interpreter (vectorcall; the stand-in for the abi3.12 variant,
  ``Py_LIMITED_API=0x030C0000``, which needs a CPython >= 3.12 with torch to run);
* times, in one interleaved run of the C harness (benchmarks/exchange_harness.c, the
  exchange benchmark's worker), each member for torch 2.13's own table (standing in for the
  native library: ours matches it, see benchmarks/results/exchange.json) and both builds;
* times the Python path a consumer takes without the API (``x.__dlpack__()``,
  ``torch.from_dlpack``, ``to_dlpack(torch.empty(...))``) in the same worker;
* prints one table and the targets of issue 30 (item 6): export (from_py + deleter)
  <= 0.7x ``x.__dlpack__()``; allocator <= 1.0x ``to_dlpack(torch.empty(...))``; and writes
  ``benchmarks/results/portable.json``.

Targets are reported, never asserted: a shared machine's load moves every number.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from .exchange import ExchangeSettings, _Comparison, _run_interleaved, summarize_worker_output
from .harness import build_harness
from .report import Progress, Table, describe_machine, format_ns, format_ratio, write_result
from .stats import Target, ratio
from .subjects import ROOT, BenchContext

__all__ = ["PORTABLE_BUILDS", "main", "run_portable"]

#: The builds measured: name -> Py_LIMITED_API (None: the full API of this interpreter).
PORTABLE_BUILDS: dict[str, int | None] = {
    "portable abi3 (3.9, as shipped)": 0x03090000,
    "portable full API (vectorcall)": None,
}
TORCH_OWN = "torch 2.13 own (native stand-in)"

#: Rows: the harness function, what a consumer does in Python instead.
ROWS = (
    ("from_py_object", "export: from_py + deleter", "__dlpack__()"),
    ("dltensor_from_py_object", "export: dltensor_from_py", "__dlpack__()"),
    ("to_py_object", "import: to_py", "from_dlpack(capsule)"),
    ("allocator", "allocator: float32[16]", "to_dlpack(torch.empty(16))"),
    ("current_work_stream", "current_work_stream (CPU)", None),
)


def _build(work_dir: Path) -> dict[str, Path]:
    sys.path.insert(0, str(ROOT))
    from tests.helpers import build_portable_library

    return {
        name: build_portable_library(
            work_dir / f"portable-{index}", limited_api=api, name=f"libportable{index}.so"
        )
        for index, (name, api) in enumerate(PORTABLE_BUILDS.items())
    }


def run_portable(ctx: BenchContext) -> tuple[Table, list[Target], dict[str, Any]]:
    """Build, time and tabulate; returns the table, the targets and the summary."""
    settings = ExchangeSettings.for_run(quick=ctx.quick)
    ctx.progress("portable: building the abi3 and full-API libraries and the harness")
    libraries = _build(ctx.work_dir)
    harness = build_harness(Path(sys.executable), ctx.work_dir)
    providers = [{"name": TORCH_OWN, "kind": "capsule", "path": ""}]
    providers += [{"name": n, "kind": "library", "path": str(p)} for n, p in libraries.items()]
    comparison = _Comparison(
        key="torch213", python=Path(sys.executable), harness=harness, providers=providers,
        errors={}, extra={},
    )  # fmt: skip
    output = _run_interleaved([comparison], settings, ctx)["torch213"]
    summary = summarize_worker_output(output)
    medians = {
        name: {fn: stats["median"] for fn, stats in functions.items()}
        for name, functions in summary["providers"].items()
    }
    python = {name: stats["median"] for name, stats in summary["python_path"].items()}
    header = ["per call", TORCH_OWN, *PORTABLE_BUILDS, "Python path", "abi3 / Python"]
    rows = []
    for function, label, equivalent in ROWS:
        py = python.get(equivalent) if equivalent else None
        abi3 = medians.get(next(iter(PORTABLE_BUILDS)), {}).get(function)
        rows.append(
            [
                label,
                format_ns(medians.get(TORCH_OWN, {}).get(function)),
                *(format_ns(medians.get(name, {}).get(function)) for name in PORTABLE_BUILDS),
                f"{format_ns(py)} {equivalent}" if equivalent else "-",
                format_ratio(ratio(abi3, py)),
            ]
        )
    table = Table(
        title=f"Portable table, ns per call (torch {summary['torch']}, Python "
        f"{summary['python']}; medians of {settings.repeats} interleaved repeats)",
        headers=tuple(header),
        rows=tuple(tuple(row) for row in rows),
    )
    targets = []
    for name in PORTABLE_BUILDS:
        build = medians.get(name, {})
        targets.append(
            Target(
                description=f"{name}: export (from_py + deleter) / x.__dlpack__()",
                value=ratio(build.get("from_py_object"), python.get("__dlpack__()")),
                limit=0.7,
                comparison="<=",
                unit="x",
            )
        )
        targets.append(
            Target(
                description=f"{name}: allocator / to_dlpack(torch.empty(16))",
                value=ratio(build.get("allocator"), python.get("to_dlpack(torch.empty(16))")),
                limit=1.0,
                comparison="<=",
                unit="x",
            )
        )
    return table, targets, summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.portable", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer calls and repeats")
    parser.add_argument(
        "--results-dir", type=Path, default=ROOT / "benchmarks" / "results",
        help="where portable.json goes",
    )  # fmt: skip
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tcde-portable-bench-") as tmp:
        ctx = BenchContext(
            quick=args.quick, full=False, work_dir=Path(tmp), results_dir=args.results_dir,
            progress=Progress(),
        )  # fmt: skip
        table, targets, summary = run_portable(ctx)
    print(table.to_text())
    for target in targets:
        print(f"target: {target.description}: {format_ratio(target.value)} "
              f"(limit {target.comparison} {target.limit:g}x): {target.status}")  # fmt: skip
    path = write_result(
        args.results_dir, "portable", machine=describe_machine(),
        options={"quick": args.quick}, data=summary, tables=[table], targets=targets,
    )  # fmt: skip
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
