"""The exchange benchmark on CUDA tensors, offline: ``python -m benchmarks --device cuda``.

A GPU machine has no network, so this mode installs and fetches nothing (``nox -s bench``
installs torch 2.13 and fetches 0.1.5): it takes the machine's own torch (>= 2.10: its own
table is the reference) and builds, with the build driver, our native library for it (the
CUDA library; the CPU one on a CPU torch) and the portable table into
``<work dir>/libs/<cuda|cpu|portable>`` (an unchanged rebuild is a no-op), and the C harness
(``benchmarks/exchange_harness.c``). Then, in one process, in interleaved rounds (each
member timed for every table in turn, the tables' order rotated per round):

* every member of the three tables (torch's own, native, portable): the exports and the
  import on CUDA tensors, the allocator (float32[16]) and ``current_work_stream`` on their
  device (the harness's ``_on`` entry points), plus the round trip and the loop itself;
* the Python path a consumer takes without the API (``x.__dlpack__()``, ``to_dlpack``,
  ``from_dlpack(capsule)``, ``torch.empty(16, device=...)``, ``to_dlpack(torch.empty(16,
  device=...))``), with timeit, once per round.

The medians of at least :data:`MIN_ROUNDS` rounds go to ``<results>/exchange-cuda.json``
with the device (name, driver), torch and date; :mod:`benchmarks.gpu_report` (the command)
writes that file and renders it into docs/benchmarks.md's GPU section and README's GPU
costs, from a real run only.

Without a CUDA (or ROCm) device it refuses with :class:`DeviceUnavailableError`.
``--dry-run`` runs every step on CPU tensors with a few calls instead, so a host without a
GPU (the test suite) checks the plumbing; its result says so and is never rendered.
"""

from __future__ import annotations

import ctypes
import dataclasses
import shutil
import sys
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from _torch_c_dlpack_ext_core.errors import (
    BackendUnavailableError,
    CommandError,
    TorchCDLPackExtError,
)
from _torch_c_dlpack_ext_core.naming import Backend
from _torch_c_dlpack_ext_core.run import run

from .exchange_worker import HARNESS_FUNCTIONS
from .harness import build_harness
from .stats import summarize
from .subjects import BenchContext, build_our_library, running_torch_dir

__all__ = [
    "KIND",
    "MEMBERS",
    "MIN_ROUNDS",
    "TABLES",
    "DeviceUnavailableError",
    "GPUSettings",
    "Libraries",
    "build_libraries",
    "build_native",
    "build_portable",
    "run_gpu",
]

#: The result file's kind: ``<results>/exchange-cuda.json``.
KIND = "exchange-cuda"
#: A real run's rounds at least (the CPU exchange benchmark's repeats).
MIN_ROUNDS = 15
TORCH_OWN = "torch's own"
NATIVE = "native"
PORTABLE = "portable"
TABLES = (TORCH_OWN, NATIVE, PORTABLE)
#: Harness entry points, in the order the tables show them (the CPU worker's own list).
MEMBERS = HARNESS_FUNCTIONS
#: Members that take the device instead of a tensor (``tcde_bench_<name>_on``).
ON_DEVICE = ("allocator", "current_work_stream")
#: DLPack device types (dlpack.h).
KDL_CPU, KDL_CUDA, KDL_ROCM = 1, 2, 10
#: The Python-level call a consumer makes instead: name -> (statement, setup).
PYTHON_PATHS = {
    "__dlpack__()": ("for t in ts: t.__dlpack__()", "pass"),
    "to_dlpack()": ("for t in ts: to_dlpack(t)", "pass"),
    # Fresh capsules for each timeit call: a capsule can be consumed once.
    "from_dlpack(capsule)": (
        "for c in next(rounds): from_dlpack(c)",
        "rounds = iter([[t.__dlpack__() for t in ts] for _ in range(PER_ROUND)])",
    ),
    # Sizes as separate ints: a tuple costs torch's parser a failed int conversion.
    "torch.empty(16)": ("for t in ts: torch.empty(16, dtype=f32, device=dev)", "pass"),
    "to_dlpack(torch.empty(16))": (
        "for t in ts: to_dlpack(torch.empty(16, dtype=f32, device=dev))",
        "pass",
    ),
}


