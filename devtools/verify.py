"""Checking a built release the way a user gets it: every expected cell is in it
exactly once (absent only where matrix.toml allows its job to fail), each combined
wheel that fits this interpreter is installed with each torch it serves into a fresh
environment, and ``python -m torch_c_dlpack_ext --json`` must decide what the
bundled manifest says (``python -m devtools verify``; cibuildwheel's test command uses the
same check for one job's wheel)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from packaging.tags import sys_tags
from packaging.version import Version

from _torch_c_dlpack_ext_core.errors import CommandError
from _torch_c_dlpack_ext_core.manifest import ManifestEntry
from _torch_c_dlpack_ext_core.naming import PACKAGE
from _torch_c_dlpack_ext_core.run import run
from devtools.contents import check_contents, release_contents
from devtools.distfiles import WheelInfo, read_wheel
from devtools.errors import ReleaseError
from devtools.hostenv import find_uv, venv_python

__all__ = [
    "check_against_torch",
    "decision_of",
    "diagnose",
    "expected_library",
    "installs_here",
    "verify",
]

#: Time limits (seconds) so a stuck resolver never hangs a release.
INSTALL_TIMEOUT = 1800.0
DIAGNOSE_TIMEOUT = 300.0


def installs_here(wheel: WheelInfo) -> bool:
    """The wheel's tags include one this interpreter supports."""
    supported = {str(tag) for tag in sys_tags()}
    return bool(wheel.tags & supported)


def diagnose(
    python: Path, *, env: dict[str, str] | None = None, cwd: Path | None = None
) -> dict[str, Any]:
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


def decision_of(report: dict[str, Any]) -> tuple[str, str | None]:
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
    described = report.get("torch") or {}
    abi = described.get("cxx11_abi")
    want = expected_library(entries, torch, abi, str(described.get("backend") or "cpu"))
    if want is not None:
        if kind != "load" or Path(library or "").name != Path(want.file).name:
            raise ReleaseError(
                f"torch {torch} (cxx11_abi={abi}): expected to load {want.file}, "
                f"the selector decided {kind} ({library})"
            )
        if not (report.get("smoke_test") or {}).get("ok"):
            raise ReleaseError(f"torch {torch}: smoke test failed: {report.get('smoke_test')}")
    elif kind != "unavailable" or not (report.get("decision") or {}).get("remedy"):
        raise ReleaseError(
            f"torch {torch} (cxx11_abi={abi}): no bundled library fits, so the selector "
            f"must explain (unavailable with a remedy); it decided {kind}"
        )
    return f"torch {torch} cxx11_abi={abi} -> {kind} {Path(library).name if library else ''}"


def _venv(root: Path) -> Path:
    shutil.rmtree(root, ignore_errors=True)
    run([find_uv(), "venv", "--python", sys.executable, root], timeout=INSTALL_TIMEOUT)
    return venv_python(root)


def _same_libraries(variant: WheelInfo, combined: Sequence[WheelInfo]) -> None:
    # A variant wheel carries one cell; its bytes must be the combined wheel's.
    known = {(e.file, e.sha256) for w in combined for e in w.libraries}
    for entry in variant.libraries:
        if (entry.file, entry.sha256) not in known:
            raise ReleaseError(
                f"{variant.path.name}: {entry.file} (sha256 {entry.sha256[:12]}...) is in "
                "no combined wheel; variant and combined wheels must come from one build"
            )


def _verify_contents(expect: Sequence[dict[str, Any]], wheels: Sequence[WheelInfo]) -> list[str]:
    # PyPI refuses plain linux_* tags: such a wheel means a job's repair step did not run.
    unrepaired = sorted(w.path.name for w in wheels if any("-linux_" in t for t in w.tags))
    if unrepaired:
        raise ReleaseError(
            f"{unrepaired[0]}: a plain linux_* tag, which PyPI refuses; the job's "
            "auditwheel repair did not run (check [tool.cibuildwheel.linux])"
        )
    statuses = release_contents(expect, wheels)
    check_contents(statuses)
    present = sum(s.state == "present" for s in statuses)
    lines = [f"contents: {present} of {len(statuses)} expected cells present"]
    lines += [
        f"contents: {s.cell} absent, allowed ({s.allowed}): {s.reason}"
        for s in statuses
        if s.state == "absent"
    ]
    return lines


