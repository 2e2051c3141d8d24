"""The portable table (csrc/portable): its build, and what the suites cannot see.

- every API it is built for compiles warning-free and exports exactly the three symbols,
  importing nothing of torch; its build info names the Python ABI;
- the exchange suite against it on torch 2.13 (the conformance suite runs from
  test_conformance_suite.py), on PyPI's torch 2.2, 2.4, 2.8 (legacy ``DLManagedTensor``
  capsules) and 2.9, and on the GPU machine's torch without its GPU (2.11.0+cu130, CPython
  3.12: where the dispatch zoo's CUDA labels matter, issue 42);
- the allocator and current_work_stream from C threads that hold no GIL, and from Python
  threads through ``ctypes.CDLL`` (which releases it);
- deleters from threads without the GIL, and after the interpreter has finalised; the
  allocator and current_work_stream after it (no crash, -1), and current_work_stream's
  errors without the GIL (left for no one);
- ``dltensor_from_py_object_no_sync`` in flat memory over 10^6 calls, on one long-lived
  tensor and on 10^6 short-lived ones;
- a real apache-tvm-ffi round trip through it, published as torch's attribute.

Each check runs in a subprocess: a crash is a return code, not a dead test runner.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.helpers import (
    CSRC,
    ROOT,
    build_portable_library,
    clean_env,
    run_python,
)
from tests.integration.test_compile_real_torch import run_exchange_suite

pytestmark = pytest.mark.slow

NATIVE_CALLER = Path(__file__).resolve().parent / "fixtures" / "portable_native_caller.c"
OLD_TORCH = "2.8.0"
#: The exchange suite's tests on the portable table: far fewer means most skipped.
MIN_SUITE_PASSED_213 = 300
MIN_SUITE_PASSED_OLD = 230


def _other_python_include(version: str) -> Path | None:
    """The include dir of another CPython (``python3.12`` on PATH or pyenv's), or None."""
    # pyenv's shims are on PATH for every version but run only the selected ones.
    candidates = [str(p) for p in sorted(Path.home().glob(f".pyenv/versions/{version}.*/bin"))]
    candidates = [f"{c}/python{version}" for c in candidates]
    on_path = shutil.which(f"python{version}")
    for python in [*candidates, *([on_path] if on_path else [])]:
        proc = subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"],
            capture_output=True, text=True, check=False, timeout=60,
        )  # fmt: skip
        include = Path(proc.stdout.strip())
        if proc.returncode == 0 and (include / "Python.h").is_file():
            return include
    return None


def _free_threaded_include() -> Path | None:
    root = Path.home() / ".cache" / "torch-c-dlpack-ext-dev" / "python"
    found = sorted(root.glob("3.1*t/include/python3.1*t/Python.h"))
    return found[-1].parent if found else None


def _build_info(library: Path) -> dict[str, object]:
    # Reading the string needs no interpreter state: ctypes.CDLL in a fresh process.
    code = (
        "import ctypes, sys; lib = ctypes.CDLL(sys.argv[1]); "
        "lib.TorchCDLPackExtBuildInfo.restype = ctypes.c_char_p; "
        "print(lib.TorchCDLPackExtBuildInfo().decode())"
    )
    proc = run_python(code, args=[str(library)], env=clean_env())
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    assert isinstance(data, dict)
    return data


def _dynamic_symbols(library: Path, *, undefined: bool) -> set[str]:
    flag = "--undefined-only" if undefined else "--defined-only"
    out = subprocess.run(
        ["nm", "-D", flag, str(library)], capture_output=True, text=True, check=True
    ).stdout
    return {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}


def _variants() -> list[tuple[str, int | None, Path | None, str]]:
    """(id, Py_LIMITED_API, include dir or None for the running one, expected "python")."""
    running = f"{sys.version_info[0]}.{sys.version_info[1]}"
    variants: list[tuple[str, int | None, Path | None, str]] = [
        ("abi3", 0x03090000, None, "abi3"),
        (f"full-{running}", None, None, running),
    ]
    for version in ("3.12", "3.13", "3.14"):
        include = _other_python_include(version)
        if include is not None:
            variants.append((f"abi3.12-with-{version}", 0x030C0000, include, "abi3.12"))
            break
    threaded = _free_threaded_include()
    if threaded is not None:
        tag = threaded.name.removeprefix("python")
        variants.append((f"free-threaded-{tag}", None, threaded, tag))
    return variants


