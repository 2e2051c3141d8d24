"""The GPU check (``gpu_check.py``) as CI runs it: on a machine without a GPU its CPU half
runs (a real build for the running torch, forced, compared with torch's own table, tvm-ffi's
echo) and every GPU case says "not run", never "ok"; on a CUDA torch without a GPU too
(``test_cuda_torch_without_gpu.py`` runs this file under one). Where a GPU is present the
same test demands that every case ran.

The check builds into ``<build cache>/libs``, the folder ``gpu_run.py`` builds into (it
points the build cache there), so that its run of this file compiles nothing again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

CHECK = Path(__file__).with_name("gpu_check.py")
ROOT = Path(__file__).resolve().parents[2]
#: Cases of the CPU half: they must run (and pass) everywhere.
CPU_CASES = {
    "build: cpu library",
    "cpu: from_py/non-owning/to_py",
    "cpu: allocator -> torch kernels",
    "cpu: allocator, bad request",
    "cpu: current_work_stream",
    "cpu: tvm-ffi echo float16",
    "build: portable library",
    "portable cpu: from_py/non-owning/to_py",
    "portable cpu: allocator -> torch kernels",
    "portable cpu: current_work_stream",
}


def _run_check(tmp_path: Path, cache: Path, *args: str) -> tuple[int, str, list[dict[str, Any]]]:
    table = tmp_path / "table.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_C_DLPACK_EXT_")}
    env.pop("PYTHONPATH", None)
    proc = subprocess.run(
        [sys.executable, str(CHECK), "--cache-dir", str(cache), "--json", str(table), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    output = proc.stdout + proc.stderr
    print(proc.stdout)
    rows = json.loads(table.read_text()) if table.is_file() else []
    return proc.returncode, output, rows


@pytest.fixture(scope="module")
def gpu_present() -> bool:
    torch = pytest.importorskip("torch")
    return bool(torch.cuda.is_available())


def test_cpu_half_passes_and_gpu_cases_are_never_passed_without_a_gpu(
    tmp_path: Path, build_cache: Path, gpu_present: bool
) -> None:
    code, output, rows = _run_check(tmp_path, build_cache / "libs")
    assert code == 0, output[-6000:]
    verdicts = {row["case"]: row["verdict"] for row in rows}
    for case in CPU_CASES:
        assert verdicts.get(case) == "ok", (case, verdicts, output[-4000:])
    # Forced: the CUDA library where a GPU runs it, else the CPU one.
    forced = "cuda" if gpu_present else "cpu"
    assert verdicts[f"force: published table is ours ({forced})"] == "ok", verdicts
    gpu_rows = [
        row
        for row in rows
        if row["case"] not in CPU_CASES
        and row["case"] != f"force: published table is ours ({forced})"
    ]
    assert len(gpu_rows) >= 12, "every GPU case appears in the table"
    # A CUDA torch without a GPU still builds (and audits) the CUDA library.
    assert verdicts["build: cuda library"] in ("ok", "not run")
    gpu_rows = [row for row in gpu_rows if row["case"] != "build: cuda library"]
    if gpu_present:
        assert all(row["verdict"] == "ok" for row in gpu_rows), gpu_rows
    else:
        assert {row["verdict"] for row in gpu_rows} == {"not run"}, gpu_rows
        assert all(row["detail"] for row in gpu_rows), "each 'not run' says why"
    assert " ok, " in output, "the summary line"


def test_require_gpu_fails_where_no_gpu_case_ran(
    tmp_path: Path, build_cache: Path, gpu_present: bool
) -> None:
    if gpu_present:
        pytest.skip("a GPU is present: --require-gpu is satisfied here")
    code, output, _ = _run_check(tmp_path, build_cache / "libs", "--require-gpu")
    assert code == 2, output[-4000:]
    assert "--require-gpu: GPU cases were not run" in output


# --- the comparison itself finds a wrong table (a mutant of torch's own) ------------------


def _mutant_of_torch(field: str) -> Any:
    """torch's own table, except that its non-owning export changes one field of its result.

    (Only that member is wrapped: the suite calls it only for tensors the owning export
    accepted, so the wrapper never sees torch refuse, which a ctypes callback cannot pass on.)
    """
    import ctypes

    import torch
    from tests.exchange_suite import dlpack_ctypes as dl

    real = dl.api_from_capsule(torch.Tensor.__dlpack_c_exchange_api__)
    mutant = dl.DLPackExchangeAPI()
    ctypes.pointer(mutant)[0] = real
    inner = real.dltensor_from_py_object_no_sync

    def dltensor(obj: Any, out: Any) -> int:
        status = int(inner(obj, out))
        if field == "device_id":
            out.contents.device.device_id = 3
        else:
            out.contents.dtype.bits += 1
        return status

    keep = [type(inner)(dltensor)]
    mutant.dltensor_from_py_object_no_sync = keep[0]
    return mutant, keep, real


@pytest.mark.parametrize("field", ["device_id", "bits"])
def test_a_table_differing_in_one_field_is_a_mismatch(field: str) -> None:
    from tests.gpu import gpu_check

    mutant, keep, real = _mutant_of_torch(field)
    same = gpu_check.Tables(ours=real, torch=real, cpu=real)
    dtypes, views, mismatches = gpu_check.compare_exports(same, "cpu")
    assert mismatches == []
    assert dtypes >= 20
    assert views == dtypes * 5
    wrong = gpu_check.Tables(ours=mutant, torch=real, cpu=real)
    _, _, mismatches = gpu_check.compare_exports(wrong, "cpu")
    assert len(mismatches) >= dtypes, mismatches[:3]
    assert keep


def test_exit_codes() -> None:
    from tests.gpu import gpu_check

    report = gpu_check.Report()
    report.add("a", "1", "1", gpu_check.OK, gpu=False)
    report.not_run(["g"], "no GPU")
    assert gpu_check.exit_code(report, require_gpu=False) == 0
    assert gpu_check.exit_code(report, require_gpu=True) == gpu_check.EXIT_NO_GPU
    report.add("b", "1", "2", gpu_check.MISMATCH, gpu=False)
    assert gpu_check.exit_code(report, require_gpu=False) == gpu_check.EXIT_MISMATCH
    assert gpu_check.exit_code(report, require_gpu=True) == gpu_check.EXIT_MISMATCH
