"""managed_tensor_to_py_object_no_sync on generated raw DLManagedTensorVersioned inputs.

Each input goes to our table and (unless torch's own would crash on it: the
``kept_from_torch`` deviations) to torch's. Invariants on ours, on every torch: a refusal
leaves the tensor with the caller (deleter not run, out NULL); an import holds the
buffer's values, its storage lies inside the producer's buffer and covers the whole
view, slicing/transposing/deepcopy/clone/torch.save work, and the deleter runs exactly
once, after the last user is gone. Differential (torch >= 2.10): the same outcome and
every property of the result, except through ``tables.DEVIATIONS``.
"""

from __future__ import annotations

import ctypes
import dataclasses
import gc
import random
from typing import Any

import pytest
import torch
from hypothesis import assume, example, given
from hypothesis import strategies as st

from exchange_suite.dlpack_ctypes import (
    DELETER,
    FLAG_IS_COPIED,
    FLAG_IS_SUBBYTE_TYPE_PADDED,
    FLAG_READ_ONLY,
    DLDataTypeCode,
    DLDeviceType,
    DLManagedTensorVersioned,
    steal_pyobject,
)

from .checks import (
    derived_views_work,
    storage_span,
    values_equal,
    view_of_bytes,
    view_span,
)
from .conftest import count_case
from .tables import (
    UNCREATABLE_DEVICE_TYPES,
    Outcome,
    Tables,
    deviates,
    gpu_rule,
    torch_minor,
)

INT64_MAX = 2**63 - 1
#: Inputs whose extent fits int64 but needs more memory than this are not generated
#: (a buffer that large cannot be provided; extents beyond int64 are).
MAX_BUFFER = 1 << 16

