"""One no-GIL error contract for both tables (issue 42, finding 8).

``managed_tensor_allocator`` and ``current_work_stream`` may be called without the GIL
(docs/import.md). Asked for something they refuse (a GPU stream a torch without a GPU
cannot give, a device id past ``c10::DeviceIndex``, an allocation on a device the table
does not serve, a negative size), both tables answer -1 and do not crash, from:

- a plain C thread with no Python thread state (tests/integration/fixtures/
  gilless_refusals.c); the allocator reports through SetError exactly once, out NULL;
- a Python thread that released the GIL (``ctypes.CFUNCTYPE``): no error is left pending
  (it would surface at the next C call as an unrelated ``SystemError``);

and only a caller that held the GIL (``ctypes.PYFUNCTYPE``) gets the table's ``ValueError``,
naming the library.

The portable table runs on the running torch (2.13, CPU), PyPI's 2.8.0 and 2.2.2 and the
GPU machine's 2.11.0+cu130 (CUDA builds on a host without a GPU); the native library for
the running torch (CPU build) and the native CUDA library of torch 2.8.0.
Each check runs in a subprocess: a crash is a return code, not a dead test runner.
"""

from __future__ import annotations

import json
import subprocess
import sysconfig
from pathlib import Path
from typing import Any

import pytest
from tests.helpers import ROOT, clean_env, run_python, suite_python

pytestmark = pytest.mark.slow

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "gilless_refusals.c"

SCRIPT = r"""
import ctypes, json, sys
import torch
sys.path[:0] = [sys.argv[3], sys.argv[4]]
from pathlib import Path
from exchange_suite.dlpack_ctypes import ExchangeLibrary
library = ExchangeLibrary(Path(sys.argv[1]))
caller = ctypes.CDLL(sys.argv[2])
caller.tcde_stream_refusal.argtypes = (ctypes.c_int64, ctypes.c_int, ctypes.c_int)
caller.tcde_allocator_refusal.argtypes = (
    ctypes.c_int64, ctypes.c_int, ctypes.c_int, ctypes.c_int64)
gpu_build = torch.version.cuda is not None or getattr(torch.version, "hip", None) is not None
# (device type, id) of streams refused on any host: ids past c10::DeviceIndex; on a CPU
# build of torch any GPU stream.
streams = [(2, 128), (2, 200), (10, 200), (2, 32767)]
if not gpu_build:
    streams += [(2, 0), (10, 0)]
# (device type, id, size) of allocations refused on any host: a negative size, a device
# id past c10::DeviceIndex, Vulkan; on a CPU build of torch any GPU.
allocations = [(1, 0, -3), (2, 200, 4), (7, 0, 4)]
if not gpu_build:
    allocations += [(2, 0, 4)]
report = {"c_thread_streams": [], "c_thread_allocations": [], "released": [], "held": []}
for device_type, device_id in streams:
    report["c_thread_streams"].append(
        caller.tcde_stream_refusal(library.address, device_type, device_id))
for device_type, device_id, size in allocations:
    report["c_thread_allocations"].append(
        caller.tcde_allocator_refusal(library.address, device_type, device_id, size))
pointer = ctypes.cast(library.api.current_work_stream, ctypes.c_void_p).value
signature = (ctypes.c_int, ctypes.c_int, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p))
released = ctypes.CFUNCTYPE(*signature)(pointer)
held = ctypes.PYFUNCTYPE(*signature)(pointer)
for device_type, device_id in streams:
    out = ctypes.c_void_p(1)
    rc = released(device_type, device_id, ctypes.byref(out))
    try:
        len([1, 2])  # a C call: raises SystemError if an error was left set
        pending = None
    except SystemError as exc:
        pending = repr(exc)
    report["released"].append([rc, pending])
    try:
        held(device_type, device_id, ctypes.byref(ctypes.c_void_p(1)))
        report["held"].append("no error")
    except Exception as exc:
        report["held"].append([type(exc).__name__, str(exc)])
print(json.dumps(report))
"""

