"""ctypes mirrors of the DLPack 1.3 C structs and of the ``DLPackExchangeAPI`` table.

Shared by the conformance suite and the benchmarks: one definition of the layout,
so a consumer written in Python sees exactly what a C consumer (tvm-ffi) sees.

The function pointers are declared with ``ctypes.PYFUNCTYPE``: the producer
expects the GIL to be held and reports failures by setting a Python exception,
which ``PYFUNCTYPE`` checks and re-raises after the call returns.
"""

from __future__ import annotations

import ctypes
import dataclasses
import enum
import json
from pathlib import Path
from typing import Any

__all__ = [
    "ALLOCATOR",
    "CAPSULE_NAME",
    "CURRENT_WORK_STREAM",
    "DELETER",
    "DLTENSOR_FROM_PY_OBJECT",
    "FLAG_IS_COPIED",
    "FLAG_IS_SUBBYTE_TYPE_PADDED",
    "FLAG_READ_ONLY",
    "FROM_PY_OBJECT",
    "SET_ERROR",
    "TO_PY_OBJECT",
    "DLDataType",
    "DLDataTypeCode",
    "DLDevice",
    "DLDeviceType",
    "DLManagedTensorVersioned",
    "DLPackExchangeAPI",
    "DLPackExchangeAPIHeader",
    "DLPackVersion",
    "DLTensor",
    "ExchangeLibrary",
    "TensorFields",
    "api_from_capsule",
    "export_dltensor",
    "export_managed",
    "fields_of",
    "import_managed",
    "managed_fields",
    "steal_pyobject",
]

#: PyCapsule name under which a framework publishes its table.
CAPSULE_NAME = b"dlpack_exchange_api"

FLAG_READ_ONLY = 1 << 0
FLAG_IS_COPIED = 1 << 1
FLAG_IS_SUBBYTE_TYPE_PADDED = 1 << 2


class DLDeviceType(enum.IntEnum):
    """``DLDeviceType`` codes (DLPack 1.3)."""

    kDLCPU = 1
    kDLCUDA = 2
    kDLCUDAHost = 3
    kDLOpenCL = 4
    kDLVulkan = 7
    kDLMetal = 8
    kDLVPI = 9
    kDLROCM = 10
    kDLROCMHost = 11
    kDLExtDev = 12
    kDLCUDAManaged = 13
    kDLOneAPI = 14
    kDLWebGPU = 15
    kDLHexagon = 16
    kDLMAIA = 17
    kDLTrn = 18


class DLDataTypeCode(enum.IntEnum):
    """``DLDataTypeCode`` values (DLPack 1.3)."""

    kDLInt = 0
    kDLUInt = 1
    kDLFloat = 2
    kDLOpaqueHandle = 3
    kDLBfloat = 4
    kDLComplex = 5
    kDLBool = 6
    kDLFloat8_e3m4 = 7
    kDLFloat8_e4m3 = 8
    kDLFloat8_e4m3b11fnuz = 9
    kDLFloat8_e4m3fn = 10
    kDLFloat8_e4m3fnuz = 11
    kDLFloat8_e5m2 = 12
    kDLFloat8_e5m2fnuz = 13
    kDLFloat8_e8m0fnu = 14
    kDLFloat6_e2m3fn = 15
    kDLFloat6_e3m2fn = 16
    kDLFloat4_e2m1fn = 17


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

_MTV_PTR = ctypes.POINTER(DLManagedTensorVersioned)

ALLOCATOR = ctypes.PYFUNCTYPE(
    ctypes.c_int,
    ctypes.POINTER(DLTensor),
    ctypes.POINTER(_MTV_PTR),
    ctypes.c_void_p,
    SET_ERROR,
)
FROM_PY_OBJECT = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(_MTV_PTR))
TO_PY_OBJECT = ctypes.PYFUNCTYPE(ctypes.c_int, _MTV_PTR, ctypes.POINTER(ctypes.c_void_p))
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


_MEMBERS = tuple(name for name, _ in DLPackExchangeAPI._fields_[1:])


def api_from_capsule(capsule: object) -> DLPackExchangeAPI:
    """The table behind a ``dlpack_exchange_api`` PyCapsule (e.g. torch >= 2.10's own)."""
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype = ctypes.c_void_p
    get_pointer.argtypes = (ctypes.py_object, ctypes.c_char_p)
    address = get_pointer(capsule, CAPSULE_NAME)
    return DLPackExchangeAPI.from_address(address)


