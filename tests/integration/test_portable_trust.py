"""The portable table's trust boundary, on real torch 2.2, 2.8 and 2.13 (issue 36).

- Tensor subclasses whose Python-level answers lie (``dtype``, ``shape``, ``size()``,
  ``stride()``, ``device``, ``data_ptr()``, ``layout``, ``detach()``/``view()``, and all of
  them through ``__torch_function__``), and a torch function mode lying about plain
  tensors: every export describes the memory the tensor really has (the fields of its
  plain twin's export), never more than its storage; on torch 2.13 also equal to torch's
  own table on the same object (tests/exchange_suite/liars.py);
- float8 exports on torch < 2.10 never reach torch's refusal (which leaks there);
- loading the table allocates nothing and asks nothing of the default device, dtype or
  modes: it loads under a default device of ``meta`` (or ``cuda`` on a CUDA torch with no
  GPU, without a CUDA call), a default dtype of float64, ``FakeTensorMode``, a dispatch
  mode that refuses ``empty``, function and dispatch modes that raise on anything (issue
  42, finding 10), and inside ``with torch.device("meta")``; and the package publishes it
  there;
- torch 2.2's importer never releases a data-NULL import: every zero-element import
  through the table still reaches the producer's deleter.

Each check runs in a subprocess: a crash is a return code, not a dead test runner.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.helpers import (
    CUDA_SPY,
    ROOT,
    bundle_portable,
    clean_env,
    make_package,
    run_python,
)

pytestmark = pytest.mark.slow

#: The ``suite_interpreter`` fixture: a release -> its suite env's Python.
Interpreters = Callable[[str], "Path | str"]

#: The torches the trust checks run on: the oldest the suite has, a legacy-capsule one
#: (both served by the portable table in the field), and the running one (2.13, with its
#: own table to compare with).
TORCHES = ["2.2.2", "2.8.0", "running"]


def _run(code: str, library: Path, python: Path | str, *args: str, timeout: float = 600) -> str:
    proc = run_python(
        code,
        args=[str(library), str(ROOT / "tests"), str(ROOT / "python"), *args],
        env=clean_env(), python=python, timeout=timeout,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return proc.stdout.strip().splitlines()[-1]


#: Every liar exported owning and non-owning, under a lying mode too; on torch >= 2.10 the
#: same objects through torch's own table.
LIARS = r"""
import ctypes, json, sys, warnings
warnings.simplefilter("ignore")
import torch
sys.path[:0] = [sys.argv[2], sys.argv[3]]
from pathlib import Path
from exchange_suite.dlpack_ctypes import (
    ExchangeLibrary, api_from_capsule, export_dltensor, export_managed, fields_of,
    managed_fields)
from exchange_suite.liars import described_extent, liars, lying_mode, storage_bytes

ours = ExchangeLibrary(Path(sys.argv[1])).api
own = getattr(torch.Tensor, "__dlpack_c_exchange_api__", None)
own = api_from_capsule(own) if own is not None else None

def owning(api, obj):
    managed = export_managed(api, obj)
    fields = managed_fields(managed)
    managed.contents.deleter(managed)
    return fields

def non_owning(api, obj):
    return fields_of(export_dltensor(api, obj))

def outcome(call):
    try:
        return call()
    except BufferError as exc:
        return "BufferError"

report = {"torch": torch.__version__, "cases": 0, "problems": []}

def key(fields):
    # Everything an export describes; the version is each table's own.
    return (fields.data, fields.device_type, fields.device_id, fields.ndim, fields.code,
            fields.bits, fields.lanes, fields.shape, fields.strides, fields.byte_offset)

def check(name, how, fields, plain, twin):
    report["cases"] += 1
    if fields == "BufferError":
        return
    start, size = storage_bytes(plain)
    low, high = described_extent(fields)
    if low != high and (low < start or high > start + size):
        report["problems"].append([name, how, "describes memory outside the storage",
                                   [low, high], [start, start + size]])
    if key(fields) != key(twin):
        report["problems"].append([name, how, "differs from the plain twin",
                                   str(fields), str(twin)])

for name, liar, plain in liars():
    for how, export in (("owning", owning), ("non-owning", non_owning)):
        twin = export(ours, plain)
        check(name, how, outcome(lambda: export(ours, liar)), plain, twin)
        with lying_mode():
            check(name, how + " in a lying mode", outcome(lambda: export(ours, liar)), plain,
                  twin)
            check(name + "(plain)", how + " in a lying mode",
                  outcome(lambda: export(ours, plain)), plain, twin)
        if own is not None:
            theirs = outcome(lambda: export(own, liar))
            mine = outcome(lambda: export(ours, liar))
            report["cases"] += 1
            if (theirs if isinstance(theirs, str) else key(theirs)) != (
                    mine if isinstance(mine, str) else key(mine)):
                report["problems"].append([name, how, "differs from torch's own table",
                                           str(mine), str(theirs)])
