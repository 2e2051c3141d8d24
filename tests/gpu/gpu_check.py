"""The CUDA conformance check: our library against torch's own exchange table, on real GPUs.

One command, run from the checkout with the machine's own Python (see docs/gpu-check.md)::

    python tests/gpu/gpu_check.py --require-gpu

It needs only torch (>= 2.10, which has its own ``__dlpack_c_exchange_api__`` to compare
with), a C++ compiler, the Python headers, apache-tvm-ffi (its DLPack >= 1.2 header and
``tvm_ffi.testing.echo``) and filelock (torch depends on it); CUDA headers for the CUDA
library come from ``$CUDA_HOME``, ``nvcc`` on PATH or ``/usr/local/cuda``. No network.

What it does, in one process:

1. builds our CPU library, where torch has CUDA our CUDA library, and the portable table
   for the running torch through the one driver (``_torch_c_dlpack_ext_core.driver``, as
   :mod:`benchmarks.gpu` builds them) into ``<cache>/{cpu,cuda,portable}`` (a temporary
   folder; ``--cache-dir`` keeps it), each audited;
2. forces ours (``TORCH_C_DLPACK_EXT_FORCE=1``, ``TORCH_C_DLPACK_EXT_LIBRARY``) after
   keeping torch's own capsule, and checks ``torch.Tensor.__dlpack_c_exchange_api__`` is
   then our table: the CUDA library where a GPU runs it, else the CPU library, which a GPU
   torch publishes only when ``TORCH_C_DLPACK_EXT_BACKEND=cpu`` asks for it;
3. compares ours with torch's table field by field: export (owning and non-owning) and
   import round trips for every dtype torch supports on the device, the allocator
   (memory torch kernels then use; a bad request fails cleanly), ``current_work_stream``
   (default stream, inside ``torch.cuda.stream(s)``, per device), device type and id of
   every visible GPU, and the CPU library refusing CUDA tensors;
4. runs the seed's "GPU tensor metadata through DLPack" test through real tvm-ffi
   (float16 (512,), (512, 512), (2, 3, 4) round-tripped by ``tvm_ffi.testing.echo``);
5. compares the portable table with torch's the same way (``portable ...`` cases);
6. prints one table (case, ours, torch, verdict) and exits 1 on any mismatch.

What each table costs per call is the benchmark's job (``python -m benchmarks --device
cuda``); ``tests/gpu/gpu_run.py`` runs both, and apache-tvm-ffi's own GPU tests, in one
command.

Without a GPU (CI) the CPU cases run and every GPU case is reported "not run", never
passed; ``--require-gpu`` then exits 2, so a GPU run that silently found no GPU fails.
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import gc
import json
import os
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
for _path in (ROOT / "python", ROOT):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import torch  # noqa: E402
from benchmarks.gpu import build_native, build_portable  # noqa: E402
from tests.exchange_suite.dlpack_ctypes import (  # noqa: E402
    DLDeviceType,
    DLManagedTensorVersioned,
    DLPackExchangeAPI,
    DLTensor,
    ErrorSink,
    ExchangeLibrary,
    TensorFields,
    api_from_capsule,
    export_dltensor,
    export_managed,
    fields_of,
    import_managed,
    managed_fields,
)

from _torch_c_dlpack_ext_core.errors import TorchCDLPackExtError  # noqa: E402
from _torch_c_dlpack_ext_core.naming import Backend  # noqa: E402

OK = "ok"
MISMATCH = "MISMATCH"
NOT_RUN = "not run"
#: Exit codes: 1 a mismatch (or a case that crashed), 2 GPU cases not run under --require-gpu.
EXIT_MISMATCH = 1
EXIT_NO_GPU = 2
#: The seed's GPU test (tests/exchange_suite/test_gpu.py, "GPU tensor metadata through DLPack").
SEED_SHAPES = ((512,), (512, 512), (2, 3, 4))


@dataclasses.dataclass
class Row:
    case: str
    ours: str
    torch: str
    verdict: str
    detail: str = ""


@dataclasses.dataclass
class Report:
    rows: list[Row] = dataclasses.field(default_factory=list)
    gpu_cases: set[str] = dataclasses.field(default_factory=set)

    def add(
        self, case: str, ours: str, theirs: str, verdict: str, detail: str = "", *, gpu: bool
    ) -> None:
        self.rows.append(Row(case, ours, theirs, verdict, detail))
        if gpu:
            self.gpu_cases.add(case)

    def not_run(self, cases: list[str], why: str) -> None:
        for case in cases:
            self.add(case, "-", "-", NOT_RUN, why, gpu=True)

    def print(self) -> None:
        headers = ("case", "ours", "torch", "verdict")
        cells = [(r.case, r.ours, r.torch, r.verdict) for r in self.rows]
        widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]
        line = "  ".join(h.ljust(w) for h, w in zip(headers, widths))
        print("\n" + line)
        print("  ".join("-" * w for w in widths))
        for cell in cells:
            print("  ".join(c.ljust(w) for c, w in zip(cell, widths)))
        notes = [r for r in self.rows if r.detail]
        if notes:
            print("\nnotes:")
            for r in notes:
                print(f"  {r.case} [{r.verdict}]: {r.detail}")
        counts = {v: sum(r.verdict == v for r in self.rows) for v in (OK, MISMATCH, NOT_RUN)}
        print(f"\n{counts[OK]} ok, {counts[MISMATCH]} mismatch, {counts[NOT_RUN]} not run")


# --- the two tables ---------------------------------------------------------------------


@dataclasses.dataclass
class Tables:
    ours: DLPackExchangeAPI
    torch: DLPackExchangeAPI
    #: Our CPU library (for the refusal cases); the same as ``ours`` on a CPU-only run.
    cpu: DLPackExchangeAPI


def outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    """``("ok", value)`` or ``("error", "<ExceptionType>")``."""
    try:
        return "ok", call()
    except Exception as exc:  # the outcome IS the result being compared
        return "error", type(exc).__name__


def same_outcome(ours: tuple[str, Any], theirs: tuple[str, Any]) -> bool:
    """Equal results, or both refused: the error type may differ, as documented in
    CONTRIBUTING.md (ours raises BufferError where torch raises RuntimeError)."""
    if ours[0] == theirs[0] == "error":
        return True
    return ours == theirs


def export_fields(api: DLPackExchangeAPI, tensor: Any) -> tuple[TensorFields, TensorFields]:
    """(owning export's fields, non-owning export's fields); the owning one is released."""
    managed = export_managed(api, tensor)
    owned = managed_fields(managed)
    managed.contents.deleter(managed)
    return owned, fields_of(export_dltensor(api, tensor))


def round_trip(api: DLPackExchangeAPI, tensor: Any) -> tuple[int, tuple[int, ...], Any, Any]:
    """Export and import with ``api``: the result's (data_ptr, strides, dtype, device)."""
    back = import_managed(api, export_managed(api, tensor))
    return back.data_ptr(), tuple(back.stride()), back.dtype, back.device


