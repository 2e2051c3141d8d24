"""The native table keeps the portable table's no-GIL error contract (issue 42, finding 8):
``current_work_stream`` called without the GIL for a request it refuses (``kDLCUDA`` on a
CPU build) returns -1 and leaves no Python error for anyone, from a Python thread that
released the GIL (``ctypes.CFUNCTYPE``) and from a C thread with no thread state; with
the GIL held the caller still gets its ValueError. Before, the native table set the error
without the GIL: a SIGSEGV in the C thread.

The library is csrc/ compiled against the running torch (2.13 in ``nox -s tests``, CPU),
the same script as the portable table's test; each run is a subprocess: a crash is a
return code, not a dead test runner."""

from __future__ import annotations

from pathlib import Path

from _torch_c_dlpack_ext_core.manifest import ManifestEntry
from tests.helpers import ROOT, clean_env, run_python
from tests.integration.test_portable_table import STREAM_ERRORS_WITHOUT_GIL, _native_caller


def test_native_stream_errors_without_the_gil_stay_with_no_one(
    tmp_path: Path, torch213_library: tuple[Path, ManifestEntry]
) -> None:
    library, _ = torch213_library
    proc = run_python(
        STREAM_ERRORS_WITHOUT_GIL,
        args=[str(library), str(_native_caller(tmp_path)), str(ROOT / "tests"),
              str(ROOT / "python")],
        env=clean_env(), timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr[-6000:]
    assert "stream errors ok" in proc.stdout
