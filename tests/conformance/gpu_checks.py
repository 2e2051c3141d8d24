"""Checks that a table refuses the GPU work it does not serve (issues 13 and 37), callable
from a GPU suite with a real GPU tensor and from this suite without one.

What a table refuses is THE rule table's (tables.py, GPU_RULES): the CPU build serves no
GPU; a CUDA build no kDLROCM memory, a ROCm build no kDLCUDA memory; and on torch 2.13+,
whose own table answers the other GPU's stream with NULL, a GPU build refuses that stream
too (on 2.4-2.12 it answers it with its own current stream). Without a GPU (here, and CI)
the tensor-free half runs: current_work_stream, the allocator, and the import of a
hand-built DLPack tensor of that device type. On a GPU machine pass a real tensor of the
unserved kind (e.g. a CUDA tensor to a CPU build forced on a CUDA torch) to check the
export refusal too.
"""

from __future__ import annotations

import ctypes
from typing import Any

import pytest

from exchange_suite.dlpack_ctypes import (
    DELETER,
    SET_ERROR,
    DLDataTypeCode,
    DLDeviceType,
    DLManagedTensorVersioned,
    DLTensor,
)

GPU_NAMES = {DLDeviceType.kDLCUDA: "cuda", DLDeviceType.kDLROCM: "rocm"}


def check_refuses_unserved_gpu(api: Any, backend: str, tensor: Any = None,
                               minor: int | None = None) -> int:  # fmt: skip
    """Assert that table ``api`` (a ``backend`` build, on torch 2.``minor``: the running
    torch's by default) refuses every GPU device type it does not serve, member by member,
    naming the build that would. ``tensor``: optionally a real torch tensor on such a
    device, whose export must be refused too. Returns the number of checks made."""
    from .tables import answers_gpu_stream, serves_gpu_memory, torch_minor

    minor = torch_minor() if minor is None else minor
    checks = 0
    for device_type, name in GPU_NAMES.items():
        needle = f"use the {name} build"
        if not answers_gpu_stream(backend, device_type, minor):
            _check_stream(api, device_type, needle)
            checks += 1
        if not serves_gpu_memory(backend, device_type):
            _check_allocator(api, device_type, needle)
            _check_import(api, device_type, needle)
            checks += 2
    if tensor is not None:
        _check_export(api, tensor)
        checks += 2
    return checks


def _check_stream(api: Any, device_type: int, needle: str) -> None:
    # An error, never "success with NULL" (a consumer would use the default stream).
    stream = ctypes.c_void_p(0x1234)
    with pytest.raises(ValueError, match=needle):
        api.current_work_stream(device_type, 0, ctypes.byref(stream))
    assert stream.value is None


def _check_allocator(api: Any, device_type: int, needle: str) -> None:
    errors: list[tuple[str, str]] = []
    sink = SET_ERROR(lambda _c, kind, msg: errors.append((kind.decode(), msg.decode())))
    dims = (ctypes.c_int64 * 1)(4)
    proto = DLTensor()
    proto.ndim, proto.shape = 1, dims
    proto.dtype.code, proto.dtype.bits, proto.dtype.lanes = DLDataTypeCode.kDLFloat, 32, 1
    proto.device.device_type = device_type
    out = ctypes.POINTER(DLManagedTensorVersioned)()
    status = api.managed_tensor_allocator(ctypes.byref(proto), ctypes.byref(out), None, sink)
    assert status == -1
    assert not out
    assert len(errors) == 1, errors
    assert errors[0][0] == "ValueError", errors
    assert needle in errors[0][1], errors


def _check_import(api: Any, device_type: int, needle: str) -> None:
    # BufferError, and the tensor stays with the caller (deleter not run, out NULL).
    calls: list[int] = []
    deleter = DELETER(lambda _p: calls.append(1))
    dims = (ctypes.c_int64 * 1)(4)
    buffer = (ctypes.c_float * 4)()
    managed = DLManagedTensorVersioned()
    managed.version.major, managed.version.minor = 1, 3
    managed.deleter = deleter
    dl = managed.dl_tensor
    dl.data = ctypes.addressof(buffer)
    dl.device.device_type = device_type
    dl.ndim, dl.shape = 1, dims
    dl.dtype.code, dl.dtype.bits, dl.dtype.lanes = DLDataTypeCode.kDLFloat, 32, 1
    result = ctypes.c_void_p()
    with pytest.raises(BufferError, match=needle):
        api.managed_tensor_to_py_object_no_sync(ctypes.pointer(managed), ctypes.byref(result))
    assert calls == []
    assert result.value is None


def _check_export(api: Any, tensor: Any) -> None:
    out = ctypes.POINTER(DLManagedTensorVersioned)()
    with pytest.raises(BufferError, match="current_work_stream"):
        api.managed_tensor_from_py_object_no_sync(tensor, ctypes.byref(out))
    assert not out
    with pytest.raises(BufferError, match="current_work_stream"):
        api.dltensor_from_py_object_no_sync(tensor, ctypes.byref(DLTensor()))