def supported_dtypes(device: str) -> list[Any]:
    """Every dtype of this torch that can make a strided tensor on ``device``."""
    found = []
    for name in sorted(dir(torch)):
        dtype = getattr(torch, name)
        if not isinstance(dtype, torch.dtype) or dtype in found:
            continue
        try:
            torch.zeros((2, 3), dtype=dtype, device=device)
        except Exception:  # not creatable there: not a dtype torch supports on it
            continue
        found.append(dtype)
    return found


def sample(dtype: Any, device: str) -> list[Any]:
    """Views of one dtype: contiguous, transposed, sliced with an offset, 0-d, empty."""
    base = torch.zeros((4, 6), dtype=dtype, device=device)
    return [base, base.t(), base[1:, 2:], base[0, 0], base[:0]]


def compare_exports(tables: Tables, device: str) -> tuple[int, int, list[str]]:
    """Field-by-field export and round-trip comparison over every dtype on ``device``.

    Returns (dtypes, views compared, mismatches described).
    """
    mismatches: list[str] = []
    dtypes = supported_dtypes(device)
    views = 0
    for dtype in dtypes:
        for index, tensor in enumerate(sample(dtype, device)):
            views += 1
            ours = outcome(lambda t=tensor: export_fields(tables.ours, t))
            theirs = outcome(lambda t=tensor: export_fields(tables.torch, t))
            if not same_outcome(ours, theirs):
                mismatches.append(f"{dtype} view {index}: export ours {ours} torch {theirs}")
                continue
            if ours[0] != "ok":
                continue
            # The memory and its layout come back unchanged; the dtype as torch's own
            # round trip gives it (sub-byte ints travel as 8-bit ints in both).
            memory = (tensor.data_ptr(), tuple(tensor.stride()) if tensor.numel() else None)
            ours_back = outcome(lambda t=tensor: round_trip(tables.ours, t))
            torch_back = outcome(lambda t=tensor: round_trip(tables.torch, t))
            if not same_outcome(ours_back, torch_back):
                mismatches.append(
                    f"{dtype} view {index}: to_py ours {ours_back} torch {torch_back}"
                )
                continue
            if ours_back[0] != "ok":
                continue
            ptr, strides, back_dtype, back_device = ours_back[1]
            have = (ptr, strides if tensor.numel() else None)
            if have != memory or (back_dtype, back_device) != torch_back[1][2:]:
                mismatches.append(
                    f"{dtype} view {index}: round trip ours {ours_back[1]} torch "
                    f"{torch_back[1]} (tensor: {memory})"
                )
    return len(dtypes), views, mismatches


