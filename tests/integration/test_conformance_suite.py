"""The differential conformance suite (tests/conformance/test_diff_*.py) against real builds.

- torch 2.13 (the running one): our library compiled against it, next to torch's own
  table: every outcome compared (the differential half) and every invariant checked;
- PyPI torch 2.8.0, really imported in a provisioned env with hypothesis: our library
  built for it; torch has no table of its own there, so the invariant half runs.

Each run is a subprocess (a crash in a table must not take this session down) with the
``ci`` hypothesis profile; the suite's summary line, printed here, says how many cases it
exercised. ``-s`` shows it; pass ``TCDE_TEST_CONFORMANCE_PROFILE=thorough`` for
a larger local run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from devtools.envs.torchenv import TorchEnv

from _torch_c_dlpack_ext_core.driver import BuildRequest, compile_library
from _torch_c_dlpack_ext_core.manifest import ManifestEntry
from _torch_c_dlpack_ext_core.torchinstall import TorchInstall

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SUITE_ENV = "TCDE_TEST_LIBRARY"
PROFILE_ENV = "TCDE_TEST_CONFORMANCE_PROFILE"
#: The differential files (test_import_totality.py, also in tests/conformance, runs in the
#: dev env directly).
SUITE = sorted(
    str(p.relative_to(ROOT)) for p in (ROOT / "tests" / "conformance").glob("test_diff_*.py")
)
#: Cases the ci profile runs at least (6 properties x 150 examples, plus the differential
#: calls on torch 2.13): far fewer means the suite mostly skipped or filtered.
MIN_CASES_213 = 1200
MIN_CASES_28 = 700
MIN_DIFFERENTIAL_CASES = 500
#: The torch of the 2.8 half, in the suite's env (with hypothesis: ``tests.helpers.SUITE_EXTRAS``).
OLD_TORCH = "2.8.0"


def run_conformance_suite(python: Path | str, library: Path) -> dict[str, int]:
    """Run the suite with ``python`` against ``library``; return its case counts."""
    env = {**os.environ, SUITE_ENV: str(library)}
    env.pop("PYTHONPATH", None)
    profile = os.environ.get(PROFILE_ENV, "ci")
    started = time.monotonic()
    proc = subprocess.run(
        [str(python), "-m", "pytest", *SUITE, "-q", "-p", "no:cacheprovider",
         "--confcutdir", "tests/conformance", f"--hypothesis-profile={profile}"],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=1800,
    )  # fmt: skip
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"conformance suite failed with {python}:\n{output[-12000:]}"
    assert "skipped" not in output.strip().splitlines()[-1], output[-3000:]
    lines = [line for line in output.splitlines() if line.startswith("conformance:")]
    print(f"\nCONFORMANCE {library.name} under {python} ({time.monotonic() - started:.1f} s):")
    print("\n".join(lines))
    counts = {
        match.group(2).strip(): int(match.group(1))
        for line in lines
        if (match := re.match(r"conformance:\s+(\d+)\s+(.+)$", line))
    }
    total = re.search(r"conformance: (\d+) cases", output)
    assert total is not None, output[-3000:]
    counts["total"] = int(total.group(1))
    return counts


def test_conformance_torch213(torch213_library: tuple[Path, ManifestEntry]) -> None:
    library, _ = torch213_library
    counts = run_conformance_suite(sys.executable, library)
    assert counts["total"] >= MIN_CASES_213, counts
    differential = sum(n for name, n in counts.items() if name.endswith("differential"))
    assert differential >= MIN_DIFFERENTIAL_CASES, counts


def test_conformance_invariants_on_torch28(
    build_cache: Path, old_torch_env: Callable[[str], TorchEnv]
) -> None:
    env = old_torch_env(OLD_TORCH)
    install = TorchInstall.from_path(env.root)
    # Its own output dir: this env's torch path is another cache key than the exchange
    # suite's 2.8 env, and one dir for both would rebuild each on every run.
    output_dir = build_cache / f"torch{OLD_TORCH}-conformance"
    entry = compile_library(BuildRequest(torch=install, backend="cpu", output_dir=output_dir))
    counts = run_conformance_suite(env.python, output_dir / entry.file)
    assert counts["total"] >= MIN_CASES_28, counts
    assert not any(name.endswith("differential") for name in counts), counts


def test_conformance_portable_torch213(portable_library: Path) -> None:
    """The portable table (csrc/portable, abi3) against torch 2.13's own table."""
    counts = run_conformance_suite(sys.executable, portable_library)
    assert counts["total"] >= MIN_CASES_213, counts
    differential = sum(n for name, n in counts.items() if name.endswith("differential"))
    assert differential >= MIN_DIFFERENTIAL_CASES, counts


@pytest.mark.parametrize("version", [OLD_TORCH, "2.9.1"])
def test_conformance_portable_invariants_on_older_torch(
    portable_library: Path, version: str, old_torch_env: Callable[[str], TorchEnv]
) -> None:
    """The portable table on torch 2.8 (legacy capsules both ways) and 2.9 (versioned, but
    no byte_offset or float8 import); CUDA torches without a GPU here, so the suite's
    host-only half applies (tables.Tables.runs_as_host_only)."""
    env = old_torch_env(version)
    counts = run_conformance_suite(env.python, portable_library)
    assert counts["total"] >= MIN_CASES_28, counts
    assert not any(name.endswith("differential") for name in counts), counts
