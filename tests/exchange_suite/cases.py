"""Tensors and dtypes the suite exercises, built only from APIs torch 2.4 already has."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch

from .dlpack_ctypes import DLDataTypeCode as Code
from .dlpack_ctypes import DLDeviceType, TensorFields

#: DLPack (code, bits, lanes) of every torch dtype DLPack can express, by attribute
#: name on ``torch`` (dtypes missing from the running torch are left out).
#: Sub-byte integers are stored one element per byte, so they travel as 8-bit
#: (u)ints; FP4 packs two values per byte, so bits=4, lanes=2 (both as torch 2.13).
DLPACK_DTYPES: dict[str, tuple[int, int, int]] = {
    "bool": (Code.kDLBool, 8, 1),
    "uint8": (Code.kDLUInt, 8, 1),
    "int8": (Code.kDLInt, 8, 1),
    "int16": (Code.kDLInt, 16, 1),
    "int32": (Code.kDLInt, 32, 1),
    "int64": (Code.kDLInt, 64, 1),
    "uint16": (Code.kDLUInt, 16, 1),
    "uint32": (Code.kDLUInt, 32, 1),
    "uint64": (Code.kDLUInt, 64, 1),
    "float16": (Code.kDLFloat, 16, 1),
    "float32": (Code.kDLFloat, 32, 1),
    "float64": (Code.kDLFloat, 64, 1),
    "bfloat16": (Code.kDLBfloat, 16, 1),
    "complex32": (Code.kDLComplex, 32, 1),
    "complex64": (Code.kDLComplex, 64, 1),
    "complex128": (Code.kDLComplex, 128, 1),
    "float8_e5m2": (Code.kDLFloat8_e5m2, 8, 1),
    "float8_e4m3fn": (Code.kDLFloat8_e4m3fn, 8, 1),
    "float8_e5m2fnuz": (Code.kDLFloat8_e5m2fnuz, 8, 1),
    "float8_e4m3fnuz": (Code.kDLFloat8_e4m3fnuz, 8, 1),
    "float8_e8m0fnu": (Code.kDLFloat8_e8m0fnu, 8, 1),
    "float4_e2m1fn_x2": (Code.kDLFloat4_e2m1fn, 4, 2),
    **{f"int{n}": (Code.kDLInt, 8, 1) for n in range(1, 8)},
    **{f"uint{n}": (Code.kDLUInt, 8, 1) for n in range(1, 8)},
}

#: torch dtypes DLPack cannot express: exporting them raises BufferError.
REFUSED_DTYPES = (
    *("qint8", "quint8", "qint32", "quint4x2", "quint2x4"),
    *(f"bits{kind}" for kind in ("1x8", "2x4", "4x2", "8", "16")),
)

#: dtype a DLPack dtype imports as, where that is not the exported dtype itself.
IMPORTED_AS = {
    **{f"int{n}": "int8" for n in range(1, 8)},
    **{f"uint{n}": "uint8" for n in range(1, 8)},
}


def present(names: Any) -> list[str]:
    """The names of ``names`` that are dtypes of the running torch."""
    return [name for name in names if isinstance(getattr(torch, name, None), torch.dtype)]


def make_tensor(dtype: torch.dtype, shape: tuple[int, ...] = (2, 3)) -> torch.Tensor:
    """A tensor of ``dtype`` with distinct bytes in every element (not all dtypes have
    arithmetic, so the bytes are written through a uint8 view of the storage).

    Skips the test where this torch has the dtype but cannot allocate it (some
    sub-byte dtypes of older releases)."""
    with warnings.catch_warnings():
        # complex32 warns that it is experimental; creating it is all we need.
        warnings.simplefilter("ignore", UserWarning)
        try:
            tensor = torch.empty(shape, dtype=dtype)
        except (RuntimeError, NotImplementedError) as exc:
            pytest.skip(f"torch {torch.__version__} cannot allocate {dtype} tensors: {exc}")
    nbytes = tensor.untyped_storage().nbytes()
    if nbytes:
        raw = torch.arange(nbytes, dtype=torch.int64).remainder(251).to(torch.uint8)
        tensor.untyped_storage().copy_(raw.untyped_storage())
    return tensor


def _base() -> torch.Tensor:
    return torch.arange(60, dtype=torch.float32).reshape(3, 4, 5)


class _Sub(torch.Tensor):
    pass


#: Layout cases: (id, factory). Every factory returns a fresh strided CPU tensor.
LAYOUTS: list[tuple[str, Callable[[], torch.Tensor]]] = [
    ("contiguous", _base),
    ("transposed", lambda: _base().transpose(0, 2)),
    ("permuted", lambda: _base().permute(1, 2, 0)),
    ("step_sliced", lambda: _base()[:, 1:, ::2]),
    ("offset_row", lambda: _base()[2]),
    ("offset_column", lambda: _base()[:, :, 3]),
    ("diagonal", lambda: torch.diagonal(_base()[0])),
    ("zero_dim", lambda: torch.tensor(3.5)),
    ("zero_dim_view", lambda: _base()[1, 2, 3]),
    ("empty", lambda: torch.empty(0, 3)),
    ("empty_with_storage", lambda: _base().reshape(-1)[7:7]),
    ("size_one_dims", lambda: _base()[1:2, :, 2:3]),
    ("expanded", lambda: torch.arange(4.0).expand(3, 4)),
    ("requires_grad", lambda: torch.ones(2, 3, requires_grad=True)),
    ("non_leaf_grad", lambda: torch.ones(2, 3, requires_grad=True) * 2),
    ("parameter", lambda: torch.nn.Parameter(torch.ones(4))),
    ("subclass", lambda: torch.ones(2, 2).as_subclass(_Sub)),
    ("int64_sliced", lambda: torch.arange(20).reshape(4, 5)[1:, 2:]),
]


def expected_fields(tensor: torch.Tensor, code: int, bits: int, lanes: int) -> TensorFields:
    """What a DLTensor of a CPU ``tensor`` must say: torch 2.13's conventions (data is
    the first element, byte_offset 0, NULL data for tensors without elements)."""
    return TensorFields(
        data=tensor.data_ptr() if tensor.numel() else 0,
        device_type=DLDeviceType.kDLCPU,
        device_id=0,
        ndim=tensor.dim(),
        code=code,
        bits=bits,
        lanes=lanes,
        shape=tuple(tensor.shape),
        strides=tuple(tensor.stride()),
        byte_offset=0,
    )
