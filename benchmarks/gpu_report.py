"""``python -m benchmarks --device cuda`` (:func:`run_cuda_mode`) and where its figures go: the
result file ``exchange-cuda.json`` (measured by :mod:`benchmarks.gpu`), the printed tables,
docs/benchmarks.md's GPU section and README's GPU costs.

Only a real run is rendered on the pages: a dry run (CPU tensors) or a run of fewer than
:data:`~benchmarks.gpu.MIN_ROUNDS` rounds is refused with a :class:`ConfigError`. Without a
result, the GPU section says "not measured yet" and README shows no GPU figures (its cog
block writes nothing), so no GPU number is ever written that was not measured.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from _torch_c_dlpack_ext_core.errors import ConfigError

from .gpu import KIND, MEMBERS, MIN_ROUNDS, NATIVE, PORTABLE, TABLES, TORCH_OWN, run_gpu
from .report import (
    Progress,
    Table,
    describe_machine,
    format_ns,
    format_ratio,
    read_result,
    write_result,
)
from .stats import ratio
from .subjects import ROOT, BenchContext

__all__ = [
    "gpu_result",
    "gpu_section",
    "readme_gpu_section",
    "render_gpu_section",
    "render_readme_costs",
    "run_cuda_mode",
    "tables_of",
]

#: For each member, the Python calls a user makes for the same job.
PYTHON_EQUIVALENTS = {
    "from_py_object": ("__dlpack__()", "to_dlpack()"),
    "to_py_object": ("from_dlpack(capsule)",),
    "allocator": ("to_dlpack(torch.empty(16))",),
}


NOT_MEASURED = (
    "Not measured yet: no run on a GPU has written `benchmarks/results/exchange-cuda.json` "
    "(docs/gpu-check.md says how to run one)."
)


def _median(data: dict[str, Any], table: str, member: str) -> float | None:
    value = data["providers"].get(table, {}).get(member, {}).get("median")
    return None if value is None else float(value)


def tables_of(data: dict[str, Any]) -> list[Table]:
    """The per-member table and the Python-path table of a result's data."""
    settings, device = data["settings"], data["device"]
    where = "CPU tensors (a dry run)" if data["dry_run"] else f"CUDA tensors on {device['name']}"
    rows = []
    for member in MEMBERS:
        own, native, portable = (_median(data, table, member) for table in TABLES)
        if own is None and native is None and portable is None:
            continue
        rows.append(
            (member, format_ns(own), format_ns(native), format_ns(portable),
             format_ratio(ratio(native, own)), format_ratio(ratio(portable, own)))
        )  # fmt: skip
    members = Table(
        title=f"Exchange overhead, {where}: torch {data['torch']}'s own table, our "
        f"{data['native_backend'].upper()} library and the portable table (ns per call, medians of "
        f"{settings['rounds']} interleaved rounds x {settings['calls']:,} calls)",
        headers=("member", "torch's own", "native", "portable", "native / own",
                 "portable / own"),
        rows=tuple(rows),
    )  # fmt: skip
    python_rows = []
    for member, equivalents in PYTHON_EQUIVALENTS.items():
        native, portable = _median(data, NATIVE, member), _median(data, PORTABLE, member)
        for equivalent in equivalents:
            value = data["python_path"].get(equivalent, {}).get("median")
            python_rows.append(
                (f"{member} vs {equivalent}", format_ns(value), format_ns(native),
                 format_ns(portable), format_ratio(ratio(value, native)),
                 format_ratio(ratio(value, portable)))
            )  # fmt: skip
    python_table = Table(
        title=f"C API vs Python path, {where}",
        headers=("C call vs Python call", "Python ns", "native ns", "portable ns",
                 "native speedup", "portable speedup"),
        rows=tuple(python_rows),
    )  # fmt: skip
    return [members, python_table]


def check_real_run(document: dict[str, Any], where: str) -> None:
    """Raise :class:`ConfigError` unless ``document`` is a real GPU run of enough rounds."""
    data = document.get("data", {})
    if document.get("kind") != KIND:
        raise ConfigError(f"{where} is a {document.get('kind')!r} result, not {KIND!r}")
    if data.get("dry_run"):
        raise ConfigError(
            f"{where} is a dry run (CPU tensors): only a run on a GPU is rendered; run "
            "`python -m benchmarks --device cuda` on a machine with one"
        )
    rounds = int(data.get("settings", {}).get("rounds", 0))
    if rounds < MIN_ROUNDS:
        raise ConfigError(
            f"{where} has {rounds} rounds; the pages show medians of at least {MIN_ROUNDS} "
            "(a run without --quick)"
        )


def _run_line(document: dict[str, Any]) -> str:
    data, machine = document["data"], document.get("machine", {})
    device = data["device"]
    return (
        f"{device['name']} (compute capability {device.get('capability', '?')}, "
        f"{device.get('count', '?')} device(s)), driver {device['driver']}, CUDA "
        f"{device.get('runtime')}; torch {data['torch']}, CPython {data['python']}; "
        f"{machine.get('cpu_model', 'unknown CPU')}, {machine.get('cores', '?')} cores; "
        f"{machine.get('date_utc', '')}"
    )


def render_gpu_section(document: dict[str, Any] | None) -> str:
    """docs/benchmarks.md's GPU section (a cog block's output) for a real run, or "not
    measured yet" without one."""
    if document is None:
        body = [NOT_MEASURED]
    else:
        body = [f"*exchange on CUDA tensors*: {_run_line(document)}"]
        for table in document["tables"]:
            body += ["", Table.from_json(table).to_markdown()]
        errors = document["data"].get("errors", {})
        if errors:
            body += ["", *(f"- {name}: not measured ({error})" for name, error in errors.items())]
    return "\n".join(body) + "\n"