#: The GPU machine's torch without its GPU: PyPI's 2.11.0+cu130 on CPython 3.12
#: (devtools.envs.gpu_carry.twin_env), a CUDA build where torch 2.11's own table crashes
#: on a refused stream without the GIL.
CUDA_TWIN = "2.11.0-cuda"


def torch_python(version: str, observer: Any) -> Path | str:
    """:func:`tests.helpers.suite_python`, and :data:`CUDA_TWIN`'s interpreter
    (``observer``: the ``env_observer`` fixture)."""
    if version == CUDA_TWIN:
        from devtools.envs.gpu_carry import twin_env

        return Path(twin_env(observer).python)
    return suite_python(version, observer=observer)


#: (table, torch) pairs: the portable table on the torches of the trust checks (2.8.0 is
#: a CUDA build on a host without a GPU) and the CUDA twin, the native library on the
#: running torch.
CASES = [
    ("portable", "running"),
    ("portable", "2.8.0"),
    ("portable", "2.2.2"),
    ("portable", CUDA_TWIN),
    ("native", "running"),
    ("native-cuda", "2.8.0"),
]


def _native_cuda_library(build_cache: Path, observer: Any) -> Path:
    """The native CUDA library of PyPI's torch 2.8.0 (compiled against its env's CUDA
    header wheels, as test_compile_real_torch.py's CUDA variant is; a cache hit there)."""
    from tests.helpers import suite_env
    from tests.integration.test_compile_real_torch import timed_compile

    from _torch_c_dlpack_ext_core.torchinstall import TorchInstall

    env = suite_env("2.8.0", observer=observer)
    output_dir = build_cache / "torch2.8.0-cuda"
    entry = timed_compile(
        torch=TorchInstall.from_path(env.torch_dir),
        backend="cuda",
        output_dir=output_dir,
        gpu_home=env.site_packages / "nvidia" / "cuda_runtime",
    )
    return output_dir / entry.file


def _caller(tmp_path: Path) -> Path:
    import tvm_ffi.libinfo

    out = tmp_path / "libgilless_refusals.so"
    subprocess.run(
        ["gcc", "-std=c11", "-O1", "-fPIC", "-shared", "-Wall", "-Wextra", "-Werror",
         f"-I{sysconfig.get_paths()['include']}",
         f"-I{tvm_ffi.libinfo.find_dlpack_include_path()}",
         "-o", str(out), str(FIXTURE), "-lpthread"],
        check=True, timeout=120,
    )  # fmt: skip
    return out


@pytest.mark.parametrize(("table", "version"), CASES, ids=[f"{t}-{v}" for t, v in CASES])
def test_refusals_without_the_gil_return_minus_one_on_both_tables(
    tmp_path: Path,
    request: pytest.FixtureRequest,
    table: str,
    version: str,
    env_observer: Any,
) -> None:
    if table == "portable":
        library: Path = request.getfixturevalue("portable_library")
    elif table == "native":
        library = request.getfixturevalue("torch213_library")[0]
    else:
        library = _native_cuda_library(request.getfixturevalue("build_cache"), env_observer)
    proc = run_python(
        SCRIPT,
        args=[str(library), str(_caller(tmp_path)), str(ROOT / "tests"), str(ROOT / "python")],
        env=clean_env(), python=torch_python(version, env_observer), timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, (
        f"{table} table on torch {version}: the process died ({proc.returncode}):\n"
        f"{proc.stdout[-2000:]}{proc.stderr[-4000:]}"
    )
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    streams = report["c_thread_streams"]
    assert streams == [-1] * len(streams), f"current_work_stream from a C thread: {streams}"
    allocations = report["c_thread_allocations"]
    # 101: one SetError call, out NULL, rc -1 (gilless_refusals.c).
    assert allocations == [101] * len(allocations), f"the allocator from a C thread: {allocations}"
    assert report["released"] == [[-1, None]] * len(streams), report["released"]
    for outcome in report["held"]:
        assert outcome != "no error", report["held"]
        kind, message = outcome
        assert kind == "ValueError", outcome
        assert "torch-c-dlpack-ext" in message, outcome
