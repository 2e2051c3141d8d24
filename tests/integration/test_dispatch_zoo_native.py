"""The dispatch zoo (issue 42) on the native CUDA library.

The native libraries of CPU builds run the zoo inside the whole exchange suite
(test_compile_real_torch.py: torch 2.4.1, 2.6.0, 2.8.0 and 2.9.1; the running 2.13), and the
portable table runs it on 2.2.2-2.13 (test_portable_table.py). The CUDA library of torch
2.8 is only compiled there; here the zoo, its property and the findings' regression tests
run on it in PyPI's CUDA build of torch 2.8.0 on a host without a GPU: where a
``dispatch_device`` liar's host memory labelled ``kDLCUDA`` would reach a consumer's kernel.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from tests.helpers import ROOT
from tests.integration.test_compile_real_torch import timed_compile

from _torch_c_dlpack_ext_core.torchinstall import TorchInstall

pytestmark = pytest.mark.slow

#: The zoo's files: its cases, its property, the findings every table can show.
ZOO = (
    "tests/exchange_suite/test_zoo.py",
    "tests/exchange_suite/test_zoo_property.py",
    "tests/exchange_suite/test_dispatch_findings.py",
)
#: The fewest of their tests that must pass (66 at the time of writing: 24 cases x 2
#: exports, the property, the findings; DTensor or FunctionalTensor may skip where a torch
#: cannot make them).
MIN_ZOO_PASSED = 56
SUITE_ENV = "TCDE_TEST_LIBRARY"


def run_zoo(python: Path | str, library: Path, files: Sequence[str] = ZOO) -> str:
    """Run the zoo's files with ``python`` against ``library``; return the summary line,
    once it is checked that they passed."""
    env = {**os.environ, SUITE_ENV: str(library)}
    env.pop("PYTHONPATH", None)
    proc = subprocess.run(
        [str(python), "-m", "pytest", *files, "-q", "-p", "no:cacheprovider",
         "--confcutdir", "tests/exchange_suite"],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=900,
    )  # fmt: skip
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, (
        f"the dispatch zoo failed against {library.name}:\n{output[-8000:]}"
    )
    summary = proc.stdout.strip().splitlines()[-1]
    passed = re.search(r"(\d+) passed", summary)
    assert passed is not None, summary
    assert int(passed.group(1)) >= MIN_ZOO_PASSED, summary
    print(f"\nZOO {library.name} under {python}: {summary}")
    return summary


def test_dispatch_zoo_on_the_native_cuda_library(
    old_torch_env: Callable[[str], object], build_cache: Path
) -> None:
    env = old_torch_env("2.8.0")
    install = TorchInstall.from_path(env.torch_dir)  # type: ignore[attr-defined]
    output_dir = build_cache / "torch2.8.0-cuda"
    entry = timed_compile(
        torch=install,
        backend="cuda",
        output_dir=output_dir,
        gpu_home=env.site_packages / "nvidia" / "cuda_runtime",  # type: ignore[attr-defined]
    )
    run_zoo(env.python, output_dir / entry.file)  # type: ignore[attr-defined]