print(json.dumps(report))
"""


@pytest.mark.parametrize("version", TORCHES)
def test_lying_tensors_export_their_real_memory(
    portable_library: Path, version: str, suite_interpreter: Interpreters
) -> None:
    report = json.loads(_run(LIARS, portable_library, suite_interpreter(version)))
    print(f"\ntorch {report['torch']}: {report['cases']} liar cases", file=sys.stderr)
    assert report["cases"] >= 40, report
    assert report["problems"] == [], json.dumps(report["problems"], indent=1)


#: torch's refusal of a float8 export, counted: on torch < 2.10 the table must never ask.
NO_REFUSAL = r"""
import sys, warnings
warnings.simplefilter("ignore")
import torch
sys.path[:0] = [sys.argv[2], sys.argv[3]]
from pathlib import Path
from exchange_suite.dlpack_ctypes import ExchangeLibrary, export_managed, managed_fields
C = torch._C
refused = []
for name in ("_to_dlpack", "_to_dlpack_versioned"):
    real = getattr(C, name, None)
    if real is None:
        continue
    def spy(tensor, real=real):
        try:
            return real(tensor)
        except Exception as exc:
            refused.append(str(exc))
            raise
    setattr(C, name, spy)
api = ExchangeLibrary(Path(sys.argv[1])).api
exported = 0
for name in ("float8_e5m2", "float8_e4m3fn", "float8_e5m2fnuz", "float8_e4m3fnuz",
             "float8_e8m0fnu", "float4_e2m1fn_x2"):
    dtype = getattr(torch, name, None)
    if dtype is None:
        continue
    tensor = torch.zeros(4, 3, dtype=torch.uint8).view(dtype)[1:]
    managed = export_managed(api, tensor)
    fields = managed_fields(managed)
    managed.contents.deleter(managed)
    assert fields.shape == (3, 3) and fields.data == tensor.data_ptr(), fields
    exported += 1
print(exported, len(refused))
"""


@pytest.mark.parametrize("version", TORCHES)
def test_float8_exports_never_reach_torchs_refusal(
    portable_library: Path, version: str, suite_interpreter: Interpreters
) -> None:
    exported, refused = _run(NO_REFUSAL, portable_library, suite_interpreter(version)).split()
    assert int(exported) >= (0 if version == "2.2.2" else 4), exported
    assert refused == "0"


#: The table loaded (TorchDLPackExchangeAPIPtr, then a call) under each mode and default.
LOAD_UNDER = r"""
import contextlib, ctypes, sys, warnings
warnings.simplefilter("ignore")
import torch
sys.path[:0] = [sys.argv[2], sys.argv[3]]
from pathlib import Path
how = sys.argv[4]
{spy}
if how == "meta-default":
    torch.set_default_device("meta")
elif how == "cuda-default":
    assert torch.version.cuda is not None
    torch.set_default_device("cuda")
elif how == "float64-default":
    torch.set_default_dtype(torch.float64)
scope = contextlib.nullcontext()
if how == "fake":
    from torch._subclasses.fake_tensor import FakeTensorMode
    scope = FakeTensorMode()
elif how == "meta-context":
    scope = torch.device("meta")
