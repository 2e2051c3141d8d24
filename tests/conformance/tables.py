"""The two tables under comparison, how an outcome is recorded, and THE deviation list.

Every call goes through ctypes exactly as a C consumer (tvm-ffi) makes it. An outcome is
``Outcome(ok, error, value)``: ``error`` is the exception type name of a refusal (a Python
error, or the SetError kind of the allocator).

``DEVIATIONS`` is the one list of deliberate differences from torch 2.13's own table. A
comparison may only differ from torch through :func:`deviates`, which names an entry of
that list; anything else must be identical. The list is restated, with reasons, in
CONTRIBUTING.md ("What the exchange library does").

``GPU_RULES`` is what torch answers for the two GPU device types (kDLCUDA, kDLROCM) member
by member, per build flavour and minor 2.4-2.15, and what both tables (the native library
and the portable one) do about it: follow torch where it gives the stream or device its
work runs on, refuse where it would hand a GPU caller a NULL stream or a wrong device. Its
sources are in docs/facts.md ("torch's device-type rules").
"""

from __future__ import annotations

import collections
import ctypes
import dataclasses
from pathlib import Path
from typing import Any

import torch

from exchange_suite.dlpack_ctypes import (
    DLDeviceType,
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
        "(CPU build) imports kDLCUDA/kDLROCM memory as cuda/hip tensors (none of its kernels "
        "runs on them), exports such tensors, and current_work_stream answers NULL for "
        "kDLCUDA/kDLROCM (2.10+)",
        "the CPU build serves no GPU: it refuses GPU tensors (export and import, "
        "BufferError; the allocator, as torch, ValueError) and current_work_stream for "
        "kDLCUDA/kDLROCM (ValueError), naming the build that serves them",
        "a NULL stream is the default stream: a consumer would race torch's current stream; "
        "a tensor on a device without kernels fails at its first use, far from the cause",
    ),
    "other-gpu-memory": Deviation(
        "(CUDA build) imports kDLROCM memory as a 'hip' tensor, which no kernel of a CUDA "
        "build runs on, and exports such tensors as kDLROCM",
        "BufferError naming the rocm build (the ROCm build refuses kDLCUDA, as torch's ROCm "
        "build does)",
        "a tensor on a wrong device: it fails at its first use, far from the cause",
    ),
    "other-gpu-stream": Deviation(
        "(torch 2.13+, CUDA and ROCm builds) current_work_stream answers the other GPU's "
        "device type (kDLROCM on CUDA, kDLCUDA on ROCm) with NULL, rc 0: only its "
        "accelerator's own type gets the current stream (2.10-2.12 answered both)",
        "ValueError naming the build that serves that device type; for torch 2.4-2.12 both "
        "types get the build's current stream, as torch's rule of those releases",
        "a NULL stream is the default stream: a consumer would race torch's current stream",
    ),
    "gpu-build-other-device-stream": Deviation(
        "(CUDA and ROCm builds) current_work_stream answers every device type but its GPU "
        "ones with NULL, rc 0 (kDLOneAPI, kDLVulkan, kDLMetal, kDLExtDev, ...)",
        "ValueError for every device type but its GPU ones and host memory (NULL)",
        "those are accelerators with streams: NULL would be their default stream",
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
    "outside-storage-export": Deviation(
        "(2.11, 2.13) exports the sizes and strides a tensor subclass answers through "
        "__torch_dispatch__ (dispatch_sizes_strides_policy), even beyond its storage: 4 MiB "
        "described over a 16-byte storage",
        "BufferError where the described extent (lowest to highest byte of sizes x strides "
        "+ offset) leaves the C++ storage, naming the library and the remedy "
        "(t.as_subclass(torch.Tensor))",
        "a consumer would read and write past the storage",
    ),
    "storage-device-export": Deviation(
        "(2.11 CUDA build) labels a CPU storage with the device a dispatch_device subclass "
        "answers through __torch_dispatch__ (host memory exported as kDLCUDA)",
        "BufferError: an export is labelled with its storage's device or refused",
        "a consumer would launch a GPU kernel on host memory",
    ),
    "stream-error-without-gil": Deviation(
        "(2.11) current_work_stream sets a Python error for a refused request even when its "
        "caller does not hold the GIL (a crash from a C thread)",
        "-1 with no error left for a caller without the GIL; the table's ValueError for a "
        "caller that holds it (both tables alike)",
        "an error set without the GIL corrupts the interpreter or crashes",
        kept_from_torch=True,
    ),
    "allocator-error-kind": Deviation(
        "reports every allocator failure with kind MemoryError",
        "ValueError for a prototype torch cannot represent (dtype, device, negative sizes, "
        "an element count, byte size or stride beyond int64), MemoryError when the memory "
        "cannot be allocated, RuntimeError otherwise (e.g. a CUDA error)",
        "the kind names the cause",
    ),
}


