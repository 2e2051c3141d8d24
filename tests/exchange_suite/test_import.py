"""Importing DLPack tensors: managed_tensor_to_py_object and round trips."""

from __future__ import annotations

import ctypes
import sys
from typing import Any

import pytest
import torch

from .cases import DLPACK_DTYPES, IMPORTED_AS, LAYOUTS, make_tensor, present
from .dlpack_ctypes import (
    DELETER,
    DLDataTypeCode,
    DLDeviceType,
    DLManagedTensorVersioned,
    DLPackExchangeAPI,
    export_managed,
    import_managed,
)


class HandBuilt:
    """A DLManagedTensorVersioned over a ctypes buffer whose deleter counts its calls."""

    def __init__(
        self,
        values: list[float],
        shape: tuple[int, ...],
        strides: tuple[int, ...] | None = None,
        *,
        code: int = DLDataTypeCode.kDLFloat,
        bits: int = 64,
        lanes: int = 1,
        device_type: int = DLDeviceType.kDLCPU,
        byte_offset: int = 0,
        major: int = 1,
    ) -> None:
        self.buffer = (ctypes.c_double * len(values))(*values)
        self.shape = (ctypes.c_int64 * len(shape))(*shape)
        self.strides = None if strides is None else (ctypes.c_int64 * len(strides))(*strides)
        self.calls: list[int] = []
        self.deleter = DELETER(self._delete)
        managed = DLManagedTensorVersioned()
        managed.version.major = major
        managed.version.minor = 3
        managed.deleter = self.deleter
        tensor = managed.dl_tensor
        tensor.data = ctypes.addressof(self.buffer)
        tensor.device.device_type = device_type
        tensor.ndim = len(shape)
        tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes = code, bits, lanes
        tensor.shape = self.shape
        tensor.strides = self.strides
        tensor.byte_offset = byte_offset
        self.managed = managed

    def _delete(self, pointer: Any) -> None:
        self.calls.append(ctypes.addressof(pointer.contents))

    @property
    def address(self) -> int:
        return ctypes.addressof(self.managed)

    def pointer(self) -> Any:
        return ctypes.pointer(self.managed)


def test_import_shares_memory(api: DLPackExchangeAPI) -> None:
    built = HandBuilt([0.0, 1.0, 2.0, 3.0, 4.0, 5.0], (2, 3))
    tensor = import_managed(api, built.pointer())
    assert tensor.dtype == torch.float64
    assert tensor.shape == (2, 3)
    assert tensor.stride() == (3, 1)
    assert tensor.device == torch.device("cpu")
    assert tensor.data_ptr() == ctypes.addressof(built.buffer)
    assert tensor.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    built.buffer[4] = 40.0
    assert tensor[1, 1].item() == 40.0
    tensor[0, 2] = -2.0
    assert built.buffer[2] == -2.0
    assert not tensor.requires_grad


def test_deleter_runs_once_when_torch_frees(api: DLPackExchangeAPI) -> None:
    built = HandBuilt([1.0] * 6, (2, 3))
    tensor = import_managed(api, built.pointer())
    view = tensor[1:]
    del tensor
    assert built.calls == [], "deleter ran while a view still used the memory"
    del view
    assert built.calls == [built.address]


def test_imported_tensor_refcount(api: DLPackExchangeAPI) -> None:
    built = HandBuilt([1.0] * 3, (3,))
    tensor = import_managed(api, built.pointer())
    fresh = torch.ones(3, dtype=torch.float64)
    # One reference (ours): same count as a tensor torch created itself.
    assert sys.getrefcount(tensor) == sys.getrefcount(fresh)
    del tensor
    assert built.calls == [built.address]


def test_import_strides_and_byte_offset(api: DLPackExchangeAPI) -> None:
    built = HandBuilt([float(i) for i in range(12)], (2, 3), (1, 4), byte_offset=8)
    tensor = import_managed(api, built.pointer())
    base = ctypes.addressof(built.buffer)
    assert tensor.data_ptr() == base + 8
    assert tensor.stride() == (1, 4)
    assert tensor.tolist() == [[1.0, 5.0, 9.0], [2.0, 6.0, 10.0]]
    # torch 2.13's convention: an element-aligned byte_offset is a storage offset,
    # and the storage (from `data`) covers the offset and the whole view.
    assert tensor.storage_offset() == 1
    assert tensor.untyped_storage().data_ptr() == base
    assert tensor.untyped_storage().nbytes() == 8 * (1 + 10)  # offset + extent
    del tensor
    assert len(built.calls) == 1