@pytest.mark.parametrize(
    ("limited_api", "include", "python_tag"),
    [pytest.param(api, inc, tag, id=name) for name, api, inc, tag in _variants()],
)
def test_builds_warning_free_and_exports_three_symbols(
    tmp_path: Path, limited_api: int | None, include: Path | None, python_tag: str
) -> None:
    # build_portable_library compiles with -Wall -Wextra -Werror.
    library = build_portable_library(tmp_path, limited_api=limited_api, python_include=include)
    assert _dynamic_symbols(library, undefined=False) == {
        "TorchDLPackExchangeAPIPtr",
        "TorchCDLPackExtBuildInfo",
        "TorchCDLPackExtLoadProblem",
    }
    undefined = _dynamic_symbols(library, undefined=True)
    # Only the Python C API (resolved at load time from the interpreter) and libc.
    foreign = {name for name in undefined if not re.match(r"_?Py|__|_ITM_|[a-z]", name)}
    assert not foreign, foreign
    assert not any("torch" in name or "c10" in name or "at::" in name for name in undefined)
    needed = subprocess.run(
        ["readelf", "-d", str(library)], capture_output=True, text=True, check=True
    ).stdout
    assert "libpython" not in needed, "an extension-module-style library links no libpython"
    if include is None:  # loadable here: the running interpreter's headers
        info = _build_info(library)
        assert info["python"] == python_tag
        assert (info["table"], info["torch"], info["backend"]) == ("portable", "any", "any")


def test_source_includes_only_python_and_dlpack() -> None:
    """Every file of the portable table (and the headers it shares with the native table)
    includes Python.h, dlpack.h, the C standard library and the table's own headers:
    nothing of torch."""
    shared = ("../tcde_contract.h", "../tcde_borrowed_dims.h")
    sources = [*sorted((CSRC / "portable").glob("*.[ch]"))]
    sources += [CSRC / "portable" / name for name in shared]
    pattern = re.compile(r"^#include\s+[<\"]([^>\"]+)[>\"]", re.MULTILINE)
    includes: set[str] = set()
    for path in sources:
        includes |= set(pattern.findall(path.read_text()))
    allowed = {"Python.h", "dlpack/dlpack.h", "portable.h", *shared}
    assert allowed <= includes
    # Everything else is the C standard library.
    others = includes - allowed
    assert {name for name in others if "/" in name or "torch" in name or "tcde" in name} == set()


def test_exchange_suite_on_torch213(portable_library: Path) -> None:
    assert run_exchange_suite(sys.executable, portable_library) >= MIN_SUITE_PASSED_213


@pytest.mark.parametrize("version", ["2.2.2", "2.4.1", OLD_TORCH, "2.9.1"])
def test_exchange_suite_on_older_torch(
    portable_library: Path, version: str, old_torch_env: Callable[[str], Any]
) -> None:
    """torch 2.2-2.8 export and import legacy DLManagedTensor capsules only (2.2, older
    than any native build, is served by this table alone); 2.9 has versioned capsules but
    imports neither byte_offset nor the float8/fp4 codes."""
    env = old_torch_env(version)
    assert run_exchange_suite(env.python, portable_library) >= MIN_SUITE_PASSED_OLD


def test_exchange_suite_on_the_cuda_torch_211(portable_library: Path, env_observer: Any) -> None:
    """PyPI's CUDA build of torch 2.11 on a host without a GPU (the GPU machine's twin,
    devtools.envs.gpu_carry.twin_env): a CUDA build where host memory labelled as a GPU's
    (the zoo's dispatch_device liars) would reach a consumer's kernel."""
    from devtools.envs.gpu_carry import twin_env

    python = twin_env(env_observer).python
    assert run_exchange_suite(python, portable_library) >= MIN_SUITE_PASSED_213


