"""Objects DLPack cannot describe: -1 with a typed Python error, and the process lives on."""

from __future__ import annotations

import array
import ctypes
from collections.abc import Callable
from typing import Any

import pytest
import torch

from .cases import REFUSED_DTYPES, present
from .dlpack_ctypes import DLManagedTensorVersioned, DLPackExchangeAPI, DLTensor

# Sparse CSR, quantized and nested tensors warn that they are beta/deprecated/prototype.
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _conj() -> torch.Tensor:
    tensor = torch.ones(3, dtype=torch.complex64).conj()
    assert tensor.is_conj()
    return tensor


def _neg() -> torch.Tensor:
    tensor = torch._neg_view(torch.ones(3, dtype=torch.complex64))
    assert tensor.is_neg()
    return tensor


def _nested() -> torch.Tensor:
    return torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])


class _Wrapper(torch.Tensor):
    """A __torch_dispatch__ wrapper subclass (FakeTensor is one too): sizes and dtype,
    but no memory of its own."""

    @staticmethod
    def __new__(cls, elem: torch.Tensor) -> Any:
        return torch.Tensor._make_wrapper_subclass(cls, elem.shape, dtype=elem.dtype)

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        raise NotImplementedError(f"{func} on a test wrapper")


INEXPRESSIBLE: list[tuple[str, Callable[[], Any], str]] = [
    ("conj", _conj, "resolve_conj"),
    ("neg", _neg, "resolve_neg"),
    ("sparse_coo", lambda: torch.ones(2, 2).to_sparse(), "to_dense"),
    ("sparse_csr", lambda: torch.ones(2, 2).to_sparse_csr(), "to_dense"),
    ("quantized", lambda: torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.quint8), "dtype"),
    ("nested", _nested, "nested"),
    ("meta", lambda: torch.empty(3, device="meta"), "meta"),
    ("wrapper_subclass", lambda: _Wrapper(torch.ones(3)), "memory"),
]

NOT_TENSORS: list[tuple[str, Any]] = [
    ("int", 3),
    ("str", "tensor"),
    ("None", None),
    ("list", [1.0, 2.0]),
    ("buffer", array.array("d", [1.0, 2.0])),
    ("tensor_type", torch.Tensor),
]


@pytest.mark.parametrize(
    ("case", "factory", "needle"), INEXPRESSIBLE, ids=[c for c, _, _ in INEXPRESSIBLE]
)
def test_inexpressible_managed(
    api: DLPackExchangeAPI, case: str, factory: Callable[[], Any], needle: str
) -> None:
    obj = factory()
    out = ctypes.POINTER(DLManagedTensorVersioned)()
    with pytest.raises(BufferError, match=needle):
        api.managed_tensor_from_py_object_no_sync(obj, ctypes.byref(out))
    assert not out


@pytest.mark.parametrize(
    ("case", "factory", "needle"), INEXPRESSIBLE, ids=[c for c, _, _ in INEXPRESSIBLE]
)
def test_inexpressible_dltensor(
    api: DLPackExchangeAPI, case: str, factory: Callable[[], Any], needle: str
) -> None:
    with pytest.raises(BufferError, match=needle):
        api.dltensor_from_py_object_no_sync(factory(), ctypes.byref(DLTensor()))


def _jagged() -> torch.Tensor:
    try:
        return torch.nested.nested_tensor([torch.ones(2, 3), torch.ones(4, 3)], layout=torch.jagged)
    except (AttributeError, RuntimeError, TypeError) as exc:
        pytest.skip(f"torch {torch.__version__} makes no jagged nested tensor here: {exc}")


@pytest.mark.parametrize("factory", [_nested, _jagged], ids=["strided", "jagged"])
def test_nested_remedies_work(api: DLPackExchangeAPI, factory: Callable[[], Any]) -> None:
    """Every remedy the refusal of a nested tensor names (``t.method(...)``) works on that
    tensor: neither kind has ``.to_dense()``, which the layout message suggests."""
    import re

    tensor = factory()
    with pytest.raises(BufferError, match="nested") as refused:
        api.managed_tensor_from_py_object_no_sync(
            tensor, ctypes.byref(ctypes.POINTER(DLManagedTensorVersioned)())
        )
    message = str(refused.value)
    remedies = re.findall(r"\bt\.(\w+)\(([^)]*)\)", message)
    assert remedies, message
    assert "to_dense" not in message, message
    for name, argument in remedies:
        result = getattr(tensor, name)(*([float(argument)] if argument else []))
        # Each remedy gives what DLPack can export: strided tensors (or a tuple of them).
        for part in result if isinstance(result, tuple) else (result,):
            assert part.layout == torch.strided, (name, part)
            assert not part.is_nested, (name, part)


@pytest.mark.parametrize("name", present(REFUSED_DTYPES))
def test_refused_dtypes(api: DLPackExchangeAPI, name: str) -> None:
    dtype = getattr(torch, name)
    try:
        tensor = torch.empty(4, dtype=dtype)
    except RuntimeError as exc:
        pytest.skip(f"torch {torch.__version__} cannot create a {name} tensor here: {exc}")
    with pytest.raises(BufferError, match="no DLPack equivalent"):
        api.managed_tensor_from_py_object_no_sync(
            tensor, ctypes.byref(ctypes.POINTER(DLManagedTensorVersioned)())
        )
    with pytest.raises(BufferError):
        api.dltensor_from_py_object_no_sync(tensor, ctypes.byref(DLTensor()))


@pytest.mark.parametrize(("case", "obj"), NOT_TENSORS, ids=[c for c, _ in NOT_TENSORS])
def test_not_a_tensor(api: DLPackExchangeAPI, case: str, obj: Any) -> None:
    out = ctypes.POINTER(DLManagedTensorVersioned)()
    with pytest.raises(TypeError, match=type(obj).__name__):
        api.managed_tensor_from_py_object_no_sync(obj, ctypes.byref(out))
    assert not out
    with pytest.raises(TypeError, match=r"expected a torch\.Tensor"):
        api.dltensor_from_py_object_no_sync(obj, ctypes.byref(DLTensor()))


def test_errors_leave_no_residue(api: DLPackExchangeAPI) -> None:
    # After many refusals the table still works and no exception lingers.
    for _ in range(200):
        with pytest.raises(BufferError):
            api.managed_tensor_from_py_object_no_sync(
                _conj(), ctypes.byref(ctypes.POINTER(DLManagedTensorVersioned)())
            )
        with pytest.raises(TypeError):
            api.dltensor_from_py_object_no_sync(1, ctypes.byref(DLTensor()))
    tensor = torch.ones(2)
    out = DLTensor()
    assert api.dltensor_from_py_object_no_sync(tensor, ctypes.byref(out)) == 0
    assert out.data == tensor.data_ptr()


def test_requires_grad_is_exported(api: DLPackExchangeAPI) -> None:
    # Unlike Tensor.__dlpack__, the C API exports tensors that require grad (as torch's own
    # API does): the consumer reads the data, autograd is not involved.
    tensor = torch.ones(3, requires_grad=True)
    out = ctypes.POINTER(DLManagedTensorVersioned)()
    assert api.managed_tensor_from_py_object_no_sync(tensor, ctypes.byref(out)) == 0
    assert out.contents.flags == 0
    out.contents.deleter(out)
