"""AddressSanitizer + UBSan builds of both tables under the exchange and conformance suites.

- the driver's sanitizer setting (``sanitizers=``) builds the portable table (abi3) and
  the native library for the running torch (2.13 CPU, the test venv) with ASan and UBSan;
  both run tests/exchange_suite and the differential conformance suite
  (tests/conformance/test_diff_*.py) with the runtimes preloaded (Python and torch are not
  instrumented: ``LD_PRELOAD``, :func:`preload_libraries`), and any finding aborts the run;
- the dispatch zoo (tests/exchange_suite/test_zoo*.py, test_dispatch_findings.py: issue
  42) runs on its own too, so that its count is checked: every byte an export describes
  is read before it is judged, and a read past the storage is AddressSanitizer's report;
- the harness is checked with it: a heap overflow and a signed overflow in a fixture library
  built with the same flags stop a process run with the same environment;
- the ABI audits accept the sanitizer runtimes' symbols (``__asan_*``, ``__ubsan_*``) for
  a sanitizer build, each sanitizer's only, and nothing else there; a release build
  importing them is refused, naming the cause.

One torch only (the running one), to keep CI's time: ``nox -s sanitizers`` runs this file
alone. Linux with GCC and its sanitizer runtimes (Debian: libasan8, libubsan1).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
from tests.helpers import ROOT, clean_env, run_python
from tests.integration.test_conformance_suite import (
    MIN_CASES_213,
    MIN_DIFFERENTIAL_CASES,
    SUITE_ENV,
)
from tests.integration.test_conformance_suite import SUITE as CONFORMANCE_SUITE
from tests.integration.test_dispatch_zoo_native import MIN_ZOO_PASSED, ZOO

from _torch_c_dlpack_ext_core.buildrequest import (
    BuildPolicy,
    BuildRequest,
    PortableRequest,
    Sanitizer,
)
from _torch_c_dlpack_ext_core.driver import compile_library, compile_portable_library
from _torch_c_dlpack_ext_core.errors import ABIAuditError
from _torch_c_dlpack_ext_core.toolchains import AuditOutcome, toolchain_for
from _torch_c_dlpack_ext_core.toolchains.elf import audit_torch_free_library, needed_libraries
from _torch_c_dlpack_ext_core.toolchains.sanitizers import compile_flags, preload_libraries
from _torch_c_dlpack_ext_core.torchinstall import TorchInstall

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the gnu toolchain's builds"),
]

SANITIZERS = (Sanitizer.ADDRESS, Sanitizer.UNDEFINED)
FAULTS = Path(__file__).resolve().parent / "fixtures" / "sanitizer_faults.c"
#: Exchange-suite tests that must pass under the sanitizers (the leak loops skip there):
#: far fewer means most of the suite skipped.
MIN_SUITE_PASSED = 300
GNU = toolchain_for("linux")


def _compiler() -> tuple[str, ...]:
    """The C compiler the driver builds the portable table with (its runtimes are the
    native build's too: one GCC)."""
    return GNU.find_c_compiler(None, os.environ).command


def sanitizer_environment(log_dir: Path | None = None) -> dict[str, str]:
    """What a process needs to load a sanitizer build: the runtimes preloaded (ASan's
    first) and every finding fatal.

    ``detect_leaks=0``: CPython and torch keep memory until exit by design, which
    LeakSanitizer would report (the heap and RSS loops of test_leaks.py check leaks);
    ``allocator_may_return_null=1``: the suites ask for impossible sizes on purpose and
    expect a MemoryError, where ASan would abort. ``log_dir``: where ASan writes its
    reports and warnings (``asan.<pid>``) instead of stderr; GCC 12's UBSan ignores
    ``log_path`` beside ASan and writes to stderr."""
    preload = preload_libraries(_compiler(), SANITIZERS)
    asan = "detect_leaks=0:allocator_may_return_null=1:halt_on_error=1"
    if log_dir is not None:
        asan += f":log_path={log_dir / 'asan'}"
    return {
        "LD_PRELOAD": ":".join(str(path) for path in preload),
        "ASAN_OPTIONS": asan,
        "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
    }


def _findings(log_dir: Path, stderr: str) -> str:
    """The sanitizer reports of a run: ASan's log files (not its allocation-failure
    warnings) and stderr when it holds a UBSan report."""
    reports = [
        text
        for path in sorted(log_dir.glob("asan.*"))
        if "ERROR: AddressSanitizer" in (text := path.read_text(errors="replace"))
    ]
    if "runtime error:" in stderr or "Sanitizer" in stderr:
        reports.append(stderr)
    return "\n".join(reports)


def run_sanitized_suite(
    files: Sequence[str], library: Path, log_dir: Path, *, options: Sequence[str] = ()
) -> str:
    """Run pytest on ``files`` (one suite under tests/) in a fresh interpreter against the
    sanitizer build ``library``, the runtimes preloaded; return its stdout, once it is
    checked that the run passed and no sanitizer reported anything.

    ``--capture=sys``: a sanitizer ends the process at once (``_exit``), so a report
    written to a file descriptor pytest captured for a test would be lost; this way only
    Python's own streams are captured, UBSan's reports reach stderr and ASan's
    ``log_dir``. The summary is read from stdout alone."""
    log_dir.mkdir(parents=True, exist_ok=True)
    env = clean_env(**sanitizer_environment(log_dir), **{SUITE_ENV: str(library)})
    env.pop("PYTHONPATH", None)
    suite_dir = "/".join(files[0].split("/")[:2])  # tests/<suite>: its conftest, not ours
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", *files, "-q", "-p", "no:cacheprovider",
         "--capture=sys", "--confcutdir", suite_dir, *options],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=1800,
    )  # fmt: skip
    findings = _findings(log_dir, proc.stderr)
    assert not findings, f"a sanitizer reported, running {suite_dir}:\n{findings[-12000:]}"
    assert proc.returncode == 0, (
        f"{suite_dir} failed against {library.name}:\n{proc.stdout[-8000:]}\n{proc.stderr[-4000:]}"
    )
    summary = proc.stdout.strip().splitlines()[-1]
    assert "failed" not in summary, summary
    assert "error" not in summary, summary
    print(f"\nSANITIZED {library.name}, {suite_dir}: {summary}")
    return proc.stdout