def _native_caller(tmp_path: Path) -> Path:
    import tvm_ffi.libinfo

    out = tmp_path / "libnative_caller.so"
    subprocess.run(
        ["gcc", "-std=c11", "-O1", "-fPIC", "-shared", "-Wall", "-Wextra", "-Werror",
         f"-I{sysconfig.get_paths()['include']}",
         f"-I{tvm_ffi.libinfo.find_dlpack_include_path()}",
         "-o", str(out), str(NATIVE_CALLER), "-lpthread"],
        check=True, timeout=120,
    )  # fmt: skip
    return out


#: Loads the table through ctypes.CDLL: every call made through CFUNCTYPE releases the GIL.
GILLESS = r"""
import ctypes, sys, threading
import torch
sys.path[:0] = [sys.argv[3], sys.argv[4]]
from exchange_suite.dlpack_ctypes import DLManagedTensorVersioned, DLTensor

lib = ctypes.CDLL(sys.argv[1])
lib.TorchDLPackExchangeAPIPtr.restype = ctypes.c_int64
address = lib.TorchDLPackExchangeAPIPtr()
assert address, "the table did not load"
caller = ctypes.CDLL(sys.argv[2])
caller.tcde_run_native_threads.argtypes = (ctypes.c_int64, ctypes.c_int, ctypes.c_int)

# 1. Plain C threads: no Python thread state at all.
failures = caller.tcde_run_native_threads(address, 8, 300)
assert failures == 0, f"{failures} failed checks in C threads"

# 2. Python threads, the GIL released around each call (CFUNCTYPE, not PYFUNCTYPE).
MTV_P = ctypes.POINTER(DLManagedTensorVersioned)
SET_ERROR = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p)
ALLOC = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(DLTensor), ctypes.POINTER(MTV_P),
                         ctypes.c_void_p, SET_ERROR)
STREAM = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_int32,
                          ctypes.POINTER(ctypes.c_void_p))
FROM_PY = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(MTV_P))
DELETER = ctypes.CFUNCTYPE(None, MTV_P)
pointers = (ctypes.c_void_p * 7).from_address(address)
allocator, stream_of = ALLOC(pointers[2]), STREAM(pointers[6])
from_py = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(MTV_P))(pointers[3])
errors = []
sink = SET_ERROR(lambda _ctx, kind, msg: errors.append(kind.decode()))
problems = []

def work(n):
    for i in range(300):
        dims = (ctypes.c_int64 * 1)(n + i % 5 + 1)
        proto = DLTensor()
        proto.ndim, proto.shape = 1, dims
        proto.dtype.code, proto.dtype.bits, proto.dtype.lanes = 2, 32, 1
        proto.device.device_type = 1
        out = MTV_P()
        if allocator(ctypes.byref(proto), ctypes.byref(out), None, sink) != 0 or not out:
            problems.append(("allocator", n, i))
            continue
        ctypes.memset(out.contents.dl_tensor.data, 1, 4 * dims[0])
        DELETER(ctypes.cast(out.contents.deleter, ctypes.c_void_p).value)(out)  # GIL released
        stream = ctypes.c_void_p(1)
        if stream_of(7, 0, ctypes.byref(stream)) != 0 or stream.value is not None:
            problems.append(("stream", n, i))
        # An export made with the GIL, deleted from this thread without it.
        exported = MTV_P()
        from_py(torch.full((3,), float(n)), ctypes.byref(exported))
        DELETER(ctypes.cast(exported.contents.deleter, ctypes.c_void_p).value)(exported)

threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
for t in threads: t.start()
for t in threads: t.join()
assert not problems, problems[:5]
assert errors == [], errors
print("gilless ok")
"""