def test_import_byte_offset_storage_covers_the_view(api: DLPackExchangeAPI) -> None:
    # The case that used to get a 2560-byte storage (offset added in elements, not
    # bytes): float32[512] 2048 bytes into a 4096-byte buffer, NULL and explicit strides.
    import copy
    import gc
    import io

    for strides in (None, (1,)):
        buffer = (ctypes.c_float * 1024)(*range(1024))
        built = HandBuilt([0.0], (512,), strides, bits=32, byte_offset=2048)
        built.buffer = buffer
        built.managed.dl_tensor.data = ctypes.addressof(buffer)
        tensor = import_managed(api, built.pointer())
        storage = tensor.untyped_storage()
        assert (storage.data_ptr(), storage.nbytes()) == (ctypes.addressof(buffer), 4096)
        expected = torch.arange(512, 1024, dtype=torch.float32)
        assert torch.equal(tensor, expected)
        assert torch.equal(tensor[1:], expected[1:])
        assert torch.equal(tensor.reshape(16, 32).T, expected.reshape(16, 32).T)
        assert torch.equal(copy.deepcopy(tensor), expected)
        saved = io.BytesIO()
        torch.save(tensor, saved)
        saved.seek(0)
        assert torch.equal(torch.load(saved, weights_only=True), expected)
        del tensor, storage
        gc.collect()
        assert len(built.calls) == 1


@pytest.mark.parametrize(
    ("shape", "strides"), [((0,), None), ((3, 0), None), ((3, 0), (1, 4)), ((0, 5), (7, 1))]
)
def test_import_empty_view_gets_an_empty_storage(
    api: DLPackExchangeAPI, shape: tuple[int, ...], strides: tuple[int, ...] | None
) -> None:
    """A view without elements addresses no memory, whatever its byte_offset: it gets an
    empty storage and storage offset 0 (deviation ``empty-view-storage``). A storage
    covering a huge offset (torch 2.13 makes one) has torch.save and copy.deepcopy read
    memory the producer never provided."""
    import copy
    import gc
    import io

    built = HandBuilt([1.0], shape, strides, byte_offset=2**40)  # 8-aligned, < int64
    tensor = import_managed(api, built.pointer())
    assert tuple(tensor.shape) == shape
    assert tensor.numel() == 0
    if strides is not None:
        assert tensor.stride() == strides
    # (An int, not the storage, in the assertion: pytest's repr of a storage reads it.)
    nbytes = tensor.untyped_storage().nbytes()
    assert nbytes == 0, f"an empty view got a {nbytes}-byte storage"
    assert tensor.storage_offset() == 0
    assert copy.deepcopy(tensor).shape == shape
    saved = io.BytesIO()
    torch.save(tensor, saved)
    saved.seek(0)
    loaded = torch.load(saved, weights_only=True)
    assert (tuple(loaded.shape), loaded.dtype) == (shape, torch.float64)
    del tensor
    gc.collect()
    assert built.calls == [built.address], "deleter must run exactly once"


def test_import_flags(api: DLPackExchangeAPI) -> None:
    from .dlpack_ctypes import FLAG_IS_COPIED, FLAG_IS_SUBBYTE_TYPE_PADDED, FLAG_READ_ONLY

    # Informational flags are accepted ...
    built = HandBuilt([1.0, 2.0], (2,))
    built.managed.flags = FLAG_IS_COPIED | FLAG_IS_SUBBYTE_TYPE_PADDED
    assert import_managed(api, built.pointer()).tolist() == [1.0, 2.0]
    # ... READ_ONLY is refused: torch tensors are always writable.
    built = HandBuilt([1.0, 2.0], (2,))
    built.managed.flags = FLAG_READ_ONLY | FLAG_IS_COPIED
    out = ctypes.c_void_p()
    with pytest.raises(BufferError, match="READ_ONLY"):
        api.managed_tensor_to_py_object_no_sync(built.pointer(), ctypes.byref(out))
    assert built.calls == []


def test_import_null_strides_means_row_major(api: DLPackExchangeAPI) -> None:
    built = HandBuilt([float(i) for i in range(6)], (3, 2), None)
    tensor = import_managed(api, built.pointer())
    assert tensor.stride() == (2, 1)
    assert tensor.tolist() == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]


def test_import_zero_dim(api: DLPackExchangeAPI) -> None:
    built = HandBuilt([9.5], ())
    tensor = import_managed(api, built.pointer())
    assert tensor.dim() == 0
    assert tensor.item() == 9.5


