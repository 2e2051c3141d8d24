"""What the portable table's allocator asks torch for: the call it makes is its cost.

A recorder in place of ``torch.empty`` (installed before the table loads) sees every call
the allocator makes, with the arguments as the allocator passed them, on PyPI's torch
2.2.2, 2.8.0 and the running torch 2.13:

- the sizes go as separate ints (``torch.empty(2, 3)``), never as one tuple: torch's
  argument parser tries a tuple as an int first and raises and clears a formatted
  ``TypeError`` each call (up to +1 us on torch 2.11; docs/facts.md, "A tuple of
  sizes"); a 0-d tensor is ``torch.empty(())``;
- host float32 asks without keywords; any other dtype names only ``dtype``;
- a prototype of 100 dimensions allocates too (no fixed-size argument array);

and every allocation still describes the prototype (shape, row-major strides, dtype).

A host request ignores the ambient state (issue 42, finding 9): under a default device of
cuda (a CUDA torch without a GPU) or meta, a default dtype of float64, and a function or
dispatch mode that answers ``empty`` elsewhere, it gets host memory and touches no CUDA.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.helpers import ROOT, clean_env, run_python
from tests.integration.test_gilless_refusals import CUDA_TWIN, torch_python

pytestmark = pytest.mark.slow

#: Allocates each prototype with torch.empty replaced, before the table is loaded (it takes
#: torch.empty from the module), by a recorder; prints what torch.empty was asked and what
#: the allocator returned, as JSON. (Not a TorchFunctionMode: a host request runs outside
#: every mode, issue 42.)
RECORD = r"""
import ctypes, json, sys
import torch
sys.path[:0] = [sys.argv[2], sys.argv[3]]
from exchange_suite.dlpack_ctypes import (
    DLManagedTensorVersioned, DLTensor, ErrorSink, ExchangeLibrary, managed_fields)
from pathlib import Path

calls = []
real_empty = torch.empty

def recording_empty(*args, **kwargs):
    calls.append({"args": [list(a) if isinstance(a, tuple) else a for a in args],
                  "tuple_args": [isinstance(a, tuple) for a in args],
                  "kwargs": sorted(kwargs)})
    return real_empty(*args, **kwargs)

torch.empty = recording_empty
api = ExchangeLibrary(Path(sys.argv[1])).api

def allocate(shape, code=2, bits=32):
    dims = (ctypes.c_int64 * max(1, len(shape)))(*shape)
    proto = DLTensor()
    proto.ndim, proto.shape = len(shape), dims
    proto.dtype.code, proto.dtype.bits, proto.dtype.lanes = code, bits, 1
    proto.device.device_type = 1
    out = ctypes.POINTER(DLManagedTensorVersioned)()
    sink = ErrorSink()
    del calls[:]
    status = api.managed_tensor_allocator(ctypes.byref(proto), ctypes.byref(out), None,
                                          sink.callback)
    assert status == 0, sink.errors
    fields = managed_fields(out)
    out.contents.deleter(out)
    return {"calls": list(calls), "shape": list(fields.shape), "strides": list(fields.strides),
            "dtype": [fields.code, fields.bits]}

cases = {
    "1d": allocate([16]),
    "3d": allocate([2, 3, 4]),
    "0d": allocate([]),
    "empty": allocate([0, 5]),
    "float64": allocate([4, 3], bits=64),
    "int64": allocate([5], code=0, bits=64),
    "100d": allocate([1] * 98 + [2, 3]),
}
print(json.dumps(cases))
"""


def _row_major(shape: list[int]) -> list[int]:
    strides, stride = [], 1
    for size in reversed(shape):
        strides.append(stride)
        stride *= max(size, 1)
    return strides[::-1]


@pytest.fixture(scope="module", params=["running", "2.8.0", "2.2.2"])
def recorded(
    request: pytest.FixtureRequest,
    portable_library: Path,
    suite_interpreter: Callable[[str], Path | str],
) -> dict[str, dict]:
    python = suite_interpreter(request.param)
    proc = run_python(
        RECORD,
        args=[str(portable_library), str(ROOT / "tests"), str(ROOT / "python")],
        env=clean_env(), python=python, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr[-6000:]
    cases: dict[str, dict] = json.loads(proc.stdout.strip().splitlines()[-1])
    return cases


def test_sizes_are_separate_ints(recorded: dict[str, dict]) -> None:
    for case, shape in (("1d", [16]), ("3d", [2, 3, 4]), ("empty", [0, 5])):
        (call,) = recorded[case]["calls"]
        assert call["args"] == shape, (case, call)
        assert call["tuple_args"] == [False] * len(shape), (case, call)


def test_a_0d_tensor_is_asked_with_an_empty_tuple(recorded: dict[str, dict]) -> None:
    (call,) = recorded["0d"]["calls"]
    assert call == {"args": [[]], "tuple_args": [True], "kwargs": []}
    assert recorded["0d"]["shape"] == []
    assert recorded["0d"]["strides"] == []


def test_host_float32_asks_without_keywords_other_dtypes_name_only_dtype(
    recorded: dict[str, dict],
) -> None:
    assert [c["kwargs"] for c in recorded["1d"]["calls"]] == [[]]
    assert [c["kwargs"] for c in recorded["float64"]["calls"]] == [["dtype"]]
    assert [c["kwargs"] for c in recorded["int64"]["calls"]] == [["dtype"]]


def test_every_allocation_describes_its_prototype(recorded: dict[str, dict]) -> None:
    expected = {
        "1d": ([16], [2, 32]),
        "3d": ([2, 3, 4], [2, 32]),
        "empty": ([0, 5], [2, 32]),
        "float64": ([4, 3], [2, 64]),
        "int64": ([5], [0, 64]),
        "100d": ([1] * 98 + [2, 3], [2, 32]),
    }
    for case, (shape, dtype) in expected.items():
        assert recorded[case]["shape"] == shape, case
        assert recorded[case]["strides"] == _row_major(shape), case
        assert recorded[case]["dtype"] == dtype, case
    (call,) = recorded["100d"]["calls"]
    assert call["args"] == [1] * 98 + [2, 3]


#: A host float32 request under one ambient setting (argv[4]) that could send torch.empty
#: elsewhere: a default device of cuda (on a CUDA torch without a GPU) or meta, a default
#: dtype of float64, a function mode and a dispatch mode that answer every empty() with a
#: meta tensor. Prints the allocation's device, dtype, shape and the CUDA calls made.
AMBIENT = r"""
import ctypes, json, sys, warnings
warnings.simplefilter("ignore")
import torch
sys.path[:0] = [sys.argv[2], sys.argv[3]]
from pathlib import Path
from exchange_suite.dlpack_ctypes import (
    DLManagedTensorVersioned, DLTensor, ErrorSink, ExchangeLibrary, managed_fields)
{spy}
how = sys.argv[4]
api = ExchangeLibrary(Path(sys.argv[1])).api
api.managed_tensor_allocator  # the table is loaded before the ambient state is set

