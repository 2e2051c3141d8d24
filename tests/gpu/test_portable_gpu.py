"""The portable table (csrc/portable) on real GPUs: CUDA tensors out and in, the current
stream (device -1 included), the allocator. Skipped without a CUDA/ROCm device; the same
cases run in ``gpu_check.py`` ("portable cuda: ..."), beside torch's own table.

torch's own table (torch >= 2.10) is the reference where a case compares: the portable table
reaches torch only through Python, so it must agree with it field by field.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import pytest
from tests.exchange_suite.dlpack_ctypes import (
    DLDeviceType,
    DLManagedTensorVersioned,
    DLTensor,
    ErrorSink,
    ExchangeLibrary,
    api_from_capsule,
    export_dltensor,
    export_managed,
    fields_of,
    import_managed,
    managed_fields,
)

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(), reason="no CUDA/ROCm device (torch.cuda.is_available())"
    ),
]


@pytest.fixture(scope="module")
def portable(portable_library: Path) -> ExchangeLibrary:
    return ExchangeLibrary(portable_library)


def gpu_kind() -> int:
    return DLDeviceType.kDLROCM if getattr(torch.version, "hip", None) else DLDeviceType.kDLCUDA


def other_gpu_kind() -> int:
    return DLDeviceType.kDLCUDA if gpu_kind() == DLDeviceType.kDLROCM else DLDeviceType.kDLROCM


def stream(api: Any, device_type: int, device_id: int) -> int:
    out = ctypes.c_void_p(0x1234)
    api.current_work_stream(device_type, device_id, ctypes.byref(out))
    return out.value or 0


def test_export_fields_every_device(portable: ExchangeLibrary) -> None:
    torch_own = getattr(torch.Tensor, "__dlpack_c_exchange_api__", None)
    for index in range(torch.cuda.device_count()):
        tensor = torch.arange(12.0, device=f"cuda:{index}").reshape(3, 4)[1:, ::2]
        managed = export_managed(portable.api, tensor)
        try:
            fields = managed_fields(managed)
        finally:
            managed.contents.deleter(managed)
        assert (fields.device_type, fields.device_id) == (gpu_kind(), index)
        assert fields.data == tensor.data_ptr()
        assert (fields.shape, fields.strides) == ((2, 2), (4, 2))
        view = fields_of(export_dltensor(portable.api, tensor))
        assert view.data == fields.data
        assert view.shape == fields.shape
        if torch_own is not None:
            theirs = export_managed(api_from_capsule(torch_own), tensor)
            try:
                assert managed_fields(theirs) == fields
            finally:
                theirs.contents.deleter(theirs)


def test_round_trip_keeps_device_and_memory(portable: ExchangeLibrary) -> None:
    for index in range(torch.cuda.device_count()):
        original = torch.arange(24, dtype=torch.float16, device=f"cuda:{index}").reshape(2, 3, 4)
        back = import_managed(portable.api, export_managed(portable.api, original))
        assert back.device == original.device
        assert back.data_ptr() == original.data_ptr()
        back.add_(1)
        torch.cuda.synchronize(index)
        assert float(original.float().sum()) == float(sum(range(24)) + 24)


def test_current_stream(portable: ExchangeLibrary) -> None:
    kind = gpu_kind()
    count = torch.cuda.device_count()
    for index in range(count):
        assert stream(portable.api, kind, index) == torch.cuda.current_stream(index).cuda_stream
    side = torch.cuda.Stream(device=0)
    with torch.cuda.stream(side):
        assert stream(portable.api, kind, 0) == side.cuda_stream != 0
    # device_id -1: the current device's current stream.
    last = count - 1
    other = torch.cuda.Stream(device=last)
    with torch.cuda.device(last), torch.cuda.stream(other):
        assert stream(portable.api, kind, -1) == other.cuda_stream
    # The other GPU type: torch's own rule (tests/conformance/tables.py GPU_RULES), the
    # same current stream up to torch 2.12, refused (torch answers NULL) from 2.13.
    from tests.conformance.tables import answers_gpu_stream, torch_minor

    build = "rocm" if getattr(torch.version, "hip", None) else "cuda"
    if answers_gpu_stream(build, other_gpu_kind(), torch_minor()):
        assert stream(portable.api, other_gpu_kind(), 0) == torch.cuda.current_stream(0).cuda_stream
    else:
        with pytest.raises(ValueError, match="build of torch"):
            portable.api.current_work_stream(other_gpu_kind(), 0, ctypes.byref(ctypes.c_void_p()))


def test_allocator_gives_memory_torch_kernels_use(portable: ExchangeLibrary) -> None:
    kind = gpu_kind()
    for index in range(torch.cuda.device_count()):
        dims = (ctypes.c_int64 * 2)(64, 3)
        proto = DLTensor()
        proto.ndim, proto.shape = 2, dims
        proto.dtype.code, proto.dtype.bits, proto.dtype.lanes = 2, 32, 1
        proto.device.device_type, proto.device.device_id = kind, index
        out = ctypes.POINTER(DLManagedTensorVersioned)()
        sink = ErrorSink()
        assert (
            portable.api.managed_tensor_allocator(
                ctypes.byref(proto), ctypes.byref(out), None, sink.callback
            )
            == 0
        ), sink.errors
        fields = managed_fields(out)
        assert (fields.device_type, fields.device_id) == (kind, index)
        assert (fields.shape, fields.strides) == ((64, 3), (3, 1))
        tensor = import_managed(portable.api, out)
        tensor.fill_(2.0)
        assert float(tensor.sum()) == 2.0 * 64 * 3
        # A device that does not exist: refused through SetError, nothing returned.
        proto.device.device_id = torch.cuda.device_count()
        bad = ctypes.POINTER(DLManagedTensorVersioned)()
        sink = ErrorSink()
        status = portable.api.managed_tensor_allocator(
            ctypes.byref(proto), ctypes.byref(bad), None, sink.callback
        )
        assert status == -1
        assert not bad
        assert len(sink.errors) == 1, sink.errors
