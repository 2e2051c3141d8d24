"""managed_tensor_from_py_object_no_sync and dltensor_from_py_object_no_sync on generated
tensors and non-tensors, then round trips through both tables.

Generators cover every dtype of the running torch (including those DLPack cannot express),
0-d, empty, huge (expanded), strided, offset and expanded views, and conj / neg / sparse /
nested / meta / quantized / mkldnn / subclass / Parameter / requires-grad / wrapper-subclass
/ fake tensors, plus non-tensors and objects whose ``__class__`` claims torch.Tensor.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from hypothesis import given, reject
from hypothesis import strategies as st

from exchange_suite.cases import DLPACK_DTYPES, REFUSED_DTYPES, expected_fields, present
from exchange_suite.dlpack_ctypes import (
    TensorFields,
    export_dltensor,
    export_managed,
    fields_of,
    import_managed,
    managed_fields,
)

from .checks import MAX_CHECKED_ELEMENTS, bits
from .conftest import count_case
from .tables import Outcome, Tables, deviates

EXPRESSIBLE = present(DLPACK_DTYPES)
INEXPRESSIBLE = [name for name in present(REFUSED_DTYPES) if name.startswith("bits")]


class Sub(torch.Tensor):
    """A plain Python subclass: a real tensor."""


class Wrapper(torch.Tensor):
    """A __torch_dispatch__ wrapper subclass: sizes and dtype, no memory."""

    @staticmethod
    def __new__(cls, elem: torch.Tensor) -> Any:
        return torch.Tensor._make_wrapper_subclass(cls, elem.shape, dtype=elem.dtype)

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        raise NotImplementedError(f"Wrapper does not run {func}")


class ClaimsTensor:
    """Not a tensor, but isinstance(obj, torch.Tensor) is True (``__class__`` lies)."""

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        return torch.Tensor


@dataclasses.dataclass
class Case:
    """A generated object and what our table must do with it (None: export it)."""

    kind: str
    obj: Any
    refusal: str | None = None  # expected exception type name
    dtype_name: str | None = None

    def __repr__(self) -> str:
        shape = tuple(self.obj.shape) if isinstance(self.obj, torch.Tensor) else None
        return f"Case({self.kind}, dtype={self.dtype_name}, shape={shape})"


def _quiet(make: Callable[[], Any]) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return make()


def _new(dtype: torch.dtype, shape: tuple[int, ...], seed: int) -> torch.Tensor:
    try:
        tensor = _quiet(lambda: torch.empty(shape, dtype=dtype))
    except (RuntimeError, NotImplementedError):
        reject()  # this torch has the dtype but cannot allocate it
    nbytes = tensor.untyped_storage().nbytes()
    if nbytes:
        raw = torch.arange(seed, seed + nbytes, dtype=torch.int64).remainder(251)
        tensor.untyped_storage().copy_(raw.to(torch.uint8).untyped_storage())
    return tensor


@st.composite
def views(draw: Any, tensor: torch.Tensor) -> torch.Tensor:
    """A chain of view operations: slices with steps, transposes, selects, expands,
    diagonals, unsqueezes, and a huge zero-stride view."""
    for _ in range(draw(st.integers(0, 4))):
        op = draw(st.sampled_from(["slice", "transpose", "select", "expand", "diag", "unsq"]))
        nd = tensor.dim()
        if op == "slice" and nd:
            dim = draw(st.integers(0, nd - 1))
            start = draw(st.integers(0, tensor.shape[dim]))
            step = draw(st.integers(1, 3))
            tensor = tensor[(slice(None),) * dim + (slice(start, None, step),)]
        elif op == "transpose" and nd >= 2:
            tensor = tensor.transpose(draw(st.integers(0, nd - 1)), draw(st.integers(0, nd - 1)))
        elif op == "select" and nd and tensor.shape[0]:
            tensor = tensor.select(0, draw(st.integers(0, tensor.shape[0] - 1)))
        elif op == "expand" and nd < 5:
            tensor = tensor.unsqueeze(0).expand(draw(st.integers(0, 3)), *tensor.shape)
        elif op == "diag" and nd >= 2:
            tensor = tensor.diagonal(draw(st.integers(-1, 1)), 0, 1)
        elif op == "unsq" and nd < 5:
            tensor = tensor.unsqueeze(draw(st.integers(0, nd)))
    if tensor.numel() and draw(st.integers(0, 9)) == 0:
        tensor = tensor.as_strided((2**40, 2**20), (0, 0), tensor.storage_offset())
    return tensor


@st.composite
def strided(draw: Any) -> Case:
    name = draw(st.sampled_from(EXPRESSIBLE + INEXPRESSIBLE))
    shape = tuple(draw(st.lists(st.integers(0, 5), max_size=4)))
    tensor = draw(views(_new(getattr(torch, name), shape, draw(st.integers(0, 250)))))
    wrap = draw(st.sampled_from(["plain", "plain", "subclass", "parameter", "grad"]))
    floating = tensor.is_floating_point() or tensor.is_complex()
    if wrap == "subclass":
        tensor = tensor.as_subclass(Sub)
    elif wrap in ("parameter", "grad") and floating and tensor.dtype.itemsize >= 2:
        try:
            leaf = torch.nn.Parameter(tensor) if wrap == "parameter" else tensor.requires_grad_()
        except RuntimeError:
            leaf = tensor  # dtypes autograd does not support
        tensor = leaf
    refusal = "BufferError" if name in INEXPRESSIBLE else None
    return Case(f"strided/{wrap}", tensor, refusal, name)


QUANTIZED = [name for name in present(REFUSED_DTYPES) if name.startswith("q")]


def _quantized(name: str) -> Callable[[], torch.Tensor]:
    dtype = getattr(torch, name)
    return lambda: torch.quantize_per_tensor(torch.ones(4), 0.1, 0, dtype)


def _fake() -> torch.Tensor:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        return torch.ones(3, 2)


SPECIAL: list[tuple[str, Callable[[], Any], str | None]] = [
    ("conj", lambda: torch.ones(3, dtype=torch.complex64).conj(), "BufferError"),
    ("conj-imag", lambda: torch.ones(3, dtype=torch.complex64).conj().imag, "BufferError"),
    ("neg view", lambda: torch.ones(2, 2)._neg_view(), "BufferError"),
    ("conj resolved", lambda: torch.ones(3, dtype=torch.complex64).conj().resolve_conj(), None),
    ("sparse coo", lambda: torch.ones(2, 2).to_sparse(), "BufferError"),
    ("sparse csr", lambda: torch.eye(3).to_sparse_csr(), "BufferError"),
    ("nested", lambda: torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]), "BufferError"),
    ("meta", lambda: torch.ones(2, device="meta"), "BufferError"),
    ("meta empty", lambda: torch.empty(0, device="meta"), "BufferError"),
    *((f"quantized {name}", _quantized(name), "BufferError") for name in QUANTIZED),
    ("wrapper subclass", lambda: Wrapper(torch.ones(3)), "BufferError"),
    # No elements, so nothing to point at: exported with data NULL, like any empty tensor.
    ("wrapper subclass empty", lambda: Wrapper(torch.ones(0)), None),
    ("fake", _fake, "BufferError"),
    ("int", lambda: 1, "TypeError"),
    ("None", lambda: None, "TypeError"),
    ("str", lambda: "tensor", "TypeError"),
    ("list", lambda: [1.0, 2.0], "TypeError"),
    ("tensor type", lambda: torch.Tensor, "TypeError"),
    ("dtype", lambda: torch.float32, "TypeError"),
    ("storage", lambda: torch.ones(2).untyped_storage(), "TypeError"),
    ("claims tensor", ClaimsTensor, "TypeError"),
]  # fmt: skip
if torch.backends.mkldnn.is_available():
    SPECIAL.append(("mkldnn", lambda: torch.ones(2).to_mkldnn(), "BufferError"))


@st.composite
def special(draw: Any) -> Case:
    kind, make, refusal = draw(st.sampled_from(SPECIAL))
    obj = _quiet(make)
    name = str(obj.dtype).removeprefix("torch.") if refusal is None else None
    return Case(kind, obj, refusal, name)


CASES = st.one_of(strided(), strided(), special())


def export(api: Any, obj: Any, how: str) -> Outcome:
    try:
        if how == "managed":
            managed = export_managed(api, obj)
            fields = managed_fields(managed)
            managed.contents.deleter(managed)
        else:
            fields = fields_of(export_dltensor(api, obj))
    except Exception as exc:
        return Outcome(False, type(exc).__name__, str(exc))
    return Outcome(True, value=fields)


def expected_managed_or_not(tensor: torch.Tensor, name: str, how: str, minor: int) -> TensorFields:
    """The exchange suite's expected fields, with the managed header where ``how`` has one."""
    fields = expected_fields(tensor, *DLPACK_DTYPES[name])
    if how != "managed":
        return fields
    return dataclasses.replace(fields, version=(1, minor), flags=0)


