"""managed_tensor_allocator on generated prototypes, and current_work_stream on every
device type and id: our table's invariants, and the same answers as torch's own."""

from __future__ import annotations

import ctypes
import gc
from typing import Any

import torch
from hypothesis import example, given
from hypothesis import strategies as st

from exchange_suite.dlpack_ctypes import (
    SET_ERROR,
    DLDataTypeCode,
    DLDeviceType,
    DLManagedTensorVersioned,
    DLTensor,
    import_managed,
    managed_fields,
)

from .checks import bits
from .conftest import count_case
from .gpu_checks import check_refuses_unserved_gpu
from .tables import Tables, answers_gpu_stream, deviates, gpu_rule, torch_minor
from .test_diff_import import (
    DEVICE_IDS,
    DEVICE_TYPES,
    IMPORTABLE,
    INT64_MAX,
    mostly,
    row_major_span,
)

GPU_TYPES = (DLDeviceType.kDLCUDA, DLDeviceType.kDLROCM)
HOST_TYPES = (
    DLDeviceType.kDLCPU,
    DLDeviceType.kDLCUDAHost,
    DLDeviceType.kDLROCMHost,
    DLDeviceType.kDLCUDAManaged,
)
#: At most this many elements are really allocated; larger prototypes are generated only
#: where no allocation can succeed (element counts beyond int64, terabytes).
SMALL = 4096


class Prototype:
    def __init__(self, shape: tuple[int, ...], ndim: int, dtype: tuple[int, int, int],
                 device: tuple[int, int]) -> None:  # fmt: skip
        self.dims = (ctypes.c_int64 * max(len(shape), 1))(*shape)
        self.shape, self.ndim, self.dtype, self.device = shape, ndim, dtype, device
        self.tensor = DLTensor()
        self.tensor.ndim = ndim
        self.tensor.shape = self.dims
        self.tensor.dtype.code, self.tensor.dtype.bits, self.tensor.dtype.lanes = dtype
        self.tensor.device.device_type, self.tensor.device.device_id = device

    def __repr__(self) -> str:
        return f"Prototype(shape={self.shape}, dtype={self.dtype}, device={self.device})"


@st.composite
def prototypes(draw: Any) -> Prototype:
    dtype = draw(
        mostly(
            st.sampled_from(sorted(IMPORTABLE)),
            st.tuples(st.integers(0, 20), st.sampled_from([0, 1, 8, 24, 32]), st.integers(0, 4)),
        )
    )
    size = mostly(st.integers(0, 6), st.sampled_from([-1, 2**40, 2**62]))
    shape = tuple(draw(st.lists(size, max_size=4)))
    return Prototype(shape, len(shape), dtype, (draw(DEVICE_TYPES), draw(DEVICE_IDS)))


def allocate(api: Any, proto: Prototype) -> tuple[int, Any, list[tuple[str, str]]]:
    errors: list[tuple[str, str]] = []
    sink = SET_ERROR(lambda _ctx, kind, message: errors.append((kind.decode(), message.decode())))
    out = ctypes.POINTER(DLManagedTensorVersioned)()
    status = api.managed_tensor_allocator(ctypes.byref(proto.tensor), ctypes.byref(out), None, sink)
    return status, out, errors


def numel(shape: tuple[int, ...]) -> int:
    """The element count, or 2**64 where c10 finds it overflowing: it multiplies the sizes
    left to right in uint64 (an overflow before a zero size still counts; a product past
    int64 that a later zero brings back to 0 does not) and refuses a count beyond int64."""
    product, overflow = 1, False
    for n in shape:
        product *= n
        if product >= 2**64:
            overflow, product = True, product % 2**64
    return 2**64 if overflow or product > INT64_MAX else product


def expected_kind(proto: Prototype) -> str:
    """The SetError kind of a prototype that cannot be allocated: ValueError for one torch
    cannot represent (dtype, device, negative sizes, or an element count, byte size or
    row-major stride beyond int64, the sizes c10 refuses), MemoryError for memory that
    cannot be had."""
    if proto.dtype not in IMPORTABLE or proto.device[0] != DLDeviceType.kDLCPU:
        return "ValueError"
    if any(n < 0 for n in proto.shape):
        return "ValueError"
    count = numel(proto.shape)
    if count > INT64_MAX or count * IMPORTABLE[proto.dtype] > INT64_MAX:
        return "ValueError"
    if row_major_span(proto.shape) > INT64_MAX:
        return "ValueError"
    return "MemoryError"


