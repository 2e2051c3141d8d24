"""The two tables under comparison, how an outcome is recorded, and THE deviation list.

Every call goes through ctypes exactly as a C consumer (tvm-ffi) makes it. An outcome is
``Outcome(ok, error, value)``: ``error`` is the exception type name of a refusal (a Python
error, or the SetError kind of the allocator).

``DEVIATIONS`` is the one list of deliberate differences from torch 2.13's own table. A
comparison may only differ from torch through :func:`deviates`, which names an entry of
that list; anything else must be identical. The list is restated, with reasons, in
CONTRIBUTING.md ("What the exchange library does").
"""

from __future__ import annotations

import collections
import ctypes
import dataclasses
from pathlib import Path
from typing import Any

import torch

from exchange_suite.dlpack_ctypes import (
    DLPackExchangeAPI,
    ExchangeLibrary,
    api_from_capsule,
)

#: First torch release with its own ``torch.Tensor.__dlpack_c_exchange_api__``.
TORCH_OWN_API_SINCE = (2, 10)


@dataclasses.dataclass(frozen=True)
class Deviation:
    """One deliberate difference from torch 2.13's own table."""

    torch_does: str
    we_do: str
    why: str
    #: True where torch's table is never called with such inputs (it would crash or abort).
    kept_from_torch: bool = False


DEVIATIONS: dict[str, Deviation] = {
    "conj-neg-export": Deviation(
        "exports the raw memory of conjugate / negative-bit tensors",
        "BufferError (resolve_conj() / resolve_neg() first)",
        "DLPack has no such flags: the consumer would read wrong values",
    ),
    "no-storage-export": Deviation(
        "exports tensors with elements but no memory (wrapper subclasses, fake tensors) "
        "with data == NULL",
        "BufferError",
        "a consumer would dereference NULL",
    ),
    "error-types": Deviation(
        "RuntimeError for every refusal (non-tensors, inexpressible tensors, bad imports)",
        "TypeError for non-tensors, BufferError for tensors/DLPack tensors it cannot "
        "exchange, ValueError for NULL arguments and streams it cannot answer",
        "callers can tell a wrong argument from an inexpressible tensor",
    ),
    "claimed-class": Deviation(
        "reads an object whose __class__ claims torch.Tensor as a tensor (a crash)",
        "TypeError: only real torch.Tensor subtypes are tensors",
        "memory safety",
        kept_from_torch=True,
    ),
    "malformed-import": Deviation(
        "terminates or crashes the process on imports with negative sizes or strides, an "
        "extent beyond int64, negative ndim or a NULL shape",
        "BufferError, the tensor stays with the caller",
        "an importer must not be killed by its input",
        kept_from_torch=True,
    ),
    "byte-offset-import": Deviation(
        "imports an element-aligned byte_offset as a storage offset, but only with explicit "
        "strides: with NULL strides it refuses ('Expected zero byte_offset')",
        "the same with NULL strides (row-major): storage from `data`, storage offset "
        "byte_offset / itemsize, covering the whole view. Unaligned offsets: both refuse",
        "NULL strides only mean row-major; the offset means the same either way",
    ),
    "empty-view-storage": Deviation(
        "imports a view without elements with an element-aligned byte_offset as a storage "
        "of byte_offset bytes and that storage offset, even over NULL data (a huge offset: a "
        "huge storage, which torch.save and copy.deepcopy then read past the producer's "
        "memory)",
        "an empty storage and storage offset 0: the view addresses no memory",
        "a storage must lie inside the memory the producer provided",
    ),
    "deleter-on-refusal": Deviation(
        "runs the producer's deleter on some refusals (device types it maps but cannot "
        "use, e.g. kDLOpenCL: an internal assert after it took ownership)",
        "never: a refused tensor stays with the caller, deleter not run",
        "a caller that frees a refused tensor would free it twice",
    ),
    "read-only-import": Deviation(
        "imports a READ_ONLY tensor as an ordinary writable tensor",
        "BufferError: torch has no read-only tensors (IS_COPIED and the sub-byte padding "
        "flag are accepted; they need nothing)",
        "an in-place op would write to memory the producer declared read-only",
    ),
    "null-data-import": Deviation(
        "imports data == NULL with elements as a tensor whose storage has no memory (any "
        "access raises or crashes)",
        "BufferError",
        "a tensor must be backed by the memory it describes",
    ),
    "major-version-import": Deviation(
        "ignores the DLPack major version",
        "BufferError unless the major version is 1",
        "another major version may lay out the struct differently after `flags`",
    ),
    "unserved-gpu": Deviation(
        "(CPU build) imports kDLCUDA/kDLROCM memory as cuda/hip tensors, and "
        "current_work_stream answers NULL for every device type",
        "a build serves only the GPUs whose streams it can report: the CPU build refuses "
        "GPU tensors (export and import, BufferError; allocator ValueError) and "
        "current_work_stream for kDLCUDA/kDLROCM (ValueError); a CUDA build refuses ROCm, a "
        "ROCm build kDLCUDA",
        "a NULL stream is the default stream: a consumer would race torch's current stream",
    ),
    "uncreatable-device": Deviation(
        "imports host memory tagged kDLMetal, kDLExtDev or kDLMAIA as an mps, "
        "privateuseone or maia tensor, devices this torch build cannot create tensors on",
        "BufferError: a build serves only devices it can also answer streams for (a CPU "
        "build: host memory)",
        "a tensor of a device without a backend fails at its first use, far from the cause",
    ),
    "out-on-refusal": Deviation(
        "leaves *out as it was when managed_tensor_to_py_object_no_sync refuses",
        "sets *out to NULL on every refusal",
        "a caller that forgets the status cannot use a stale pointer",
    ),
    "allocator-error-kind": Deviation(
        "reports every allocator failure with kind MemoryError",
        "ValueError for a prototype torch cannot represent (dtype, device, negative sizes, "
        "an element count, byte size or stride beyond int64), MemoryError when the memory "
        "cannot be allocated, RuntimeError otherwise (e.g. a CUDA error)",
        "the kind names the cause",
    ),
}