class ExchangeLibrary:
    """A loaded exchange library: its table and its build info."""

    def __init__(self, path: Path) -> None:
        self.path = path
        # PyDLL: the exports are trivial, but loading through PyDLL documents that
        # this library lives inside the interpreter (it needs libpython's symbols).
        self.dll = ctypes.PyDLL(str(path))
        ptr_fn = self.dll.TorchDLPackExchangeAPIPtr
        ptr_fn.restype = ctypes.c_int64
        ptr_fn.argtypes = ()
        self.address = int(ptr_fn())
        info_fn = self.dll.TorchCDLPackExtBuildInfo
        info_fn.restype = ctypes.c_char_p
        info_fn.argtypes = ()
        raw = info_fn()
        self.build_info_text = raw.decode("utf-8") if raw is not None else ""
        self.api = DLPackExchangeAPI.from_address(self.address)

    @property
    def build_info(self) -> dict[str, Any]:
        data = json.loads(self.build_info_text)
        assert isinstance(data, dict)
        return data

    @staticmethod
    def member_names() -> tuple[str, ...]:
        return _MEMBERS


@dataclasses.dataclass(frozen=True)
class TensorFields:
    """Every field of a DLManagedTensorVersioned / DLTensor, copied out as plain values."""

    data: int
    device_type: int
    device_id: int
    ndim: int
    code: int
    bits: int
    lanes: int
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None
    byte_offset: int
    version: tuple[int, int] | None = None
    flags: int | None = None


def fields_of(
    tensor: DLTensor, *, version: DLPackVersion | None = None, flags: int | None = None
) -> TensorFields:
    """Copy a DLTensor's fields (and optionally a managed tensor's version/flags) out."""
    ndim = tensor.ndim
    shape = tuple(tensor.shape[i] for i in range(ndim)) if ndim else ()
    # A 0-d tensor's arrays are never read, so NULL and non-NULL are equivalent.
    strides: tuple[int, ...] | None = ()
    if ndim:
        strides = tuple(tensor.strides[i] for i in range(ndim)) if tensor.strides else None
    return TensorFields(
        data=tensor.data or 0,
        device_type=tensor.device.device_type,
        device_id=tensor.device.device_id,
        ndim=ndim,
        code=tensor.dtype.code,
        bits=tensor.dtype.bits,
        lanes=tensor.dtype.lanes,
        shape=shape,
        strides=strides,
        byte_offset=tensor.byte_offset,
        version=None if version is None else (version.major, version.minor),
        flags=flags,
    )


def managed_fields(managed: Any) -> TensorFields:
    """:func:`fields_of` for a ``POINTER(DLManagedTensorVersioned)``."""
    m = managed.contents
    return fields_of(m.dl_tensor, version=m.version, flags=m.flags)


def export_managed(api: DLPackExchangeAPI, obj: object) -> Any:
    """``managed_tensor_from_py_object_no_sync``: an owning ``POINTER(DLManagedTensorVersioned)``.

    The caller must call its deleter (or hand it to ``import_managed``).
    """
    out = _MTV_PTR()
    api.managed_tensor_from_py_object_no_sync(obj, ctypes.byref(out))
    return out


def export_dltensor(api: DLPackExchangeAPI, obj: object) -> DLTensor:
    """``dltensor_from_py_object_no_sync`` into a fresh DLTensor (valid while ``obj`` lives)."""
    out = DLTensor()
    api.dltensor_from_py_object_no_sync(obj, ctypes.byref(out))
    return out


_py_decref = ctypes.pythonapi.Py_DecRef
_py_decref.restype = None
_py_decref.argtypes = (ctypes.c_void_p,)


def steal_pyobject(address: int) -> Any:
    """The object behind a new (owned) ``PyObject*`` reference, taking over that reference."""
    obj = ctypes.cast(ctypes.c_void_p(address), ctypes.py_object).value
    _py_decref(address)
    return obj


def import_managed(api: DLPackExchangeAPI, managed: Any) -> Any:
    """``managed_tensor_to_py_object_no_sync``: the Python tensor (ownership moves to it)."""
    out = ctypes.c_void_p()
    api.managed_tensor_to_py_object_no_sync(managed, ctypes.byref(out))
    assert out.value is not None
    return steal_pyobject(out.value)