def test_import_matches_torch(api: DLPackExchangeAPI, need_torch_api: DLPackExchangeAPI) -> None:
    def describe(table: DLPackExchangeAPI) -> tuple[Any, ...]:
        built = HandBuilt([float(i) for i in range(12)], (2, 3), (1, 4), byte_offset=8)
        tensor = import_managed(table, built.pointer())
        base = ctypes.addressof(built.buffer)
        result = (
            tensor.dtype,
            tuple(tensor.shape),
            tensor.stride(),
            tensor.storage_offset(),
            tensor.data_ptr() - base,
            tensor.device,
            tensor.requires_grad,
        )
        del tensor
        assert len(built.calls) == 1
        return result

    assert describe(api) == describe(need_torch_api)


@pytest.mark.parametrize(
    ("change", "kwargs"),
    [
        ("unknown dtype code", {"code": 99}),
        ("float of 24 bits", {"code": DLDataTypeCode.kDLFloat, "bits": 24}),
        ("vector lanes", {"lanes": 4}),
        ("device without torch support", {"device_type": DLDeviceType.kDLVulkan}),
        ("pinned host memory", {"device_type": DLDeviceType.kDLCUDAHost}),
        ("major version 2", {"major": 2}),
        ("unaligned byte_offset", {"byte_offset": 4}),
        ("GPU memory in a CPU build", {"device_type": DLDeviceType.kDLROCM}),
        ("negative stride", {"shape": (2,), "strides": (-1,), "byte_offset": 8}),
        ("negative size", {"shape": (-2,)}),
        ("extent beyond int64", {"shape": (2**40, 2**30)}),
        ("strided extent beyond int64", {"shape": (2, 2), "strides": (2**62, 1)}),
        ("NULL data with elements", {"null_data": True}),
    ],
)
def test_import_refusal_keeps_ownership(
    api: DLPackExchangeAPI, change: str, kwargs: dict[str, Any]
) -> None:
    shape = kwargs.pop("shape", (2,))
    strides = kwargs.pop("strides", None)
    null_data = kwargs.pop("null_data", False)
    built = HandBuilt([1.0, 2.0], shape, strides, **kwargs)
    if null_data:
        built.managed.dl_tensor.data = None
    out = ctypes.c_void_p(1)
    with pytest.raises(BufferError, match="not called"):
        api.managed_tensor_to_py_object_no_sync(built.pointer(), ctypes.byref(out))
    assert out.value is None
    # Ownership was not taken: the deleter has not run, and the caller may run it.
    assert built.calls == []
    built.managed.deleter(built.pointer())
    assert built.calls == [built.address]


@pytest.mark.parametrize("name", present(DLPACK_DTYPES))
def test_round_trip_dtype(api: DLPackExchangeAPI, name: str) -> None:
    original = make_tensor(getattr(torch, name))
    back = import_managed(api, export_managed(api, original))
    assert back.dtype == getattr(torch, IMPORTED_AS.get(name, name))
    assert back.shape == original.shape
    assert back.stride() == original.stride()
    assert back.data_ptr() == original.data_ptr()
    assert torch.equal(back.view(torch.uint8), original.view(torch.uint8))


@pytest.mark.parametrize(("case", "factory"), LAYOUTS, ids=[case for case, _ in LAYOUTS])
def test_round_trip_layout(api: DLPackExchangeAPI, case: str, factory: Any) -> None:
    original = factory()
    back = import_managed(api, export_managed(api, original))
    assert back.dtype == original.dtype
    assert back.shape == original.shape
    assert back.stride() == original.stride()
    assert back.device == original.device
    assert back.data_ptr() == original.data_ptr()
    assert not back.requires_grad
    assert torch.equal(back, original.detach())
    if original.numel():
        last = tuple(size - 1 for size in original.shape)
        back[last] = 123
        assert original.detach()[last].item() == 123


def test_round_trip_writes_through(api: DLPackExchangeAPI) -> None:
    original = torch.zeros(4, 4, dtype=torch.int32)
    view = original[1:, ::2]
    back = import_managed(api, export_managed(api, view))
    back.fill_(7)
    assert original[1:, ::2].eq(7).all()
    assert original[0].eq(0).all()
    assert original[:, 1].eq(0).all()
    original[3, 2] = -1
    assert back[2, 1].item() == -1


def test_round_trip_keeps_source_alive(api: DLPackExchangeAPI) -> None:
    original = torch.arange(100, dtype=torch.int64)
    back = import_managed(api, export_managed(api, original))
    source = original.data_ptr()
    del original
    assert back[99].item() == 99
    assert back.data_ptr() == source


def test_round_trip_releases_source(api: DLPackExchangeAPI) -> None:
    # (Newer torch lets a C++ reference keep the Python object alive, so the count
    # may rise while the import lives; it must come back when the import dies.)
    original = torch.arange(10, dtype=torch.int64)
    before = sys.getrefcount(original)
    back = import_managed(api, export_managed(api, original))
    del back
    assert sys.getrefcount(original) == before