def allocate(
    api: DLPackExchangeAPI, shape: tuple[int, ...], device_type: int, device_id: int, code: int
) -> tuple[int, Any, ErrorSink]:
    dims = (ctypes.c_int64 * max(len(shape), 1))(*shape)
    prototype = DLTensor()
    prototype.ndim = len(shape)
    prototype.shape = dims
    prototype.dtype.code, prototype.dtype.bits, prototype.dtype.lanes = code, 32, 1
    prototype.device.device_type, prototype.device.device_id = device_type, device_id
    sink = ErrorSink()
    out = ctypes.POINTER(DLManagedTensorVersioned)()
    status = api.managed_tensor_allocator(
        ctypes.byref(prototype), ctypes.byref(out), None, sink.callback
    )
    return status, out, sink


def allocator_case(api: DLPackExchangeAPI, device_type: int, device_id: int) -> str:
    """Allocate float32[64, 64], import it, run torch kernels on it; describe the result."""
    status, out, sink = allocate(api, (64, 64), device_type, device_id, 2)
    if status != 0:
        return f"failed {sink.errors}"
    fields = managed_fields(out)
    tensor = import_managed(api, out)
    tensor.fill_(1.5)
    total = float((tensor * 2).sum().item())
    return (
        f"dev ({fields.device_type},{fields.device_id}) {tensor.device} "
        f"sum {total:g} strides {fields.strides}"
    )


def bad_allocation(api: DLPackExchangeAPI, device_type: int, device_id: int) -> str:
    """A dtype code no DLPack defines: must fail (-1) through SetError, nothing allocated."""
    status, out, sink = allocate(api, (4,), device_type, device_id, 200)
    if status == 0:
        managed_fields(out)
        out.contents.deleter(out)
        return "accepted"
    kinds = sorted({kind for kind, _ in sink.errors})
    return f"refused {'/'.join(kinds) or 'without SetError'}"


def stream_of(api: DLPackExchangeAPI, device_type: int, device_id: int) -> tuple[str, Any]:
    stream = ctypes.c_void_p()
    return outcome(
        lambda: (
            (api.current_work_stream(device_type, device_id, ctypes.byref(stream)), stream.value)[1]
            or 0
        )
    )


# --- forcing -------------------------------------------------------------------------


def gpu_torch() -> bool:
    """A CUDA or ROCm build of torch (a device need not be present)."""
    return torch.version.cuda is not None or getattr(torch.version, "hip", None) is not None


def force(library: Path) -> tuple[bool, str]:
    """Import the package forced onto ``library``; (our table is published, what it says).

    The CPU library on a GPU torch (no GPU to run the CUDA one) is asked for with
    ``BACKEND=cpu``: without it the selector rightly refuses a library of another backend
    than torch's build."""
    os.environ["TORCH_C_DLPACK_EXT_FORCE"] = "1"
    os.environ["TORCH_C_DLPACK_EXT_LIBRARY"] = str(library)
    if ExchangeLibrary(library).build_info["backend"] == "cpu" and gpu_torch():
        os.environ["TORCH_C_DLPACK_EXT_BACKEND"] = "cpu"
    import torch_c_dlpack_ext
    from torch_c_dlpack_ext import _library

    status = torch_c_dlpack_ext.status()
    published = api_from_capsule(torch.Tensor.__dlpack_c_exchange_api__)
    # The package loads its own (verified, private) copy of the file: the published table
    # must be that copy's, whose build info says the same as the file's.
    loaded = _library.loaded_library(library)
    same = (
        loaded is not None
        and ctypes.addressof(published) == loaded.pointer
        and json.loads(loaded.build_info() or "{}") == ExchangeLibrary(library).build_info
    )
    decision = getattr(status, "decision", None)
    kind = getattr(getattr(decision, "kind", None), "value", "?")
    return same, f"decision {kind}, {library.name}"