@pytest.fixture(scope="module")
def portable_asan(build_cache: Path) -> Path:
    """The portable table, built by the driver with ASan and UBSan and audited."""
    output_dir = build_cache / "sanitizers"
    entry = compile_portable_library(
        PortableRequest(output_dir=output_dir, sanitizers=SANITIZERS),
        BuildPolicy(stable_abi_audit=True),
    )
    return output_dir / entry.file


@pytest.fixture(scope="module")
def native_asan(build_cache: Path) -> Path:
    """csrc/ against the running torch (CPU), built by the driver with ASan and UBSan."""
    torch = pytest.importorskip("torch")
    output_dir = build_cache / "sanitizers"
    entry = compile_library(
        BuildRequest(
            torch=Path(torch.__file__).parent,
            backend="cpu",
            output_dir=output_dir,
            sanitizers=SANITIZERS,
        ),
        BuildPolicy(stable_abi_audit=True),
    )
    return output_dir / entry.file


def _faults_library(tmp_path: Path, *defines: str) -> Path:
    """tests/integration/fixtures/sanitizer_faults.c built with the driver's sanitizer flags."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    out = tmp_path / "libfaults.so"
    subprocess.run(
        [*_compiler(), "-shared", "-fPIC", *compile_flags(SANITIZERS),
         *(f"-D{d}" for d in defines), "-o", str(out), str(FAULTS)],
        check=True, timeout=120,
    )  # fmt: skip
    return out


CALL = (
    "import ctypes, sys\n"
    "lib = ctypes.CDLL(sys.argv[1])\n"
    "print('result', getattr(lib, sys.argv[2])(int(sys.argv[3])), flush=True)\n"
)


@pytest.fixture(scope="module")
def faults(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _faults_library(tmp_path_factory.mktemp("faults"))


def test_torch_runs_beside_the_runtimes(faults: Path) -> None:
    env = clean_env(**sanitizer_environment())
    fine = run_python(f"import torch\n{CALL}", env=env, args=[str(faults), "tcde_fine", "1"])
    assert (fine.returncode, fine.stdout.strip()) == (0, "result 2"), fine.stderr[-3000:]


@pytest.mark.parametrize(
    ("function", "report"),
    [
        ("tcde_heap_overflow", "ERROR: AddressSanitizer: heap-buffer-overflow"),
        ("tcde_signed_overflow", "runtime error: signed integer overflow"),
    ],
)
def test_a_finding_stops_the_process(faults: Path, function: str, report: str) -> None:
    """The flags and the environment the suites run with make a sanitizer finding fatal:
    a run with one cannot pass, and the report names the source line."""
    faulty = run_python(
        CALL, env=clean_env(**sanitizer_environment()), args=[str(faults), function, "8"]
    )
    assert faulty.returncode != 0, faulty.stdout
    assert "result" not in faulty.stdout, "the process went on after the finding"
    assert report in faulty.stderr, faulty.stderr[-3000:]
    assert "sanitizer_faults.c" in faulty.stderr, "the report names no source line"


def test_the_portable_audit_accepts_each_sanitizers_runtime_only_there(
    portable_asan: Path,
) -> None:
    needed = needed_libraries(portable_asan)
    assert any(name.startswith("libasan.so") for name in needed), needed
    assert any(name.startswith("libubsan.so") for name in needed), needed
    audit_torch_free_library(portable_asan, cc=_compiler(), sanitizers=SANITIZERS)
    with pytest.raises(ABIAuditError, match=r"-fsanitize=address,undefined") as release:
        audit_torch_free_library(portable_asan, cc=_compiler())
    assert "__asan_init" in release.value.missing
    assert any(name.startswith("__ubsan_handle_") for name in release.value.missing)
    # Each sanitizer's runtime, not every sanitizer symbol.
    with pytest.raises(ABIAuditError) as only_ubsan:
        audit_torch_free_library(portable_asan, cc=_compiler(), sanitizers=(Sanitizer.UNDEFINED,))
    assert {name.split("_")[2] for name in only_ubsan.value.missing} == {"asan"}
    with pytest.raises(ABIAuditError) as only_asan:
        audit_torch_free_library(portable_asan, cc=_compiler(), sanitizers=(Sanitizer.ADDRESS,))
    assert {name.split("_")[2] for name in only_asan.value.missing} == {"ubsan"}


def test_a_sanitizer_build_is_audited_for_everything_else(tmp_path: Path) -> None:
    library = _faults_library(tmp_path, "TCDE_IMPORT_UNKNOWN")
    audit_torch_free_library(
        _faults_library(tmp_path / "plain"), cc=_compiler(), sanitizers=SANITIZERS
    )
    with pytest.raises(ABIAuditError) as refused:
        audit_torch_free_library(library, cc=_compiler(), sanitizers=SANITIZERS)
    assert refused.value.missing == ("tcde_provided_nowhere",)


def test_the_native_audit_accepts_the_runtimes_only_of_a_sanitizer_build(
    native_asan: Path,
) -> None:
    torch = pytest.importorskip("torch")
    install = TorchInstall.from_path(Path(torch.__file__).parent)
    outcome = GNU.audit(native_asan, install, "cpu", sanitizers=SANITIZERS)
    assert outcome is AuditOutcome.PASSED
    with pytest.raises(ABIAuditError, match=r"likely cause: it was compiled with -fsanitize=") as e:
        GNU.audit(native_asan, install, "cpu")
    assert {name.split("_")[2] for name in e.value.missing} == {"asan", "ubsan"}


def _exchange_suite(library: Path, log_dir: Path) -> None:
    output = run_sanitized_suite(["tests/exchange_suite"], library, log_dir)
    passed = re.search(r"(\d+) passed", output.strip().splitlines()[-1])
    assert passed is not None, output[-3000:]
    assert int(passed.group(1)) >= MIN_SUITE_PASSED, output[-3000:]


def _conformance_suite(library: Path, log_dir: Path) -> None:
    output = run_sanitized_suite(
        CONFORMANCE_SUITE, library, log_dir, options=["--hypothesis-profile=ci"]
    )
    assert "skipped" not in output.strip().splitlines()[-1], output[-3000:]
    counts = {
        match.group(2).strip(): int(match.group(1))
        for match in re.finditer(r"^conformance:\s+(\d+)\s+(.+)$", output, re.MULTILINE)
    }
    total = re.search(r"^conformance: (\d+) cases", output, re.MULTILINE)
    assert total is not None, output[-3000:]
    assert int(total.group(1)) >= MIN_CASES_213, output[-3000:]
    differential = sum(n for name, n in counts.items() if name.endswith("differential"))
    assert differential >= MIN_DIFFERENTIAL_CASES, counts


def _zoo(library: Path, log_dir: Path) -> None:
    output = run_sanitized_suite(list(ZOO), library, log_dir)
    passed = re.search(r"(\d+) passed", output.strip().splitlines()[-1])
    assert passed is not None, output[-3000:]
    assert int(passed.group(1)) >= MIN_ZOO_PASSED, output[-3000:]


def test_dispatch_zoo_portable(portable_asan: Path, tmp_path: Path) -> None:
    _zoo(portable_asan, tmp_path)


def test_dispatch_zoo_native(native_asan: Path, tmp_path: Path) -> None:
    _zoo(native_asan, tmp_path)


def test_exchange_suite_portable(portable_asan: Path, tmp_path: Path) -> None:
    _exchange_suite(portable_asan, tmp_path)


def test_conformance_portable(portable_asan: Path, tmp_path: Path) -> None:
    _conformance_suite(portable_asan, tmp_path)


def test_exchange_suite_native(native_asan: Path, tmp_path: Path) -> None:
    """The native library preloads as well: torch's own libraries are not instrumented,
    but ASan's malloc serves them too, so our code's reads and writes of their memory
    are checked."""
    _exchange_suite(native_asan, tmp_path)


def test_conformance_native(native_asan: Path, tmp_path: Path) -> None:
    _conformance_suite(native_asan, tmp_path)


def test_the_sanitizer_builds_keep_their_own_names(portable_asan: Path, native_asan: Path) -> None:
    """Next to release builds in one folder, a sanitizer build never takes their names."""
    assert portable_asan.name == "libtorch_c_dlpack_ext-portable-asan-ubsan.so"
    assert native_asan.name.endswith("-asan-ubsan.so")