#: The device types of "uncreatable-device": torch 2.13's CPU build imports exactly these
#: besides kDLCPU (kDLCUDA/kDLROCM are "unserved-gpu"); it refuses every other one too.
UNCREATABLE_DEVICE_TYPES = frozenset({8, 12, 17})  # kDLMetal, kDLExtDev, kDLMAIA

#: How often each deviation was relied on in this run (shown in the terminal summary).
USED: collections.Counter[str] = collections.Counter()


def deviates(name: str) -> bool:
    """Mark a difference from torch as the documented deviation ``name`` (always True)."""
    if name not in DEVIATIONS:
        raise KeyError(f"{name!r} is not in tests/conformance/tables.py DEVIATIONS")
    USED[name] += 1
    return True


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What one call did: accepted (with a comparable value) or refused with an error."""

    ok: bool
    error: str | None = None
    value: Any = None


def refused(exc: BaseException) -> Outcome:
    return Outcome(False, type(exc).__name__)


@dataclasses.dataclass
class Tables:
    """Our library's table, and torch's own where the running torch has one."""

    library: ExchangeLibrary
    ours: DLPackExchangeAPI
    torch: DLPackExchangeAPI | None

    @property
    def backend(self) -> str:
        return self.library.backend

    @property
    def runs_as_host_only(self) -> bool:
        """Whether the CPU half of the suite applies: a CPU build, or a table serving a GPU
        torch's backend (the portable table on PyPI's CUDA torch) where no GPU is present,
        so that every GPU memory it is handed is refused (by the table or by torch)."""
        if self.backend == "cpu":
            return True
        # The question is asked only of GPU-serving tables, in a test process.
        return not torch.cuda.is_available()


def load_tables(path: Path) -> Tables:
    library = ExchangeLibrary(path)
    own: DLPackExchangeAPI | None = None
    major, minor = (int(part) for part in torch.__version__.split(".")[:2])
    capsule = getattr(torch.Tensor, "__dlpack_c_exchange_api__", None)
    if (major, minor) >= TORCH_OWN_API_SINCE and capsule is not None:
        table = api_from_capsule(capsule)
        # A capsule pointing at the library under test is not torch's own.
        if ctypes.addressof(table) != library.address:
            own = table
    return Tables(library, library.api, own)