# --- the check -----------------------------------------------------------------------------


def gpu_device_type() -> int:
    return DLDeviceType.kDLROCM if getattr(torch.version, "hip", None) else DLDeviceType.kDLCUDA


def run_case(
    report: Report, case: str, gpu: bool, body: Callable[[], tuple[str, str, bool]]
) -> None:
    """Run one case; a crash of the case itself is a mismatch with its traceback."""
    try:
        ours, theirs, same = body()
    except Exception as exc:
        report.add(case, "crashed", "-", MISMATCH, f"{type(exc).__name__}: {exc}", gpu=gpu)
        traceback.print_exc()
        return
    report.add(case, ours, theirs, OK if same else MISMATCH, gpu=gpu)


def check_device(report: Report, tables: Tables, device: str, gpu: bool, label: str) -> None:
    def exports() -> tuple[str, str, bool]:
        dtypes, views, mismatches = compare_exports(tables, device)
        text = f"{dtypes} dtypes x 5 views"
        if mismatches:
            print("\n".join(mismatches[:20]), file=sys.stderr)
        return (
            f"{text}: {views - len(mismatches)}/{views} equal",
            text,
            not mismatches,
        )

    run_case(report, f"{label}: from_py/non-owning/to_py", gpu, exports)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--require-gpu", action="store_true", help="exit 2 if no GPU case ran")
    parser.add_argument("--cache-dir", type=Path, default=None, help="keep the builds here")
    parser.add_argument("--json", type=Path, default=None, help="also write the table as JSON")
    args = parser.parse_args(argv)

    report = Report()
    print(
        f"torch {torch.__version__} (CUDA {torch.version.cuda}), Python {sys.version.split()[0]}, "
        f"cuda available: {torch.cuda.is_available()}, devices: {torch.cuda.device_count()}",
        flush=True,
    )
    own_capsule = getattr(torch.Tensor, "__dlpack_c_exchange_api__", None)
    if own_capsule is None:
        print(f"torch {torch.__version__} has no exchange API of its own to compare with")
        return EXIT_MISMATCH
    torch_api = api_from_capsule(own_capsule)
    temporary = None
    if args.cache_dir is None:
        temporary = tempfile.TemporaryDirectory(prefix="tcde-gpu-check-")
        cache = Path(temporary.name)
    else:
        cache = args.cache_dir.resolve()
    try:
        code = _check(report, torch_api, cache, own_capsule)
    finally:
        if temporary is not None:
            gc.collect()
            temporary.cleanup()
    report.print()
    if args.json is not None:
        args.json.write_text(
            json.dumps([dataclasses.asdict(r) for r in report.rows], indent=2) + "\n"
        )
    return code or exit_code(report, require_gpu=args.require_gpu)


def exit_code(report: Report, *, require_gpu: bool) -> int:
    """1 on any mismatch; else 2 if ``require_gpu`` and a GPU case did not run; else 0."""
    if any(r.verdict == MISMATCH for r in report.rows):
        return EXIT_MISMATCH
    if require_gpu and any(r.verdict == NOT_RUN for r in report.rows if r.case in report.gpu_cases):
        print("--require-gpu: GPU cases were not run", file=sys.stderr)
        return EXIT_NO_GPU
    return 0


GPU_CASES = [
    "build: cuda library",
    "force: published table is ours (cuda)",
    "cuda: device type and id, every GPU",
    "cuda: from_py/non-owning/to_py",
    "cuda: allocator -> torch kernels",
    "cuda: allocator, bad request",
    "cuda: current_work_stream, default stream",
    "cuda: current_work_stream, torch.cuda.stream(s)",
    "cuda: current_work_stream, per device",
    "cuda: cpu library refuses CUDA tensors",
    "cuda: tvm-ffi echo float16 (seed test)",
    "cuda: import leaves CUDA uninitialised",
    "cuda: a forked child uses CUDA after the import",
]


