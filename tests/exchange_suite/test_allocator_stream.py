"""managed_tensor_allocator and current_work_stream.

The GPU device types follow torch's rules per build flavour and minor, as
tests/conformance/tables.py lists them (GPU_RULES; docs/facts.md, "torch's device-type
rules"): the tests here ask that table what the library under test must do.
"""

from __future__ import annotations

import ctypes
import math
from typing import Any

import pytest
import torch

from conformance.tables import answers_gpu_stream, serves_gpu_memory, torch_minor

from .dlpack_ctypes import (
    DLDataTypeCode,
    DLDeviceType,
    DLManagedTensorVersioned,
    DLPackExchangeAPI,
    DLTensor,
    ErrorSink,
    ExchangeLibrary,
    import_managed,
    managed_fields,
)


def allocate(
    api: DLPackExchangeAPI,
    shape: tuple[int, ...],
    *,
    code: int = DLDataTypeCode.kDLFloat,
    bits: int = 32,
    lanes: int = 1,
    device_type: int = DLDeviceType.kDLCPU,
    device_id: int = 0,
) -> tuple[int, Any, ErrorSink]:
    dims = (ctypes.c_int64 * max(len(shape), 1))(*shape)
    prototype = DLTensor()
    prototype.ndim = len(shape)
    prototype.shape = dims
    prototype.dtype.code, prototype.dtype.bits, prototype.dtype.lanes = code, bits, lanes
    prototype.device.device_type, prototype.device.device_id = device_type, device_id
    sink = ErrorSink()
    out = ctypes.POINTER(DLManagedTensorVersioned)()
    status = api.managed_tensor_allocator(
        ctypes.byref(prototype), ctypes.byref(out), None, sink.callback
    )
    return status, out, sink


@pytest.mark.parametrize(
    ("shape", "code", "bits", "dtype"),
    [
        ((2, 3, 4), DLDataTypeCode.kDLFloat, 32, torch.float32),
        ((5,), DLDataTypeCode.kDLInt, 64, torch.int64),
        ((), DLDataTypeCode.kDLBfloat, 16, torch.bfloat16),
        ((0, 7), DLDataTypeCode.kDLBool, 8, torch.bool),
        ((3, 1), DLDataTypeCode.kDLComplex, 128, torch.complex128),
    ],
)
def test_allocator_follows_prototype(
    api: DLPackExchangeAPI, shape: tuple[int, ...], code: int, bits: int, dtype: torch.dtype
) -> None:
    status, out, sink = allocate(api, shape, code=code, bits=bits)
    assert (status, sink.errors) == (0, [])
    fields = managed_fields(out)
    contiguous = torch.empty(shape).stride()
    assert fields.shape == shape
    assert fields.strides == contiguous
    assert (fields.code, fields.bits, fields.lanes) == (code, bits, 1)
    assert (fields.device_type, fields.device_id) == (DLDeviceType.kDLCPU, 0)
    assert fields.version == (1, api.header.version.minor)
    assert fields.flags == 0
    assert fields.byte_offset == 0
    assert bool(fields.data) == (torch.Size(shape).numel() > 0)
    # The allocation is a real, owned, writable tensor: hand it to torch.
    tensor = import_managed(api, out)
    assert tensor.dtype == dtype
    assert tuple(tensor.shape) == shape
    tensor.fill_(1)
    assert tensor.eq(1).all()


def test_allocator_matches_torch(api: DLPackExchangeAPI, need_torch_api: DLPackExchangeAPI) -> None:
    def describe(table: DLPackExchangeAPI) -> Any:
        status, out, _ = allocate(table, (4, 2), code=DLDataTypeCode.kDLInt, bits=16)
        assert status == 0
        fields = managed_fields(out)
        out.contents.deleter(out)
        return fields.shape, fields.strides, fields.code, fields.bits, fields.flags, fields.version

    assert describe(api) == describe(need_torch_api)


@pytest.mark.parametrize(
    ("case", "kwargs", "kind", "needle"),
    [
        ("unknown dtype code", {"code": 99}, "ValueError", "dtype"),
        ("float of 24 bits", {"bits": 24}, "ValueError", "dtype"),
        ("vector lanes", {"lanes": 4}, "ValueError", "dtype"),
        ("unsupported device", {"device_type": DLDeviceType.kDLVulkan}, "ValueError", "device"),
        ("negative size", {"shape": (2, -1)}, "ValueError", "shape[1]"),
        # Sizes torch cannot represent (at::empty: "Storage size calculation overflowed",
        # a RuntimeError) are a bad prototype; memory that cannot be had is a MemoryError
        # (DefaultCPUAllocator: "can't allocate memory", a RuntimeError from at::empty).
        ("element count beyond int64", {"shape": (2**62, 4)}, "ValueError", "int64"),
        ("byte size beyond int64", {"shape": (2**61,), "bits": 64}, "ValueError", "int64"),
        ("stride beyond int64", {"shape": (0, 2**40, 2**40)}, "ValueError", "int64"),
        ("more memory than exists", {"shape": (2**58,)}, "MemoryError", "allocate"),
    ],
)
def test_allocator_failure_calls_set_error(
    api: DLPackExchangeAPI, case: str, kwargs: dict[str, Any], kind: str, needle: str
) -> None:
    shape = kwargs.pop("shape", (2, 2))
    status, out, sink = allocate(api, shape, **kwargs)
    assert status == -1
    assert not out, "out must be NULL on failure"
    assert len(sink.errors) == 1
    assert sink.errors[0][0] == kind
    assert needle in sink.errors[0][1]