class DeviceUnavailableError(BackendUnavailableError):
    """``--device cuda`` where torch sees no CUDA (or ROCm) device to measure on."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class GPUSettings:
    """Calls per member per round, rounds, warm-up calls, Python-path calls per round."""

    calls: int
    rounds: int
    warmup: int
    python_calls: int

    @classmethod
    def for_run(cls, *, quick: bool, dry_run: bool) -> GPUSettings:
        if dry_run:
            return cls(calls=200, rounds=3, warmup=20, python_calls=40)
        if quick:
            return cls(calls=20_000, rounds=5, warmup=2_000, python_calls=4_000)
        return cls(calls=100_000, rounds=MIN_ROUNDS, warmup=10_000, python_calls=20_000)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Libraries:
    """Our two tables for the running torch (a path each, or why there is none)."""

    native: Path | None
    portable: Path | None
    #: The native library's backend (``cuda`` on a CUDA torch, else ``cpu``).
    backend: Backend
    #: Built file -> ``"<size> B, <seconds> s[, CUDA <version>]"``.
    built: dict[str, str]
    errors: dict[str, str]


def build_native(libs_dir: Path, backend: Backend) -> tuple[Path, str]:
    """Our ``backend`` library for the running torch, built (or taken from the driver's
    cache) in ``libs_dir/<backend>``: its path and ``"<size> B, <s> s[, CUDA <v>]"``."""
    library = build_our_library(
        running_torch_dir(), libs_dir / backend.value, python=Path(sys.executable),
        backend=backend,
    )  # fmt: skip
    toolkit = f", CUDA {library.entry.gpu_toolkit}" if library.entry.gpu_toolkit else ""
    return library.path, f"{library.entry.size} B, {library.seconds:.1f} s{toolkit}, audited"


def build_portable(libs_dir: Path) -> tuple[Path, str]:
    """The portable table as shipped (abi3), built by the driver in ``libs_dir/portable``:
    its path and ``"<size> B, <python>, <s> s"``."""
    from _torch_c_dlpack_ext_core.driver import PortableRequest, compile_portable_library

    started = time.perf_counter()
    entry = compile_portable_library(PortableRequest(output_dir=libs_dir / PORTABLE))
    seconds = time.perf_counter() - started
    return libs_dir / PORTABLE / entry.file, f"{entry.size} B, {entry.python}, {seconds:.1f} s"


def build_libraries(libs_dir: Path, *, backend: Backend) -> Libraries:
    """:func:`build_native` and :func:`build_portable`; a failed build is recorded, not
    raised (the other tables are still measured)."""
    paths: dict[str, Path | None] = {NATIVE: None, PORTABLE: None}
    built: dict[str, str] = {}
    errors: dict[str, str] = {}
    for name, build in ((NATIVE, lambda: build_native(libs_dir, backend)),
                        (PORTABLE, lambda: build_portable(libs_dir))):  # fmt: skip
        try:
            path, said = build()
        except (TorchCDLPackExtError, OSError) as exc:
            errors[name] = f"{type(exc).__name__}: {exc}"[-2000:]
            continue
        paths[name] = path
        built[path.name] = said
    return Libraries(
        native=paths[NATIVE], portable=paths[PORTABLE], backend=backend, built=built,
        errors=errors,
    )  # fmt: skip


def _torch() -> ModuleType:
    import torch

    return torch


def _device(torch: ModuleType, *, dry_run: bool) -> tuple[Any, int, int]:
    """(torch device, DLPack device type, index) to measure on; raises
    :class:`DeviceUnavailableError` where a real run has no GPU."""
    if dry_run:
        return torch.device("cpu"), KDL_CPU, 0
    hip = getattr(torch.version, "hip", None)
    retry = "run it on a machine with a GPU, or add --dry-run to check the steps on CPU tensors"
    if torch.version.cuda is None and hip is None:
        raise DeviceUnavailableError(
            f"--device cuda: torch {torch.__version__} is a CPU build (no torch.version.cuda "
            f"or .hip): install a CUDA build of torch and {retry}"
        )
    if not torch.cuda.is_available():
        raise DeviceUnavailableError(
            f"--device cuda: torch {torch.__version__} (CUDA {torch.version.cuda or hip}) "
            f"sees no GPU (torch.cuda.is_available() is False); {retry}"
        )
    index = torch.cuda.current_device()
    return torch.device("cuda", index), KDL_ROCM if hip else KDL_CUDA, index


def _driver_version() -> str:
    """The NVIDIA driver's version (``nvidia-smi``), else the CUDA driver API's."""
    smi = shutil.which("nvidia-smi")
    if smi is not None:
        try:
            query = [smi, "--query-gpu=driver_version", "--format=csv,noheader"]
            return run(query, echo=False).stdout.splitlines()[0].strip()
        except (CommandError, IndexError):
            pass
    try:
        version = ctypes.c_int()
        if ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(version)) == 0:
            return f"CUDA driver API {version.value // 1000}.{version.value % 1000 // 10}"
    except (OSError, AttributeError):
        pass
    return "unknown"


def describe_device(torch: ModuleType, device: Any) -> dict[str, Any]:
    """What a reader needs to judge a GPU figure: the device, the driver, the runtime."""
    if device.type == "cpu":
        return {"name": "none (dry run: CPU tensors)", "driver": "-", "count": 0}
    props = torch.cuda.get_device_properties(device)
    return {
        "name": props.name,
        "capability": f"{props.major}.{props.minor}",
        "memory_gib": round(props.total_memory / 2**30),
        "count": torch.cuda.device_count(),
        "driver": _driver_version(),
        "runtime": torch.version.cuda or getattr(torch.version, "hip", None),
    }


def _table_address(torch: ModuleType, name: str, path: Path | None, keep: list[Any]) -> int | str:
    """The table's address (torch's own from its capsule, ours from the library's export),
    or why there is none."""
    try:
        return _load_table(torch, name, path, keep)
    except (OSError, AttributeError, RuntimeError) as exc:
        return f"{type(exc).__name__}: {exc}"


def _load_table(torch: ModuleType, name: str, path: Path | None, keep: list[Any]) -> int:
    if name == TORCH_OWN:
        capsule = getattr(torch.Tensor, "__dlpack_c_exchange_api__", None)
        if capsule is None:
            raise RuntimeError(f"torch {torch.__version__} has no table of its own (< 2.10)")
        get = ctypes.pythonapi.PyCapsule_GetPointer
        get.restype = ctypes.c_void_p
        get.argtypes = [ctypes.py_object, ctypes.c_char_p]
        return int(get(capsule, b"dlpack_exchange_api") or 0)
    if path is None:
        raise RuntimeError("not built")
    # Loaded locally (the exchange worker's way): only torch's libraries, already mapped.
    library = ctypes.CDLL(str(path))
    keep.append(library)
    entry = library.TorchDLPackExchangeAPIPtr
    entry.restype, entry.argtypes = ctypes.c_int64, []
    return int(entry())


class _Harness:
    """The harness's entry points, typed, with the device for the allocator and stream."""

    def __init__(self, path: Path, device_type: int, device_id: int) -> None:
        self._dll = ctypes.PyDLL(str(path))
        self._device = (device_type, device_id)
        self.functions: dict[str, Callable[..., int]] = {}
        for member in MEMBERS:
            on = member in ON_DEVICE
            function = getattr(self._dll, f"tcde_bench_{member}{'_on' if on else ''}")
            function.restype = ctypes.c_int64
            function.argtypes = [ctypes.c_void_p, ctypes.py_object, ctypes.c_int64] + (
                [ctypes.c_int32, ctypes.c_int32] if on else []
            )
            self.functions[member] = function

    def ns(self, member: str, api: int, tensors: list[Any], calls: int) -> int:
        extra = self._device if member in ON_DEVICE else ()
        return int(self.functions[member](api, tensors, calls, *extra))


