"""detect_backend and TorchInfo.from_torch on fake torch modules (one test points at the real
torch's own table, if it has one): which attributes on ``torch.Tensor`` are trusted."""

from __future__ import annotations

import ctypes
import types
from typing import Any

import pytest

from torch_c_dlpack_ext._naming import Backend
from torch_c_dlpack_ext._torchinfo import (
    TorchInfo,
    check_legacy_pointer,
    detect_backend,
    mapped_image_base,
)


def fake_torch(available: bool, version: Any, *, tensor_attrs: dict[str, Any] | None = None) -> Any:
    tensor = type("Tensor", (), dict(tensor_attrs or {}))
    return types.SimpleNamespace(
        __version__="2.6.0+x",
        cuda=types.SimpleNamespace(is_available=lambda: available),
        version=version,
        Tensor=tensor,
        compiled_with_cxx11_abi=lambda: False,
    )


@pytest.mark.parametrize(
    ("available", "version", "expected"),
    [
        (True, types.SimpleNamespace(cuda="12.4", hip=None), Backend.CUDA),
        (True, types.SimpleNamespace(cuda=None, hip="6.2.4"), Backend.ROCM),
        # A GPU build on a machine without a device: the CPU library serves it.
        (False, types.SimpleNamespace(cuda="12.4", hip=None), Backend.CPU),
        (False, types.SimpleNamespace(cuda=None, hip="6.2.4"), Backend.CPU),
        (False, types.SimpleNamespace(cuda=None, hip=None), Backend.CPU),
        # Builds whose torch.version lacks the attributes must not raise.
        (True, types.SimpleNamespace(), Backend.CUDA),
        (True, types.SimpleNamespace(hip="6.0"), Backend.ROCM),
        (False, types.SimpleNamespace(), Backend.CPU),
    ],
    ids=[
        "cuda",
        "hip",
        "cuda-build-no-device",
        "hip-build-no-device",
        "neither",
        "available-no-attrs",
        "hip-only-attr",
        "no-attrs",
    ],
)
def test_detect_backend(available: bool, version: Any, expected: Backend) -> None:
    assert detect_backend(fake_torch(available, version)) is expected


def test_torchinfo_from_fake_torch_without_version_attributes() -> None:
    info = TorchInfo.from_torch(fake_torch(False, types.SimpleNamespace()))
    assert info.backend is Backend.CPU
    assert (info.cuda_version, info.hip_version) == (None, None)
    assert info.cxx11_abi is False
    assert not info.has_capsule
    assert not info.has_legacy_int


_NAME = ctypes.create_string_buffer(b"dlpack_exchange_api")
_OTHER = ctypes.create_string_buffer(b"other")
_new_capsule = ctypes.PYFUNCTYPE(
    ctypes.py_object, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p
)(("PyCapsule_New", ctypes.pythonapi))
_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)


def capsule(name: Any = _NAME) -> Any:
    return _new_capsule(ctypes.addressof(_NAME), ctypes.addressof(name), None)


def test_torchinfo_trusts_a_valid_capsule() -> None:
    torch = fake_torch(
        True,
        types.SimpleNamespace(hip="6.2"),
        tensor_attrs={"__dlpack_c_exchange_api__": capsule()},
    )
    info = TorchInfo.from_torch(torch)
    assert info.backend is Backend.ROCM
    assert info.has_capsule
    assert info.bogus_attributes == ()
    assert info.hip_version == "6.2"


class _Raises:
    def __get__(self, instance: object, owner: object) -> Any:
        raise RuntimeError("attribute exploded")


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (5, "is int 5, not a 'dlpack_exchange_api' capsule"),
        (None, "is NoneType None"),
        (object(), "is object <object object"),
        ("x" * 5000, "(5000 characters)"),
        (capsule(_OTHER), "a PyCapsule of another name"),
        (_Raises(), "raised RuntimeError('attribute exploded')"),
    ],
    ids=["int", "none", "object", "long-string", "other-name", "raises"],
)
def test_a_bogus_capsule_is_not_trusted_and_is_named(value: Any, says: str) -> None:
    info = TorchInfo.from_torch(
        fake_torch(
            False, types.SimpleNamespace(), tensor_attrs={"__dlpack_c_exchange_api__": value}
        )
    )
    assert not info.has_capsule
    (problem,) = info.bogus_attributes
    assert says in problem, problem
    assert len(problem) < 300, problem


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (1, "is not a valid table address"),
        (2**64, "is not a valid table address"),
        (-1, "is not a valid table address"),
        (2**63 - 8, "is not a valid table address"),
        (True, "is bool True, not an address"),
        ("0x1000", "is str '0x1000', not an address"),
        (1.5, "is float 1.5, not an address"),
        # Python heap memory: mapped, but not inside any loaded shared object.
        (
            ctypes.addressof(ctypes.create_string_buffer(64)) // 8 * 8,
            "does not point into a loaded",
        ),
        # Inside a shared object (libpython's function), but not a DLPackExchangeAPI.
        (
            ctypes.cast(ctypes.pythonapi.Py_IsInitialized, ctypes.c_void_p).value // 8 * 8,
            "exchange table has",
        ),
    ],
    ids=["one", "2**64", "negative", "near-int64-max", "bool", "str", "float", "heap", "code"],
)
def test_a_bogus_legacy_int_is_never_dereferenced(value: Any, says: str) -> None:
    info = TorchInfo.from_torch(
        fake_torch(
            False, types.SimpleNamespace(), tensor_attrs={"__c_dlpack_exchange_api__": value}
        )
    )
    assert not info.has_legacy_int
    (problem,) = info.bogus_attributes
    assert problem.startswith("torch.Tensor.__c_dlpack_exchange_api__"), problem
    assert says in problem, problem


def test_a_real_table_passes_as_a_legacy_int() -> None:
    torch = pytest.importorskip("torch")
    own = torch.Tensor.__dict__.get("__dlpack_c_exchange_api__") or getattr(
        torch._C.TensorBase, "__dlpack_c_exchange_api__", None
    )
    if own is None:
        pytest.skip(f"torch {torch.__version__} has no exchange API of its own to point at")
    pointer = _get_pointer(own, b"dlpack_exchange_api")
    info = TorchInfo.from_torch(
        fake_torch(
            False, types.SimpleNamespace(), tensor_attrs={"__c_dlpack_exchange_api__": pointer}
        )
    )
    assert info.has_legacy_int, info.bogus_attributes
    assert not info.has_capsule
    assert info.bogus_attributes == ()
    assert check_legacy_pointer(pointer)[0] == pointer


def test_mapped_image_base_never_reads_the_address() -> None:
    assert mapped_image_base(0) is None
    assert mapped_image_base(8) is None
    assert mapped_image_base(2**64) is None
    inside = ctypes.cast(ctypes.pythonapi.Py_IsInitialized, ctypes.c_void_p).value
    assert inside is not None
    assert mapped_image_base(inside) is not None


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"__version__": 2.6}, "torch.__version__ is float"),
        ({"cuda": types.SimpleNamespace(is_available=lambda: 1 / 0)}, "division by zero"),
    ],
)
def test_a_torch_that_cannot_be_described_raises(change: dict[str, Any], says: str) -> None:
    torch = fake_torch(False, types.SimpleNamespace())
    for key, value in change.items():
        setattr(torch, key, value)
    with pytest.raises(Exception, match=says):
        TorchInfo.from_torch(torch)
