"""Tensors whose Python-level answers lie, for the trust-boundary checks of the portable
table (ARCHITECTURE: "the portable table's trust boundary").

Each liar is a pair: the tensor a consumer hands the table (a ``torch.Tensor`` subclass
overriding a property or method, or answering through ``__torch_function__``), and the
plain tensor it really is (the same storage, sizes, strides, offset and dtype). Whatever
the liar says, an export must describe the memory of the plain twin, or be refused with
``BufferError``; never more memory than the storage holds.

``lying_mode()`` is a torch function mode that lies about every plain tensor around it.

Built only from APIs torch 2.2 already has; runs in the exchange suite's minimal envs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

#: torch._C.TensorBase (torch < 2.3: _TensorBase), whose descriptors the liars bypass.
TENSOR_BASE: Any = getattr(torch._C, "TensorBase", None) or torch._C._TensorBase


def _bigger(tensor: torch.Tensor) -> torch.Tensor:
    """A tensor that claims far more memory than ``tensor`` has."""
    return torch.empty(4096, dtype=torch.float64)


class LyingDtype(torch.Tensor):
    @property
    def dtype(self) -> torch.dtype:  # type: ignore[override]
        return torch.float64


class LyingFloat8(torch.Tensor):
    """Claims a one-byte float8 dtype (where the torch has one): old torch routes such
    exports through a uint8 view."""

    @property
    def dtype(self) -> torch.dtype:  # type: ignore[override]
        return getattr(torch, "float8_e4m3fn", torch.uint8)


class LyingPlain(torch.Tensor):
    """A float8 tensor claiming to be float32 (where the torch has float8)."""

    @property
    def dtype(self) -> torch.dtype:  # type: ignore[override]
        return torch.float32


class LyingShape(torch.Tensor):
    @property
    def shape(self) -> torch.Size:  # type: ignore[override]
        return torch.Size([1 << 20, 1 << 10])

    def size(self, dim: Any = None) -> Any:  # type: ignore[override]
        shape = torch.Size([1 << 20, 1 << 10])
        return shape if dim is None else shape[dim]

    def dim(self) -> int:
        return 2


class LyingStrides(torch.Tensor):
    def stride(self, dim: Any = None) -> Any:  # type: ignore[override]
        strides = tuple(1 << 30 for _ in range(TENSOR_BASE.dim(self)))
        return strides if dim is None else strides[dim]


class LyingDevice(torch.Tensor):
    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return torch.device("cuda", 3)

    @property
    def is_cuda(self) -> bool:  # type: ignore[override]
        return True


class LyingDataPtr(torch.Tensor):
    def data_ptr(self) -> int:
        return 4096

    def element_size(self) -> int:
        return 16


class LyingLayout(torch.Tensor):
    @property
    def layout(self) -> torch.layout:  # type: ignore[override]
        return torch.strided

    @property
    def is_nested(self) -> bool:  # type: ignore[override]
        return False


class LyingDetach(torch.Tensor):
    """Answers detach() and view() (as a method: the table's own calls go through
    TensorBase, so only __torch_function__ could reach them) with a bigger tensor."""

    def detach(self) -> torch.Tensor:  # type: ignore[override]
        return _bigger(self)

    def view(self, *args: Any) -> torch.Tensor:  # type: ignore[override]
        return _bigger(self)


#: What a lying ``__torch_function__`` answers for a property getter, by property name.
_PROPERTY_LIES: dict[str, Callable[[], Any]] = {
    "dtype": lambda: torch.float64,
    "layout": lambda: torch.sparse_coo,
    "is_nested": lambda: True,
    "device": lambda: torch.device("cuda", 1),
    "shape": lambda: torch.Size([1 << 20]),
}

#: ... and for a method, by name, given the tensor it was called on.
_METHOD_LIES: dict[str, Callable[[torch.Tensor], Any]] = {
    **dict.fromkeys(("detach", "view", "contiguous", "as_strided"), _bigger),
    **dict.fromkeys(("size", "stride"), lambda t: torch.Size([1 << 30] * TENSOR_BASE.dim(t))),
    **dict.fromkeys(("is_neg", "is_conj"), lambda t: False),
    "data_ptr": lambda t: 4096,
}


def _lie(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """What a lying ``__torch_function__`` answers for ``func``, or ``NotImplemented``."""
    name = getattr(func, "__name__", "")
    owner = getattr(func, "__self__", None)
    if name == "__get__" and owner is not None:
        prop = _PROPERTY_LIES.get(getattr(owner, "__name__", ""))
        return NotImplemented if prop is None else prop()
    method = _METHOD_LIES.get(name)
    return NotImplemented if method is None or not args else method(args[0])


class LyingTorchFunction(torch.Tensor):
    """Answers properties and methods through ``__torch_function__``."""

    @classmethod
    def __torch_function__(
        cls, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        lie = _lie(func, args, kwargs)
        if lie is not NotImplemented:
            return lie
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **kwargs)


@contextlib.contextmanager
def lying_mode() -> Iterator[None]:
    """A torch function mode that lies about every tensor (plain ones included)."""
    from torch.overrides import TorchFunctionMode

    class Lying(TorchFunctionMode):
        def __torch_function__(
            self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
        ) -> Any:
            kwargs = kwargs or {}
            lie = _lie(func, args, kwargs)
            return func(*args, **kwargs) if lie is NotImplemented else lie

    with Lying():
        yield


def _float32() -> torch.Tensor:
    return torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)[:, 1:, ::2]


def _float8() -> torch.Tensor | None:
    dtype = getattr(torch, "float8_e5m2", None)
    if dtype is None:
        return None
    return torch.arange(16, dtype=torch.uint8).view(dtype).reshape(4, 4)[:, 1:]


def _short_dims() -> torch.Tensor:
    """Dimensions of size 1 (whose strides the table asks the tensor for)."""
    return torch.arange(12, dtype=torch.float32).reshape(3, 1, 4).transpose(0, 2)


#: (name, subclass, plain factory): the liar is ``plain.as_subclass(subclass)``.
LIARS: list[tuple[str, type[torch.Tensor], Callable[[], torch.Tensor | None]]] = [
    ("dtype", LyingDtype, _float32),
    ("dtype-float8", LyingFloat8, _float32),
    ("float8-says-float32", LyingPlain, _float8),
    ("shape-size", LyingShape, _float32),
    ("stride", LyingStrides, _short_dims),
    ("device", LyingDevice, _float32),
    ("data_ptr", LyingDataPtr, _float32),
    ("layout", LyingLayout, _float32),
    ("detach-view", LyingDetach, _float32),
    ("detach-view-float8", LyingDetach, _float8),
    ("torch_function", LyingTorchFunction, _float32),
    ("torch_function-short-dims", LyingTorchFunction, _short_dims),
    ("torch_function-float8", LyingTorchFunction, _float8),
]


def liars() -> Iterator[tuple[str, torch.Tensor, torch.Tensor]]:
    """(name, liar, plain twin) for each liar this torch can make."""
    for name, subclass, factory in LIARS:
        plain = factory()
        if plain is not None:
            yield name, plain.as_subclass(subclass), plain


def storage_bytes(tensor: torch.Tensor) -> tuple[int, int]:
    """(first address, byte size) of the storage a plain tensor lives in."""
    with torch._C.DisableTorchFunction():
        storage = TENSOR_BASE.untyped_storage(tensor)
        return int(storage.data_ptr()), int(storage.nbytes())


def described_extent(fields: Any) -> tuple[int, int]:
    """[first, last) byte addresses an export's fields (``TensorFields``) describe (empty:
    first == last)."""
    if any(size == 0 for size in fields.shape):
        return fields.data, fields.data
    item = (fields.bits * fields.lanes + 7) // 8
    low = high = fields.data + fields.byte_offset
    for size, stride in zip(fields.shape, fields.strides):
        step = (size - 1) * stride * item
        if step < 0:
            low += step
        else:
            high += step
    return low, high + item
