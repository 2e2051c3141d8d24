"""The dispatch zoo: tensors whose answers come through ``__torch_dispatch__`` (issue 42).

liars.py lies through Python properties and ``__torch_function__``; these lie one level
down, where torch's own C++ asks Python:

- ``_make_subclass(cls, t, dispatch_sizes_strides_policy="sizes" | "strides")`` over a
  real small storage: torch asks ``__torch_dispatch__`` for ``sym_size``, ``sym_stride``,
  ``sym_numel``, ``sym_storage_offset`` (and ``dim``, ``size``, ``stride``, ``numel``,
  ``is_contiguous``), which answer lies (:class:`Lie`);
- ``_make_subclass(cls, t, dispatch_device=True)`` answering ``prim.device`` with
  ``cuda:0`` for a tensor in host memory;
- dispatch subclasses and ``TorchDispatchMode`` s answering ``as_strided`` with a smaller
  tensor of another dtype (the bytes of a float64 tensor as uint8: torch < 2.9's exporter
  labels the answer with the float64 it asked for), and ``detach``/``alias``/``view``
  with a bigger tensor elsewhere or with one of the liars above;
- ``_make_wrapper_subclass``, ``FakeTensorMode``, ``FunctionalTensor`` and DTensor
  (where it imports on a CPU-only host): tensors with elements and no memory of their own.

Each case knows the truth without asking the tensor: it is built over a plain tensor whose
storage (data pointer, byte size) was read before any liar existed, or it has no storage
at all (``storage`` None). An export of a case must describe bytes of that storage only,
on its device (host memory, ``kDLCPU`` 0), or be refused with ``BufferError``.

Built from APIs torch 2.2 already has; a case this torch cannot make is skipped, saying why.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from .dlpack_ctypes import (
    DLPackExchangeAPI,
    TensorFields,
    export_dltensor,
    export_managed,
    fields_of,
    managed_fields,
)
from .liars import described_extent, storage_bytes

#: The library's name, which every refusal of the table names (both tables' messages
#: start with it: "torch-c-dlpack-ext" or "torch-c-dlpack-ext (portable table)").
LIBRARY_NAME = "torch-c-dlpack-ext"

#: DLPack's kDLCPU, 0: where every storage of the zoo lives.
HOST = (1, 0)


@dataclasses.dataclass(frozen=True)
class Lie:
    """What a dispatch liar answers for its sizes, strides, storage offset and device
    (None: the truth)."""

    sizes: tuple[int, ...] | None = None
    strides: tuple[int, ...] | None = None
    offset: int | None = None
    device: str | None = None


@dataclasses.dataclass
class Made:
    """A case, made: the object to export, the scope to export it under, and the truth:
    the (first address, byte size) of the storage it really has (None: it has no memory
    of its own, so an export with elements must be refused)."""

    obj: Any
    scope: Callable[[], contextlib.AbstractContextManager[Any]]
    storage: tuple[int, int] | None
    #: Objects the case must keep alive while it is exported (the real tensors behind it).
    keep: tuple[Any, ...] = ()


class CannotMake(Exception):
    """This torch cannot make the case (the reason is the message)."""


def _int_arg(args: Sequence[Any]) -> int | None:
    return int(args[1]) if len(args) > 1 and isinstance(args[1], int) else None


def _contiguous(sizes: Sequence[int], strides: Sequence[int]) -> bool:
    expected = 1
    for size, stride in reversed(list(zip(sizes, strides))):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


class DispatchLiar(torch.Tensor):
    """A ``_make_subclass`` tensor over a real storage whose ``__torch_dispatch__`` answers
    the metadata queries with :attr:`lie` and every other op on the real tensor behind it
    (:attr:`real`), except those named in :attr:`answers`."""

    # Not ``real``: torch.Tensor has a ``real`` property (whose setter copies).
    zoo_real: torch.Tensor
    zoo_lie: Lie
    #: Op packet name -> answer, given the op's (unwrapped) args.
    zoo_answers: dict[str, Callable[[tuple[Any, ...]], Any]]

    @classmethod
    def __torch_dispatch__(
        cls, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        me = next((a for a in args if isinstance(a, DispatchLiar) and a._made()), None)
        name = func.overloadpacket.__name__ if hasattr(func, "overloadpacket") else ""
        if me is not None:
            answer = me._answer(name, args)
            if answer is not NotImplemented:
                return answer
        real = tuple(a.zoo_real if isinstance(a, DispatchLiar) else a for a in args)
        if me is not None and name in me.zoo_answers:
            return me.zoo_answers[name](real)
        return func(*real, **kwargs)

    def _made(self) -> bool:
        return "zoo_answers" in self.__dict__

    def _answer(self, name: str, args: Sequence[Any]) -> Any:
        lie, real = self.zoo_lie, self.zoo_real
        if name == "device" and lie.device is not None:
            return torch.device(lie.device)
        if lie.sizes is None and lie.strides is None and lie.offset is None:
            return NotImplemented
        sizes = lie.sizes if lie.sizes is not None else tuple(real.shape)
        strides = lie.strides if lie.strides is not None else tuple(real.stride())
        offset = lie.offset if lie.offset is not None else real.storage_offset()
        dim = _int_arg(args)
        answers: dict[str, Callable[[], Any]] = {
            "dim": lambda: len(sizes),
            "size": lambda: sizes if dim is None else sizes[dim],
            "stride": lambda: strides if dim is None else strides[dim],
            "numel": lambda: math.prod(sizes),
            "storage_offset": lambda: offset,
            "is_contiguous": lambda: _contiguous(sizes, strides),
            "is_strides_like_format": lambda: False,
            "is_non_overlapping_and_dense": lambda: False,
        }
        answer = answers.get(name.removeprefix("sym_"))
        return NotImplemented if answer is None else answer()


def _policy_kwargs(lie: Lie) -> dict[str, Any]:
    if lie.device is not None:
        return {"dispatch_device": True}
    if lie.sizes is not None or lie.offset is not None:
        return {"dispatch_sizes_strides_policy": "sizes"}
    if lie.strides is not None:
        return {"dispatch_sizes_strides_policy": "strides"}
    return {}


def dispatch_liar(
    real: torch.Tensor,
    lie: Lie = Lie(),
    answers: dict[str, Callable[[tuple[Any, ...]], Any]] | None = None,
) -> torch.Tensor:
    """A :class:`DispatchLiar` over ``real`` (the same storage): with a sizes policy where
    ``lie`` lies about sizes or the offset, a strides policy where only about strides,
    ``dispatch_device`` where about the device."""
    try:
        liar = torch.Tensor._make_subclass(DispatchLiar, real, False, **_policy_kwargs(lie))
    except TypeError as exc:  # a torch whose _make_subclass lacks the keyword
        raise CannotMake(f"torch {torch.__version__}: _make_subclass: {exc}") from None
    # Plain instance attributes (no dispatch involved); zoo_answers last: until it is set
    # the liar tells the truth (_made).
    liar.zoo_real = real
    liar.zoo_lie = lie
    liar.zoo_answers = dict(answers or {})
    return liar


def storage_of(tensor: torch.Tensor) -> tuple[int, int]:
    """(first address, byte size) of a plain tensor's storage, read with torch function
    and dispatch disabled (no mode or subclass can answer)."""
    with torch._C._DisableTorchDispatch():
        return storage_bytes(tensor)


def _bytes_as_uint8(real: torch.Tensor) -> Callable[[tuple[Any, ...]], Any]:
    """The answer to ``as_strided``: the storage's bytes, as uint8 (a smaller tensor of
    another dtype: 16 elements for 16 bytes, which a float64 label makes 128 bytes)."""
    return lambda args: real.view(torch.uint8)


def _elsewhere(size: int = 1 << 16) -> Callable[[tuple[Any, ...]], Any]:
    """An answer over memory that is not the tensor's: a bigger tensor of its own."""
    return lambda args: torch.zeros(size, dtype=torch.float64)