@pytest.mark.parametrize(
    ("code", "bits", "expected"),
    [
        (DLDataTypeCode.kDLFloat, 32, float("nan")),
        (DLDataTypeCode.kDLInt, 32, 2**31 - 1),
    ],
)
def test_allocator_honours_the_deterministic_fill(
    api: DLPackExchangeAPI, code: int, bits: int, expected: float
) -> None:
    """With torch.use_deterministic_algorithms(True) and fill_uninitialized_memory, new
    memory holds NaN (floats) or the maximum (integers), as torch.empty's does."""
    import torch.utils.deterministic

    enabled = torch.are_deterministic_algorithms_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        status, out, sink = allocate(api, (257,), code=code, bits=bits)
        assert (status, sink.errors) == (0, [])
        tensor = import_managed(api, out)
    finally:
        torch.use_deterministic_algorithms(enabled)
        torch.utils.deterministic.fill_uninitialized_memory = fill
    if math.isnan(expected):
        assert tensor.isnan().all()
    else:
        assert tensor.eq(expected).all()


def test_allocator_gpu_without_gpu(api: DLPackExchangeAPI) -> None:
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: CUDA allocation would succeed")
    status, out, sink = allocate(api, (2,), device_type=DLDeviceType.kDLCUDA)
    assert status == -1
    assert not out
    assert len(sink.errors) == 1
    assert sink.errors[0][0] in ("RuntimeError", "ValueError")
    assert sink.errors[0][1]


def test_allocator_sets_no_python_error(api: DLPackExchangeAPI) -> None:
    # PYFUNCTYPE would raise if a Python error were left set; SetError is the only channel.
    status, _, sink = allocate(api, (2,), code=99)
    assert status == -1
    assert sink.errors


def test_stream_cpu_is_null(api: DLPackExchangeAPI) -> None:
    stream = ctypes.c_void_p(0x1234)
    assert api.current_work_stream(DLDeviceType.kDLCPU, 0, ctypes.byref(stream)) == 0
    assert stream.value is None


GPU_NAMES = {DLDeviceType.kDLCUDA: "cuda", DLDeviceType.kDLROCM: "rocm"}


def test_stream_by_build(api: DLPackExchangeAPI, exchange_library: ExchangeLibrary) -> None:
    stream = ctypes.c_void_p(0x1234)
    backend = exchange_library.backend
    minor = torch_minor()
    # Host memory (also pinned and managed) has no stream in every build.
    for host in (DLDeviceType.kDLCUDAHost, DLDeviceType.kDLROCMHost, DLDeviceType.kDLCUDAManaged):
        assert api.current_work_stream(host, 0, ctypes.byref(stream)) == 0
        assert stream.value is None
    for device_type, name in GPU_NAMES.items():
        stream.value = 0x1234
        if not answers_gpu_stream(backend, device_type, minor):
            # Where torch's own answer is NULL (or none): an error naming the build that
            # would know the stream, never NULL (a consumer would take the default stream).
            with pytest.raises(ValueError, match=f"use the {name} build"):
                api.current_work_stream(device_type, 0, ctypes.byref(stream))
            assert stream.value is None
        elif torch.cuda.is_available():
            assert api.current_work_stream(device_type, 0, ctypes.byref(stream)) == 0
            assert stream.value == (torch.cuda.current_stream(0).cuda_stream or None)
        else:
            # The build's own GPU stream, asked of c10 (or torch.cuda): no GPU, so that fails,
            # and the table says so rather than refusing the device type.
            with pytest.raises(RuntimeError):
                api.current_work_stream(device_type, 0, ctypes.byref(stream))
            assert stream.value is None
    if backend != "cpu":
        with pytest.raises(ValueError, match="device type"):
            api.current_work_stream(DLDeviceType.kDLVulkan, 0, ctypes.byref(stream))


@pytest.mark.parametrize("device_id", [-2, 128, 256, 2**31 - 1, -(2**31)])
def test_stream_refuses_device_ids_c10_cannot_index(
    api: DLPackExchangeAPI, exchange_library: ExchangeLibrary, device_id: int
) -> None:
    """c10's device index is 8 bits: id 256 would wrap to device 0 and hand out device 0's
    stream. torch's own table does that; ours refuses (the native one before asking c10,
    with a ValueError; the portable one's torch call refuses it too)."""
    backend = exchange_library.backend
    if backend == "cpu":
        pytest.skip("a CPU build answers no GPU stream, whatever the id")
    own = DLDeviceType.kDLROCM if backend == "rocm" else DLDeviceType.kDLCUDA
    stream = ctypes.c_void_p(0x1234)
    expected = (ValueError, RuntimeError) if exchange_library.is_portable else ValueError
    with pytest.raises(expected) as refused:
        api.current_work_stream(own, device_id, ctypes.byref(stream))
    assert stream.value is None
    if not exchange_library.is_portable:
        assert "device id" in str(refused.value)


def test_stream_refuses_a_null_out(api: DLPackExchangeAPI) -> None:
    for device_type in (DLDeviceType.kDLCPU, DLDeviceType.kDLCUDA, DLDeviceType.kDLROCM):
        with pytest.raises(ValueError, match="out is NULL"):
            api.current_work_stream(device_type, 0, None)


@pytest.mark.parametrize(
    ("device_type", "name"), list(GPU_NAMES.items()), ids=list(GPU_NAMES.values())
)
def test_allocator_refuses_gpu_memory_it_does_not_serve(
    api: DLPackExchangeAPI, exchange_library: ExchangeLibrary, device_type: int, name: str
) -> None:
    backend = exchange_library.backend
    if serves_gpu_memory(backend, device_type):
        pytest.skip(f"a {backend} build serves {name} memory")
    status, out, sink = allocate(api, (2,), device_type=device_type)
    assert status == -1
    assert not out
    assert [kind for kind, _ in sink.errors] == ["ValueError"]
    assert f"use the {name} build" in sink.errors[0][1]