elif how == "refuse-empty":
    from torch.utils._python_dispatch import TorchDispatchMode
    class RefuseEmpty(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if "empty" in str(func):
                raise RuntimeError("this mode refuses empty")
            return func(*args, **(kwargs or {}))
    scope = RefuseEmpty()
elif how == "strict-function-mode":
    from torch.overrides import TorchFunctionMode
    class Strict(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            raise RuntimeError(f"this mode refuses everything: {func}")
    scope = Strict()
elif how == "strict-dispatch-mode":
    from torch.utils._python_dispatch import TorchDispatchMode
    class Strict(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            raise RuntimeError(f"this mode refuses everything: {func}")
    scope = Strict()
with scope:
    lib = ctypes.PyDLL(sys.argv[1])
    lib.TorchDLPackExchangeAPIPtr.restype = ctypes.c_int64
    lib.TorchCDLPackExtLoadProblem.restype = ctypes.c_char_p
    problem = lib.TorchCDLPackExtLoadProblem()
    address = lib.TorchDLPackExchangeAPIPtr()
torch.set_default_device("cpu") if hasattr(torch, "set_default_device") else None
torch.set_default_dtype(torch.float32)
from exchange_suite.dlpack_ctypes import ExchangeLibrary, export_managed, managed_fields
api = ExchangeLibrary(Path(sys.argv[1])).api
tensor = torch.ones(2, 1, 3).transpose(0, 1)
managed = export_managed(api, tensor)
fields = managed_fields(managed)
managed.contents.deleter(managed)
print(problem, address != 0, fields.strides == tensor.stride(), "cuda-calls:",
      len(globals().get("CUDA_CALLS", [])))
"""

#: strict-*: modes that raise on anything they see (issue 42, finding 10: the load called
#: torch.device("cpu"), which a function mode sees, and published nothing under one).
MODES = [
    "meta-default",
    "float64-default",
    "fake",
    "meta-context",
    "refuse-empty",
    "strict-function-mode",
    "strict-dispatch-mode",
]


@pytest.mark.parametrize("how", [*MODES, "cuda-default"])
@pytest.mark.parametrize("version", TORCHES)
def test_table_loads_under_any_default_and_mode(
    portable_library: Path, version: str, how: str, suite_interpreter: Interpreters
) -> None:
    if how == "cuda-default" and version == "running":
        pytest.skip("the running torch 2.13 is a CPU build: cuda-default runs on 2.2 and 2.8")
    code = LOAD_UNDER.replace("{spy}", CUDA_SPY if how == "cuda-default" else "")
    # No load problem, a table, an export with the tensor's own strides, no CUDA call.
    python = suite_interpreter(version)
    assert _run(code, portable_library, python, how) == "None True True cuda-calls: 0"


#: The whole package on a torch no native library serves: the portable table published
#: under a meta default device, and no CUDA call on a CUDA torch with a cuda default.
PACKAGE_UNDER = r"""
import sys, warnings
import torch
{spy}
torch.set_default_device(sys.argv[1])
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import torch_c_dlpack_ext
status = torch_c_dlpack_ext.status()
print(status.kind.value, torch.Tensor.__dict__.get("__dlpack_c_exchange_api__") is not None,
      len(caught), len(globals().get("CUDA_CALLS", [])))
"""


@pytest.mark.parametrize("device", ["meta", "cuda"])
def test_package_publishes_the_table_under_a_default_device(
    tmp_path: Path, portable_library: Path, device: str, old_torch_env: Callable[[str], Any]
) -> None:
    root = bundle_portable(make_package(tmp_path / "pkg"), portable_library)
    env = old_torch_env("2.8.0")
    code = PACKAGE_UNDER.replace("{spy}", CUDA_SPY)
    proc = run_python(
        code, pythonpath=[root], env=clean_env(), python=env.python, args=[device], timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    assert proc.stdout.split()[-4:] == ["portable", "True", "0", "0"], proc.stdout


#: The whole package imported under a mode that raises on anything: the portable table is
#: still published (issue 42, finding 10).
PACKAGE_IN_STRICT_MODE = r"""
import sys, warnings
import torch
kind = sys.argv[1]
if kind == "function":
    from torch.overrides import TorchFunctionMode as Mode
    class Strict(Mode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            raise RuntimeError(f"this mode refuses everything: {func}")
else:
    from torch.utils._python_dispatch import TorchDispatchMode as Mode
    class Strict(Mode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            raise RuntimeError(f"this mode refuses everything: {func}")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with Strict():
        import torch_c_dlpack_ext
status = torch_c_dlpack_ext.status()
print(status.kind.value, torch.Tensor.__dict__.get("__dlpack_c_exchange_api__") is not None,
      len(caught), [str(w.message)[:200] for w in caught])
"""


@pytest.mark.parametrize("kind", ["function", "dispatch"])
def test_package_publishes_the_table_under_a_strict_mode(
    tmp_path: Path, portable_library: Path, kind: str, old_torch_env: Callable[[str], Any]
) -> None:
    root = bundle_portable(make_package(tmp_path / "pkg"), portable_library)
    env = old_torch_env("2.8.0")
    proc = run_python(
        PACKAGE_IN_STRICT_MODE, pythonpath=[root], env=clean_env(), python=env.python,
        args=[kind], timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    assert proc.stdout.split()[:3] == ["portable", "True", "0"], proc.stdout


#: 10^4 zero-element imports with data NULL, through the table: each reaches the
#: producer's deleter (torch 2.2's importer alone would call none).
EMPTY_IMPORTS = r"""
import ctypes, gc, sys, warnings
warnings.simplefilter("ignore")
import torch
sys.path[:0] = [sys.argv[2], sys.argv[3]]
from pathlib import Path
from exchange_suite.dlpack_ctypes import (
    DELETER, DLManagedTensorVersioned, ExchangeLibrary, import_managed)
api = ExchangeLibrary(Path(sys.argv[1])).api
calls = [0]
deleter = DELETER(lambda _p: calls.__setitem__(0, calls[0] + 1))
shape = (ctypes.c_int64 * 2)(0, 3)
n = int(sys.argv[4])
made = []
for i in range(n):
    m = DLManagedTensorVersioned()
    m.version.major, m.version.minor = 1, 3
    m.deleter = deleter
    dl = m.dl_tensor
    dl.data, dl.ndim, dl.shape = None, 2, shape
    dl.device.device_type = 1
    dl.dtype.code, dl.dtype.bits, dl.dtype.lanes = 2, 32, 1
    made.append(m)
    tensor = import_managed(api, ctypes.pointer(m))
    assert tuple(tensor.shape) == (0, 3) and tensor.dtype == torch.float32
    del tensor
gc.collect()
print(torch.__version__, calls[0], n)
"""


@pytest.mark.parametrize("version", TORCHES)
def test_empty_imports_release_their_producer(
    portable_library: Path, version: str, suite_interpreter: Interpreters
) -> None:
    python = suite_interpreter(version)
    _, called, made = _run(EMPTY_IMPORTS, portable_library, python, "10000").split()
    assert called == made, f"{called} of {made} deleters called"