def _python_timers(
    torch: ModuleType, tensors: list[Any], device: Any, per_round: int
) -> dict[str, timeit.Timer]:
    from torch.utils import dlpack

    env = {
        "ts": tensors, "to_dlpack": dlpack.to_dlpack, "from_dlpack": dlpack.from_dlpack,
        "torch": torch, "f32": torch.float32, "dev": device, "PER_ROUND": per_round,
    }  # fmt: skip
    return {
        name: timeit.Timer(stmt, setup=setup, globals=env)
        for name, (stmt, setup) in PYTHON_PATHS.items()
    }


def _unsupported(harness: _Harness, api: int, tensors: list[Any], calls: int) -> dict[str, str]:
    """Warm each member up with ``calls`` untimed calls; the members the table leaves NULL
    (the harness raises NotImplementedError for them), with why."""
    found = {}
    for member in MEMBERS:
        try:
            harness.ns(member, api, tensors, calls)
        except NotImplementedError as exc:  # noqa: PERF203 (warm-up, untimed)
            found[member] = str(exc)
    return found


def measure(
    torch: ModuleType,
    harness: _Harness,
    apis: dict[str, int],
    *,
    tensors: list[Any],
    settings: GPUSettings,
    progress: Callable[[str], None],
) -> tuple[dict[str, dict[str, list[float]]], dict[str, list[float]], dict[str, dict[str, str]]]:
    """Samples in ns per call: (table -> member -> per round, Python path -> per round,
    table -> member -> why it is unsupported)."""
    unsupported = {
        name: _unsupported(harness, api, tensors, settings.warmup) for name, api in apis.items()
    }
    per_round = max(1, settings.python_calls // len(tensors))
    timers = _python_timers(torch, tensors, tensors[0].device, per_round)
    for timer in timers.values():
        timer.timeit(number=max(1, per_round // 10))
    samples: dict[str, dict[str, list[float]]] = {name: {} for name in apis}
    python: dict[str, list[float]] = {name: [] for name in timers}
    names = list(apis)
    for index in range(settings.rounds):
        progress(f"exchange-cuda: round {index + 1}/{settings.rounds}")
        order = names[index % len(names) :] + names[: index % len(names)] if names else []
        for member in MEMBERS:
            for name in order:
                if member not in unsupported[name]:
                    elapsed = harness.ns(member, apis[name], tensors, settings.calls)
                    samples[name].setdefault(member, []).append(elapsed / settings.calls)
        for path, timer in timers.items():
            seconds = timer.timeit(number=per_round)
            python[path].append(seconds * 1e9 / (per_round * len(tensors)))
        if tensors[0].device.type == "cuda":
            torch.cuda.synchronize(tensors[0].device)
    return samples, python, unsupported


def run_gpu(ctx: BenchContext, *, dry_run: bool) -> dict[str, Any]:
    """Build and measure: the result's data (medians and spread per table and member, the
    Python path, the device, torch, what could not be measured and why). Raises
    :class:`DeviceUnavailableError` without a GPU unless ``dry_run``."""
    torch = _torch()
    device, device_type, index = _device(torch, dry_run=dry_run)
    settings = GPUSettings.for_run(quick=ctx.quick, dry_run=dry_run)
    gpu_build = torch.version.cuda is not None or getattr(torch.version, "hip", None)
    backend = Backend.CUDA if torch.version.cuda is not None else Backend.CPU
    if getattr(torch.version, "hip", None):
        backend = Backend.ROCM
    ctx.progress(f"exchange-cuda: building our {backend.value} library and the portable table")
    libraries = build_libraries(ctx.work_dir / "libs", backend=backend)
    harness_path = build_harness(Path(sys.executable), ctx.work_dir / "harness")
    harness = _Harness(harness_path, device_type, index)
    keep: list[Any] = []
    apis: dict[str, int] = {}
    errors = dict(libraries.errors)
    paths = {TORCH_OWN: None, NATIVE: libraries.native, PORTABLE: libraries.portable}
    for name in TABLES:
        address = _table_address(torch, name, paths[name], keep)
        if isinstance(address, str):
            errors.setdefault(name, address)
        else:
            apis[name] = address
    tensors = [
        torch.zeros(1024, dtype=torch.float32, device=device),
        torch.zeros(32, 32, dtype=torch.float32, device=device).t(),
        torch.zeros(2, 3, 4, dtype=torch.int64, device=device),
        torch.zeros((), dtype=torch.float16, device=device),
    ]
    ctx.progress(
        f"exchange-cuda: timing {', '.join(apis)} on {device} ({settings.rounds} interleaved "
        f"rounds x {settings.calls:,} calls per member)"
    )
    samples, python, unsupported = measure(
        torch, harness, apis, tensors=tensors, settings=settings, progress=ctx.progress
    )
    data: dict[str, Any] = {
        "dry_run": dry_run,
        "device": describe_device(torch, device),
        "gpu_build": bool(gpu_build),
        "torch": str(torch.__version__),
        "torch_versions": [str(torch.__version__)],
        "python": sys.version.split()[0],
        "settings": dataclasses.asdict(settings),
        "native_backend": libraries.backend.value,
        "libraries": libraries.built,
        "tensors": [f"{tuple(t.shape)} {t.dtype} {t.device}" for t in tensors],
        "providers": {
            name: {member: summarize(values).to_json() for member, values in members.items()}
            for name, members in samples.items()
        },
        "python_path": {name: summarize(values).to_json() for name, values in python.items()},
        "unsupported": unsupported,
        "errors": errors,
    }
    return data