import contextlib
scope = contextlib.nullcontext()
if how == "cuda-default":
    torch.set_default_device("cuda")
elif how == "meta-default":
    torch.set_default_device("meta")
elif how == "float64-default":
    torch.set_default_dtype(torch.float64)
elif how == "function-mode":
    from torch.overrides import TorchFunctionMode
    class Elsewhere(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func is torch.empty:
                return torch.zeros(1, device="meta")
            return func(*args, **(kwargs or {}))
    scope = Elsewhere()
elif how == "dispatch-mode":
    from torch.utils._python_dispatch import TorchDispatchMode
    class Elsewhere(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if "empty" in str(func):
                return torch.zeros(1, device="meta")
            return func(*args, **(kwargs or {}))
    scope = Elsewhere()
dims = (ctypes.c_int64 * 2)(4, 3)
proto = DLTensor()
proto.ndim, proto.shape = 2, dims
proto.dtype.code, proto.dtype.bits, proto.dtype.lanes = 2, 32, 1
proto.device.device_type = 1
out = ctypes.POINTER(DLManagedTensorVersioned)()
sink = ErrorSink()
with scope:
    status = api.managed_tensor_allocator(ctypes.byref(proto), ctypes.byref(out), None,
                                          sink.callback)
result = {"status": status, "errors": sink.errors}
if status == 0:
    fields = managed_fields(out)
    ctypes.memset(fields.data, 0x5A, 4 * 12)  # host memory: writable here
    out.contents.deleter(out)
    result.update(device=[fields.device_type, fields.device_id],
                  dtype=[fields.code, fields.bits], shape=list(fields.shape),
                  strides=list(fields.strides))
result["cuda_calls"] = globals().get("CUDA_CALLS", [])
result["cuda_initialized"] = bool(torch.cuda.is_initialized())
print(json.dumps(result))
"""

AMBIENT_SETTINGS = ["cuda-default", "meta-default", "float64-default", "function-mode",
                    "dispatch-mode"]  # fmt: skip


@pytest.mark.parametrize("how", AMBIENT_SETTINGS)
@pytest.mark.parametrize("version", ["running", "2.8.0", "2.2.2", CUDA_TWIN])
def test_a_host_request_ignores_the_ambient_device_dtype_and_modes(
    portable_library: Path, version: str, how: str, env_observer: Any
) -> None:
    """Issue 42, finding 9: whatever the default device (cuda on a CUDA torch without a
    GPU: 2.8.0, 2.2.2 and the 2.11 twin are CUDA builds), default dtype or mode, a host
    float32 request gets host float32 memory of its shape, and nothing touches CUDA."""
    from tests.helpers import CUDA_SPY

    code = AMBIENT.replace("{spy}", CUDA_SPY)
    proc = run_python(
        code,
        args=[str(portable_library), str(ROOT / "tests"), str(ROOT / "python"), how],
        env=clean_env(), python=torch_python(version, env_observer), timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr[-6000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["status"] == 0, result
    assert result["device"] == [1, 0], result
    assert result["dtype"] == [2, 32], result
    assert (result["shape"], result["strides"]) == ([4, 3], [3, 1]), result
    assert result["cuda_calls"] == [], result
    assert result["cuda_initialized"] is False, result