#: (code, bits, lanes) -> itemsize, for every DLPack dtype this torch can import.
IMPORTABLE: dict[tuple[int, int, int], int] = {
    (DLDataTypeCode.kDLBool, 8, 1): 1,
    **{(DLDataTypeCode.kDLInt, b, 1): b // 8 for b in (8, 16, 32, 64)},
    **{(DLDataTypeCode.kDLUInt, b, 1): b // 8 for b in (8, 16, 32, 64)},
    **{(DLDataTypeCode.kDLFloat, b, 1): b // 8 for b in (16, 32, 64)},
    (DLDataTypeCode.kDLBfloat, 16, 1): 2,
    **{(DLDataTypeCode.kDLComplex, b, 1): b // 8 for b in (32, 64, 128)},
    **{
        (code, 8, 1): 1
        for code in (
            DLDataTypeCode.kDLFloat8_e5m2,
            DLDataTypeCode.kDLFloat8_e4m3fn,
            DLDataTypeCode.kDLFloat8_e5m2fnuz,
            DLDataTypeCode.kDLFloat8_e4m3fnuz,
        )
    },
}
if hasattr(torch, "float8_e8m0fnu"):
    IMPORTABLE[(DLDataTypeCode.kDLFloat8_e8m0fnu, 8, 1)] = 1
if hasattr(torch, "float4_e2m1fn_x2"):
    IMPORTABLE[(DLDataTypeCode.kDLFloat4_e2m1fn, 4, 2)] = 1

ALL_FLAGS = (FLAG_READ_ONLY, FLAG_IS_COPIED, FLAG_IS_SUBBYTE_TYPE_PADDED, 1 << 20)


def row_major_span(shape: tuple[int, ...]) -> int:
    """The largest row-major stride: the product of every size but the first, zeros
    counted as one."""
    span = 1
    for n in shape[1:]:
        span *= max(n, 1)
    return span


@dataclasses.dataclass(frozen=True)
class RawInput:
    """A generated DLManagedTensorVersioned, described by plain values."""

    code: int
    bits: int
    lanes: int
    ndim: int
    shape: tuple[int, ...] | None  # None: a NULL shape pointer
    strides: tuple[int, ...] | None  # None: NULL strides (row-major)
    byte_offset: int
    null_data: bool
    device_type: int
    device_id: int
    major: int
    minor: int
    flags: int
    seed: int

    @property
    def itemsize(self) -> int | None:
        return IMPORTABLE.get((self.code, self.bits, self.lanes))

    def effective_strides(self) -> tuple[int, ...]:
        assert self.shape is not None
        if self.strides is not None:
            return self.strides
        out, step = [], 1
        for n in reversed(self.shape):
            out.append(step)
            step *= max(n, 1)
        return tuple(reversed(out))

    def malformed(self) -> bool:
        """Inputs torch 2.13's own table crashes or aborts on (kept from it)."""
        if self.ndim < 0 or (self.ndim > 0 and self.shape is None):
            return True
        assert self.shape is not None
        if any(n < 0 for n in self.shape) or any(s < 0 for s in self.effective_strides()):
            return True
        return self.extent_elements() is None

    def extent_elements(self) -> int | None:
        """One past the farthest element, or None where torch cannot count the elements
        (c10 multiplies the sizes left to right: an overflow before a zero size counts)
        or the bytes exceed int64 (itemsize 1 if the dtype is not importable)."""
        assert self.shape is not None
        numel = 1
        for n in self.shape:
            numel *= n
            if numel >= 2**64:
                return None
        if numel > INT64_MAX:
            return None
        if self.strides is None and row_major_span(self.shape) > INT64_MAX:
            return None  # its row-major strides do not fit in int64
        if numel == 0:
            return 0
        strides = self.effective_strides()
        extent = 1 + sum((n - 1) * s for n, s in zip(self.shape, strides))
        return extent if extent * (self.itemsize or 1) <= INT64_MAX else None

    def needed_bytes(self) -> int:
        """Buffer bytes from `data` to the end of the view (0 when malformed)."""
        if self.malformed():
            return 0
        extent = self.extent_elements()
        assert extent is not None
        return self.byte_offset + extent * (self.itemsize or 1)


def mostly(common: st.SearchStrategy[Any], rare: st.SearchStrategy[Any]) -> Any:
    """``common`` nine times in ten, ``rare`` otherwise (``one_of`` would pick each half
    the time, and then nearly every multi-dimensional input would be malformed)."""
    return st.integers(0, 9).flatmap(lambda roll: rare if roll == 0 else common)


SIZES = mostly(st.integers(0, 6), st.sampled_from([2**31, 2**40, 2**62, -1, -(2**40)]))
STRIDE = mostly(st.integers(0, 9), st.sampled_from([-1, -3, 2**40, 2**62, INT64_MAX]))
DEVICE_TYPES = mostly(
    st.just(int(DLDeviceType.kDLCPU)),
    st.sampled_from([int(t) for t in DLDeviceType] + [0, 5, 6, 19, 99, -1]),
)
DEVICE_IDS = mostly(st.just(0), st.sampled_from([1, 7, -1, 127, 128, 2**31 - 1, -(2**31)]))


@st.composite
def raw_inputs(draw: Any) -> RawInput:
    if draw(st.integers(0, 9)) < 8:
        code, bits_, lanes = draw(st.sampled_from(sorted(IMPORTABLE)))
    else:
        code = draw(st.integers(0, 20))
        bits_ = draw(st.sampled_from([0, 1, 4, 6, 8, 16, 24, 32, 64, 128, 255]))
        lanes = draw(st.sampled_from([0, 1, 2, 4, 65535]))
    ndim = draw(mostly(st.integers(0, 4), st.sampled_from([-1, 6])))
    rank = max(ndim, 0)
    shape: tuple[int, ...] | None = tuple(draw(st.lists(SIZES, min_size=rank, max_size=rank)))
    if ndim > 0 and draw(st.integers(0, 19)) == 0:
        shape = None
    strides: tuple[int, ...] | None = None
    if draw(st.booleans()):
        strides = tuple(draw(st.lists(STRIDE, min_size=rank, max_size=rank)))
    itemsize = IMPORTABLE.get((code, bits_, lanes), 1)
    byte_offset = draw(
        st.one_of(
            st.just(0),
            st.just(0),
            st.integers(1, 8).map(lambda k: k * itemsize),  # element-aligned
            st.integers(1, 64),  # often unaligned
            mostly(st.just(0), st.sampled_from([2**63, 2**64 - 1])),
        )
    )
    flags = 0
    for flag in ALL_FLAGS:
        if draw(st.integers(0, 7)) == 0:
            flags |= flag
    raw = RawInput(
        code=code,
        bits=bits_,
        lanes=lanes,
        ndim=ndim,
        shape=shape,
        strides=strides,
        byte_offset=byte_offset,
        null_data=draw(st.integers(0, 9)) == 0,
        device_type=draw(DEVICE_TYPES),
        device_id=draw(DEVICE_IDS),
        major=draw(mostly(st.just(1), st.sampled_from([0, 2, 2**32 - 1]))),
        minor=draw(st.integers(0, 5)),
        flags=flags,
        seed=draw(st.integers(0, 2**32 - 1)),
    )
    # A producer's buffer must hold the whole view; views too large to back are left out.
    assume(raw.needed_bytes() <= MAX_BUFFER)
    return raw


def expected_refusal(raw: RawInput, host_only: bool) -> str | None:
    """Why our table must refuse ``raw`` (None: it must import it)."""
    # A CPU build serves only host memory, and so does a GPU-serving table without a GPU
    # (tables.runs_as_host_only); GPU builds are checked on a GPU.
    assert host_only, "run the GPU half of this suite on a GPU"
    reasons = (
        ("major version", lambda: raw.major != 1),
        ("READ_ONLY", lambda: bool(raw.flags & FLAG_READ_ONLY)),
        ("dtype", lambda: raw.itemsize is None),
        ("device", lambda: raw.device_type != DLDeviceType.kDLCPU),
        ("malformed", raw.malformed),
        ("unaligned byte_offset", lambda: bool(raw.byte_offset % (raw.itemsize or 1))),
        ("NULL data", lambda: raw.null_data and raw.extent_elements() != 0),
    )
    return next((reason for reason, applies in reasons if applies()), None)


class Built:
    """The DLManagedTensorVersioned of a RawInput over its own buffer; counts deleter calls."""

    def __init__(self, raw: RawInput) -> None:
        rng = random.Random(raw.seed)
        size = raw.needed_bytes() + rng.randrange(0, 16)
        # A double array: 8-byte aligned, as a real allocation would be.
        self.buffer = (ctypes.c_double * (size // 8 + 1))()
        self.size = ctypes.sizeof(self.buffer)
        payload = rng.randbytes(self.size)
        if (raw.code, raw.bits) == (DLDataTypeCode.kDLBool, 8):
            # Only 0 and 1 are bools: other bytes are not values torch promises to keep.
            payload = bytes(byte & 1 for byte in payload)
        ctypes.memmove(self.buffer, payload, self.size)
        self.raw_bytes = bytes(self.buffer)
        self.calls: list[int] = []
        self.deleter = DELETER(lambda pointer: self.calls.append(ctypes.addressof(pointer[0])))
        rank = max(raw.ndim, 0)
        self.shape = (ctypes.c_int64 * max(rank, 1))(*(raw.shape or ()))
        self.strides = (
            None if raw.strides is None else (ctypes.c_int64 * max(rank, 1))(*raw.strides)
        )
        m = DLManagedTensorVersioned()
        m.version.major, m.version.minor = raw.major, raw.minor
        m.deleter = self.deleter
        m.flags = raw.flags
        t = m.dl_tensor
        t.data = None if raw.null_data else ctypes.addressof(self.buffer)
        t.device.device_type, t.device.device_id = raw.device_type, raw.device_id
        t.ndim = raw.ndim
        t.dtype.code, t.dtype.bits, t.dtype.lanes = raw.code, raw.bits, raw.lanes
        t.shape = None if raw.shape is None else self.shape
        t.strides = self.strides
        t.byte_offset = raw.byte_offset
        self.managed = m

    @property
    def address(self) -> int:
        return ctypes.addressof(self.managed)

    @property
    def span(self) -> tuple[int, int]:
        start = ctypes.addressof(self.buffer)
        return start, start + self.size


def call_import(
    api: Any, built: Built, *, ours: bool = True
) -> tuple[Outcome, torch.Tensor | None]:
    out = ctypes.c_void_p(0x1)
    try:
        api.managed_tensor_to_py_object_no_sync(ctypes.pointer(built.managed), ctypes.byref(out))
    except Exception as exc:
        if ours:
            assert out.value is None, "out must be NULL after a refusal"
        elif out.value is not None:
            deviates("out-on-refusal")
        if ours or not built.calls:
            assert built.calls == [], "the deleter ran although the import was refused"
        else:
            deviates("deleter-on-refusal")
        return Outcome(False, type(exc).__name__, str(exc)), None
    assert out.value is not None
    tensor = steal_pyobject(out.value)
    return Outcome(True), tensor


def describe(tensor: torch.Tensor, built: Built) -> tuple[Any, ...]:
    try:
        first, end = storage_span(tensor)
    except RuntimeError:  # torch's table makes storages without memory (NULL data)
        return ("invalid storage", tuple(tensor.shape))
    return (
        tensor.dtype,
        tuple(tensor.shape),
        tensor.stride(),
        tensor.storage_offset(),
        tensor.data_ptr() - built.span[0] if tensor.numel() else None,
        first - built.span[0] if tensor.numel() else None,
        end - first,
        tensor.device,
        tensor.requires_grad,
    )


def drop_storage(description: tuple[Any, ...]) -> tuple[Any, ...]:
    """A :func:`describe` tuple without the storage offset and the storage's size."""
    return description[:3] + description[4:6] + description[7:]


def check_our_import(raw: RawInput, built: Built, tensor: torch.Tensor) -> tuple[Any, ...]:
    """Every invariant of an accepted import; returns its description for the diff."""
    assert raw.shape is not None
    strides = raw.effective_strides()
    assert tuple(tensor.shape) == raw.shape
    if tensor.numel():
        assert tensor.stride() == strides
    assert tensor.device == torch.device("cpu")
    assert not tensor.requires_grad
    if tensor.numel():
        # The first element is at data + byte_offset (a storage offset, as torch 2.13
        # does); the storage starts at `data` and covers the whole view, inside the
        # producer's buffer.
        assert tensor.data_ptr() == built.span[0] + raw.byte_offset
        assert tensor.storage_offset() * tensor.element_size() == raw.byte_offset
        first, end = storage_span(tensor)
        view_first, view_end = view_span(tensor)
        assert first == built.span[0], "the storage does not start at data"
        assert first <= view_first
        assert view_end <= end, f"storage ends {view_end - end} bytes before the view"
        assert end <= built.span[1], f"storage runs {end - built.span[1]} bytes past the buffer"
        expected = view_of_bytes(
            built.raw_bytes[raw.byte_offset :], tensor.element_size(), raw.shape, strides
        )
        assert values_equal(tensor, expected), "values differ from the buffer's"
        problems = derived_views_work(tensor, expected)
        assert not problems, problems
    else:
        # No elements: an empty storage and no offset, whatever the byte_offset
        # (deviation empty-view-storage).
        assert tensor.untyped_storage().nbytes() == 0
        assert tensor.storage_offset() == 0
    return describe(tensor, built)


def _empty_huge(shape: tuple[int, ...]) -> RawInput:
    return RawInput(
        code=DLDataTypeCode.kDLInt, bits=8, lanes=1, ndim=len(shape), shape=shape,
        strides=None, byte_offset=8, null_data=False, device_type=DLDeviceType.kDLCPU,
        device_id=0, major=1, minor=3, flags=0, seed=0,
    )  # fmt: skip


def _empty_offset(strides: tuple[int, ...] | None) -> RawInput:
    return RawInput(
        code=DLDataTypeCode.kDLInt, bits=16, lanes=1, ndim=2, shape=(0, 3), strides=strides,
        byte_offset=48, null_data=False, device_type=DLDeviceType.kDLCPU, device_id=0,
        major=1, minor=3, flags=0, seed=0,
    )  # fmt: skip


# Found by the thorough profile's allocator twin: no elements, but row-major strides that
# do not fit in int64 (refused), or that do (imported).
@example(raw=_empty_huge((0, 2**40, 2**40)))
@example(raw=_empty_huge((2**40, 0, 2**40)))
@example(raw=dataclasses.replace(_empty_offset((3, 1)), null_data=True))
@example(raw=_empty_offset((3, 1)))
@example(raw=_empty_offset(None))
@given(raw=raw_inputs())
def test_import_generated(tables: Tables, raw: RawInput) -> None:
    check_import(tables, raw)


def check_import(tables: Tables, raw: RawInput) -> None:
    count_case("import: raw DLManagedTensorVersioned")
    reason = expected_refusal(raw, tables.runs_as_host_only)
    ours_built = Built(raw)
    ours, tensor = call_import(tables.ours, ours_built)
    if reason is not None:
        assert not ours.ok, f"our table imported an input it must refuse ({reason})"
        assert ours.error == "BufferError", ours
        assert "not consumed" in str(ours.value), ours.value
        # A GPU the table does not serve is refused naming the build that would; the one it
        # serves (a GPU torch without a GPU) is refused by torch itself.
        gpus = {DLDeviceType.kDLCUDA: "cuda", DLDeviceType.kDLROCM: "rocm"}
        if reason == "device" and gpus.get(raw.device_type, tables.backend) != tables.backend:
            assert "build" in str(ours.value), ours.value
        ours_description = None
    else:
        assert ours.ok, f"our table refused a valid input: {ours.value}"
        assert tensor is not None
        ours_description = check_our_import(raw, ours_built, tensor)
        del tensor
        gc.collect()
        assert ours_built.calls == [ours_built.address], "deleter must run exactly once"
    if tables.torch is not None:
        compare_with_torch(tables, raw, reason, ours, ours_description)


def compare_with_torch(
    tables: Tables, raw: RawInput, reason: str | None, ours: Outcome, ours_description: Any
) -> None:
    """The same input to torch's own table: the same outcome and result, or a deviation."""
    assert tables.torch is not None
    if raw.malformed() and deviates("malformed-import"):
        return
    gpu = raw.device_type in (DLDeviceType.kDLCUDA, DLDeviceType.kDLROCM)
    if reason == "device" and gpu:
        # torch would make a "cuda" or "hip" tensor over host memory: the rule's deviation
        # (GPU_RULES), or the GPU a GPU-serving table without a GPU cannot reach.
        deviation = gpu_rule("import", tables.backend, raw.device_type, torch_minor()).deviation
        if deviates(deviation or "unserved-gpu"):
            return
    theirs_built = Built(raw)
    theirs, their_tensor = call_import(tables.torch, theirs_built, ours=False)
    count_case("import: differential")
    if reason == "device":  # compared per device type: ours refused it (a CPU build)
        count_case("import: non-CPU device types vs torch")
        if theirs.ok:
            assert raw.device_type in UNCREATABLE_DEVICE_TYPES, (
                f"torch imports device type {raw.device_type} ({their_tensor.device}), we "
                "refuse it: not a documented deviation"
            )
            assert deviates("uncreatable-device")
            del their_tensor
            gc.collect()
        elif ours.error != theirs.error:
            assert deviates("error-types")
        return
    their_description = None
    if their_tensor is not None:
        their_description = describe(their_tensor, theirs_built)
        if their_tensor.numel() and ours_description is not None:
            assert raw.shape is not None
            expected = view_of_bytes(
                theirs_built.raw_bytes[raw.byte_offset :],
                their_tensor.element_size(),
                raw.shape,
                raw.effective_strides(),
            )
            assert values_equal(their_tensor, expected), "torch's import holds other values"
        del their_tensor
        gc.collect()
    if ours.ok and theirs.ok:
        compare_imports(raw, ours_description, their_description)
    elif ours.ok:
        assert raw.byte_offset != 0, f"torch refused ({theirs.value}) an input we import"
        assert raw.strides is None, f"torch refused ({theirs.value}) an input we import"
        assert deviates("byte-offset-import")
    elif theirs.ok:
        deviation = {
            "READ_ONLY": "read-only-import",
            "major version": "major-version-import",
            "NULL data": "null-data-import",
        }.get(reason or "")
        assert deviation is not None, f"we refused ({ours.value}) an input torch imports"
        assert deviates(deviation)
    elif ours.error != theirs.error:
        assert deviates("error-types")


def compare_imports(raw: RawInput, ours: tuple[Any, ...], theirs: tuple[Any, ...]) -> None:
    """Both tables imported ``raw``: the same result, or the empty-view deviation."""
    if ours != theirs and raw.extent_elements() == 0:
        # Ours: an empty storage, offset 0; torch's storage covers the offset, even over
        # NULL data (a storage of byte_offset bytes without memory: "invalid storage").
        if theirs[0] == "invalid storage":
            assert raw.null_data, theirs
            assert theirs[1] == ours[1]  # the shape
        else:
            assert drop_storage(ours) == drop_storage(theirs)
        assert deviates("empty-view-storage")
    else:
        assert ours == theirs


@pytest.mark.parametrize("device_type", sorted({int(t) for t in DLDeviceType} | {0, 5, 6, 19, 99}))
def test_import_each_device_type_against_torch(tables: Tables, device_type: int) -> None:
    """Every device type, not only the ones hypothesis happens to draw: our refusal is
    compared with torch's outcome for that type (a float32[4] over host memory)."""
    raw = RawInput(
        code=DLDataTypeCode.kDLFloat, bits=32, lanes=1, ndim=1, shape=(4,), strides=None,
        byte_offset=0, null_data=False, device_type=device_type, device_id=0, major=1,
        minor=3, flags=0, seed=device_type,
    )  # fmt: skip
    check_import(tables, raw)
