"""No reference or memory leaks over many calls of every member that owns memory.

Each loop warms up, then compares the process's memory use before and after many calls
(:class:`MemoryUse`):

- the bytes malloc has handed out and not got back (glibc's ``mallinfo2``): exact, so a
  few hundred calls show a leak of a few hundred bytes each. Torch's own refusal of a
  float8 export (``torch._C._to_dlpack``) leaks 576-608 bytes per call on torch 2.2.2 and
  2.8.0 (measured here: 500 calls, +288 kB on 2.2.2, +304 kB on 2.8.0, 0 on 2.13), which
  is where every float8 / fp4 export of a table that asks torch first ends up;
- the blocks Python's allocator holds (``sys.getallocatedblocks``): a Python object
  left behind per call;
- the resident set size, as a coarse backstop for memory neither of them sees.

The deleters of imported tensors are counted too: torch 2.2.2's importer never calls the
producer's deleter for a tensor without elements whose ``data`` is NULL.

Under a sanitizer runtime (the ASan builds of tests/integration/test_sanitizers.py) these
loops measure the sanitizer's allocator (its quarantine holds freed memory), not the
table's: they skip there.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import torch

from .cases import DLPACK_DTYPES, make_tensor, present
from .dlpack_ctypes import (
    DELETER,
    DLDataTypeCode,
    DLDeviceType,
    DLManagedTensorVersioned,
    DLPackExchangeAPI,
    DLTensor,
    ErrorSink,
    import_managed,
    steal_pyobject,
)

try:
    import psutil
except ImportError:  # minimal old-torch environments: Linux's /proc tells the same
    psutil = None


def _sanitizer_runtime_loaded() -> bool:
    """An ASan runtime is in this process (preloaded for a sanitizer build)."""
    try:
        process = ctypes.CDLL(None)
    except OSError:
        return False
    return hasattr(process, "__asan_init")


pytestmark = pytest.mark.skipif(
    _sanitizer_runtime_loaded(),
    reason="under AddressSanitizer, RSS and heap counts measure its quarantine, not leaks",
)

#: RSS growth tolerated over a loop: allocator and interpreter noise. RSS is the coarse
#: measure: the exact one is :data:`HEAP_SLACK`.
RSS_SLACK = 8 * 1024 * 1024
#: malloc's bytes in use tolerated to grow over a loop. Measured noise on torch 2.2.2,
#: 2.8.0 and 2.13.0: 0-80 bytes per loop. A leak of 576 bytes per call (torch 2.2.2's
#: float8 refusal) over the :data:`BYTE_VIEW_CALLS` of the shortest loop adds 576 kB.
HEAP_SLACK = 64 * 1024
#: Python allocator blocks tolerated to grow over a loop (measured noise: 0-7); a Python
#: object left per call adds as many blocks as there are calls.
BLOCKS_SLACK = 200
#: Calls of the float32 export loops (100,000 when RSS was the only measure): a leak of
#: more than HEAP_SLACK / FLOAT32_CALLS = 3.3 bytes per call fails, or without mallinfo2
#: one of more than RSS_SLACK / FLOAT32_CALLS = 420 bytes.
FLOAT32_CALLS = 20_000
#: Calls of the float8 / fp4 / sub-byte loops: torch 2.2.2's refusal of a float8 export
#: costs ~2 ms (it builds a C++ exception with its backtrace), so these loops are the
#: shortest; a leak of more than HEAP_SLACK / BYTE_VIEW_CALLS = 66 bytes per call fails.
BYTE_VIEW_CALLS = 1_000


class _MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (2.33+): every field a ``size_t``."""

    _fields_ = tuple(
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd",
            "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost",
        )
    )  # fmt: skip


def _heap_reader() -> Callable[[], int] | None:
    """``() -> bytes in use`` from glibc's ``mallinfo2`` (chunks handed out from the
    arenas plus mmap'd ones), or None where there is none (musl, macOS, old glibc)."""
    try:
        mallinfo2 = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        return None
    mallinfo2.restype = _MallInfo2
    mallinfo2.argtypes = ()

    def read() -> int:
        info = mallinfo2()
        return int(info.uordblks + info.hblkhd)

    return read