def _cost(data: dict[str, Any], table: str) -> str:
    stats = data["providers"].get(table, {})
    if "from_py_object" not in stats or "allocator" not in stats:
        return "not measured"
    export, allocation = stats["from_py_object"]["median"], stats["allocator"]["median"]
    return f"{export:,.0f} ns / {allocation:,.0f} ns"


def render_readme_costs(document: dict[str, Any] | None) -> str:
    """README's GPU costs under the table of paths (a cog block's output), or nothing
    between the markers without a real run."""
    if document is None:
        return ""
    data = document["data"]
    device = data["device"]
    python = data["python_path"]
    fallback = "not measured"
    if "__dlpack__()" in python and "to_dlpack(torch.empty(16))" in python:
        fallback = (
            f"{python['__dlpack__()']['median']:,.0f} ns / "
            f"{python['to_dlpack(torch.empty(16))']['median']:,.0f} ns"
        )
    rows = [
        ("**defer**: torch's own table", _cost(data, TORCH_OWN)),
        (f"**native**: our {data['native_backend'].upper()} library", _cost(data, NATIVE)),
        ("**portable table**", _cost(data, PORTABLE)),
        ("the Python path a consumer takes instead", fallback),
    ]
    date = str(document.get("machine", {}).get("date_utc", ""))[:10]
    return (
        "\n".join(
            [
                f"On a GPU, with CUDA tensors ({device['name']}, driver {device['driver']}, torch "
                f"{data['torch']}, {date}; medians of `python -m benchmarks --device cuda`):",
                "",
                "| path | per call on CUDA tensors: export / allocation |",
                "|---|---|",
                *(f"| {path} | {cost} |" for path, cost in rows),
                "",
                "The Python path is `x.__dlpack__()` and "
                '`to_dlpack(torch.empty(16, device="cuda"))`.',
            ]
        )
        + "\n"
    )


def gpu_result(results_dir: Path | str) -> dict[str, Any] | None:
    """``exchange-cuda.json`` of ``results_dir`` (else the committed one), checked to be a
    real run; None where neither folder has one."""
    for folder in (Path(results_dir), ROOT / "benchmarks" / "results"):
        path = folder / f"{KIND}.json"
        if path.is_file():
            document = read_result(path)
            check_real_run(document, str(path))
            return document
    return None


def gpu_section(results_dir: Path | str) -> str:
    """docs/benchmarks.md's GPU section (its cog block)."""
    return render_gpu_section(gpu_result(results_dir))


def readme_gpu_section(results_dir: Path | str) -> str:
    """README's GPU costs (its cog block)."""
    return render_readme_costs(gpu_result(results_dir))


def _context(args: argparse.Namespace) -> tuple[BenchContext, bool]:
    """The run's context from ``python -m benchmarks``'s options, and whether its results
    folder is the committed one; raises :class:`ConfigError` for options the CUDA mode
    does not take."""
    if args.device != "cuda":
        raise ConfigError("--dry-run belongs to --device cuda (the CPU benchmarks need no GPU)")
    for option, given in (("--only", args.only), ("--full", args.full)):
        if given:
            raise ConfigError(f"--device cuda runs the exchange benchmark only; drop {option}")
    work_dir: Path = args.work_dir.resolve()
    scratch = "results-dry-run" if args.dry_run else "results-quick" if args.quick else None
    committed_dir = (ROOT / "benchmarks" / "results").resolve()
    if args.results_dir is not None:
        results_dir: Path = args.results_dir.resolve()
    else:
        results_dir = work_dir / scratch if scratch else committed_dir
    committed = results_dir == committed_dir
    if committed and scratch:
        raise ConfigError(
            f"--{scratch.removeprefix('results-')} results never go to benchmarks/results: "
            "give another --results-dir, or leave it out"
        )
    ctx = BenchContext(
        quick=args.quick, full=False, work_dir=work_dir, results_dir=results_dir,
        progress=Progress(),
    )  # fmt: skip
    return ctx, committed


def run_cuda_mode(args: argparse.Namespace) -> int:
    """``python -m benchmarks --device cuda [--dry-run] [--quick]``: measure, print the
    tables, write ``<results>/exchange-cuda.json``; then, for a real run into the committed
    folder (or with ``--write-readme``), the pages' GPU figures
    (every generated section, :func:`benchmarks.pages.write_pages`). ``--readme-only`` only
    re-renders them."""
    ctx, committed = _context(args)
    if not args.readme_only:
        data = run_gpu(ctx, dry_run=args.dry_run)
        tables = tables_of(data)
        path = write_result(
            ctx.results_dir,
            KIND,
            machine=describe_machine(),
            options={"quick": ctx.quick, "dry_run": args.dry_run, "device": "cuda"},
            data=data,
            tables=tables,
            targets=[],
        )
        print()
        for table in tables:
            print(table.to_text(), end="\n\n")
        for name, error in data["errors"].items():
            print(f"{name}: not measured: {error}", file=sys.stderr)
        ctx.progress(f"{KIND}: wrote {path}")
    if (committed or args.write_readme or args.readme_only) and not args.dry_run:
        from .pages import write_pages

        for page in write_pages(ctx.results_dir):
            ctx.progress(f"{page.relative_to(ROOT)}: GPU figures rewritten from {ctx.results_dir}")
    return 0
