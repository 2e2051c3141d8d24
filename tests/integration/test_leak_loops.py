"""The exchange suite's leak loops (tests/exchange_suite/test_leaks.py) against the portable
table on torch 2.2.2, 2.8.0, 2.9.1 and the running torch (2.13).

2.2.2 and 2.8.0 are the releases whose own entry points leak: ``torch._C._to_dlpack``
refusing a float8 tensor (576-608 bytes per call), and on 2.2.2 an importer that never
calls the producer's deleter of a tensor without elements whose data is NULL. The table
must step around both (docs/facts.md), which these loops check: every float8 / fp4 and
sub-byte dtype of the torch exported owning and non-owning, round trips, the allocator,
imports with the producer's deleter calls counted. Refusing a ``meta`` tensor leaks the
same way on torch < 2.10 (576-608 bytes per call on 2.2.2 and 2.8.0; 2.9.1's refusals
leak too: issue 42, finding 7), so meta tensors are looped over as well.
2.8.0, 2.9.1 and 2.13 also run them inside the whole exchange suite
(test_portable_table.py); 2.2.2, below the matrix, only here.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.helpers import ROOT, clean_env

pytestmark = pytest.mark.slow

SUITE_ENV = "TCDE_TEST_LIBRARY"
LEAKS = "tests/exchange_suite/test_leaks.py"
#: Loops that must pass per torch: 2.2.2 has no sub-byte dtype (their three loops skip).
MIN_PASSED = {"2.2.2": 14, "2.8.0": 17, "2.9.1": 17, "running": 17}


def run_leak_loops(python: Path | str, library: Path) -> str:
    """Run the leak loops with ``python`` against ``library``; return the summary line."""
    env = clean_env(**{SUITE_ENV: str(library)})
    env.pop("PYTHONPATH", None)
    proc = subprocess.run(
        [str(python), "-m", "pytest", LEAKS, "-q", "-p", "no:cacheprovider", "-rs",
         "--confcutdir", "tests/exchange_suite"],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=900,
    )  # fmt: skip
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"leak loops failed with {python}:\n{output[-8000:]}"
    summary = proc.stdout.strip().splitlines()[-1]
    print(f"\nLEAKS {library.name} under {python}: {summary}")
    return summary


@pytest.mark.parametrize("version", ["2.2.2", "2.8.0", "2.9.1", "running"])
def test_leak_loops_portable(
    portable_library: Path, version: str, suite_interpreter: Callable[[str], Path | str]
) -> None:
    python = suite_interpreter(version)
    summary = run_leak_loops(python, portable_library)
    passed = re.search(r"(\d+) passed", summary)
    assert passed is not None, summary
    assert int(passed.group(1)) >= MIN_PASSED[version], summary
    assert "failed" not in summary, summary
    assert "error" not in summary, summary