# --- torch's device-type rules for the two GPU types (issue 37) --------------------------

#: What torch answers (``GpuRule.torch_answers``).
STREAM = "the build's current GPU stream"
NULL_STREAM = "NULL, rc 0"
MEMORY = "memory or a tensor on the device its work runs on"
WRONG_DEVICE = "a tensor on a device none of that build's kernels runs on"
REFUSES = "an error"
#: What both tables do (``GpuRule.we``).
FOLLOW = "as torch"
REFUSE = "refuse, naming the build that serves the device type"

MEMBERS = ("stream", "allocator", "import", "export")
BUILDS = ("cpu", "cuda", "rocm")
#: Minors of torch 2.x the rules were read for (docs/facts.md, "torch's device-type rules").
MINORS = (4, 15)


@dataclasses.dataclass(frozen=True)
class GpuRule:
    """torch's answer for one member, build flavour, GPU device type and range of minors,
    and what the tables do about it."""

    member: str
    #: torch's build flavour, and the table's (the native build; the portable table serves
    #: the running torch's).
    build: str
    device_type: int
    #: First and last minor of torch 2.x (inclusive).
    minors: tuple[int, int]
    torch_answers: str
    we: str
    #: The DEVIATIONS entry where we refuse and torch answers; None where both refuse.
    deviation: str | None
    #: Where torch's answer was read (details in docs/facts.md).
    source: str


_CUDA, _ROCM = int(DLDeviceType.kDLCUDA), int(DLDeviceType.kDLROCM)
_SRC_FROM_DLPACK = "torch/utils/dlpack.py from_dlpack (2.6.0:104-105, 2.9.1:144-145)"
#: torch 2.2 and 2.3 (served by the portable table alone): the same stream rule, read from
#: the wheels' own torch/utils/dlpack.py.
_SRC_FROM_DLPACK_OLD = "torch/utils/dlpack.py from_dlpack (2.2.2:104-105, 2.3.1:104-105 wheels)"
_SRC_TABLE_210 = "Module.cpp CurrentWorkStream, (type & ~8) == 2 (2.10-2.12 CUDA wheels)"
_SRC_TABLE_213 = "Module.cpp CurrentWorkStream, at::accelerator (2.13-2.15 wheels)"
_SRC_CONVERT = (
    "DLConvertor.cpp getATenDevice / dlDeviceToTorchDevice (2.6.0:133-161, 2.9.1:145-176; "
    "2.4.1, 2.8.0, 2.9.1, 2.11.0, 2.13.0 run)"
)
_SRC_EXPORT = "DLConvertor.cpp getDLDevice / torchDeviceToDLDevice (2.6.0:101-109, 2.9.1:110-118)"


