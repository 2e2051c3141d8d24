"""Tensors whose Python-level answers lie (liars.py): every export describes the memory
the tensor really has, and every described byte is read (so a sanitizer build sees any
read past the storage)."""

from __future__ import annotations

import ctypes
from typing import Any

import pytest
import torch

from .dlpack_ctypes import (
    DLPackExchangeAPI,
    TensorFields,
    export_dltensor,
    export_managed,
    fields_of,
    managed_fields,
)
from .liars import described_extent, liars, lying_mode, storage_bytes

CASES = list(liars())


def _key(fields: TensorFields) -> tuple[Any, ...]:
    # Everything an export describes (the version is each table's own).
    return (
        fields.data,
        fields.device_type,
        fields.device_id,
        fields.ndim,
        fields.code,
        fields.bits,
        fields.lanes,
        fields.shape,
        fields.strides,
        fields.byte_offset,
    )


def _owning(api: DLPackExchangeAPI, obj: object) -> TensorFields:
    managed = export_managed(api, obj)
    try:
        fields = managed_fields(managed)
        _read_all(fields)
    finally:
        managed.contents.deleter(managed)
    return fields


def _non_owning(api: DLPackExchangeAPI, obj: object) -> TensorFields:
    fields = fields_of(export_dltensor(api, obj))
    _read_all(fields)
    return fields


def _read_all(fields: TensorFields) -> None:
    """Touch every byte the export describes (host memory only)."""
    low, high = described_extent(fields)
    if high > low and fields.device_type == 1:
        ctypes.string_at(low, high - low)


@pytest.mark.parametrize("export", [_owning, _non_owning], ids=["owning", "non-owning"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("in_mode", [False, True], ids=["", "lying-mode"])
def test_a_lying_tensor_exports_its_real_memory(
    api: DLPackExchangeAPI,
    export: Any,
    case: tuple[str, torch.Tensor, torch.Tensor],
    in_mode: bool,
) -> None:
    name, liar, plain = case
    twin = export(api, plain)
    try:
        if in_mode:
            with lying_mode():
                fields = export(api, liar)
        else:
            fields = export(api, liar)
    except BufferError:
        return  # refusing a lie is allowed; describing the wrong memory is not
    start, size = storage_bytes(plain)
    low, high = described_extent(fields)
    assert low == high or (start <= low and high <= start + size), (name, fields)
    assert _key(fields) == _key(twin), (name, fields, twin)


def test_a_lying_mode_cannot_change_a_plain_export(api: DLPackExchangeAPI) -> None:
    plain = torch.arange(12, dtype=torch.float32).reshape(3, 4)[:, ::2]
    owning, non_owning = _owning(api, plain), _non_owning(api, plain)
    with lying_mode():
        assert _key(_owning(api, plain)) == _key(owning)
        assert _key(_non_owning(api, plain)) == _key(non_owning)