# A count past int64 that a zero brings back (c10 allocates it), an element count beyond
# uint64 (ValueError) and 4 EiB (MemoryError: no address space holds it).
@example(proto=Prototype((2**62, 2, 0), 3, (DLDataTypeCode.kDLInt, 8, 1), (1, 0)))
@example(proto=Prototype((2**62, 4), 2, (DLDataTypeCode.kDLFloat, 32, 1), (1, 0)))
@example(proto=Prototype((2**40, 2**20), 2, (DLDataTypeCode.kDLFloat, 32, 1), (1, 0)))
# Found by the thorough profile: c10 counts the first size out of the largest stride.
@example(proto=Prototype((2**40, 0, 2**40), 3, (DLDataTypeCode.kDLInt, 8, 1), (1, 0)))
@example(proto=Prototype((0, 2**40, 2**40), 3, (DLDataTypeCode.kDLInt, 8, 1), (1, 0)))
@given(proto=prototypes())
def test_allocator_generated(tables: Tables, proto: Prototype) -> None:
    count_case("allocator: generated prototypes")
    valid = (
        proto.dtype in IMPORTABLE
        and proto.device[0] == DLDeviceType.kDLCPU
        and all(n >= 0 for n in proto.shape)
    )
    if valid and (numel(proto.shape) > SMALL or row_major_span(proto.shape) >= 2**63):
        # Terabytes or more, or strides beyond int64: must fail cleanly.
        valid = False
    status, out, errors = allocate(tables.ours, proto)
    fields = None
    if not valid:
        assert status == -1, f"allocated {proto}"
        assert not out
        assert len(errors) == 1, errors
        assert errors[0][0] == expected_kind(proto), errors
        if proto.device[0] in GPU_TYPES and proto.dtype in IMPORTABLE:
            assert "build" in errors[0][1], errors
    else:
        assert (status, errors) == (0, []), proto
        fields = managed_fields(out)
        assert fields.shape == proto.shape
        assert fields.strides == torch.empty(proto.shape).stride()
        assert (fields.code, fields.bits, fields.lanes) == proto.dtype
        assert (fields.device_type, fields.device_id) == (DLDeviceType.kDLCPU, 0)
        assert (fields.flags, fields.byte_offset) == (0, 0)
        assert bool(fields.data) == (numel(proto.shape) > 0)
        tensor = import_managed(tables.ours, out)  # (takes `out` over: not read again)
        bits(tensor).fill_(1)  # really owned, writable memory
        assert bits(tensor).eq(1).all()
        del tensor
        gc.collect()
    if tables.torch is None:
        return
    their_status, their_out, their_errors = allocate(tables.torch, proto)
    count_case("allocator: differential")
    assert their_status == status, f"torch: {their_status} {their_errors}, ours: {errors}"
    if status == 0:
        theirs = managed_fields(their_out)
        their_out.contents.deleter(their_out)
        assert dataclass_without_data(theirs) == dataclass_without_data(fields)
    elif their_errors[0][0] != errors[0][0]:
        assert deviates("allocator-error-kind")


def dataclass_without_data(fields: Any) -> tuple[Any, ...]:
    return (fields.shape, fields.strides, fields.code, fields.bits, fields.lanes,
            fields.device_type, fields.device_id, fields.flags, fields.version)  # fmt: skip


@given(
    device_type=st.one_of(st.sampled_from([int(t) for t in DLDeviceType]), st.integers(-2, 40)),
    device_id=st.one_of(st.integers(-2, 8), st.sampled_from([127, 128, 2**31 - 1, -(2**31)])),
)
def test_current_work_stream(tables: Tables, device_type: int, device_id: int) -> None:
    count_case("current_work_stream: device types and ids")
    assert tables.runs_as_host_only, "run the GPU half of this suite on a GPU"
    stream = ctypes.c_void_p(0x1234)
    error: BaseException | None = None
    try:
        tables.ours.current_work_stream(device_type, device_id, ctypes.byref(stream))
    except (ValueError, RuntimeError) as exc:
        error = exc
    assert stream.value is None
    answered = device_type in GPU_TYPES and answers_gpu_stream(
        tables.backend, device_type, torch_minor()
    )
    if device_type in GPU_TYPES and not answered:
        # Never NULL for a GPU whose stream it does not answer (GPU_RULES): an error naming
        # the build that would.
        name = "cuda" if device_type == DLDeviceType.kDLCUDA else "rocm"
        assert isinstance(error, ValueError), error
        assert f"use the {name} build" in str(error)
    if tables.backend != "cpu":
        # A GPU torch without a GPU (the portable table on PyPI's CUDA torch): never NULL for
        # a GPU (its own stream cannot be had without one), ValueError for device types no
        # GPU build serves.
        assert error is not None or device_type in HOST_TYPES, (device_type, device_id)
        if device_type in HOST_TYPES:
            assert error is None, error
        elif answered:
            assert not isinstance(error, ValueError) or "device id" in str(error), error
        return
    assert error is None or isinstance(error, ValueError), error
    if device_type not in GPU_TYPES:
        assert error is None, error  # host memory (and other types): no stream, as torch
    if tables.torch is None:
        return
    theirs = ctypes.c_void_p(0x1234)
    tables.torch.current_work_stream(device_type, device_id, ctypes.byref(theirs))
    count_case("current_work_stream: differential")
    assert theirs.value is None
    if error is not None:
        rule = gpu_rule("stream", tables.backend, device_type, torch_minor())
        assert rule.deviation is not None, rule
        assert deviates(rule.deviation)


def test_unserved_gpu_refused_without_a_gpu(tables: Tables) -> None:
    """The tensor-free half of gpu_checks (a GPU machine adds real GPU tensors)."""
    count_case("unserved GPU refusals", check_refuses_unserved_gpu(tables.ours, tables.backend))