def _check(report: Report, torch_api: DLPackExchangeAPI, cache: Path, own_capsule: Any) -> int:
    # Builds first: the CPU library always, the CUDA one where this torch has CUDA.
    try:
        cpu_path, text = build_native(cache, Backend.CPU)
        report.add("build: cpu library", text, "-", OK, gpu=False)
    except (TorchCDLPackExtError, OSError) as exc:
        report.add("build: cpu library", "failed", "-", MISMATCH, f"{exc}", gpu=False)
        report.not_run(GPU_CASES, "no CPU library")
        return 0
    cpu_lib = ExchangeLibrary(cpu_path)
    cuda_lib = None
    gpu_reason = ""
    torch_lib = Path(torch.__file__).parent / "lib"
    if torch.version.cuda is None or not any(torch_lib.glob("*c10_cuda*")):
        gpu_reason = f"torch {torch.__version__} has no CUDA libraries"
    else:
        try:
            cuda_path, text = build_native(cache, Backend.CUDA)
            report.add("build: cuda library", text, "-", OK, gpu=True)
            cuda_lib = ExchangeLibrary(cuda_path)
        except (TorchCDLPackExtError, OSError) as exc:
            report.add("build: cuda library", "failed", "-", MISMATCH, f"{exc}"[-400:], gpu=True)
            gpu_reason = "the CUDA library did not build"
    if cuda_lib is not None and not torch.cuda.is_available():
        gpu_reason = "torch.cuda.is_available() is False (no GPU on this machine)"

    ours_lib = cuda_lib if (cuda_lib is not None and not gpu_reason) else cpu_lib
    case = f"force: published table is ours ({ours_lib.build_info['backend']})"
    run_case(report, case, ours_lib is cuda_lib, lambda: _force_row(ours_lib.path))
    tables = Tables(ours=_as_published(ours_lib), torch=torch_api, cpu=cpu_lib.api)

    # The CPU half: runs everywhere (CI), and is the round trip on the running torch.
    check_device(report, tables, "cpu", False, "cpu")
    cpu = DLDeviceType.kDLCPU

    def cpu_allocator() -> tuple[str, str, bool]:
        ours, theirs = allocator_case(tables.ours, cpu, 0), allocator_case(tables.torch, cpu, 0)
        return ours, theirs, ours == theirs

    run_case(report, "cpu: allocator -> torch kernels", False, cpu_allocator)
    run_case(
        report,
        "cpu: allocator, bad request",
        False,
        lambda: _both_refuse(
            bad_allocation(tables.ours, cpu, 0), bad_allocation(tables.torch, cpu, 0)
        ),
    )
    run_case(
        report,
        "cpu: current_work_stream",
        False,
        lambda: _same(str(stream_of(tables.ours, cpu, 0)), str(stream_of(tables.torch, cpu, 0))),
    )
    run_case(report, "cpu: tvm-ffi echo float16", False, lambda: _seed(tables, "cpu"))
    _portable_half(report, torch_api, cache, gpu_reason)

    if gpu_reason:
        done = {r.case for r in report.rows}
        report.not_run(
            [c for c in GPU_CASES if c not in done and not c.startswith("force")], gpu_reason
        )
        if not any(r.case.startswith("force") and "cuda" in r.case for r in report.rows):
            report.not_run(["force: published table is ours (cuda)"], gpu_reason)
        return 0
    _gpu_half(report, tables)
    assert cuda_lib is not None  # no gpu_reason: it was built
    _import_checks(report, cuda_lib.path)
    return 0


#: Imports torch_c_dlpack_ext in a fresh process with our CUDA library forced (issue 18);
#: prints whether CUDA was initialised, then forks: the child must be able to use CUDA,
#: which it cannot once the parent initialised it ("Cannot re-initialize CUDA in forked
#: subprocess").
IMPORT_PROBE = r"""
import json, os, sys
import torch
import torch_c_dlpack_ext
status = torch_c_dlpack_ext.status()
initialized = torch.cuda.is_initialized()
pid = os.fork()
if pid == 0:
    try:
        ok = float(torch.ones(4, device="cuda").sum().item()) == 4.0
    except BaseException as exc:
        print(f"child: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        ok = False
    os._exit(0 if ok else 3)
_, code = os.waitpid(pid, 0)
print(json.dumps({"kind": status.kind.value, "initialized": initialized,
                  "child": os.waitstatus_to_exitcode(code)}))
"""


