"""The native library's GPU paths (issue 37) on real GPUs: the allocator's direct path to
CUDA's caching allocator, and current_work_stream's fast path with torch's device-type
rules. Skipped without a CUDA/ROCm device.

The library is built for the running torch through the one driver (CUDA headers from
``$CUDA_HOME``, ``nvcc`` on PATH or ``/usr/local/cuda``). What each GPU device type gets
comes from tests/conformance/tables.py (GPU_RULES), the rules both tables follow.
"""

from __future__ import annotations

import ctypes
import math
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.exchange_suite.dlpack_ctypes import (
    DLDataTypeCode,
    DLDeviceType,
    DLManagedTensorVersioned,
    DLTensor,
    ErrorSink,
    ExchangeLibrary,
    api_from_capsule,
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

GPU_NAMES = {DLDeviceType.kDLCUDA: "cuda", DLDeviceType.kDLROCM: "rocm"}


def backend() -> str:
    return "rocm" if getattr(torch.version, "hip", None) else "cuda"


def own_type() -> int:
    return DLDeviceType.kDLROCM if backend() == "rocm" else DLDeviceType.kDLCUDA


@pytest.fixture(scope="module")
def native(build_cache: Path) -> ExchangeLibrary:
    from _torch_c_dlpack_ext_core.driver import BuildRequest, compile_library

    out = build_cache / f"running-gpu-py{sys.version_info[0]}{sys.version_info[1]}"
    entry = compile_library(
        BuildRequest(torch=Path(torch.__file__).parent, backend=backend(), output_dir=out)
    )
    return ExchangeLibrary(out / entry.file)


def allocate(api: Any, shape: tuple[int, ...], device_id: int, *, code: int = 2,
             bits: int = 32) -> tuple[int, Any, ErrorSink]:  # fmt: skip
    dims = (ctypes.c_int64 * max(len(shape), 1))(*shape)
    proto = DLTensor()
    proto.ndim, proto.shape = len(shape), dims
    proto.dtype.code, proto.dtype.bits, proto.dtype.lanes = code, bits, 1
    proto.device.device_type, proto.device.device_id = own_type(), device_id
    out = ctypes.POINTER(DLManagedTensorVersioned)()
    sink = ErrorSink()
    status = api.managed_tensor_allocator(ctypes.byref(proto), ctypes.byref(out), None,
                                          sink.callback)  # fmt: skip
    return status, out, sink


def test_allocator_takes_the_caching_allocators_memory_on_each_device(
    native: ExchangeLibrary,
) -> None:
    """Memory on the requested device (the device guard), from the allocator torch.empty
    uses (its statistics count it), usable by torch kernels; the current device unchanged."""
    count = torch.cuda.device_count()
    for index in range(count):
        current = torch.cuda.current_device()
        before = torch.cuda.memory_allocated(index)
        status, out, sink = allocate(native.api, (256, 3), index)
        assert (status, sink.errors) == (0, [])
        assert torch.cuda.current_device() == current
        assert torch.cuda.memory_allocated(index) >= before + 256 * 3 * 4
        fields = managed_fields(out)
        assert (fields.device_type, fields.device_id) == (own_type(), index)
        assert (fields.shape, fields.strides, fields.byte_offset) == ((256, 3), (3, 1), 0)
        tensor = import_managed(native.api, out)
        assert tensor.device == torch.device("cuda", index)
        tensor.fill_(2.0)
        assert float(tensor.sum()) == 2.0 * 256 * 3
        del tensor
        torch.cuda.synchronize(index)
        assert torch.cuda.memory_allocated(index) == before
    # Allocating on the last device while another is current leaves the current one.
    with torch.cuda.device(0):
        status, out, _ = allocate(native.api, (4,), count - 1)
        assert status == 0
        assert torch.cuda.current_device() == 0
        out.contents.deleter(out)


def test_allocator_refuses_a_device_that_does_not_exist(native: ExchangeLibrary) -> None:
    status, out, sink = allocate(native.api, (4,), torch.cuda.device_count())
    assert status == -1
    assert not out
    assert [kind for kind, _ in sink.errors] == ["RuntimeError"], sink.errors


def test_allocator_empty_tensor(native: ExchangeLibrary) -> None:
    status, out, sink = allocate(native.api, (0, 5), 0)
    assert (status, sink.errors) == (0, [])
    fields = managed_fields(out)
    assert fields.data == 0
    assert import_managed(native.api, out).shape == (0, 5)


@pytest.mark.parametrize(
    ("code", "bits", "expected"),
    [(DLDataTypeCode.kDLFloat, 32, float("nan")), (DLDataTypeCode.kDLInt, 32, 2**31 - 1)],
)
def test_allocator_honours_the_deterministic_fill(
    native: ExchangeLibrary, code: int, bits: int, expected: float
) -> None:
    import torch.utils.deterministic

    enabled = torch.are_deterministic_algorithms_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        status, out, sink = allocate(native.api, (1025,), 0, code=code, bits=bits)
        assert (status, sink.errors) == (0, [])
        tensor = import_managed(native.api, out)
    finally:
        torch.use_deterministic_algorithms(enabled)
        torch.utils.deterministic.fill_uninitialized_memory = fill
    values = tensor.cpu()
    if math.isnan(expected):
        assert values.isnan().all()
    else:
        assert values.eq(expected).all()


def stream_of(api: Any, device_type: int, device_id: int) -> int | None:
    out = ctypes.c_void_p(0x1234)
    assert api.current_work_stream(device_type, device_id, ctypes.byref(out)) == 0
    return out.value


def test_stream_follows_torchs_rule_for_both_gpu_types(native: ExchangeLibrary) -> None:
    from conformance.tables import answers_gpu_stream, torch_minor

    side = torch.cuda.Stream(device=0)
    for device_type, name in GPU_NAMES.items():
        if not answers_gpu_stream(backend(), device_type, torch_minor()):
            with pytest.raises(ValueError, match=f"use the {name} build"):
                native.api.current_work_stream(device_type, 0, ctypes.byref(ctypes.c_void_p()))
            continue
        for index in range(torch.cuda.device_count()):
            expected = torch.cuda.current_stream(index).cuda_stream or None
            assert stream_of(native.api, device_type, index) == expected
        with torch.cuda.stream(side):
            assert stream_of(native.api, device_type, 0) == side.cuda_stream != 0
        # -1: the current device's current stream.
        last = torch.cuda.device_count() - 1
        other = torch.cuda.Stream(device=last)
        with torch.cuda.device(last), torch.cuda.stream(other):
            assert stream_of(native.api, device_type, -1) == other.cuda_stream


def test_stream_same_as_torchs_own_where_torch_gives_one(native: ExchangeLibrary) -> None:
    from conformance.tables import STREAM, gpu_rule, torch_minor

    capsule = getattr(torch.Tensor, "__dlpack_c_exchange_api__", None)
    if capsule is None:
        pytest.skip(f"torch {torch.__version__} has no exchange table of its own (2.10+)")
    theirs = api_from_capsule(capsule)
    side = torch.cuda.Stream(device=0)
    for device_type in GPU_NAMES:
        rule = gpu_rule("stream", backend(), device_type, torch_minor())
        with torch.cuda.stream(side):
            their_stream = stream_of(theirs, device_type, 0)
            if rule.torch_answers == STREAM:
                assert stream_of(native.api, device_type, 0) == their_stream == side.cuda_stream
            else:
                assert their_stream is None, rule
