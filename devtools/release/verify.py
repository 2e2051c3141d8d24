"""Checking a built release the way a user gets it: every expected cell is in it
exactly once (absent only where matrix.toml allows its job to fail), each combined
wheel that fits this interpreter is installed with each torch it serves into a fresh
environment, and ``python -m torch_c_dlpack_ext --json`` must decide what the
bundled manifest says (``python -m devtools verify``; cibuildwheel's test command uses the
same check for one job's wheel, from :mod:`devtools.release.diagnose`). On GitHub Actions
each wheel's check is a group of the log and its failure an annotation on the wheel.
Variant wheels are held to the variant invariant (:mod:`devtools.release.variantcheck`)."""

from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from packaging.version import Version

from _torch_c_dlpack_ext_core.run import run
from devtools.base import ghactions
from devtools.base.errors import ReleaseError
from devtools.base.hostenv import venv_python
from devtools.base.steps import find_uv
from devtools.matrix.jobs import JobRecord
from devtools.matrix.reader import load_matrix
from devtools.release.contents import check_contents, release_contents
from devtools.release.diagnose import (
    INSTALL_TIMEOUT,
    check_against_torch,
    decision_of,
    diagnose,
)
from devtools.release.distfiles import WheelInfo, installs_here, read_wheel
from devtools.release.variantcheck import check_variants

__all__ = ["verify"]


def _venv(root: Path) -> Path:
    shutil.rmtree(root, ignore_errors=True)
    run([find_uv(), "venv", "--python", sys.executable, root], timeout=INSTALL_TIMEOUT)
    return venv_python(root)


def _verify_contents(expect: Sequence[JobRecord], wheels: Sequence[WheelInfo]) -> list[str]:
    # PyPI refuses plain linux_* tags: such a wheel means a job's repair step did not run.
    unrepaired = sorted(w.path.name for w in wheels if any("-linux_" in t for t in w.tags))
    if unrepaired:
        raise ReleaseError(
            f"{unrepaired[0]}: a plain linux_* tag, which PyPI refuses; the job's "
            "auditwheel repair did not run (check [tool.cibuildwheel.linux])"
        )
    statuses = release_contents(load_matrix(), expect, wheels)
    check_contents(statuses)
    present = sum(s.state == "present" for s in statuses)
    lines = [f"contents: {present} of {len(statuses)} expected cells present"]
    lines += [
        f"contents: {s.cell} absent, allowed ({s.allowed}): {s.reason}"
        for s in statuses
        if s.state == "absent"
    ]
    return lines


@contextlib.contextmanager
def _step(title: str, wheel: WheelInfo) -> Iterator[None]:
    """One wheel's check: a group of the log on GitHub Actions, and its failure an
    annotation on the wheel."""
    # The annotation after the group's end: the log shows it without unfolding the group.
    with ghactions.annotate_failure(file=wheel.path, title=title), ghactions.group(title):
        yield


def _install_and_diagnose(
    wheels: Sequence[WheelInfo], combined: Sequence[WheelInfo], torch_minors: Sequence[str] | None
) -> list[str]:
    """verify's installing part: each fitting combined wheel with each torch it serves
    (only ``torch_minors`` when given), and the universal wheel without torch."""
    results: list[str] = []
    with tempfile.TemporaryDirectory(prefix="tcde-verify-") as tmp:
        for wheel in combined:
            if not installs_here(wheel):
                continue
            bundled = {e.torch for e in wheel.libraries}
            chosen = bundled if torch_minors is None else bundled & set(torch_minors)
            for torch in sorted(chosen, key=Version):
                with _step(f"verify {wheel.path.name} with torch {torch}", wheel):
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
                with _step(f"verify {wheel.path.name} without torch", wheel):
                    python = _venv(Path(tmp) / "universal")
                    run(
                        [find_uv(), "pip", "install", "--python", python, wheel.path],
                        timeout=INSTALL_TIMEOUT,
                    )
                    kind, _ = decision_of(diagnose(python))
                    if kind != "unavailable":
                        raise ReleaseError(f"{wheel.path.name} without torch: decided {kind}")
                    results.append(f"{wheel.path.name}: no torch -> {kind}")
    return results


def verify(
    dist: Path,
    *,
    expect: Sequence[JobRecord] | None = None,
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

    Variant wheels (which pip ignores) are checked with or without ``install``: each
    holds its torch minor's libraries of the combined wheel of its tags, byte for byte,
    and the selector decides with it what it decides with that combined wheel, for
    every torch build of that minor (:func:`devtools.release.variantcheck.check_variants`:
    the variant invariant). GPU libraries cannot be selected on a GPU-less runner; the
    runtime checks their size and sha256 before any load.
    """
    results: list[str] = []
    wheels = [read_wheel(path) for path in sorted(dist.glob("*.whl"))]
    combined = [w for w in wheels if not w.universal and not w.variant]
    if expect is not None:
        with ghactions.group("the release's contents, cell by cell"):
            results += _verify_contents(expect, wheels)
    with ghactions.group("the variant invariant"):
        results += check_variants(dist)
    if not install:
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
