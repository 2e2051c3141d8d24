"""ctypes mirrors of the DLPack 1.3 C structs and of the ``DLPackExchangeAPI`` table,
plus the helpers the conformance suite and the benchmarks use with them.

The mirrors themselves are ``_torch_c_dlpack_ext_core.dlpack_ctypes`` (one definition
of the layout for the loader, the diagnostics, this suite and the benchmarks),
imported from the checkout's ``python/`` (pytest's ``pythonpath``): the building
blocks have no import side effects, so no selector runs before the suite chose a
library, in any torch environment.

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

from _torch_c_dlpack_ext_core.dlpack_ctypes import (
    ALLOCATOR,
    CAPSULE_NAME,
    CURRENT_WORK_STREAM,
    DELETER,
    DLTENSOR_FROM_PY_OBJECT,
    FLAG_IS_COPIED,
    FLAG_IS_SUBBYTE_TYPE_PADDED,
    FLAG_READ_ONLY,
    FROM_PY_OBJECT,
    SET_ERROR,
    TO_PY_OBJECT,
    DLDataType,
    DLDevice,
    DLManagedTensorVersioned,
    DLPackExchangeAPI,
    DLPackExchangeAPIHeader,
    DLPackVersion,
    DLTensor,
)
from _torch_c_dlpack_ext_core.dlpack_ctypes import EXCHANGE_API_MEMBERS as _MEMBERS

_MTV_PTR = ctypes.POINTER(DLManagedTensorVersioned)

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
    "ErrorSink",
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


def api_from_capsule(capsule: object) -> DLPackExchangeAPI:
    """The table behind a ``dlpack_exchange_api`` PyCapsule (e.g. torch >= 2.10's own)."""
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype = ctypes.c_void_p
    get_pointer.argtypes = (ctypes.py_object, ctypes.c_char_p)
    address = get_pointer(capsule, CAPSULE_NAME)
    return DLPackExchangeAPI.from_address(address)


class ErrorSink:
    """A SetError callback that records (kind, message) pairs."""

    def __init__(self) -> None:
        self.errors: list[tuple[str, str]] = []
        self.callback = SET_ERROR(self._record)

    def _record(self, _ctx: Any, kind: bytes, message: bytes) -> None:
        self.errors.append((kind.decode(), message.decode()))


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

    @property
    def backend(self) -> str:
        """The GPU backend the library serves ("cpu", "cuda", "rocm"): its build's, or for the
        portable table (backend "any") the running torch build's, as it decides at run time
        (``torch.version.hip``, then ``torch.version.cuda``, else a CPU torch)."""
        backend = str(self.build_info["backend"])
        if backend != "any":
            return backend
        import torch

        if getattr(torch.version, "hip", None):
            return "rocm"
        return "cuda" if getattr(torch.version, "cuda", None) else "cpu"

    @property
    def is_portable(self) -> bool:
        """Whether this is the torch-agnostic portable table (csrc/portable)."""
        return self.build_info.get("table") == "portable"

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
