"""Compile one cell in a fresh process and report its wall time and the compiler's peak RSS.

``python -m benchmarks.compile_probe --torch DIR --backend cpu --output-dir DIR`` calls the
project's driver twice: the first call measures a build into a fresh output directory, the
second the no-op rebuild that finds everything up to date. Running in its own process
keeps ``RUSAGE_CHILDREN`` about this compile alone (it reports the largest descendant the
process waited for, here the compiler proper).
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.compile_probe")
    parser.add_argument("--torch", type=Path, required=True, help="torch package directory")
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--output-dir", type=Path, required=True)
    args = parser.parse_args(argv)

    from _torch_c_dlpack_ext_core.driver import BuildRequest, compile_library
    from _torch_c_dlpack_ext_core.naming import parse_backend

    backend = parse_backend(args.backend)
    started = time.perf_counter()
    entry = compile_library(
        BuildRequest(torch=args.torch, backend=backend, output_dir=args.output_dir)
    )
    first = time.perf_counter() - started
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    library = args.output_dir / entry.file
    before = library.stat().st_mtime_ns
    started = time.perf_counter()
    compile_library(BuildRequest(torch=args.torch, backend=backend, output_dir=args.output_dir))
    noop = time.perf_counter() - started
    # In a shared tree someone may edit csrc/ between the two calls; then the second one
    # rightly rebuilds and its time is not a no-op's.
    rebuilt = library.stat().st_mtime_ns != before
    json.dump(
        {
            "file": entry.file,
            "torch_build": entry.torch_build,
            "backend": entry.backend.value,
            "cxx11_abi": entry.cxx11_abi,
            "toolchain": entry.toolchain,
            "size": entry.size,
            "seconds": first,
            "child_cpu_seconds": usage.ru_utime + usage.ru_stime,
            # Linux reports ru_maxrss in KiB.
            "peak_rss_mib": usage.ru_maxrss / 1024,
            "noop_seconds": noop,
            "noop_rebuilt": rebuilt,
        },
        sys.stdout,
    )
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
