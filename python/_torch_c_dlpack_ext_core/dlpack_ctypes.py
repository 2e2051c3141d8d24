"""THE ctypes mirrors of the DLPack 1.3 C structs and of the ``DLPackExchangeAPI`` table,
the one definition of that layout (it imports only :mod:`ctypes`): the diagnostics, the
exchange suite and the benchmarks load it, and the loader's restatement is pinned to it.

The loader's table check restates it (a unit test keeps the two equal),
``python -m torch_c_dlpack_ext`` drives a round trip through it, and
the conformance suite and the benchmarks load this file by path
(``tests/exchange_suite/dlpack_ctypes.py``), so a consumer written in Python sees
exactly what a C consumer (tvm-ffi) sees.

It imports nothing but :mod:`ctypes`, so it can be loaded on its own, inside any
torch environment, without running the package's selector. The ``DLPackExchangeAPI``
layout is the same in DLPack 1.2 and 1.3 (56 bytes on 64-bit platforms).

The table's function pointers are ``ctypes.PYFUNCTYPE``: the producer expects the GIL
to be held and reports failures by setting a Python exception, which ``PYFUNCTYPE``
checks and re-raises after the call returns.
"""

from __future__ import annotations

import ctypes

__all__ = [
    "ALLOCATOR",
    "CAPSULE_NAME",
    "CURRENT_WORK_STREAM",
    "DELETER",
    "DLTENSOR_FROM_PY_OBJECT",
    "EXCHANGE_API_MEMBERS",
    "FLAG_IS_COPIED",
    "FLAG_IS_SUBBYTE_TYPE_PADDED",
    "FLAG_READ_ONLY",
    "FROM_PY_OBJECT",
    "SET_ERROR",
    "SUPPORTED_MAJOR",
    "TO_PY_OBJECT",
    "DLDataType",
    "DLDevice",
    "DLManagedTensorVersioned",
    "DLPackExchangeAPI",
    "DLPackExchangeAPIHeader",
    "DLPackVersion",
    "DLTensor",
]

#: PyCapsule name under which a framework publishes its table.
CAPSULE_NAME = b"dlpack_exchange_api"

#: ``DLManagedTensorVersioned.flags`` bits.
FLAG_READ_ONLY = 1 << 0
FLAG_IS_COPIED = 1 << 1
FLAG_IS_SUBBYTE_TYPE_PADDED = 1 << 2


class DLPackVersion(ctypes.Structure):
    _fields_ = (("major", ctypes.c_uint32), ("minor", ctypes.c_uint32))


class DLDevice(ctypes.Structure):
    _fields_ = (("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32))


class DLDataType(ctypes.Structure):
    _fields_ = (("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16))


class DLTensor(ctypes.Structure):
    _fields_ = (
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    )


class DLManagedTensorVersioned(ctypes.Structure):
    pass


#: ``void (*deleter)(DLManagedTensorVersioned*)``. CFUNCTYPE: a deleter may run
#: without the GIL (e.g. when torch frees storage), so ctypes must take it itself.
DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensorVersioned))

DLManagedTensorVersioned._fields_ = (
    ("version", DLPackVersion),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", DELETER),
    ("flags", ctypes.c_uint64),
    ("dl_tensor", DLTensor),
)

#: ``void (*SetError)(void* ctx, const char* kind, const char* message)``.
SET_ERROR = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p)

_MANAGED_PTR = ctypes.POINTER(DLManagedTensorVersioned)

ALLOCATOR = ctypes.PYFUNCTYPE(
    ctypes.c_int,
    ctypes.POINTER(DLTensor),
    ctypes.POINTER(_MANAGED_PTR),
    ctypes.c_void_p,
    SET_ERROR,
)
FROM_PY_OBJECT = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(_MANAGED_PTR))
TO_PY_OBJECT = ctypes.PYFUNCTYPE(ctypes.c_int, _MANAGED_PTR, ctypes.POINTER(ctypes.c_void_p))
DLTENSOR_FROM_PY_OBJECT = ctypes.PYFUNCTYPE(
    ctypes.c_int, ctypes.py_object, ctypes.POINTER(DLTensor)
)
CURRENT_WORK_STREAM = ctypes.PYFUNCTYPE(
    ctypes.c_int, ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p)
)


class DLPackExchangeAPIHeader(ctypes.Structure):
    pass


DLPackExchangeAPIHeader._fields_ = (
    ("version", DLPackVersion),
    ("prev_api", ctypes.POINTER(DLPackExchangeAPIHeader)),
)


class DLPackExchangeAPI(ctypes.Structure):
    _fields_ = (
        ("header", DLPackExchangeAPIHeader),
        ("managed_tensor_allocator", ALLOCATOR),
        ("managed_tensor_from_py_object_no_sync", FROM_PY_OBJECT),
        ("managed_tensor_to_py_object_no_sync", TO_PY_OBJECT),
        ("dltensor_from_py_object_no_sync", DLTENSOR_FROM_PY_OBJECT),
        ("current_work_stream", CURRENT_WORK_STREAM),
    )


#: The table's function members, in layout order (every one must be non-NULL).
EXCHANGE_API_MEMBERS: tuple[str, ...] = tuple(name for name, _ in DLPackExchangeAPI._fields_[1:])

#: The DLPack major version whose ``DLPackExchangeAPI`` layout the loader reads.
SUPPORTED_MAJOR = 1