def test_allocator_stream_and_deleters_without_the_gil(
    tmp_path: Path, portable_library: Path
) -> None:
    caller = _native_caller(tmp_path)
    proc = run_python(
        GILLESS,
        args=[str(portable_library), str(caller), str(ROOT / "tests"), str(ROOT / "python")],
        env=clean_env(), timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr[-6000:]
    assert "gilless ok" in proc.stdout


#: Exports (owning), allocations and an import round trip whose deleters run only after
#: Py_FinalizeEx, from the C helper's Py_AtExit hook.
AFTER_FINALIZE = r"""
import ctypes, sys
import torch
sys.path[:0] = [sys.argv[3], sys.argv[4]]
from exchange_suite.dlpack_ctypes import (
    DLManagedTensorVersioned, DLTensor, ErrorSink, ExchangeLibrary, export_managed)
from pathlib import Path

library = ExchangeLibrary(Path(sys.argv[1]))
api = library.api
caller = ctypes.CDLL(sys.argv[2])
caller.tcde_delete_after_finalize.argtypes = (ctypes.c_void_p,)
keep = []
for tensor in (torch.arange(6.0), torch.ones(2, 3).t(), torch.empty(0), torch.zeros(4)[1:]):
    managed = export_managed(api, tensor)
    assert caller.tcde_delete_after_finalize(ctypes.cast(managed, ctypes.c_void_p)) == 0
dims = (ctypes.c_int64 * 2)(3, 5)
proto = DLTensor()
proto.ndim, proto.shape = 2, dims
proto.dtype.code, proto.dtype.bits, proto.dtype.lanes = 2, 32, 1
proto.device.device_type = 1
out = ctypes.POINTER(DLManagedTensorVersioned)()
sink = ErrorSink()
assert api.managed_tensor_allocator(ctypes.byref(proto), ctypes.byref(out), None,
                                    sink.callback) == 0, sink.errors
assert caller.tcde_delete_after_finalize(ctypes.cast(out, ctypes.c_void_p)) == 0
print("scheduled")
"""


@pytest.mark.parametrize("torch_version", ["running", OLD_TORCH])
def test_deleters_after_finalize(
    tmp_path: Path,
    portable_library: Path,
    torch_version: str,
    suite_interpreter: Callable[[str], Path | str],
) -> None:
    python = suite_interpreter(torch_version)
    caller = _native_caller(tmp_path)
    proc = run_python(
        AFTER_FINALIZE,
        args=[str(portable_library), str(caller), str(ROOT / "tests"), str(ROOT / "python")],
        env=clean_env(), python=python, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr[-6000:]
    assert "scheduled" in proc.stdout
    assert "deleters ran after finalize: 5 (Py_IsInitialized=0)" in proc.stderr, proc.stderr


#: The allocator and current_work_stream called after Py_FinalizeEx, from the exiting
#: thread (a Py_AtExit hook) and from a new C thread: no crash; the allocator refuses
#: through SetError, the stream getter answers a CPU-only torch's host and non-GPU types
#: from what it cached, and -1 otherwise.
LATE_CALLS = r"""
import ctypes, sys
import torch
sys.path[:0] = [sys.argv[3], sys.argv[4]]
from exchange_suite.dlpack_ctypes import ExchangeLibrary, export_managed
from pathlib import Path
library = ExchangeLibrary(Path(sys.argv[1]))
managed = export_managed(library.api, torch.ones(3))  # the table is loaded and used
managed.contents.deleter(managed)
caller = ctypes.CDLL(sys.argv[2])
caller.tcde_late_calls_after_finalize.argtypes = (ctypes.c_int64,)
assert caller.tcde_late_calls_after_finalize(library.address) == 0
print("cuda build" if torch.version.cuda else "cpu build")
"""


@pytest.mark.parametrize("torch_version", ["running", OLD_TORCH])
def test_allocator_and_stream_after_finalize(
    tmp_path: Path,
    portable_library: Path,
    torch_version: str,
    suite_interpreter: Callable[[str], Path | str],
) -> None:
    python = suite_interpreter(torch_version)
    proc = run_python(
        LATE_CALLS,
        args=[str(portable_library), str(_native_caller(tmp_path)), str(ROOT / "tests"),
              str(ROOT / "python")],
        env=clean_env(), python=python, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr[-6000:]
    cpu_only = "cpu build" in proc.stdout
    # The vulkan stream: NULL from a CPU-only torch's cached answer; a GPU torch's
    # answer needs Python, so -1.
    vulkan = 0 if cpu_only else -1
    for where in ("atexit", "thread"):
        assert (
            f"late {where}: initialized=0 alloc=-1 out_null=1 set_error=1 stream_cpu=0 "
            f"stream_vulkan={vulkan} stream_cuda=-1"
        ) in proc.stderr, proc.stderr[-3000:]


#: current_work_stream refusing (kDLCUDA on a CPU torch) when called without the GIL:
#: from a Python thread that released it (ctypes.CFUNCTYPE), the error must not stay
#: pending (it would surface at the next C call as an unrelated SystemError); from a C
#: thread with no thread state, -1 and nothing else. With the GIL held (PYFUNCTYPE) the
#: caller still gets its ValueError.
STREAM_ERRORS_WITHOUT_GIL = r"""
import ctypes, sys
import torch
sys.path[:0] = [sys.argv[3], sys.argv[4]]
from exchange_suite.dlpack_ctypes import ExchangeLibrary
from pathlib import Path
assert torch.version.cuda is None and torch.version.hip is None, "needs a CPU-only torch"
library = ExchangeLibrary(Path(sys.argv[1]))
pointer = ctypes.cast(library.api.current_work_stream, ctypes.c_void_p).value
released = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_int32,
                            ctypes.POINTER(ctypes.c_void_p))(pointer)
held = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_int32,
                         ctypes.POINTER(ctypes.c_void_p))(pointer)
for _ in range(50):
    out = ctypes.c_void_p(1)
    assert released(2, 0, ctypes.byref(out)) == -1
    assert len([1, 2]) == 2  # a C call: fails with SystemError if an error was left set
    assert int("7") == 7
caller = ctypes.CDLL(sys.argv[2])
caller.tcde_stream_in_c_thread.argtypes = (ctypes.c_int64, ctypes.c_int)
assert caller.tcde_stream_in_c_thread(library.address, 2) == -1
assert caller.tcde_stream_in_c_thread(library.address, 1) == 0
try:
    held(2, 0, ctypes.byref(ctypes.c_void_p(1)))
except ValueError as exc:
    assert "current_work_stream" in str(exc), exc
else:
    raise AssertionError("no ValueError with the GIL held")
print("stream errors ok")
"""


def test_stream_errors_without_the_gil_stay_with_no_one(
    tmp_path: Path, portable_library: Path
) -> None:
    proc = run_python(
        STREAM_ERRORS_WITHOUT_GIL,
        args=[str(portable_library), str(_native_caller(tmp_path)), str(ROOT / "tests"),
              str(ROOT / "python")],
        env=clean_env(), timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr[-6000:]
    assert "stream errors ok" in proc.stdout


#: 10^6 non-owning exports of one tensor, then of 10^6 short-lived tensors: RSS stays flat.
FLAT_MEMORY = r"""
import ctypes, gc, json, sys
import psutil, torch
sys.path[:0] = [sys.argv[2], sys.argv[3]]
from exchange_suite.dlpack_ctypes import DLTensor, ExchangeLibrary
from pathlib import Path

api = ExchangeLibrary(Path(sys.argv[1])).api
call = api.dltensor_from_py_object_no_sync
out = DLTensor()
ref = ctypes.byref(out)
n = int(sys.argv[4])
process = psutil.Process()
long_lived = torch.zeros(3, 4)
for _ in range(20000):  # warm up: caches, allocator arenas
    call(long_lived, ref)
    call(torch.empty(2, 3), ref)
gc.collect()
start = process.memory_info().rss
for _ in range(n):
    call(long_lived, ref)
assert tuple(out.shape[i] for i in range(2)) == (3, 4)
gc.collect()
after_long = process.memory_info().rss
for i in range(n):
    call(torch.empty(2, 1 + i % 3), ref)
gc.collect()
after_short = process.memory_info().rss
print(json.dumps({"start": start, "long": after_long, "short": after_short}))
"""

#: RSS growth allowed over 10^6 calls: an entry kept per call (a dict slot, a weakref, the
#: copied shape) would cost well over 100 MB.
FLAT_BOUND_MB = 24


def test_dltensor_from_py_memory_is_flat(portable_library: Path) -> None:
    pytest.importorskip("psutil")
    proc = run_python(
        FLAT_MEMORY,
        args=[str(portable_library), str(ROOT / "tests"), str(ROOT / "python"), "1000000"],
        env=clean_env(), timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr[-6000:]
    rss = json.loads(proc.stdout.strip().splitlines()[-1])
    growth_long = (rss["long"] - rss["start"]) / 2**20
    growth_short = (rss["short"] - rss["long"]) / 2**20
    print(f"\nFLAT: +{growth_long:.1f} MB (one tensor), +{growth_short:.1f} MB (short-lived)")
    assert growth_long < FLAT_BOUND_MB, rss
    assert growth_short < FLAT_BOUND_MB, rss


#: The table published as torch's attribute before tvm_ffi is imported, then real tvm-ffi
#: calls: tensors in (from_py / dltensor_from_py), tensors out (to_py), the env allocator.
TVM_FFI_ROUND_TRIP = r"""
import ctypes, sys
import torch
lib = ctypes.PyDLL(sys.argv[1])
lib.TorchDLPackExchangeAPIPtr.restype = ctypes.c_int64
address = lib.TorchDLPackExchangeAPIPtr()
new_capsule = ctypes.pythonapi.PyCapsule_New
new_capsule.restype = ctypes.py_object
new_capsule.argtypes = (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)
torch.Tensor.__dlpack_c_exchange_api__ = new_capsule(address, b"dlpack_exchange_api", None)
import tvm_ffi, tvm_ffi.testing
get = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))
assert get(torch.Tensor.__dlpack_c_exchange_api__, b"dlpack_exchange_api") == address
x = torch.arange(12, dtype=torch.float32).reshape(3, 4)[:, 1:]
t = tvm_ffi.from_dlpack(x)
assert tuple(t.shape) == (3, 3), t.shape
y = torch.from_dlpack(t)
assert torch.equal(x, y) and y.data_ptr() == x.data_ptr()
echoed = tvm_ffi.testing.echo(x)
assert isinstance(echoed, torch.Tensor), type(echoed)
assert torch.equal(echoed, x) and echoed.data_ptr() == x.data_ptr()
# Our table, not torch's own: only ours refuses a lazily conjugated tensor, with its name.
try:
    tvm_ffi.testing.echo(torch.ones(2, dtype=torch.complex64).conj())
except Exception as exc:
    assert "portable table" in str(exc), exc
else:
    raise AssertionError("a conjugate-bit tensor went through")
print("tvm-ffi ok")
"""


def test_tvm_ffi_round_trip(tmp_path: Path, portable_library: Path) -> None:
    pytest.importorskip("tvm_ffi")
    env = clean_env(TVM_FFI_CACHE_DIR=str(tmp_path / "tvm-cache"))
    proc = run_python(TVM_FFI_ROUND_TRIP, args=[str(portable_library)], env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-6000:]
    assert "tvm-ffi ok" in proc.stdout


def test_load_problem_is_null_after_import_torch(portable_library: Path) -> None:
    code = (
        "import ctypes, sys, torch; lib = ctypes.PyDLL(sys.argv[1]); "
        "lib.TorchCDLPackExtLoadProblem.restype = ctypes.c_char_p; "
        "lib.TorchDLPackExchangeAPIPtr.restype = ctypes.c_int64; "
        "print(lib.TorchCDLPackExtLoadProblem(), lib.TorchDLPackExchangeAPIPtr() != 0)"
    )
    proc = run_python(code, args=[str(portable_library)], env=clean_env())
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["None", "True"]
    assert os.path.getsize(portable_library) < 200_000


#: CPU exchanges through the table on a CUDA torch: nothing may initialise CUDA (a forked
#: child could no longer use it, CUDA_VISIBLE_DEVICES set later would be ignored).
NO_CUDA_INIT = r"""
import ctypes, sys
import torch
sys.path[:0] = [sys.argv[2], sys.argv[3]]
from exchange_suite.dlpack_ctypes import (
    DLManagedTensorVersioned, DLTensor, ErrorSink, ExchangeLibrary, export_dltensor,
    export_managed, import_managed)
from pathlib import Path
assert torch.version.cuda is not None, "needs a CUDA build of torch"
api = ExchangeLibrary(Path(sys.argv[1])).api
x = torch.arange(6.0).reshape(2, 3)
assert torch.equal(import_managed(api, export_managed(api, x)), x)
export_dltensor(api, x)
dims = (ctypes.c_int64 * 1)(8)
proto = DLTensor()
proto.ndim, proto.shape = 1, dims
proto.dtype.code, proto.dtype.bits, proto.dtype.lanes = 2, 32, 1
proto.device.device_type = 1
out = ctypes.POINTER(DLManagedTensorVersioned)()
sink = ErrorSink()
assert api.managed_tensor_allocator(ctypes.byref(proto), ctypes.byref(out), None,
                                    sink.callback) == 0
out.contents.deleter(out)
stream = ctypes.c_void_p(1)
api.current_work_stream(1, 0, ctypes.byref(stream))
print("initialized", torch.cuda.is_initialized())
"""


def test_cpu_exchanges_leave_cuda_uninitialised(
    portable_library: Path, old_torch_env: Callable[[str], Any]
) -> None:
    env = old_torch_env(OLD_TORCH)
    proc = run_python(
        NO_CUDA_INIT,
        args=[str(portable_library), str(ROOT / "tests"), str(ROOT / "python")],
        env=clean_env(), python=env.python, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr[-6000:]
    assert proc.stdout.split()[-2:] == ["initialized", "False"], proc.stdout


#: The allocator calls torch.empty, outside every mode (issue 42, finding 9): under
#: FakeTensorMode too it returns host memory; a changed default dtype or device must not
#: change what the prototype asked for.
ALLOCATOR_MODES = r"""
import ctypes, sys
import torch
sys.path[:0] = [sys.argv[2], sys.argv[3]]
from exchange_suite.dlpack_ctypes import (
    DLManagedTensorVersioned, DLTensor, ErrorSink, ExchangeLibrary, managed_fields)
from pathlib import Path
from torch._subclasses.fake_tensor import FakeTensorMode
api = ExchangeLibrary(Path(sys.argv[1])).api

def allocate(bits=32):
    dims = (ctypes.c_int64 * 2)(4, 3)
    proto = DLTensor()
    proto.ndim, proto.shape = 2, dims
    proto.dtype.code, proto.dtype.bits, proto.dtype.lanes = 2, bits, 1
    proto.device.device_type = 1
    out = ctypes.POINTER(DLManagedTensorVersioned)()
    sink = ErrorSink()
    status = api.managed_tensor_allocator(ctypes.byref(proto), ctypes.byref(out), None,
                                          sink.callback)
    if status != 0:
        assert not out
        return sink.errors
    fields = managed_fields(out)
    out.contents.deleter(out)
    return (fields.device_type, fields.code, fields.bits, fields.shape, fields.strides)

plain = (1, 2, 32, (4, 3), (3, 1))
assert allocate() == plain, allocate()
with FakeTensorMode():
    under_fake = allocate()
assert under_fake == plain, under_fake
torch.set_default_dtype(torch.float64)
assert allocate() == plain, allocate()
assert allocate(64) == (1, 2, 64, (4, 3), (3, 1)), allocate(64)
torch.set_default_dtype(torch.float32)
torch.set_default_device("meta")
assert allocate() == plain, allocate()
torch.set_default_device("cpu")
print("modes ok")
"""


def test_allocator_under_modes_and_changed_defaults(portable_library: Path) -> None:
    proc = run_python(
        ALLOCATOR_MODES,
        args=[str(portable_library), str(ROOT / "tests"), str(ROOT / "python")],
        env=clean_env(), timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr[-6000:]
    assert "modes ok" in proc.stdout


#: The stream mapping of each torch build flavour, with a stand-in build: the real torch
#: 2.13 (CPU) wearing the version fields of a ROCm, CUDA or XPU build, and stream getters
#: that answer a known handle (no ROCm or XPU torch, and no GPU, can be had here). The
#: table reads the flavour from torch.version on first use, as it does on the real build.
STREAM_FLAVOUR = r"""
import ctypes, json, sys, types
import torch
flavour = sys.argv[2]
if sys.argv[3] != "running":
    torch.__version__ = sys.argv[3]  # the table reads the minor once, on first use
torch.version.cuda = "12.8" if flavour == "cuda" else None
torch.version.hip = "6.2.41133" if flavour == "rocm" else None
torch.version.xpu = "20250101" if flavour == "xpu" else None
asked = []

def current_stream(device=None):
    asked.append(device)
    return types.SimpleNamespace(cuda_stream=0x1000 + (device or 0),
                                 sycl_queue=0x2000 + (device or 0))

torch.cuda.current_stream = current_stream
torch.xpu.current_stream = current_stream
# The raw getter (an int, no Stream object) where this torch has one: a GPU build's.
torch._C._cuda_getCurrentRawStream = lambda index: 0x3000 + index
dll = ctypes.PyDLL(sys.argv[1])
dll.TorchDLPackExchangeAPIPtr.restype = ctypes.c_int64
table = dll.TorchDLPackExchangeAPIPtr()
# DLPackExchangeAPI: header (version 8 bytes, prev_api 8), then five function pointers;
# current_work_stream is the fifth. Called with the GIL held, so a refusal raises here.
fn_ptr = ctypes.c_void_p.from_address(table + 16 + 4 * 8).value
stream_fn = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_int32,
                              ctypes.POINTER(ctypes.c_void_p))(fn_ptr)
result = {}
for name, code in (("cpu", 1), ("cuda", 2), ("rocm", 10), ("oneapi", 14)):
    for device in (0, 3, -1):
        out = ctypes.c_void_p(7)
        try:
            rc = stream_fn(code, device, ctypes.byref(out))
            result[f"{name}:{device}"] = [rc, out.value]
        except Exception as exc:
            result[f"{name}:{device}"] = [type(exc).__name__, str(exc)]
print(json.dumps({"result": result, "asked": asked}))
"""


def _stream_flavour(
    portable_library: Path, flavour: str, version: str = "running"
) -> dict[str, list[object]]:
    proc = run_python(
        STREAM_FLAVOUR, args=[str(portable_library), flavour, version], env=clean_env(),
        timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    data: dict[str, list[object]] = json.loads(proc.stdout.strip().splitlines()[-1])["result"]
    return data


#: DLPack device type names of the stand-in results, and their codes.
DEVICE_CODES = {"cpu": 1, "cuda": 2, "rocm": 10, "oneapi": 14}


@pytest.mark.parametrize("version", ["2.11.0", "2.13.0"])
@pytest.mark.parametrize(
    ("flavour", "served", "handle"),
    [
        # ROCm torch: torch.cuda is HIP; kDLROCM gets its stream.
        ("rocm", "rocm", 0x3000),
        ("cuda", "cuda", 0x3000),
        # XPU torch: kDLOneAPI gets torch.xpu's current stream's SYCL queue.
        ("xpu", "oneapi", 0x2000),
    ],
)
def test_stream_mapping_follows_the_torch_build(
    portable_library: Path, flavour: str, served: str, handle: int, version: str
) -> None:
    """torch's own rules (tests/conformance/tables.py GPU_RULES): a GPU build answers the
    other GPU type with the same current stream up to torch 2.12 and refuses it (torch
    answers NULL) from 2.13; XPU answers only kDLOneAPI."""
    from tests.conformance.tables import answers_gpu_stream

    minor = int(version.split(".")[1])
    result = _stream_flavour(portable_library, flavour, version)
    assert result["cpu:0"] == [0, None]  # host memory has no stream
    assert result[f"{served}:0"] == [0, handle]
    assert result[f"{served}:3"] == [0, handle + 3]
    # device_id -1: the current device, which the getter is asked for as such.
    rc, current = result[f"{served}:-1"]
    assert rc == 0
    assert isinstance(current, int)
    for other in {"cuda", "rocm", "oneapi"} - {served}:
        gpu = flavour in ("cuda", "rocm") and other != "oneapi"
        if gpu and answers_gpu_stream(flavour, DEVICE_CODES[other], minor):
            assert result[f"{other}:0"] == [0, handle], (other, version, result)
            continue
        kind, message = result[f"{other}:0"]
        assert kind == "ValueError", (other, version, result[f"{other}:0"])
        assert "this torch build" in str(message)


def test_a_cpu_torch_refuses_gpu_streams_and_answers_null_otherwise(
    portable_library: Path,
) -> None:
    """A CPU-only torch knows no GPU stream: kDLCUDA / kDLROCM are refused (a NULL would
    be taken for the default stream), any other device has none (NULL), as the native
    CPU build answers."""
    result = _stream_flavour(portable_library, "cpu")
    for key, value in result.items():
        if key.split(":")[0] in ("cuda", "rocm"):
            assert value[0] == "ValueError", (key, value)
        else:
            assert value == [0, None], (key, value)
