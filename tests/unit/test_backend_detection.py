"""detect_backend and describe_torch on fake torch modules (one test points at the real
torch's own table, if it has one): which attributes on ``torch.Tensor`` are trusted."""

from __future__ import annotations

import ctypes
import sys
import types
from typing import Any

import pytest

from _torch_c_dlpack_ext_core.errors import LibraryLoadError
from _torch_c_dlpack_ext_core.naming import Backend
from torch_c_dlpack_ext._torchinfo import (
    check_legacy_pointer,
    describe_torch,
    detect_backend,
    mapped_image_base,
)


def _no_device_query() -> Any:
    raise AssertionError("detect_backend asked a device (torch.cuda.is_available)")


def fake_torch(available: bool, version: Any, *, tensor_attrs: dict[str, Any] | None = None) -> Any:
    """A torch module; ``available`` is what a device query would answer, and asking it
    fails the test unless ``available`` (the tests of a query that raises set their own)."""
    tensor = type("Tensor", (), dict(tensor_attrs or {}))
    query = (lambda: True) if available else _no_device_query
    return types.SimpleNamespace(
        __version__="2.6.0+x",
        cuda=types.SimpleNamespace(is_available=query, device_count=query, init=query),
        version=version,
        Tensor=tensor,
        compiled_with_cxx11_abi=lambda: False,
    )


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        (types.SimpleNamespace(cuda="12.4", hip=None), Backend.CUDA),
        (types.SimpleNamespace(cuda=None, hip="6.2.4"), Backend.ROCM),
        # ROCm builds of some torch releases also set torch.version.cuda: hip decides.
        (types.SimpleNamespace(cuda="12.4", hip="6.2.4"), Backend.ROCM),
        (types.SimpleNamespace(cuda=None, hip=None), Backend.CPU),
        # Builds whose torch.version lacks the attributes must not raise.
        (types.SimpleNamespace(), Backend.CPU),
        (types.SimpleNamespace(hip="6.0"), Backend.ROCM),
        (types.SimpleNamespace(cuda="12.8"), Backend.CUDA),
        (None, Backend.CPU),
        # Issue 30: an XPU torch was taken for a CPU build (and given the CPU library).
        (types.SimpleNamespace(cuda=None, hip=None, xpu="20250101"), Backend.XPU),
        (types.SimpleNamespace(xpu="20250101"), Backend.XPU),
        (types.SimpleNamespace(cuda=None, hip=None, xpu=None), Backend.CPU),
    ],
    ids=[
        "cuda",
        "hip",
        "hip-and-cuda",
        "neither",
        "no-attrs",
        "hip-only-attr",
        "cuda-only-attr",
        "no-version-module",
        "xpu",
        "xpu-only-attr",
        "xpu-none",
    ],
)
def test_detect_backend_by_build_flavour(version: Any, expected: Backend) -> None:
    """The flavour alone decides, and no device is asked: the fake's ``is_available``,
    ``device_count`` and ``init`` fail the test if called. A CUDA build on a host with
    no device (the query would say False) is still cuda."""
    assert detect_backend(fake_torch(False, version)) is expected


def test_torchinfo_says_whether_the_portable_table_can_serve() -> None:
    """``torch._C._to_dlpack`` is what the portable table calls: its absence is the one
    torch the portable table cannot serve."""
    torch = fake_torch(False, types.SimpleNamespace())
    assert describe_torch(torch).has_to_dlpack is False
    torch._C = types.SimpleNamespace(_to_dlpack=lambda tensor: tensor)
    assert describe_torch(torch).has_to_dlpack is True


def test_torchinfo_from_fake_torch_without_version_attributes() -> None:
    info = describe_torch(fake_torch(False, types.SimpleNamespace()))
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


def _torch_own_pointer() -> int:
    torch = pytest.importorskip("torch")
    own = torch.Tensor.__dict__.get("__dlpack_c_exchange_api__")
    if own is None:
        pytest.skip(f"torch {torch.__version__} has no exchange API of its own to point at")
    return int(_get_pointer(own, b"dlpack_exchange_api"))


