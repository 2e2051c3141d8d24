"""``python -m benchmarks``: run the benchmark kinds, print tables, write result files."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from _torch_c_dlpack_ext_core.errors import ConfigError, TorchCDLPackExtError

from .pages import KINDS, write_pages
from .report import (
    Progress,
    Table,
    describe_machine,
    targets_table,
    write_result,
)
from .stats import Target
from .subjects import ROOT, BenchContext

__all__ = ["KINDS", "main", "parse_only"]

Runner = Callable[[BenchContext], "tuple[dict[str, Any], list[Table], list[Target]]"]


def _runners() -> dict[str, Runner]:
    # Imported here so `--help` and option errors cost nothing.
    from .buildcost import run_build
    from .exchange import run_exchange
    from .importtime import run_import
    from .portable import run_portable
    from .size import run_size

    return {
        "exchange": run_exchange,
        "portable": run_portable,
        "import": run_import,
        "build": run_build,
        "size": run_size,
    }


#: Benchmark kinds in the order they run and appear in docs/benchmarks.md.


def parse_only(value: str | None) -> tuple[str, ...]:
    """The kinds named by ``--only`` (comma-separated), in canonical order."""
    if value is None:
        return KINDS
    names = [part.strip() for part in value.split(",") if part.strip()]
    unknown = sorted(set(names) - set(KINDS))
    if unknown or not names:
        raise ConfigError(
            f"--only {value!r}: unknown kind(s) {', '.join(unknown) or '(none given)'}; "
            f"choose from {','.join(KINDS)}"
        )
    return tuple(kind for kind in KINDS if kind in names)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Exchange and import overhead, build cost and size of torch-c-dlpack-ext.",
    )
    parser.add_argument("--only", help=f"comma-separated kinds to run (default: {','.join(KINDS)})")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="fewer calls and repeats, for development; results go to the work dir, "
        "not benchmarks/results, unless --results-dir is given",
    )
    parser.add_argument(
        "--full",
        action="store_true",
        help="time the build pipeline over the whole local matrix with --jobs 1 and --jobs 2 "
        "instead of one cell, and add the CUDA cell to the per-cell compiles (long; "
        "--jobs 2 runs two compiles at once)",
    )
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=ROOT / "build" / "bench",
        help="caches: the harness, our libraries, 0.1.5's wheel (default: build/bench)",
    )
    parser.add_argument(
        "--results-dir",
        type=Path,
        default=None,
        help="where <kind>.json go (default: benchmarks/results; with --quick: "
        "<work dir>/results-quick)",
    )
    parser.add_argument(
        "--write-readme",
        action="store_true",
        help="rewrite the generated tables (docs/benchmarks.md, README.md's per-call costs) "
        "from the result files even when they are not benchmarks/results (which always "
        "refreshes them)",
    )
    parser.add_argument(
        "--readme-only",
        action="store_true",
        help="run nothing; rewrite the generated tables from the result files",
    )
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="cuda: only the exchange benchmark, on CUDA tensors, with this machine's own torch "
        "and libraries built here, offline (benchmarks/gpu.py); --readme-only with it "
        "re-renders only the GPU figures",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="with --device cuda: every step on CPU tensors with a few calls, where no GPU is; "
        "the result goes to <work dir>/results-dry-run and is never rendered",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="another checkout measured beside this one in the same interleaved rounds (a "
        "change against the tree before it): the import benchmark times its python/ "
        "package; the exchange and portable benchmarks the native and portable libraries "
        "its own driver builds from its csrc/, and report this tree / the baseline's per "
        "member (export members: at most 1.05x)",
    )
    parser.add_argument("--traceback", action="store_true", help="show tracebacks of errors")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _main(args)
    except TorchCDLPackExtError as exc:
        if args.traceback:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code


def _main(args: argparse.Namespace) -> int:
    if args.device == "cuda" or args.dry_run:
        from .gpu_report import run_cuda_mode

        return run_cuda_mode(args)
    kinds = parse_only(args.only)
    work_dir: Path = args.work_dir.resolve()
    results_dir: Path = (
        args.results_dir
        if args.results_dir is not None
        else (work_dir / "results-quick" if args.quick else ROOT / "benchmarks" / "results")
    ).resolve()
    progress = Progress()
    machine = describe_machine()
    progress(
        f"machine: {machine['cpu_model']}, {machine['cores']} cores, "
        f"load {machine['load_average_1_5_15']}; results -> {results_dir}"
    )
    ctx = BenchContext(
        quick=args.quick,
        full=args.full,
        work_dir=work_dir,
        results_dir=results_dir,
        progress=progress,
        baseline=args.baseline.resolve() if args.baseline is not None else None,
    )
    runners = _runners()
    for kind in () if args.readme_only else kinds:
        # Described per kind: the load average of a shared machine changes during a run.
        machine = describe_machine()
        progress(f"{kind}: starting (load {machine['load_average_1_5_15']})")
        data, tables, targets = runners[kind](ctx)
        path = write_result(
            results_dir,
            kind,
            machine=machine,
            options={"quick": args.quick, "full": args.full},
            data=data,
            tables=tables,
            targets=targets,
        )
        print()
        for table in tables:
            print(table.to_text(), end="\n\n")
        if targets:
            print(targets_table(target.to_json() for target in targets).to_text(), end="\n\n")
        progress(f"{kind}: wrote {path}")
    # The pages' tables are generated from benchmarks/results: refresh them whenever those
    # files change, so the committed pages and results never drift apart.
    committed = results_dir == (ROOT / "benchmarks" / "results").resolve()
    if args.write_readme or args.readme_only or committed:
        for page in write_pages(results_dir):
            progress(f"{page.relative_to(ROOT)}: generated figures rewritten from {results_dir}")
    return 0
