"""The GPU check's one command (``gpu_run.py``) where the GPU machine's torch runs without its
GPU (``test_cuda_torch_without_gpu.py`` runs this file so): every step but ``pytest
tests/gpu`` (which is what runs this file) passes; the check's CPU half passes and its GPU
cases say "not run"; apache-tvm-ffi's own tests are collected from the carried sdist, run
their CPU parts and skip their GPU parts, on our native table and then the portable one,
ours from the first test to the last; the benchmark is a dry run; the report is written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from devtools.envs.gpu_carry import CARRY_DIR, TVM_FFI_TESTS
from tests.gpu import gpu_run

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
GPU_RUN = Path(__file__).with_name("gpu_run.py")


def _run(out: Path, *args: str, timeout: float = 3600) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_C_DLPACK_EXT_")}
    env.pop("PYTHONPATH", None)
    return subprocess.run(
        [sys.executable, str(GPU_RUN), "--out", str(out), *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


def _carry() -> Path:
    return Path(os.environ.get(gpu_run.CARRY_VAR) or ROOT / CARRY_DIR)


@pytest.fixture(scope="module")
def cuda_torch_without_gpu() -> None:
    torch = pytest.importorskip("torch")
    if os.environ.get(gpu_run.INSIDE):
        pytest.skip("inside gpu_run.py's own pytest step: no run within the run")
    if torch.version.cuda is None:
        pytest.skip(
            "a CPU torch: the command is dry-run under the GPU machine's CUDA torch "
            "(test_cuda_torch_without_gpu.py runs this file there)"
        )
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: gpu_run.py is the GPU check itself here")


def test_require_gpu_exits_2_and_still_writes_the_report(
    cuda_torch_without_gpu: None, tmp_path: Path
) -> None:
    skip = [arg for step in gpu_run.STEPS for arg in ("--skip", step)]
    proc = _run(tmp_path / "out", "--require-gpu", *skip, timeout=600)
    assert proc.returncode == gpu_run.EXIT_NO_GPU, proc.stdout + proc.stderr[-3000:]
    assert "--require-gpu: torch sees no GPU" in proc.stderr
    steps = json.loads((tmp_path / "out" / "run.json").read_text())["steps"]
    assert [(s["name"], s["result"], s["summary"]) for s in steps] == [
        (name, "not run", "--skip") for name in gpu_run.STEPS
    ]


def test_every_step_passes_and_says_what_ran(
    cuda_torch_without_gpu: None, tmp_path: Path, build_cache: Path
) -> None:
    carry = _carry()
    if not list(carry.glob("apache_tvm_ffi-*.tar.gz")):
        pytest.skip(f"nothing carried in {carry}: `python -m devtools gpu-carry` gathers it")
    out = tmp_path / "out"
    proc = _run(
        out, "--carry", str(carry), "--work-dir", str(build_cache), "--deadline", "3000",
        "--skip", "pytest tests/gpu",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    document = json.loads((out / "run.json").read_text())
    steps: dict[str, dict[str, Any]] = {s["name"]: s for s in document["steps"]}
    assert list(steps) == list(gpu_run.STEPS)
    assert {n: s["result"] for n, s in steps.items()} == {
        **dict.fromkeys(gpu_run.STEPS[:-1], "ok"),
        "pytest tests/gpu": "not run",
    }
    assert document["torch"]["gpu"] is False
    assert (out / "run.md").read_text().startswith(f"GPU check: torch {document['torch']['torch']}")

    verdicts = {r["case"]: r["verdict"] for r in json.loads((out / "check.json").read_text())}
    assert verdicts["force: published table is ours (cpu)"] == "ok"
    assert "MISMATCH" not in verdicts.values()
    assert sum(v == "not run" for v in verdicts.values()) >= 19
    assert all(v == "not run" for case, v in verdicts.items() if case.startswith("cuda:"))

    files = {name.removesuffix(".py") for name in TVM_FFI_TESTS}
    for table, kind in (("native", "load"), ("portable", "portable")):
        details = steps[f"tvm-ffi {table}"]["details"]
        assert details["table"]["kind"] == kind
        assert details["table"]["published_is_ours"] is True
        assert details["table"]["still_published_at_end"] is True
        counts = details["counts"]
        assert counts["failed"] == counts["errors"] == 0, counts
        # Their CPU parts run; their GPU parts (streams, GPU tensors) skip for want of one.
        assert counts["passed"] >= 20, counts
        assert counts["skipped"] >= 5, counts
        assert set(details["seconds_per_file"]) == files
    assert "cuda" in Path(steps["tvm-ffi native"]["details"]["table"]["library"]).name

    bench = json.loads((out / "bench" / "exchange-cuda.json").read_text())
    assert bench["data"]["dry_run"] is True
    assert bench["data"]["native_backend"] == "cuda"
    assert steps["bench"]["summary"].startswith("dry run (CPU tensors); from_py_object: ")