def _rules() -> tuple[GpuRule, ...]:
    rows: list[GpuRule] = []

    def add(member: str, build: str, device_type: int, minors: tuple[int, int], *,
            torch: str, we: str, source: str, deviation: str | None = None) -> None:  # fmt: skip
        rows.append(GpuRule(member, build, device_type, minors, torch, we, deviation, source))

    every = MINORS
    for gpu in (_CUDA, _ROCM):
        # The CPU build: no stream, no memory of either GPU.
        add("stream", "cpu", gpu, (2, 3), torch=REFUSES, we=REFUSE, source=_SRC_FROM_DLPACK_OLD)
        add("stream", "cpu", gpu, (4, 9), torch=REFUSES, we=REFUSE, source=_SRC_FROM_DLPACK)
        add("stream", "cpu", gpu, (10, 15), torch=NULL_STREAM, we=REFUSE,
            deviation="unserved-gpu", source=_SRC_TABLE_210)  # fmt: skip
        add("allocator", "cpu", gpu, every, torch=REFUSES, we=REFUSE, source=_SRC_CONVERT)
        add("import", "cpu", gpu, every, torch=WRONG_DEVICE, we=REFUSE,
            deviation="unserved-gpu", source=_SRC_CONVERT)  # fmt: skip
        add("export", "cpu", gpu, every, torch=WRONG_DEVICE, we=REFUSE,
            deviation="unserved-gpu", source=_SRC_EXPORT)  # fmt: skip
    for build, own, other in (("cuda", _CUDA, _ROCM), ("rocm", _ROCM, _CUDA)):
        for gpu in (own, other):
            add("stream", build, gpu, (2, 3), torch=STREAM, we=FOLLOW,
                source=_SRC_FROM_DLPACK_OLD)  # fmt: skip
            add("stream", build, gpu, (4, 9), torch=STREAM, we=FOLLOW, source=_SRC_FROM_DLPACK)
            add("stream", build, gpu, (10, 12), torch=STREAM, we=FOLLOW, source=_SRC_TABLE_210)
        add("stream", build, own, (13, 15), torch=STREAM, we=FOLLOW, source=_SRC_TABLE_213)
        add("stream", build, other, (13, 15), torch=NULL_STREAM, we=REFUSE,
            deviation="other-gpu-stream", source=_SRC_TABLE_213)  # fmt: skip
        add("allocator", build, own, every, torch=MEMORY, we=FOLLOW, source=_SRC_CONVERT)
        add("allocator", build, other, every, torch=REFUSES, we=REFUSE, source=_SRC_CONVERT)
        add("import", build, own, every, torch=MEMORY, we=FOLLOW, source=_SRC_CONVERT)
        add("export", build, own, every, torch=MEMORY, we=FOLLOW, source=_SRC_EXPORT)
    add("import", "cuda", _ROCM, every, torch=WRONG_DEVICE, we=REFUSE,
        deviation="other-gpu-memory", source=_SRC_CONVERT)  # fmt: skip
    add("export", "cuda", _ROCM, every, torch=WRONG_DEVICE, we=REFUSE,
        deviation="other-gpu-memory", source=_SRC_EXPORT)  # fmt: skip
    add("import", "rocm", _CUDA, every, torch=REFUSES, we=REFUSE, source=_SRC_CONVERT)
    # (A ROCm torch has no tensor that exports as kDLCUDA: its HIP devices are "cuda".)
    return tuple(rows)


#: THE device-type rules for kDLCUDA / kDLROCM (see the module docstring).
GPU_RULES: tuple[GpuRule, ...] = _rules()


def gpu_rule(member: str, build: str, device_type: int, minor: int) -> GpuRule:
    """The rule of ``member`` for ``device_type`` (kDLCUDA / kDLROCM) in a ``build`` table
    for torch 2.``minor``; LookupError where none is listed (e.g. export of kDLCUDA from a
    ROCm torch, which has no such tensor)."""
    found = [
        rule
        for rule in GPU_RULES
        if (rule.member, rule.build, rule.device_type) == (member, build, device_type)
        and rule.minors[0] <= minor <= rule.minors[1]
    ]
    if len(found) != 1:
        raise LookupError(
            f"tests/conformance/tables.py GPU_RULES has {len(found)} rules for {member} of "
            f"device type {device_type} in a {build} build, torch 2.{minor}"
        )
    return found[0]


def answers_gpu_stream(build: str, device_type: int, minor: int) -> bool:
    """Whether a ``build`` table answers current_work_stream of GPU ``device_type`` with its
    current stream on torch 2.``minor`` (else it refuses with ValueError)."""
    return gpu_rule("stream", build, device_type, minor).we == FOLLOW


def serves_gpu_memory(build: str, device_type: int) -> bool:
    """Whether a ``build`` table exchanges GPU memory of ``device_type`` (export, import,
    allocator; the same on every minor)."""
    return gpu_rule("import", build, device_type, MINORS[0]).we == FOLLOW


def torch_minor() -> int:
    """The running torch's minor (torch 2.x), whose rules a table in this process follows."""
    major, minor = (int(part) for part in torch.__version__.split(".")[:2])
    if major != 2:
        raise LookupError(f"GPU_RULES cover torch 2.x, not {torch.__version__}")
    return minor


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