def check_round_trip(api: Any, tensor: torch.Tensor) -> None:
    """Export with ``api`` and import with it again: the same memory, values, metadata."""
    if isinstance(tensor, Wrapper):
        return  # (empty: nothing to compare, and torch ops on it are not implemented)
    back = import_managed(api, export_managed(api, tensor))
    assert back.data_ptr() == tensor.data_ptr() or not tensor.numel()
    assert (tuple(back.shape), back.stride()) == (tuple(tensor.shape), tensor.stride())
    assert not back.requires_grad
    if tensor.numel() <= MAX_CHECKED_ELEMENTS:
        assert torch.equal(bits(back), bits(tensor.detach()))


@pytest.mark.parametrize("how", ["managed", "dltensor"])
@given(case=CASES)
def test_export_generated(tables: Tables, how: str, case: Case) -> None:
    count_case(f"export ({how}): generated objects")
    ours = export(tables.ours, case.obj, how)
    if case.refusal is not None:
        assert not ours.ok, f"our table exported {case}, which it must refuse"
        assert ours.error == case.refusal, ours
    else:
        assert ours.ok, f"our table refused {case}: {ours.value}"
        assert case.dtype_name is not None
        minor = tables.ours.header.version.minor
        assert ours.value == expected_managed_or_not(case.obj, case.dtype_name, how, minor)
        check_round_trip(tables.ours, case.obj)
    if tables.torch is None:
        return
    if case.kind == "claims tensor" and deviates("claimed-class"):
        return
    theirs = export(tables.torch, case.obj, how)
    count_case(f"export ({how}): differential")
    if ours.ok and theirs.ok:
        assert ours.value == theirs.value
        # Interchangeable: torch's own import of our export sees the same tensor.
        check_cross(tables, case.obj)
    elif theirs.ok:
        kind = case.kind
        assert kind.startswith(("conj", "neg", "wrapper", "fake")), f"we refused {case}"
        assert deviates(
            "conj-neg-export" if kind.startswith(("conj", "neg")) else "no-storage-export"
        )
    elif ours.ok:
        pytest.fail(f"torch refused ({theirs.value}) {case}, which we export")
    elif ours.error != theirs.error:
        assert deviates("error-types")


def check_cross(tables: Tables, tensor: torch.Tensor) -> None:
    assert tables.torch is not None
    for producer, consumer in ((tables.ours, tables.torch), (tables.torch, tables.ours)):
        back = import_managed(consumer, export_managed(producer, tensor))
        assert (tuple(back.shape), back.stride()) == (tuple(tensor.shape), tensor.stride())
        if tensor.numel():
            assert back.data_ptr() == tensor.data_ptr()
