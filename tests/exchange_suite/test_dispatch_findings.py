"""Regression tests of issue 42's findings that every table and torch can show (the zoo's
own cases are test_zoo.py; the C-thread, allocator and load findings run in
tests/integration):

- 5: ``dltensor_from_py_object_no_sync`` twice on one object (a consumer converting
  ``f(x, x)``) whose stride of a size-1 dimension answers differently the second time:
  the first ``DLTensor`` keeps its shape and strides (dlpack.h: valid until control
  returns to Python);
- 6: an import with a ``byte_offset`` under ``FakeTensorMode`` either gives a tensor
  over the producer's memory, or fails leaving no tensor over that memory anywhere (the
  exception's ``__cause__``, ``__context__`` and traceback frames included);
- 11: ``current_work_stream`` for a device id past ``c10::DeviceIndex`` (8-bit): the
  table's own ``ValueError`` naming the library, not torch's bare overflow error;
- 12: a ``meta`` tensor's export: ``BufferError`` naming the library, the device and
  what to do.
"""

from __future__ import annotations

import ctypes
import gc
import re
from typing import Any

import pytest
import torch

from .dlpack_ctypes import (
    DELETER,
    DLDataTypeCode,
    DLDeviceType,
    DLManagedTensorVersioned,
    DLPackExchangeAPI,
    DLTensor,
    fields_of,
    steal_pyobject,
)
from .zoo import LIBRARY_NAME, CannotMake, Lie, dispatch_liar, storage_of

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


