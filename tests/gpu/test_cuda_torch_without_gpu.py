"""``tests/gpu`` under the GPU machine's torch without its GPU, so that CI sees that case.

The suite's torch is a CPU build; the GPU check runs on a CUDA one, where a GPU may be
missing (a CUDA wheel on a host without a GPU, as PyPI ships them). There the check once
reported 2 mismatches: forcing the CPU library, the selector rightly refused it without
``BACKEND=cpu``. This test runs ``tests/gpu`` once inside the GPU machine's twin
(:func:`devtools.envs.gpu_carry.twin_env`: torch 2.11.0+cu130 on CPython 3.12 with what
that machine has and what is carried to it; created once; its cost: docs/facts.md),
with the carried files gathered once into the build cache: every test there must pass or
skip for want of a GPU, and the CPU half of the check, the benchmark's refusal and dry
run, and the one command (``gpu_run.py``, apache-tvm-ffi's tests included) must run.
"""

from __future__ import annotations

import os
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
#: Tests that must run (not skip) in the twin: the no-GPU case of each piece.
MUST_RUN = {
    "test_gpu_check.test_cpu_half_passes_and_gpu_cases_are_never_passed_without_a_gpu",
    "test_gpu_check.test_require_gpu_fails_where_no_gpu_case_ran",
    "test_bench_gpu.test_without_a_gpu_it_refuses_with_a_typed_error",
    "test_bench_gpu.test_dry_run_times_every_member_of_the_three_tables",
    "test_gpu_run.test_require_gpu_exits_2_and_still_writes_the_report",
    "test_gpu_run.test_every_step_passes_and_says_what_ran",
}


def test_tests_gpu_pass_on_a_cuda_torch_without_a_gpu(
    build_cache: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    torch = pytest.importorskip("torch")
    if torch.version.cuda is not None or getattr(torch.version, "hip", None):
        pytest.skip("already under a GPU build of torch: tests/gpu runs here as it is")
    from devtools.envs.gpu_carry import SDIST, gather, twin_env

    twin = twin_env(request.getfixturevalue("env_observer"))
    carry = build_cache / "gpu-carry"
    version = SDIST.split("==")[1]
    if not list(carry.glob(f"apache_tvm_ffi-{version}.tar.gz")):
        gather(carry)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_C_DLPACK_EXT_")}
    env.pop("PYTHONPATH", None)
    env.update(TCDE_TEST_BUILD_CACHE=str(build_cache / "cuda-twin"), TCDE_GPU_CARRY=str(carry))
    report = tmp_path / "tests-gpu.xml"
    proc = subprocess.run(
        [str(twin.python), "-m", "pytest", "tests/gpu", "-p", "no:cacheprovider", "-q", "-rs",
         "--junitxml", str(report)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-8000:] + proc.stderr[-3000:]
    outcomes = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}.{case.get('name')}"
        tags = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        outcomes[name] = tags[0] if tags else "passed"
    ran = {name for name, outcome in outcomes.items() if outcome == "passed"}
    assert ran >= MUST_RUN, sorted(MUST_RUN - ran)
    assert set(outcomes.values()) <= {"passed", "skipped"}, outcomes
    assert outcomes[
        "test_cuda_torch_without_gpu.test_tests_gpu_pass_on_a_cuda_torch_without_a_gpu"
    ] == ("skipped"), "no twin within the twin"