def _small() -> torch.Tensor:
    """A real 16-byte storage: 4 float32."""
    return torch.arange(4, dtype=torch.float32)


def _float64_pair() -> torch.Tensor:
    """16 bytes of float64 (2 elements)."""
    return torch.tensor([1.5, 2.5], dtype=torch.float64)


def _over(
    real: torch.Tensor,
    lie: Lie = Lie(),
    answers: dict[str, Callable[[tuple[Any, ...]], Any]] | None = None,
) -> Made:
    storage = storage_of(real)
    return Made(dispatch_liar(real, lie, answers), contextlib.nullcontext, storage, (real,))


class _Wrapper(torch.Tensor):
    """A ``_make_wrapper_subclass`` tensor (no memory of its own) that answers every op
    with the real tensor it wraps, as tensor-parallel and quantization wrappers do."""

    inner: torch.Tensor

    @classmethod
    def __torch_dispatch__(
        cls, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        real = tuple(a.inner if isinstance(a, _Wrapper) else a for a in args)
        return func(*real, **kwargs)


def _wrapper() -> Made:
    inner = _small()
    try:
        wrapper = torch.Tensor._make_wrapper_subclass(
            _Wrapper, inner.shape, strides=inner.stride(), dtype=inner.dtype, device=inner.device
        )
    except (TypeError, RuntimeError) as exc:
        raise CannotMake(f"_make_wrapper_subclass: {exc}") from None
    wrapper.inner = inner
    return Made(wrapper, contextlib.nullcontext, None, (inner,))


def _mode(answers: dict[str, Callable[[tuple[Any, ...]], Any]]) -> Any:
    """A TorchDispatchMode class answering the ops named in ``answers`` (by packet name)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Answering(TorchDispatchMode):
        def __torch_dispatch__(
            self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
        ) -> Any:
            name = func.overloadpacket.__name__ if hasattr(func, "overloadpacket") else ""
            answer = answers.get(name)
            return func(*args, **(kwargs or {})) if answer is None else answer(args)

    return Answering


def _in_mode(real: torch.Tensor, answers: dict[str, Callable[[tuple[Any, ...]], Any]]) -> Made:
    return Made(real, _mode(answers), storage_of(real), (real,))


def _aliases(
    answer: Callable[[tuple[Any, ...]], Any],
) -> dict[str, Callable[[tuple[Any, ...]], Any]]:
    """``answer`` for every op an exporter may take an alias or view through."""
    names = ("detach", "alias", "view", "as_strided", "_reshape_alias", "contiguous")
    return dict.fromkeys(names, answer)


def _fake() -> Made:
    try:
        from torch._subclasses.fake_tensor import FakeTensorMode
    except ImportError as exc:
        raise CannotMake(f"no FakeTensorMode: {exc}") from None
    with FakeTensorMode():
        fake = torch.arange(4, dtype=torch.float32)
    return Made(fake, contextlib.nullcontext, None)


def _real_under_fake_mode() -> Made:
    try:
        from torch._subclasses.fake_tensor import FakeTensorMode
    except ImportError as exc:
        raise CannotMake(f"no FakeTensorMode: {exc}") from None
    real = _small()
    return Made(real, FakeTensorMode, storage_of(real), (real,))


def _functional() -> Made:
    try:
        from torch._subclasses.functional_tensor import FunctionalTensor, FunctionalTensorMode
    except ImportError as exc:
        raise CannotMake(f"no FunctionalTensor: {exc}") from None
    real = _small()
    try:
        with FunctionalTensorMode():
            functional = FunctionalTensor.to_functional(real)
    except (RuntimeError, TypeError, AttributeError) as exc:
        raise CannotMake(f"FunctionalTensor.to_functional: {exc}") from None
    return Made(functional, contextlib.nullcontext, None, (real,))


def _functional_wrapper() -> Made:
    """torch's C++ functionalization wrapper (no Python subclass): a plain ``torch.Tensor``
    whose storage is a FunctionalStorageImpl. Its export may describe the wrapped tensor's
    memory (its truth) or be refused."""
    make = getattr(torch, "_to_functional_tensor", None)
    if make is None:
        raise CannotMake(f"torch {torch.__version__} has no torch._to_functional_tensor")
    real = _small()
    return Made(make(real), contextlib.nullcontext, storage_of(real), (real,))


def _dtensor() -> Made:
    try:
        import torch.distributed as dist

        if not dist.is_available():
            raise CannotMake("torch.distributed is not available in this build")
        try:
            from torch.distributed.tensor import Replicate, distribute_tensor
        except ImportError:
            from torch.distributed._tensor import Replicate, distribute_tensor
        from torch.distributed.device_mesh import init_device_mesh
    except ImportError as exc:
        raise CannotMake(f"no DTensor here: {exc}") from None
    try:
        if not dist.is_initialized():
            store = dist.HashStore()
            dist.init_process_group("gloo", store=store, rank=0, world_size=1)
        mesh = init_device_mesh("cpu", (1,))
        real = _small()
        dtensor = distribute_tensor(real, mesh, [Replicate()])
    except Exception as exc:  # any failure to set up one process's world: not this test's subject
        raise CannotMake(
            f"no single-process DTensor on CPU here: {type(exc).__name__}: {exc}"
        ) from None
    return Made(dtensor, contextlib.nullcontext, None, (real,))


def _as_strided_uint8(*, mode: bool) -> Made:
    """16 bytes of float64 whose ``as_strided`` a dispatch subclass (or a dispatch mode
    around the plain tensor) answers with those bytes as uint8."""
    real = _float64_pair()
    answers = {"as_strided": _bytes_as_uint8(real)}
    return _in_mode(real, answers) if mode else _over(real, answers=answers)


def _mode_answers_with(lie: Lie) -> Made:
    """A dispatch mode answering every alias the exporter takes of a plain tensor with a
    :class:`DispatchLiar` over the same storage that tells ``lie``."""
    real = _small()
    return _in_mode(real, _aliases(lambda args: dispatch_liar(real, lie)))


#: name -> factory. Each ``Lie`` is built over the 16-byte storage of four float32.
CASES: dict[str, Callable[[], Made]] = {
    # _make_subclass, dispatch_sizes_strides_policy="sizes": 4 MiB over 16 bytes.
    "sizes-policy-4MiB": lambda: _over(_small(), Lie(sizes=(1 << 20,), strides=(1,))),
    "sizes-policy-2d": lambda: _over(_small(), Lie(sizes=(1 << 10, 1 << 10), strides=(1 << 10, 1))),
    "sizes-policy-offset": lambda: _over(_small(), Lie(sizes=(4,), strides=(1,), offset=1 << 20)),
    "sizes-policy-negative-stride": lambda: _over(_small(), Lie(sizes=(4,), strides=(-(1 << 16),))),
    # 2**62 elements (numel fits int64), whose 2**64 bytes do not.
    "sizes-policy-overflow": lambda: _over(
        _small(), Lie(sizes=(1 << 31, 1 << 31), strides=(1 << 31, 1))
    ),
    "sizes-policy-empty": lambda: _over(_small(), Lie(sizes=(0, 1 << 20), strides=(1 << 20, 1))),
    # dispatch_sizes_strides_policy="strides": the sizes are true, the strides not.
    "strides-policy-big": lambda: _over(_small(), Lie(strides=(1 << 20,))),
    "strides-policy-negative": lambda: _over(_small(), Lie(strides=(-(1 << 20),))),
    "strides-policy-2d": lambda: _over(_small().reshape(2, 2), Lie(strides=(1 << 18, 1))),
    # dispatch_device=True: host memory that says it is on a GPU.
    "dispatch-device-cuda": lambda: _over(_small(), Lie(device="cuda:0")),
    "dispatch-device-meta": lambda: _over(_small(), Lie(device="meta")),
    # Dispatch subclasses answering the exporter's own ops.
    "subclass-as_strided-uint8": lambda: _as_strided_uint8(mode=False),
    "subclass-detach-elsewhere": lambda: _over(_small(), answers=_aliases(_elsewhere())),
    "wrapper-subclass": _wrapper,
    # Dispatch modes around a plain tensor.
    "mode-as_strided-uint8": lambda: _as_strided_uint8(mode=True),
    "mode-detach-elsewhere": lambda: _in_mode(_small(), _aliases(_elsewhere())),
    "mode-answers-lying-sizes": lambda: _mode_answers_with(Lie(sizes=(1 << 20,), strides=(1,))),
    "mode-answers-lying-strides": lambda: _mode_answers_with(Lie(strides=(1 << 20,))),
    "mode-answers-lying-device": lambda: _mode_answers_with(Lie(device="cuda:0")),
    # Tensors with elements and no memory of their own, and a real one under a fake mode.
    "fake-tensor": _fake,
    "real-under-FakeTensorMode": _real_under_fake_mode,
    "FunctionalTensor": _functional,
    "functional-wrapper": _functional_wrapper,
    "DTensor": _dtensor,
}


def make(name: str) -> Made:
    """Case ``name``, made now (raises :class:`CannotMake` where this torch cannot)."""
    return CASES[name]()


@contextlib.contextmanager
def exported_under(made: Made) -> Iterator[None]:
    """The case's scope (a mode, or nothing)."""
    with made.scope():
        yield


def export_owning(api: DLPackExchangeAPI, obj: object) -> TensorFields:
    """The fields of an owning export (``managed_tensor_from_py_object_no_sync``), its
    deleter called."""
    managed = export_managed(api, obj)
    try:
        fields = managed_fields(managed)
    finally:
        managed.contents.deleter(managed)
    return fields


def export_non_owning(api: DLPackExchangeAPI, obj: object) -> TensorFields:
    """The fields of a non-owning export (``dltensor_from_py_object_no_sync``)."""
    return fields_of(export_dltensor(api, obj))


def _sanitized() -> bool:
    """An AddressSanitizer runtime is in this process (preloaded for a sanitizer build of
    the table: tests/integration/test_sanitizers.py)."""
    try:
        return hasattr(ctypes.CDLL(None), "__asan_init")
    except OSError:
        return False


#: Under a sanitizer build the described bytes are read before they are judged, so that
#: AddressSanitizer itself reports a read past the storage.
SANITIZED = _sanitized()
#: The most bytes read at each edge of an extent too large to read whole (2**64 bytes).
_EDGE = 1 << 16


def read_described(low: int, high: int, storage: tuple[int, int] | None) -> None:
    """Read the bytes [low, high) an export describes: all of them when the extent is
    small, else both its edges and the bytes around each end of ``storage`` that lie in it
    (where a read past the storage starts)."""
    if high - low <= 2 * _EDGE:
        ctypes.string_at(low, high - low)
        return
    windows = [(low, low + _EDGE), (high - _EDGE, high)]
    if storage is not None:
        start, size = storage
        windows += [(start - _EDGE, start + 1), (start + size - 1, start + size + _EDGE)]
    for begin, end in windows:
        first, last = max(begin, low), min(end, high)
        if last > first:
            ctypes.string_at(first, last - first)


def check_export(fields: TensorFields, storage: tuple[int, int] | None, what: str) -> None:
    """``fields`` describe bytes of ``storage`` (first address, byte size; None: none) in
    host memory; every described byte is read (under a sanitizer build first, so that
    AddressSanitizer reports a read past the storage itself)."""
    low, high = described_extent(fields)
    if low == high:
        return  # nothing described: zero-element exports keep torch's behaviour
    if SANITIZED and (fields.device_type == HOST[0] or torch.version.cuda is None):
        read_described(low, high, storage)
    assert storage is not None, (
        f"{what}: a tensor without memory of its own was exported as [{low:#x}, {high:#x}) "
        f"({high - low} bytes): {fields}"
    )
    start, size = storage
    assert start <= low, (
        f"{what}: describes [{low:#x}, {high:#x}) ({high - low} bytes) outside its storage "
        f"[{start:#x}, {start + size:#x}) ({size} bytes): {fields}"
    )
    assert high <= start + size, (
        f"{what}: describes [{low:#x}, {high:#x}) ({high - low} bytes) outside its storage "
        f"[{start:#x}, {start + size:#x}) ({size} bytes): {fields}"
    )
    assert (fields.device_type, fields.device_id) == HOST, (
        f"{what}: host memory labelled as device {(fields.device_type, fields.device_id)}"
    )
    read_described(low, high, storage)


def check_refusal(error: BufferError, what: str) -> None:
    """A refusal names the library that refused."""
    assert LIBRARY_NAME in str(error), f"{what}: a refusal that names no library: {error!r}"