def _import_checks(report: Report, library: Path) -> None:
    """After ``import torch_c_dlpack_ext`` (our CUDA library forced and published),
    ``torch.cuda.is_initialized()`` is False and a forked child can use CUDA."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_C_DLPACK_EXT_")}
    env.update(TORCH_C_DLPACK_EXT_FORCE="1", TORCH_C_DLPACK_EXT_LIBRARY=str(library))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python"), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-c", IMPORT_PROBE],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        detail = proc.stderr[-400:]
        for case in GPU_CASES[-2:]:
            report.add(case, "crashed", "-", MISMATCH, detail, gpu=True)
        return
    result = json.loads(lines[-1])
    published = result["kind"] == "load"
    report.add(
        "cuda: import leaves CUDA uninitialised",
        f"{result['kind']}, is_initialized() {result['initialized']}",
        "load, is_initialized() False",
        OK if published and result["initialized"] is False else MISMATCH,
        gpu=True,
    )
    report.add(
        "cuda: a forked child uses CUDA after the import",
        f"child exit {result['child']}",
        "child exit 0",
        OK if result["child"] == 0 else MISMATCH,
        proc.stderr[-400:] if result["child"] else "",
        gpu=True,
    )


def _same(ours: str, theirs: str) -> tuple[str, str, bool]:
    return ours, theirs, ours == theirs


def _both_refuse(ours: str, theirs: str) -> tuple[str, str, bool]:
    """Both refuse; the SetError kind may differ (ours: ValueError for a bad prototype,
    CONTRIBUTING.md; torch 2.13 reports an unknown dtype code as MemoryError)."""
    return ours, theirs, ours.startswith("refused") and theirs.startswith("refused")


def _as_published(library: ExchangeLibrary) -> DLPackExchangeAPI:
    """The table the package published for ``library`` (its own private copy of the
    file: what consumers call), or the file's own table if the force did not load it."""
    from torch_c_dlpack_ext import _library

    loaded = _library.loaded_library(library.path)
    return DLPackExchangeAPI.from_address(loaded.pointer) if loaded else library.api


def _force_row(library: Path) -> tuple[str, str, bool]:
    same, said = force(library)
    return ("ours" if same else "NOT ours") + f" ({said})", "replaced", same


def _seed(tables: Tables, device: str) -> tuple[str, str, bool]:
    """The seed test through tvm-ffi: shape, dtype and device kept, same memory."""
    import tvm_ffi.testing

    published = ctypes.addressof(api_from_capsule(torch.Tensor.__dlpack_c_exchange_api__))
    if published != ctypes.addressof(tables.ours):
        return "our table is not published", "-", False
    kept = 0
    for shape in SEED_SHAPES:
        x = torch.randn(shape, dtype=torch.float16, device=device)
        y = tvm_ffi.testing.echo(x)
        if (
            tuple(y.shape) == shape
            and y.dtype == torch.float16
            and y.device == x.device
            and y.data_ptr() == x.data_ptr()
        ):
            kept += 1
    return f"{kept}/{len(SEED_SHAPES)} kept", "-", kept == len(SEED_SHAPES)