class ChangingStride(torch.Tensor):
    """Answers ``stride()`` through ``__torch_function__`` with a new stride for each
    dimension of size 1 on every call (such a stride addresses no memory)."""

    calls = 0

    @classmethod
    def __torch_function__(
        cls, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        with torch._C.DisableTorchFunctionSubclass():
            result = func(*args, **(kwargs or {}))
        if getattr(func, "__name__", "") == "stride" and isinstance(result, tuple) and args:
            cls.calls += 1
            sizes = torch._C.TensorBase.size(args[0]) if hasattr(torch._C, "TensorBase") else None
            sizes = sizes if sizes is not None else torch._C._TensorBase.size(args[0])
            result = tuple(
                1000 + cls.calls if size == 1 else stride for size, stride in zip(sizes, result)
            )
        return result


def _short_dims() -> torch.Tensor:
    return torch.arange(12, dtype=torch.float32).reshape(3, 1, 4)


def _changing_by_torch_function() -> tuple[torch.Tensor, Any]:
    return _short_dims().as_subclass(ChangingStride), None


def _changing_by_dispatch() -> tuple[torch.Tensor, Any]:
    real = _short_dims()
    try:
        liar = dispatch_liar(real, Lie(strides=(4, 1001, 1)))
    except CannotMake as exc:
        pytest.skip(str(exc))

    def change(call: int) -> None:
        liar.zoo_lie = Lie(strides=(4, 1001 + call, 1))

    return liar, change


@pytest.mark.parametrize(
    "factory",
    [_changing_by_torch_function, _changing_by_dispatch],
    ids=["torch_function", "dispatch-strides-policy"],
)
def test_every_dltensor_stays_valid_until_control_returns(
    api: DLPackExchangeAPI, factory: Any
) -> None:
    obj, change = factory()
    convert = api.dltensor_from_py_object_no_sync
    outs = [DLTensor() for _ in range(4)]
    seen = []
    for call, out in enumerate(outs):
        if change is not None:
            change(call)
        convert(obj, ctypes.byref(out))
        seen.append(fields_of(out))
        # Whatever the later calls did, every earlier DLTensor reads as it was handed out.
        assert [fields_of(o) for o in outs[: call + 1]] == seen, (call, seen)
    assert all(fields.shape == (3, 1, 4) for fields in seen), seen


#: The producer's buffer for the import tests, in bytes.
_IMPORT_BYTES = 32

#: (id, DLPack dtype code, bits, byte_offset, torch dtype name) of each import under
#: FakeTensorMode: a byte_offset, and a float8 tensor (torch < 2.10 imports both through
#: a follow-up view the table makes).
IMPORTS_UNDER_FAKE = [
    ("byte_offset", DLDataTypeCode.kDLFloat, 32, 8, "float32"),
    ("float8", DLDataTypeCode.kDLFloat8_e4m3fn, 8, 0, "float8_e4m3fn"),
    ("float8-byte_offset", DLDataTypeCode.kDLFloat8_e4m3fn, 8, 4, "float8_e4m3fn"),
]


def _tensors_over(start: int, size: int) -> list[str]:
    """Every live torch tensor whose storage overlaps [start, start + size)."""
    found = []
    gc.collect()
    for obj in gc.get_objects():
        if not isinstance(obj, torch.Tensor):
            continue
        try:
            first, nbytes = storage_of(obj)
        except Exception:  # fake, functional, meta or wrapper tensors: no memory of ours
            continue
        if first < start + size and start < first + max(nbytes, 1) and first != 0:
            found.append(f"{type(obj).__name__} at {first:#x} ({nbytes} bytes)")
    return found


@pytest.mark.parametrize(
    ("code", "bits", "offset", "dtype_name"),
    [case[1:] for case in IMPORTS_UNDER_FAKE],
    ids=[case[0] for case in IMPORTS_UNDER_FAKE],
)
def test_an_import_under_fake_mode_leaves_no_tensor_over_the_producers_memory(
    api: DLPackExchangeAPI, code: int, bits: int, offset: int, dtype_name: str
) -> None:
    fake_mode = pytest.importorskip("torch._subclasses.fake_tensor").FakeTensorMode
    if getattr(torch, dtype_name, None) is None:
        pytest.skip(f"torch {torch.__version__} has no {dtype_name}")
    buffer = (ctypes.c_uint8 * _IMPORT_BYTES)(*range(_IMPORT_BYTES))
    start, size = ctypes.addressof(buffer), ctypes.sizeof(buffer)
    deleted = []
    deleter = DELETER(lambda pointer: deleted.append(1))
    shape = (ctypes.c_int64 * 1)((_IMPORT_BYTES - offset) * 8 // bits)
    managed = DLManagedTensorVersioned()
    managed.version.major, managed.version.minor = 1, 3
    managed.deleter = deleter
    tensor = managed.dl_tensor
    tensor.data, tensor.byte_offset, tensor.ndim, tensor.shape = start, offset, 1, shape
    tensor.device.device_type = DLDeviceType.kDLCPU
    tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes = code, bits, 1
    out = ctypes.c_void_p()
    caught: BaseException | None = None
    with fake_mode():
        try:
            api.managed_tensor_to_py_object_no_sync(ctypes.pointer(managed), ctypes.byref(out))
        except Exception as exc:  # whatever the table raises: what survives it is the test
            caught = exc
    if caught is None:
        imported = steal_pyobject(out.value or 0)
        assert imported.dtype == getattr(torch, dtype_name), imported.dtype
        first, _ = storage_of(imported)
        assert first + imported.storage_offset() * bits // 8 == start + offset
        assert imported.view(torch.uint8).tolist() == list(range(offset, _IMPORT_BYTES))
        del imported
        gc.collect()
        assert deleted == [1], "the producer's deleter did not run once"
        return
    # Not consumed: the deleter is the caller's to call, and nothing may still view the
    # memory the caller will now free, while the exception (and all it holds) lives.
    assert deleted == [], f"a failed import ran the producer's deleter: {caught!r}"
    survivors = _tensors_over(start, size)
    assert survivors == [], (
        f"after the import failed ({caught!r}, cause {caught.__cause__!r}), tensors over the "
        f"producer's memory survive: {survivors}"
    )


#: Device ids past c10::DeviceIndex (int8_t), and one far past.
BAD_DEVICE_IDS = [128, 200, 32767, 1 << 20]


@pytest.mark.parametrize("device_id", BAD_DEVICE_IDS)
@pytest.mark.parametrize("device_type", [DLDeviceType.kDLCUDA, DLDeviceType.kDLROCM])
def test_a_device_id_past_torchs_device_index_is_the_tables_value_error(
    api: DLPackExchangeAPI, device_type: int, device_id: int
) -> None:
    stream = ctypes.c_void_p(1)
    with pytest.raises(ValueError, match=re.escape(LIBRARY_NAME)) as refused:
        api.current_work_stream(device_type, device_id, ctypes.byref(stream))
    assert "Overflow" not in str(refused.value), refused.value


def _export_managed(api: DLPackExchangeAPI, obj: object) -> None:
    out = ctypes.POINTER(DLManagedTensorVersioned)()
    api.managed_tensor_from_py_object_no_sync(obj, ctypes.byref(out))


def _export_dltensor(api: DLPackExchangeAPI, obj: object) -> None:
    api.dltensor_from_py_object_no_sync(obj, ctypes.byref(DLTensor()))


@pytest.mark.parametrize(
    "export", [_export_managed, _export_dltensor], ids=["owning", "non-owning"]
)
def test_a_meta_export_names_the_library_and_what_to_do(
    api: DLPackExchangeAPI, export: Any
) -> None:
    meta = torch.empty(3, 2, device="meta")
    with pytest.raises(BufferError) as refused:
        export(api, meta)
    message = str(refused.value)
    assert LIBRARY_NAME in message, message
    assert "meta" in message, message
    assert re.search(r"\.to\(|\.cpu\(\)", message), f"no remedy named: {message}"