_HEAP = _heap_reader()


def rss() -> int:
    """Resident set size in bytes (psutil, else /proc/self/statm)."""
    if psutil is not None:
        return int(psutil.Process().memory_info().rss)
    statm = Path("/proc/self/statm")
    if not statm.exists():
        pytest.skip("neither psutil nor /proc/self/statm is available to measure RSS")
    return int(statm.read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class MemoryUse(NamedTuple):
    """What the process holds: RSS, malloc's bytes in use (None without glibc's
    mallinfo2) and Python's allocated blocks."""

    rss: int
    heap: int | None
    blocks: int

    @classmethod
    def now(cls) -> MemoryUse:
        gc.collect()
        return cls(rss(), None if _HEAP is None else _HEAP(), sys.getallocatedblocks())

    def check_growth(self, calls: int, what: str) -> None:
        """Fail naming each measure that grew past its slack since ``self``."""
        after = MemoryUse.now()
        problems = []
        if after.heap is not None and self.heap is not None:
            grown = after.heap - self.heap
            if grown >= HEAP_SLACK:
                problems.append(f"malloc's bytes in use +{grown:,} ({grown / calls:.0f} B/call)")
        if after.blocks - self.blocks >= BLOCKS_SLACK:
            problems.append(f"Python's allocated blocks +{after.blocks - self.blocks:,}")
        if after.rss - self.rss >= RSS_SLACK:
            problems.append(f"RSS +{(after.rss - self.rss) / 2**20:.1f} MiB")
        assert not problems, f"{what} over {calls:,} calls: {'; '.join(problems)}"


@contextlib.contextmanager
def no_growth(calls: int, what: str) -> Iterator[None]:
    """Check that the block's ``calls`` calls leave the memory use as it found it."""
    before = MemoryUse.now()
    yield
    before.check_growth(calls, what)


def needs_heap() -> None:
    """Skip where malloc's bytes in use cannot be read (the short loops need them)."""
    if _HEAP is None:
        pytest.skip("needs glibc's mallinfo2 to count malloc's bytes in use")


#: float8 / fp4 (what torch < 2.10's own export refuses) and the sub-byte integers.
BYTE_VIEW = present(
    (
        "float8_e5m2", "float8_e4m3fn", "float8_e5m2fnuz", "float8_e4m3fnuz",
        "float8_e8m0fnu", "float4_e2m1fn_x2",
        *(f"uint{n}" for n in range(1, 8)), *(f"int{n}" for n in range(1, 8)),
    )
)  # fmt: skip
FLOAT8 = [name for name in BYTE_VIEW if name.startswith(("float8", "float4"))]
SUB_BYTE = [name for name in BYTE_VIEW if name not in FLOAT8]


def _families() -> list[Any]:
    params = []
    for family, names in (("float8-fp4", FLOAT8), ("sub-byte", SUB_BYTE)):
        mark = () if names else (pytest.mark.skip(reason=f"torch {torch.__version__} has none"),)
        params.append(pytest.param(names, id=family, marks=mark))
    return params


def _tensors(names: list[str]) -> list[torch.Tensor]:
    return [make_tensor(getattr(torch, name)) for name in names]


def test_from_py_object_and_deleter(api: DLPackExchangeAPI) -> None:
    tensor = torch.ones(4, 5)[1:, ::2]
    convert = api.managed_tensor_from_py_object_no_sync
    out = ctypes.POINTER(DLManagedTensorVersioned)()
    out_ref = ctypes.byref(out)
    # Warm up: first calls allocate caches that are not leaks.
    for _ in range(1000):
        convert(tensor, out_ref)
        out.contents.deleter(out)
    refs = sys.getrefcount(tensor)
    with no_growth(FLOAT32_CALLS, "float32 owning exports"):
        for _ in range(FLOAT32_CALLS):
            convert(tensor, out_ref)
            out.contents.deleter(out)
    assert sys.getrefcount(tensor) == refs


def test_dltensor_from_py_object(api: DLPackExchangeAPI) -> None:
    tensor = torch.ones(3, 3)
    convert = api.dltensor_from_py_object_no_sync
    out = ctypes.byref(DLTensor())
    convert(tensor, out)
    refs = sys.getrefcount(tensor)
    with no_growth(FLOAT32_CALLS, "float32 non-owning exports"):
        for _ in range(FLOAT32_CALLS):
            convert(tensor, out)
    assert sys.getrefcount(tensor) == refs


@pytest.mark.parametrize("names", _families())
def test_byte_view_owning_exports(api: DLPackExchangeAPI, names: list[str]) -> None:
    """Owning exports of float8 / fp4 (which torch < 2.10 refuses: the table must not let
    that refusal leak on each call) and sub-byte tensors, the dtypes taken in turn."""
    needs_heap()
    tensors = _tensors(names)
    convert = api.managed_tensor_from_py_object_no_sync
    out = ctypes.POINTER(DLManagedTensorVersioned)()
    out_ref = ctypes.byref(out)
    for tensor in tensors:
        convert(tensor, out_ref)
        out.contents.deleter(out)
    refs = [sys.getrefcount(t) for t in tensors]
    with no_growth(BYTE_VIEW_CALLS, f"owning exports of {', '.join(names)}"):
        for i in range(BYTE_VIEW_CALLS):
            convert(tensors[i % len(tensors)], out_ref)
            out.contents.deleter(out)
    assert [sys.getrefcount(t) for t in tensors] == refs


@pytest.mark.parametrize("names", _families())
def test_byte_view_non_owning_exports(api: DLPackExchangeAPI, names: list[str]) -> None:
    """``dltensor_from_py_object_no_sync`` of the same dtypes."""
    needs_heap()
    tensors = _tensors(names)
    convert = api.dltensor_from_py_object_no_sync
    out = ctypes.byref(DLTensor())
    for tensor in tensors:
        convert(tensor, out)
    refs = [sys.getrefcount(t) for t in tensors]
    with no_growth(BYTE_VIEW_CALLS, f"non-owning exports of {', '.join(names)}"):
        for i in range(BYTE_VIEW_CALLS):
            convert(tensors[i % len(tensors)], out)
    assert [sys.getrefcount(t) for t in tensors] == refs


@pytest.mark.parametrize("names", [pytest.param(["float32"], id="float32"), *_families()])
def test_round_trips(api: DLPackExchangeAPI, names: list[str]) -> None:
    """Our export handed back to our import, the tensor dropped: both deleters run."""
    if names != ["float32"]:
        needs_heap()
    tensors = [torch.arange(16.0).reshape(4, 4)] if names == ["float32"] else _tensors(names)
    calls = 20_000 if names == ["float32"] else BYTE_VIEW_CALLS
    convert = api.managed_tensor_from_py_object_no_sync
    out = ctypes.POINTER(DLManagedTensorVersioned)()
    for tensor in tensors * 50:
        convert(tensor, ctypes.byref(out))
        import_managed(api, out)
    refs = [sys.getrefcount(t) for t in tensors]
    with no_growth(calls, f"round trips of {', '.join(names)}"):
        for i in range(calls):
            convert(tensors[i % len(tensors)], ctypes.byref(out))
            back = import_managed(api, out)
            del back
    assert [sys.getrefcount(t) for t in tensors] == refs


def test_errors_do_not_leak(api: DLPackExchangeAPI) -> None:
    conj = torch.ones(3, dtype=torch.complex64).conj()
    out = ctypes.byref(ctypes.POINTER(DLManagedTensorVersioned)())
    refs = sys.getrefcount(conj)
    with no_growth(20_000, "refused exports (conjugate bit)"):
        for _ in range(20_000):
            with contextlib.suppress(BufferError):
                api.managed_tensor_from_py_object_no_sync(conj, out)
    assert sys.getrefcount(conj) == refs


def _refused_objects() -> list[tuple[str, torch.Tensor]]:
    """Tensors every table refuses for their device: ``meta`` ones (torch < 2.10's own
    refusal leaks 576-608 bytes per call, like its float8 one), contiguous, a strided view
    and 0-d. Not the zoo's memoryless tensors: torch's Python dispatch caches move Python's
    block count by 100-230 per 1,000 calls there without a per-call leak (torch 2.11,
    2.13); test_zoo.py checks what they export."""
    return [
        ("meta float32", torch.empty(4, 3, device="meta")),
        ("meta float64 view", torch.empty(3, 5, dtype=torch.float64, device="meta").t()[1:]),
        ("meta 0-d", torch.empty((), device="meta")),
    ]


@pytest.mark.parametrize("export", ["owning", "non-owning"])
def test_refused_devices_do_not_leak(api: DLPackExchangeAPI, export: str) -> None:
    """Refused exports of meta tensors (issue 42, finding 7: torch < 2.10 leaks its
    refusal of a meta tensor, so the table must refuse before torch sees one)."""
    needs_heap()
    objects = _refused_objects()
    tensors = [tensor for _, tensor in objects]
    owning = export == "owning"
    managed = ctypes.POINTER(DLManagedTensorVersioned)()
    target: Any = ctypes.byref(managed) if owning else ctypes.byref(DLTensor())
    convert = (
        api.managed_tensor_from_py_object_no_sync if owning else api.dltensor_from_py_object_no_sync
    )

    def attempt(tensor: Any) -> int:
        """1 if refused; an export that went through is released."""
        try:
            convert(tensor, target)
        except BufferError:
            return 1
        if owning:
            managed.contents.deleter(managed)
        return 0

    def run(calls: int) -> int:
        return sum(attempt(tensors[i % len(tensors)]) for i in range(calls))

    # Warm up: the first calls fill caches (torch's, the interpreter's).
    assert run(300) == 300, "a meta tensor was exported"
    refs = [sys.getrefcount(t) for t in tensors]
    names = ", ".join(name for name, _ in objects)
    with no_growth(BYTE_VIEW_CALLS, f"refused {export} exports of {names}"):
        run(BYTE_VIEW_CALLS)
    assert [sys.getrefcount(t) for t in tensors] == refs


def _prototypes() -> list[tuple[str, tuple[int, int, int], tuple[int, ...]]]:
    """(id, DLPack dtype, shape) of each allocation the allocator loop asks for in turn."""
    float32 = DLPACK_DTYPES["float32"]
    cases = [("float32", float32, (2, 3)), ("float32 empty", float32, (0, 3))]
    return cases + [(name, DLPACK_DTYPES[name], (2, 3)) for name in FLOAT8]


def test_allocator(api: DLPackExchangeAPI) -> None:
    """managed_tensor_allocator: float32 and each float8 / fp4 dtype this torch has (torch
    < 2.10 allocates those as uint8 bytes), with and without elements; every allocation
    released by its deleter."""
    needs_heap()
    prototypes = []
    for _, (code, bits, lanes), shape in _prototypes():
        prototype = DLTensor()
        prototype.ndim = len(shape)
        # ctypes keeps the array alive with the structure it was assigned to.
        prototype.shape = (ctypes.c_int64 * len(shape))(*shape)
        prototype.dtype.code, prototype.dtype.bits, prototype.dtype.lanes = code, bits, lanes
        prototype.device.device_type = DLDeviceType.kDLCPU
        prototypes.append(ctypes.byref(prototype))  # which holds the structure
    sink = ErrorSink()
    out = ctypes.POINTER(DLManagedTensorVersioned)()
    out_ref = ctypes.byref(out)
    allocate = api.managed_tensor_allocator

    def run(calls: int) -> None:
        for i in range(calls):
            assert allocate(prototypes[i % len(prototypes)], out_ref, None, sink.callback) == 0
            out.contents.deleter(out)

    run(len(prototypes) * 20)
    assert sink.errors == []
    calls = 20 * BYTE_VIEW_CALLS
    with no_growth(calls, f"allocations of {', '.join(c[0] for c in _prototypes())}"):
        run(calls)
    assert sink.errors == []


class Producer:
    """Hand-built DLManagedTensorVersioned a producer owns until its deleter runs: the
    deleter counts its calls and releases what the tensor pointed to."""

    def __init__(self) -> None:
        self.deleted = 0
        self._live: dict[int, tuple[Any, ...]] = {}
        self.deleter = DELETER(self._delete)

    def make(self, code: int, bits: int, lanes: int, shape: tuple[int, ...], *, data: bool) -> Any:
        count = 1
        for size in shape:
            count *= size
        buffer = (ctypes.c_uint8 * max(count * bits * lanes // 8, 1))() if data else None
        dims = (ctypes.c_int64 * len(shape))(*shape)
        managed = DLManagedTensorVersioned()
        managed.version.major, managed.version.minor = 1, 3
        managed.deleter = self.deleter
        tensor = managed.dl_tensor
        tensor.data = None if buffer is None else ctypes.addressof(buffer)
        tensor.device.device_type = DLDeviceType.kDLCPU
        tensor.ndim = len(shape)
        tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes = code, bits, lanes
        tensor.shape = dims
        self._live[ctypes.addressof(managed)] = (managed, buffer, dims)
        return ctypes.pointer(managed)

    def _delete(self, pointer: Any) -> None:
        self.deleted += 1
        self._live.pop(ctypes.addressof(pointer.contents), None)

    @property
    def outstanding(self) -> int:
        return len(self._live)


#: (id, [DLPack dtypes taken in turn], shape, whether data points at memory) of each
#: import case.
IMPORTS = [
    ("float32", [DLPACK_DTYPES["float32"]], (2, 3), True),
    ("empty, data NULL", [DLPACK_DTYPES["float32"]], (0, 3), False),
    ("empty, data set", [DLPACK_DTYPES["float32"]], (0, 3), True),
    ("float8-fp4", [DLPACK_DTYPES[name] for name in FLOAT8], (2, 3), True),
]


@pytest.mark.parametrize(
    ("dtypes", "shape", "data"),
    [
        pytest.param(
            dtypes,
            shape,
            data,
            id=name,
            marks=() if dtypes else (pytest.mark.skip(reason="no float8 dtype in this torch"),),
        )
        for name, dtypes, shape, data in IMPORTS
    ],
)
def test_imports_release_the_producer(
    api: DLPackExchangeAPI,
    dtypes: list[tuple[int, int, int]],
    shape: tuple[int, ...],
    data: bool,
) -> None:
    """managed_tensor_to_py_object_no_sync of a producer's tensor, which is dropped: its
    deleter runs once per import (torch 2.2.2's importer never runs it for a tensor
    without elements whose data is NULL) and nothing is left behind."""
    needs_heap()
    producer = Producer()
    convert = api.managed_tensor_to_py_object_no_sync
    result = ctypes.c_void_p()

    def run(calls: int) -> None:
        for i in range(calls):
            code, bits, lanes = dtypes[i % len(dtypes)]
            convert(producer.make(code, bits, lanes, shape, data=data), ctypes.byref(result))
            tensor = steal_pyobject(result.value or 0)
            del tensor

    run(100)
    before = MemoryUse.now()
    run(BYTE_VIEW_CALLS)
    gc.collect()
    imports = BYTE_VIEW_CALLS + 100
    # First the deleter: a producer whose deleter never runs holds its tensors, which
    # the memory use would report less plainly.
    assert (producer.deleted, producer.outstanding) == (imports, 0), (
        f"the producer's deleter ran {producer.deleted} times for {imports} imports"
    )
    names = ", ".join(DLDataTypeCode(code).name for code, _, _ in dtypes)
    before.check_growth(BYTE_VIEW_CALLS, f"imports of {shape} {names}")