def _gpu_half(report: Report, tables: Tables) -> None:
    kind = gpu_device_type()
    count = torch.cuda.device_count()

    def devices() -> tuple[str, str, bool]:
        seen: list[list[tuple[int, int]]] = [[], []]
        for index in range(count):
            tensor = torch.arange(12.0, device=f"cuda:{index}").reshape(3, 4)[1:]
            for slot, api in enumerate((tables.ours, tables.torch)):
                owned, view = export_fields(api, tensor)
                seen[slot].append((owned.device_type, owned.device_id))
                seen[slot].append((view.device_type, view.device_id))
        expected = [(kind, i) for i in range(count) for _ in range(2)]
        return str(sorted(set(seen[0]))), str(sorted(set(seen[1]))), seen[0] == seen[1] == expected

    run_case(report, "cuda: device type and id, every GPU", True, devices)
    check_device(report, tables, "cuda", True, "cuda")

    def allocator() -> tuple[str, str, bool]:
        ours = [allocator_case(tables.ours, kind, i) for i in range(count)]
        theirs = [allocator_case(tables.torch, kind, i) for i in range(count)]
        return "; ".join(ours), "; ".join(theirs), ours == theirs

    run_case(report, "cuda: allocator -> torch kernels", True, allocator)

    def bad() -> tuple[str, str, bool]:
        ours = bad_allocation(tables.ours, kind, 0)
        theirs = bad_allocation(tables.torch, kind, 0)
        # A device that does not exist is refused too (ours only: torch may abort).
        beyond = bad_allocation_device(tables.ours, kind, count)
        refused = _both_refuse(ours, theirs)[2] and beyond != "accepted"
        return f"{ours}; device {count}: {beyond}", theirs, refused

    run_case(report, "cuda: allocator, bad request", True, bad)

    def default_stream() -> tuple[str, str, bool]:
        ours, theirs = stream_of(tables.ours, kind, 0), stream_of(tables.torch, kind, 0)
        want = ("ok", torch.cuda.current_stream(0).cuda_stream)
        return str(ours), str(theirs), ours == theirs == want

    run_case(report, "cuda: current_work_stream, default stream", True, default_stream)

    def side_stream() -> tuple[str, str, bool]:
        side = torch.cuda.Stream(device=0)
        with torch.cuda.stream(side):
            ours, theirs = stream_of(tables.ours, kind, 0), stream_of(tables.torch, kind, 0)
        want = ("ok", side.cuda_stream)
        return str(ours), str(theirs), ours == theirs == want and side.cuda_stream != 0

    run_case(report, "cuda: current_work_stream, torch.cuda.stream(s)", True, side_stream)

    def per_device() -> tuple[str, str, bool]:
        ours, theirs, want = [], [], []
        sides = [torch.cuda.Stream(device=i) for i in range(count)]
        for index, side in enumerate(sides):
            # Each device's current stream, asked from device 0: default, then a side stream.
            ours.append(stream_of(tables.ours, kind, index))
            theirs.append(stream_of(tables.torch, kind, index))
            want.append(("ok", torch.cuda.current_stream(index).cuda_stream))
            with torch.cuda.device(index), torch.cuda.stream(side), torch.cuda.device(0):
                ours.append(stream_of(tables.ours, kind, index))
                theirs.append(stream_of(tables.torch, kind, index))
                want.append(("ok", side.cuda_stream))
        same = ours == theirs == want
        return f"{count} devices x 2 streams", f"{count} devices x 2 streams", same

    run_case(report, "cuda: current_work_stream, per device", True, per_device)

    def cpu_refuses() -> tuple[str, str, bool]:
        tensor = torch.ones(4, device="cuda")
        owned = outcome(lambda: export_fields(tables.cpu, tensor))
        theirs = outcome(lambda: export_fields(tables.torch, tensor))
        refused = owned[0] == "error"
        return (
            f"cpu library: {owned[1] if refused else 'accepted'}",
            f"torch: {'accepted' if theirs[0] == 'ok' else theirs[1]}",
            refused and theirs[0] == "ok",
        )

    run_case(report, "cuda: cpu library refuses CUDA tensors", True, cpu_refuses)
    run_case(report, "cuda: tvm-ffi echo float16 (seed test)", True, lambda: _seed(tables, "cuda"))


#: The portable table's GPU cases (csrc/portable, torch-agnostic; compared with torch's table).
PORTABLE_GPU_CASES = [
    "portable cuda: from_py/non-owning/to_py",
    "portable cuda: allocator -> torch kernels",
    "portable cuda: allocator, bad request",
    "portable cuda: current_work_stream, default stream",
    "portable cuda: current_work_stream, torch.cuda.stream(s)",
    "portable cuda: current_work_stream, device -1 is the current device",
    "portable cuda: current_work_stream, per device",
]


