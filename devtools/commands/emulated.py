"""``python -m devtools emulated --platform linux_aarch64`` (``nox -s emulated``): our
aarch64 wheel on real aarch64 CPython and real aarch64 torch, under qemu-user, for every
torch minor of the matrix (what is provisioned and checked: :mod:`devtools.envs.emulated`).

It prints one table, a row per minor (``ok``, or ``failed`` with the cause), and exits 0
only if every minor held (1 otherwise). A host that cannot emulate (not root, no
binfmt_misc, no qemu-user; :mod:`devtools.envs.emulation`) is told so in one line, with exit
code 14.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from devtools.base.paths import ROOT
from devtools.envs import emulated, emulation
from devtools.matrix.reader import load_matrix


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--platform", required=True, choices=sorted(emulation.EMULATED))
    parser.add_argument("--torch", default=None, help="comma-separated minors (default: all)")
    parser.add_argument("--dist", type=Path, default=ROOT / "dist")
    parser.add_argument(
        "--examples",
        type=int,
        default=emulated.DEFAULT_EXAMPLES,
        help="conformance examples per property (0: skip the suite)",
    )


def print_table(results: Sequence[emulated.MinorResult]) -> None:
    """One row per minor: ok or failed, seconds, and the details or the cause."""
    print(f"{'torch':<8} {'release':<8} {'result':<7} {'seconds':>8}  detail")
    for r in results:
        state = "ok" if r.ok else "failed"
        print(f"{r.minor:<8} {r.torch:<8} {state:<7} {r.seconds:>8.1f}  {r.detail}")


def run(args: argparse.Namespace) -> int:
    target = emulation.EMULATED[args.platform]
    started = time.monotonic()
    matrix = load_matrix()
    minors = [m.strip() for m in args.torch.split(",") if m.strip()] if args.torch else None
    cells = emulated.select_minors(matrix, args.platform, minors)
    emulation.check_host(target)
    root = emulation.provision_root(target)
    wheel = emulated.ensure_wheel(args.dist.resolve(), args.platform)
    emulation.log(f"wheel {wheel.name}; root {root}")
    results: list[emulated.MinorResult] = []
    runs = root / emulated.RUNS
    runs.mkdir(parents=True, exist_ok=True)
    run_dir = Path(tempfile.mkdtemp(prefix="run-", dir=runs))
    try:
        emulated.stage_suite(run_dir, args.examples)
        with emulation.Mounted(root):
            for cell in cells:
                emulation.log(f"torch {cell.torch.release} ...")
                result = emulated.check_minor(
                    root, cell, wheel, target, examples=args.examples, run_dir=run_dir
                )
                state = "ok" if result.ok else "failed"
                emulation.log(f"torch {cell.torch.release}: {state} in {result.seconds:.0f} s")
                results.append(result)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    print_table(results)
    print(f"wall time {time.monotonic() - started:.0f} s; root {root}")
    return 0 if results and all(r.ok for r in results) else 1
