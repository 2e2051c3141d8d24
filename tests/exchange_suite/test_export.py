"""Exporting torch tensors: managed_tensor_from_py_object and dltensor_from_py_object."""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import pytest
import torch

from .cases import DLPACK_DTYPES, LAYOUTS, expected_fields, make_tensor, present
from .dlpack_ctypes import (
    DLPackExchangeAPI,
    TensorFields,
    export_dltensor,
    export_managed,
    fields_of,
    import_managed,
    managed_fields,
)


def with_managed_header(fields: TensorFields, api: DLPackExchangeAPI) -> TensorFields:
    from dataclasses import replace

    # Shares the tensor's writable memory: neither READ_ONLY nor IS_COPIED.
    return replace(fields, version=(1, api.header.version.minor), flags=0)


def export_fields(api: DLPackExchangeAPI, tensor: torch.Tensor) -> TensorFields:
    managed = export_managed(api, tensor)
    try:
        return managed_fields(managed)
    finally:
        managed.contents.deleter(managed)


@pytest.mark.parametrize("name", present(DLPACK_DTYPES))
def test_dtype_managed(api: DLPackExchangeAPI, name: str) -> None:
    tensor = make_tensor(getattr(torch, name))
    expected = with_managed_header(expected_fields(tensor, *DLPACK_DTYPES[name]), api)
    assert export_fields(api, tensor) == expected


@pytest.mark.parametrize("name", present(DLPACK_DTYPES))
def test_dtype_dltensor(api: DLPackExchangeAPI, name: str) -> None:
    tensor = make_tensor(getattr(torch, name))
    assert fields_of(export_dltensor(api, tensor)) == expected_fields(tensor, *DLPACK_DTYPES[name])


@pytest.mark.parametrize("name", present(DLPACK_DTYPES))
def test_dtype_same_as_torch(
    api: DLPackExchangeAPI, need_torch_api: DLPackExchangeAPI, name: str
) -> None:
    tensor = make_tensor(getattr(torch, name))
    assert export_fields(api, tensor) == export_fields(need_torch_api, tensor)
    assert fields_of(export_dltensor(api, tensor)) == fields_of(
        export_dltensor(need_torch_api, tensor)
    )


@pytest.mark.parametrize(("case", "factory"), LAYOUTS, ids=[case for case, _ in LAYOUTS])
def test_layout_managed(
    api: DLPackExchangeAPI, case: str, factory: Callable[[], torch.Tensor]
) -> None:
    tensor = factory()
    code, bits, lanes = DLPACK_DTYPES[str(tensor.dtype).removeprefix("torch.")]
    expected = with_managed_header(expected_fields(tensor, code, bits, lanes), api)
    assert export_fields(api, tensor) == expected


@pytest.mark.parametrize(("case", "factory"), LAYOUTS, ids=[case for case, _ in LAYOUTS])
def test_layout_dltensor(
    api: DLPackExchangeAPI, case: str, factory: Callable[[], torch.Tensor]
) -> None:
    tensor = factory()
    code, bits, lanes = DLPACK_DTYPES[str(tensor.dtype).removeprefix("torch.")]
    assert fields_of(export_dltensor(api, tensor)) == expected_fields(tensor, code, bits, lanes)


@pytest.mark.parametrize(("case", "factory"), LAYOUTS, ids=[case for case, _ in LAYOUTS])
def test_layout_same_as_torch(
    api: DLPackExchangeAPI,
    need_torch_api: DLPackExchangeAPI,
    case: str,
    factory: Callable[[], torch.Tensor],
) -> None:
    tensor = factory()
    assert export_fields(api, tensor) == export_fields(need_torch_api, tensor)
    assert fields_of(export_dltensor(api, tensor)) == fields_of(
        export_dltensor(need_torch_api, tensor)
    )


def test_offset_data_pointer_is_first_element(api: DLPackExchangeAPI) -> None:
    base = torch.arange(12, dtype=torch.int32)
    view = base[5:]
    fields = export_fields(api, view)
    assert fields.data == base.data_ptr() + 5 * 4
    assert fields.byte_offset == 0
    assert ctypes.c_int32.from_address(fields.data).value == 5


def test_managed_copies_survive_metadata_change(api: DLPackExchangeAPI) -> None:
    tensor = torch.zeros(2, 3)
    managed = export_managed(api, tensor)
    try:
        tensor.t_()  # in place: the TensorImpl's sizes/strides change
        fields = managed_fields(managed)
        assert fields.shape == (2, 3)
        assert fields.strides == (3, 1)
    finally:
        managed.contents.deleter(managed)


def test_managed_keeps_memory_alive(api: DLPackExchangeAPI) -> None:
    tensor = torch.arange(1000, dtype=torch.int64)
    managed = export_managed(api, tensor)
    data = managed.contents.dl_tensor.data
    del tensor
    # Churn the allocator: without the reference held by the context, this memory
    # would be reused and the values overwritten.
    junk = [torch.full((1000,), -1, dtype=torch.int64) for _ in range(50)]
    values = (ctypes.c_int64 * 1000).from_address(data)
    assert list(values[:3]) == [0, 1, 2]
    assert values[999] == 999
    del junk
    managed.contents.deleter(managed)


def test_managed_keeps_memory_alive_across_set_(api: DLPackExchangeAPI) -> None:
    """The export holds the memory, not the tensor: ``t.set_()`` afterwards gives the
    tensor other memory, and the exported memory must live until the export's deleter."""
    import gc

    from .test_import import HandBuilt

    built = HandBuilt([float(i) for i in range(6)], (6,))
    tensor = import_managed(api, built.pointer())
    managed = export_managed(api, tensor)
    data = managed.contents.dl_tensor.data
    tensor.set_(torch.zeros(2, dtype=torch.float64))
    gc.collect()
    assert built.calls == [], "the exported memory was released while the export held it"
    assert list((ctypes.c_double * 6).from_address(data)) == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    managed.contents.deleter(managed)
    assert built.calls == [built.address]
    del tensor


def test_dltensor_points_into_tensor_metadata(api: DLPackExchangeAPI) -> None:
    # Non-owning: two calls on the same tensor describe the same arrays, no copies.
    tensor = torch.zeros(4, 5)
    first = export_dltensor(api, tensor)
    second = export_dltensor(api, tensor)
    assert ctypes.addressof(first.shape.contents) == ctypes.addressof(second.shape.contents)
    assert ctypes.addressof(first.strides.contents) == ctypes.addressof(second.strides.contents)


def test_exported_memory_is_shared(api: DLPackExchangeAPI) -> None:
    tensor = torch.zeros(3, dtype=torch.float64)
    managed = export_managed(api, tensor)
    try:
        values = (ctypes.c_double * 3).from_address(managed.contents.dl_tensor.data)
        values[1] = 42.0
        assert tensor[1].item() == 42.0
        tensor[2] = 7.0
        assert values[2] == 7.0
    finally:
        managed.contents.deleter(managed)