def _portable_half(
    report: Report, torch_api: DLPackExchangeAPI, cache: Path, gpu_reason: str
) -> None:
    """The portable table (csrc/portable, built as shipped: abi3) beside torch's own table:
    the CPU cases everywhere, the CUDA ones where a GPU runs them."""
    try:
        path, text = build_portable(cache)
        library = ExchangeLibrary(path)
        report.add("build: portable library", text, "-", OK, gpu=False)
    except (TorchCDLPackExtError, OSError) as exc:
        report.add("build: portable library", "failed", "-", MISMATCH, f"{exc}"[-400:], gpu=False)
        report.not_run(PORTABLE_GPU_CASES, "no portable library")
        return
    tables = Tables(ours=library.api, torch=torch_api, cpu=library.api)
    cpu = DLDeviceType.kDLCPU
    check_device(report, tables, "cpu", False, "portable cpu")

    def cpu_allocator() -> tuple[str, str, bool]:
        ours, theirs = allocator_case(tables.ours, cpu, 0), allocator_case(tables.torch, cpu, 0)
        return ours, theirs, ours == theirs

    run_case(report, "portable cpu: allocator -> torch kernels", False, cpu_allocator)
    run_case(
        report,
        "portable cpu: current_work_stream",
        False,
        lambda: _same(str(stream_of(tables.ours, cpu, 0)), str(stream_of(tables.torch, cpu, 0))),
    )
    if gpu_reason:
        report.not_run(PORTABLE_GPU_CASES, gpu_reason)
        return
    kind = gpu_device_type()
    count = torch.cuda.device_count()
    check_device(report, tables, "cuda", True, "portable cuda")

    def allocator() -> tuple[str, str, bool]:
        ours = [allocator_case(tables.ours, kind, i) for i in range(count)]
        theirs = [allocator_case(tables.torch, kind, i) for i in range(count)]
        return "; ".join(ours), "; ".join(theirs), ours == theirs

    run_case(report, "portable cuda: allocator -> torch kernels", True, allocator)

    def bad() -> tuple[str, str, bool]:
        ours, theirs = bad_allocation(tables.ours, kind, 0), bad_allocation(tables.torch, kind, 0)
        beyond = bad_allocation_device(tables.ours, kind, count)
        return (
            f"{ours}; device {count}: {beyond}",
            theirs,
            _both_refuse(ours, theirs)[2] and (beyond != "accepted"),
        )

    run_case(report, "portable cuda: allocator, bad request", True, bad)

    def default_stream() -> tuple[str, str, bool]:
        ours, theirs = stream_of(tables.ours, kind, 0), stream_of(tables.torch, kind, 0)
        want = ("ok", torch.cuda.current_stream(0).cuda_stream)
        return str(ours), str(theirs), ours == theirs == want

    run_case(report, "portable cuda: current_work_stream, default stream", True, default_stream)

    def side_stream() -> tuple[str, str, bool]:
        side = torch.cuda.Stream(device=0)
        with torch.cuda.stream(side):
            ours, theirs = stream_of(tables.ours, kind, 0), stream_of(tables.torch, kind, 0)
        want = ("ok", side.cuda_stream)
        return str(ours), str(theirs), ours == theirs == want and side.cuda_stream != 0

    run_case(report, "portable cuda: current_work_stream, torch.cuda.stream(s)", True, side_stream)

    def current_device() -> tuple[str, str, bool]:
        # device_id -1: the current device's current stream (torch's convention).
        last = count - 1
        side = torch.cuda.Stream(device=last)
        with torch.cuda.device(last), torch.cuda.stream(side):
            ours = stream_of(tables.ours, kind, -1)
        return str(ours), str(("ok", side.cuda_stream)), ours == ("ok", side.cuda_stream)

    run_case(
        report,
        "portable cuda: current_work_stream, device -1 is the current device",
        True,
        current_device,
    )

    def per_device() -> tuple[str, str, bool]:
        ours, want = [], []
        for index in range(count):
            ours.append(stream_of(tables.ours, kind, index))
            want.append(("ok", torch.cuda.current_stream(index).cuda_stream))
        return str(ours), str(want), ours == want

    run_case(report, "portable cuda: current_work_stream, per device", True, per_device)


def bad_allocation_device(api: DLPackExchangeAPI, device_type: int, device_id: int) -> str:
    status, out, sink = allocate(api, (4,), device_type, device_id, 2)
    if status == 0:
        out.contents.deleter(out)
        return "accepted"
    return f"refused {'/'.join(sorted({k for k, _ in sink.errors})) or 'without SetError'}"


if __name__ == "__main__":
    sys.exit(main())
