"""What the portable table's allocator asks torch for: the call it makes is its cost.

A ``TorchFunctionMode`` sees every ``torch.empty`` call the allocator makes, with the
arguments as the allocator passed them, on PyPI's torch 2.2.2, 2.8.0 and the running
torch 2.13:

- the sizes go as separate ints (``torch.empty(2, 3)``), never as one tuple: torch's
  argument parser tries a tuple as an int first and raises and clears a formatted
  ``TypeError`` each call (up to +1 us on torch 2.11; docs/facts.md, "A tuple of
  sizes"); a 0-d tensor is ``torch.empty(())``;
- host float32 asks without keywords; any other dtype names only ``dtype``;
- a prototype of 100 dimensions allocates too (no fixed-size argument array);

and every allocation still describes the prototype (shape, row-major strides, dtype).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.helpers import ROOT, clean_env, run_python, suite_python

pytestmark = pytest.mark.slow

#: Allocates each prototype under a recording TorchFunctionMode; prints what torch.empty
#: was asked and what the allocator returned, as JSON.
RECORD = r"""
import ctypes, json, sys
import torch
from torch.overrides import TorchFunctionMode
sys.path[:0] = [sys.argv[2], sys.argv[3]]
from exchange_suite.dlpack_ctypes import (
    DLManagedTensorVersioned, DLTensor, ErrorSink, ExchangeLibrary, managed_fields)
from pathlib import Path

api = ExchangeLibrary(Path(sys.argv[1])).api

class Record(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.empty:
            self.calls.append({"args": [list(a) if isinstance(a, tuple) else a for a in args],
                               "tuple_args": [isinstance(a, tuple) for a in args],
                               "kwargs": sorted(kwargs)})
        return func(*args, **kwargs)

def allocate(shape, code=2, bits=32):
    dims = (ctypes.c_int64 * max(1, len(shape)))(*shape)
    proto = DLTensor()
    proto.ndim, proto.shape = len(shape), dims
    proto.dtype.code, proto.dtype.bits, proto.dtype.lanes = code, bits, 1
    proto.device.device_type = 1
    out = ctypes.POINTER(DLManagedTensorVersioned)()
    sink = ErrorSink()
    with Record() as mode:
        status = api.managed_tensor_allocator(ctypes.byref(proto), ctypes.byref(out), None,
                                              sink.callback)
    assert status == 0, sink.errors
    fields = managed_fields(out)
    out.contents.deleter(out)
    return {"calls": mode.calls, "shape": list(fields.shape), "strides": list(fields.strides),
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
def recorded(request: pytest.FixtureRequest, portable_library: Path) -> dict[str, dict]:
    python = suite_python(request.param)
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
