"""What a fresh installation decides: run ``python -m torch_c_dlpack_ext --json`` in an
environment (:func:`diagnose`), read its decision (:func:`decision_of`) and check it
against the libraries a wheel bundles (:func:`expected_library`,
:func:`check_against_torch`). Shared by the release check (:mod:`devtools.release.verify`),
cibuildwheel's test command (:mod:`devtools.release.cisteps`) and the rehearsal's
install scenarios (:mod:`devtools.rehearse.indexinstall`); imports no other module of its
room, so each of them stays shallow."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from _torch_c_dlpack_ext_core.errors import CommandError
from _torch_c_dlpack_ext_core.manifest import ManifestEntry
from _torch_c_dlpack_ext_core.naming import PACKAGE
from _torch_c_dlpack_ext_core.run import run
from devtools.base.errors import ReleaseError

__all__ = [
    "DIAGNOSE_TIMEOUT",
    "INSTALL_TIMEOUT",
    "check_against_torch",
    "decision_of",
    "diagnose",
    "expected_library",
]

#: Time limits (seconds) so a stuck resolver never hangs a release.
INSTALL_TIMEOUT = 1800.0
DIAGNOSE_TIMEOUT = 300.0


def diagnose(
    python: Path, *, env: dict[str, str] | None = None, cwd: Path | None = None
) -> dict[str, object]:
    """Run ``python -m torch_c_dlpack_ext --json`` and return its JSON report.

    Exit status 1 means "no working API published" (the report says why), which
    is the expected outcome in some checks, so only the JSON decides.
    """
    if env is None:  # an installed wheel is diagnosed, never a checkout on PYTHONPATH
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    try:
        cmd: list[str | os.PathLike[str]] = [python, "-m", PACKAGE, "--json"]
        stdout = run(cmd, env=env, cwd=cwd, timeout=DIAGNOSE_TIMEOUT).stdout
    except CommandError as exc:
        if exc.returncode != 1:
            raise
        stdout = exc.stdout
    try:
        data = json.loads(stdout)
    except json.JSONDecodeError:
        raise ReleaseError(
            f"`{python} -m {PACKAGE} --json` printed no JSON:\n{stdout[-2000:]}"
        ) from None
    if not isinstance(data, dict):
        raise ReleaseError(f"`{python} -m {PACKAGE} --json` printed {type(data).__name__}")
    return data


def report_table(report: Mapping[str, object], key: str) -> Mapping[str, object]:
    """The object ``report[key]`` of a diagnostics report (``{}`` when absent, null or
    not an object: the checks that read it then fail on the missing field)."""
    table = report.get(key)
    return table if isinstance(table, dict) else {}


def decision_of(report: Mapping[str, object]) -> tuple[str, str | None]:
    """``(kind, library path)`` from a ``python -m torch_c_dlpack_ext --json`` report,
    whose ``decision`` is ``{"kind": ..., "library": <path or null>, ...}``."""
    decision = report.get("decision")
    kind = decision.get("kind") if isinstance(decision, dict) else None
    if not isinstance(decision, dict) or not isinstance(kind, str):
        raise ReleaseError(f"diagnostics report has no decision: {json.dumps(report)[:500]}")
    library = decision.get("library")
    return kind, (str(library) if library else None)


def expected_library(
    entries: Sequence[ManifestEntry], torch: str, cxx11_abi: bool | None, backend: str = "cpu"
) -> ManifestEntry | None:
    """The library the selector must load for a torch ``major.minor`` with that C++ ABI
    and backend (the backend the diagnostics report for the installed torch: its
    build flavour, so PyPI's CUDA torch gets the CUDA library even without a GPU)."""
    for entry in entries:
        if (
            entry.backend is not None
            and entry.backend.value == backend
            and entry.torch == torch
            and entry.cxx11_abi == cxx11_abi
        ):
            return entry
    return None


def check_against_torch(python: Path, entries: Sequence[ManifestEntry], torch: str) -> str:
    """Diagnose the environment of ``python`` (torch ``torch`` and the package are
    installed) and check the decision against the bundled ``entries``: load the
    library of that torch's backend and ABI if there is one, else explain."""
    report = diagnose(python)
    kind, library = decision_of(report)
    described = report_table(report, "torch")
    abi = described.get("cxx11_abi")
    abi = abi if isinstance(abi, bool) else None
    want = expected_library(entries, torch, abi, str(described.get("backend") or "cpu"))
    if want is not None:
        if kind != "load" or Path(library or "").name != Path(want.file).name:
            raise ReleaseError(
                f"torch {torch} (cxx11_abi={abi}): expected to load {want.file}, "
                f"the selector decided {kind} ({library})"
            )
        if not report_table(report, "smoke_test").get("ok"):
            raise ReleaseError(f"torch {torch}: smoke test failed: {report.get('smoke_test')}")
    elif kind != "unavailable" or not report_table(report, "decision").get("remedy"):
        raise ReleaseError(
            f"torch {torch} (cxx11_abi={abi}): no bundled library fits, so the selector "
            f"must explain (unavailable with a remedy); it decided {kind}"
        )
    return f"torch {torch} cxx11_abi={abi} -> {kind} {Path(library).name if library else ''}"