def test_torchinfo_trusts_a_valid_capsule() -> None:
    table = _new_capsule(_torch_own_pointer(), ctypes.addressof(_NAME), None)
    torch = fake_torch(
        True,
        types.SimpleNamespace(hip="6.2"),
        tensor_attrs={"__dlpack_c_exchange_api__": table},
    )
    info = describe_torch(torch)
    assert info.backend is Backend.ROCM
    assert info.has_capsule
    assert info.bogus_attributes == ()
    assert info.capsule_origin == ""  # torch's own table, not a library of ours
    assert info.hip_version == "6.2"


@pytest.mark.parametrize("pointer", [1, "heap", "code"])
def test_a_well_named_capsule_with_a_bogus_pointer_is_not_trusted(pointer: Any) -> None:
    """``PyCapsule_IsValid`` and the name are not enough: the pointer inside must pass
    the same checks as the legacy int, or the capsule is reported and treated as absent
    (deferring to it would leave consumers a SIGSEGV)."""
    address = {
        "heap": ctypes.addressof(_NAME),
        "code": ctypes.cast(ctypes.pythonapi.Py_IsInitialized, ctypes.c_void_p).value,
    }.get(pointer, pointer)
    torch = fake_torch(
        False,
        types.SimpleNamespace(),
        tensor_attrs={
            "__dlpack_c_exchange_api__": _new_capsule(address, ctypes.addressof(_NAME), None)
        },
    )
    info = describe_torch(torch)
    assert not info.has_capsule
    (problem,) = info.bogus_attributes
    assert problem.startswith("torch.Tensor.__dlpack_c_exchange_api__'s pointer"), problem


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
    info = describe_torch(
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
        # Inside a shared object (libpython's code), but not a DLPackExchangeAPI: refused
        # before it is read (a table lives in a data segment).
        (
            ctypes.cast(ctypes.pythonapi.Py_IsInitialized, ctypes.c_void_p).value // 8 * 8,
            "not in a readable data segment",
        ),
    ],
    ids=["one", "2**64", "negative", "near-int64-max", "bool", "str", "float", "heap", "code"],
)
def test_a_bogus_legacy_int_is_never_dereferenced(value: Any, says: str) -> None:
    info = describe_torch(
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
    info = describe_torch(
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
        ({"compiled_with_cxx11_abi": lambda: 1 / 0}, "division by zero"),
    ],
)
def test_a_torch_that_cannot_be_described_raises(change: dict[str, Any], says: str) -> None:
    torch = fake_torch(False, types.SimpleNamespace())
    for key, value in change.items():
        setattr(torch, key, value)
    with pytest.raises(Exception, match=says):
        describe_torch(torch)


def _lookalike_tables(limit: int = 2000) -> list[int]:
    """Addresses in loaded libraries' data that look like an exchange table to a loose
    check: major version 1, then five words that each point into some loaded image."""
    import struct

    from _torch_c_dlpack_ext_core.dlpack_ctypes import DLPackExchangeAPI

    size = ctypes.sizeof(DLPackExchangeAPI)
    found: list[int] = []
    with open("/proc/self/maps", encoding="ascii", errors="replace") as maps:
        lines = maps.read().splitlines()
    for line in lines:
        fields = line.split()
        if len(fields) < 6 or not fields[1].startswith("r") or "x" in fields[1]:
            continue
        if not any(n in fields[5] for n in ("libpython", "libc.so", "libstdc++", "libtorch")):
            continue
        start, end = (int(x, 16) for x in fields[0].split("-"))
        data = ctypes.string_at(start, end - start)
        for offset in range(0, len(data) - size, 8):
            if data[offset : offset + 4] != b"\x01\x00\x00\x00":
                continue
            words = struct.unpack_from("<5Q", data, offset + 16)
            base = mapped_image_base(start + offset)
            if base is not None and all(mapped_image_base(w) is not None for w in words):
                found.append(start + offset)
                if len(found) >= limit:
                    return found
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
def test_data_that_looks_like_a_table_is_refused() -> None:
    """Words of other libraries' data that happen to look like a table (the hostile
    tester published one; the first call through it was a SIGSEGV): the members of a
    real table point into executable code of the image that holds it."""
    pytest.importorskip("torch")  # its libraries give the scan plenty of data to look at
    candidates = _lookalike_tables()
    assert len(candidates) >= 10, "the scan found too few look-alikes to mean anything"
    accepted = []
    for address in candidates:
        try:
            check_legacy_pointer(address)
        except LibraryLoadError:
            continue
        accepted.append(hex(address))
    assert accepted == [], f"{len(accepted)} of {len(candidates)} look-alikes accepted"
