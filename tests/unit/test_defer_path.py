"""The import's defer path (``torch_c_dlpack_ext._torch_defers``): a torch that publishes
the exchange API itself (2.10+) is deferred to only when the capsule on ``torch.Tensor``
is a valid ``dlpack_exchange_api`` capsule holding torch's own table; anything else goes
to the full selector, which judges and reports it. The check runs on every import of
the package under torch >= 2.10, with one ctypes prototype (issue 36), so each way a
capsule can be wrong is pinned here."""

from __future__ import annotations

import ctypes
import types

import pytest

import torch_c_dlpack_ext

NAME = b"dlpack_exchange_api"
TABLE = ctypes.create_string_buffer(56)
OTHER_TABLE = ctypes.create_string_buffer(56)
_NEW = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", ctypes.pythonapi)
)
MISSING = object()


def _capsule(table: ctypes.Array[ctypes.c_char], name: bytes = NAME) -> object:
    # The names are module constants, so the capsules' name pointers outlive them.
    return _NEW(ctypes.addressof(table), name, None)


def _torch(version: str, attribute: object, *, exports: bool = True) -> types.SimpleNamespace:
    """A torch whose ``Tensor`` carries ``attribute`` as its capsule and whose
    ``_C._dlpack_exchange_api()`` returns a capsule of ``TABLE`` (or is missing)."""
    tensor = type(
        "Tensor", (), {} if attribute is MISSING else {"__dlpack_c_exchange_api__": attribute}
    )
    c = types.SimpleNamespace(_dlpack_exchange_api=lambda: _capsule(TABLE)) if exports else None
    return types.SimpleNamespace(__version__=version, Tensor=tensor, _C=c)


@pytest.mark.parametrize(
    ("version", "attribute", "defers"),
    [
        ("2.10.0", _capsule(TABLE), True),
        ("2.13.0+cpu", _capsule(TABLE), True),
        ("3.0.0a0+git", _capsule(TABLE), True),
        ("2.9.1", _capsule(TABLE), False),  # no API of its own: the selector checks it
        ("2.10.0", _capsule(OTHER_TABLE), False),  # someone else's table
        ("2.10.0", _capsule(TABLE, b"dlpack_exchange_api_v2"), False),
        ("2.10.0", 5, False),
        ("2.10.0", None, False),
        ("2.10.0", "dlpack_exchange_api", False),
        ("2.10.0", ctypes.addressof(TABLE), False),
        ("2.10.0", MISSING, False),
        ("2.10", _capsule(TABLE), True),
        ("garbage", _capsule(TABLE), False),
    ],
    ids=str,
)
def test_the_defer_path_trusts_only_torchs_own_capsule(
    version: str, attribute: object, defers: bool
) -> None:
    assert torch_c_dlpack_ext._torch_defers(_torch(version, attribute)) is defers


def test_a_torch_without_its_table_function_is_not_deferred_to() -> None:
    assert not torch_c_dlpack_ext._torch_defers(_torch("2.10.0", _capsule(TABLE), exports=False))