def _install_and_diagnose(
    wheels: Sequence[WheelInfo], combined: Sequence[WheelInfo], torch_minors: Sequence[str] | None
) -> list[str]:
    """verify's installing part: each fitting combined wheel with each torch it serves
    (only ``torch_minors`` when given), the universal wheel without torch, variant
    wheels against the combined ones."""
    results: list[str] = []
    with tempfile.TemporaryDirectory(prefix="tcde-verify-") as tmp:
        for wheel in combined:
            if not installs_here(wheel):
                continue
            bundled = {e.torch for e in wheel.libraries}
            chosen = bundled if torch_minors is None else bundled & set(torch_minors)
            for torch in sorted(chosen, key=Version):
                python = _venv(Path(tmp) / f"torch{torch}")
                run(
                    [
                        find_uv(),
                        "pip",
                        "install",
                        "--python",
                        python,
                        f"torch=={torch}.*",
                        wheel.path,
                    ],
                    timeout=INSTALL_TIMEOUT,
                )
                line = check_against_torch(python, wheel.libraries, torch)
                results.append(f"{wheel.path.name}: {line}")
                shutil.rmtree(python.parent.parent, ignore_errors=True)
        for wheel in wheels:
            if wheel.universal:
                python = _venv(Path(tmp) / "universal")
                run(
                    [find_uv(), "pip", "install", "--python", python, wheel.path],
                    timeout=INSTALL_TIMEOUT,
                )
                kind, _ = decision_of(diagnose(python))
                if kind != "unavailable":
                    raise ReleaseError(f"{wheel.path.name} without torch: decided {kind}")
                results.append(f"{wheel.path.name}: no torch -> {kind}")
            elif wheel.variant:
                _same_libraries(wheel, combined)
                results.append(f"{wheel.path.name}: libraries match the combined wheels")
    return results


def verify(
    dist: Path,
    *,
    expect: Sequence[dict[str, Any]] | None = None,
    install: bool = True,
    torch: Sequence[str] | None = None,
) -> list[str]:
    """Check the release in ``dist`` (combined, universal and variant wheels).

    ``expect``: the ``nox -s matrix`` jobs of the run; every cell they promise must
    be in exactly one combined and one variant wheel, unless matrix.toml allows its
    job to fail (the absence is then printed, not fatal). Then install every
    combined wheel that fits this interpreter (the abi3 wheel on any CPython >= 3.9
    with the GIL, a free-threaded one on its own Python) into a fresh environment
    once per torch minor it bundles, or per minor of ``torch`` (the verify matrix
    names the minors whose oldest or newest CPython this one is), torch from PyPI,
    and check the selector's decision; the universal wheel must explain without
    torch (``install=False`` skips this).

    Variant wheels are not installable by pip; their libraries are checked to be
    byte-identical to the combined wheels' (which were just exercised). GPU
    libraries cannot be selected on a GPU-less runner; the runtime checks their
    size and sha256 before any load.
    """
    results: list[str] = []
    wheels = [read_wheel(path) for path in sorted(dist.glob("*.whl"))]
    combined = [w for w in wheels if not w.universal and not w.variant]
    if expect is not None:
        results += _verify_contents(expect, wheels)
    if not install:
        for wheel in wheels:
            if wheel.variant:
                _same_libraries(wheel, combined)
        results.append(f"{sum(w.variant for w in wheels)} variant wheel(s) match the combined")
        for line in results:
            print(line)
        return results
    if torch is not None and not torch:
        raise ReleaseError("verify --torch names no torch minor")
    results += _install_and_diagnose(wheels, combined, torch)
    if not any(" -> load " in line for line in results):
        raise ReleaseError(f"{dist}: no wheel with a library was exercised on this runner")
    for line in results:
        print(line)
    return results
