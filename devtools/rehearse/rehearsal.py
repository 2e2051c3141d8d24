"""Release rehearsal against a real package index on 127.0.0.1.

``nox -s rehearse`` (or ``PYTHONPATH=python python -m devtools rehearse``) does, bounded in time:

1. build a few cells with ``nox -s build`` (or take ``--dist``);
2. start pypiserver on a free port of 127.0.0.1, stopped on every exit path
   (:mod:`devtools.rehearse.indexserver`);
3. publish with :func:`devtools.release.publish.publish`, the code ``nox -s release`` runs,
   and check that the index serves exactly the uploaded files (sha256);
4. install ``torch-c-dlpack-ext`` from that index, and only from it, into fresh
   environments, and check which wheel pip chose and what the selector decided
   (torch 2.13, a real old torch, a Python no combined wheel serves:
   :mod:`devtools.rehearse.indexinstall`);
5. upload a different file under an existing name: the index must refuse it and
   keep serving the original bytes;
6. write the release's own variant index (every file, the variants file included), serve
   it on 127.0.0.1 and install from it with uv's ``--preview-features wheel-variants``,
   as uv is and with ``abi_dependency`` emulated, for every case of
   :func:`devtools.rehearse.variantinstall.variant_cases` and with the real old torch:
   the selector must decide as with the combined wheel (the variant invariant).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import sys
import unittest.mock
import zipfile
from collections.abc import Sequence
from pathlib import Path

from _torch_c_dlpack_ext_core.errors import CommandError
from _torch_c_dlpack_ext_core.files import sha256_of
from _torch_c_dlpack_ext_core.run import run
from devtools.base import ghactions
from devtools.base.errors import ReleaseError
from devtools.base.paths import ROOT
from devtools.base.steps import work_folder
from devtools.rehearse.indexinstall import Check, Deadline, install_scenarios
from devtools.rehearse.indexserver import IndexServer, log, served_hashes
from devtools.rehearse.variantinstall import variant_rehearsal
from devtools.release import publish
from devtools.release.distfiles import ReleaseFiles

__all__ = [
    "DEFAULT_CELLS",
    "DEFAULT_OLD_TORCH",
    "RehearsalOptions",
    "print_table",
    "rehearse",
]

#: Cells built by default (matrix.toml cell-id patterns; cells of other platforms are
#: skipped by the build): small enough for CI, yet an abi3 combined wheel holding both
#: C++ ABIs (PyPI's 2.6 is pre-cxx11, 2.8 cxx11) and a GPU library.
DEFAULT_CELLS = ("*-t28_cpu", "*-t28_cuda", "*-t26_cpu_abi0")
#: The old torch installed for real (its cell must be among the built ones).
DEFAULT_OLD_TORCH = "2.8.0"

BUILD_TIMEOUT = 3600.0


@dataclasses.dataclass(frozen=True)
class RehearsalOptions:
    """What to rehearse; every field has a command-line flag."""

    cells: tuple[str, ...] = DEFAULT_CELLS
    #: Use these built dists instead of building.
    dist: Path | None = None
    old_torch: str = DEFAULT_OLD_TORCH
    #: Scratch directory (default: a temporary one, removed afterwards).
    workdir: Path | None = None
    #: Overall time budget in seconds; each step also has its own timeout.
    budget: float = 5400.0


# --- building and publishing --------------------------------------------------------


def _build(cells: Sequence[str], out: Path, deadline: Deadline) -> Path:
    log(f"building cells {', '.join(cells)} with nox -s build")
    cmd = [sys.executable, "-m", "nox", "-s", "build", "--"]
    cmd += ["--cells", ",".join(cells), "--out", str(out)]
    try:
        proc = run(cmd, cwd=ROOT, timeout=deadline.left(BUILD_TIMEOUT))
    except CommandError as exc:
        # nox prints the build's own output on stdout and its log on stderr.
        raise ReleaseError(
            f"nox -s build failed with exit code {exc.returncode}:\n"
            f"{exc.stdout[-4000:]}\n{exc.stderr[-1500:]}"
        ) from None
    sys.stderr.write(proc.stdout[-3000:])
    return out


def _rehearsal_credentials() -> contextlib.AbstractContextManager[object]:
    # pypiserver runs with authentication off (-a . -P .); twine still wants a
    # username and password in non-interactive mode. Real ones are never needed.
    return unittest.mock.patch.dict(
        os.environ, {"TWINE_USERNAME": "rehearsal", "TWINE_PASSWORD": "rehearsal"}
    )


def _publish(dist: Path, server: IndexServer) -> tuple[ReleaseFiles, list[Check]]:
    with _rehearsal_credentials():
        files = publish.publish(
            dist, repository_url=f"{server.url}/", variants_dir=server.directory
        )
    uploaded = {p.name: sha256_of(p) for p in files.dists()}
    served = served_hashes(server.simple_url)
    checks = [
        Check(
            name="upload",
            expected=f"{len(uploaded)} files served with their sha256",
            observed=f"{len(served)} files served",
            ok=served == uploaded,
            detail="" if served == uploaded else f"uploaded {uploaded}, served {served}",
        )
    ]
    if files.variants_index is not None:
        placed = server.directory / files.variants_index.name
        same = placed.is_file() and sha256_of(placed) == sha256_of(files.variants_index)
        checks.append(
            Check(
                name="variants.json",
                expected="next to the served dists, same bytes",
                observed="present" if same else "missing or different",
                ok=same,
                detail="pypiserver keeps it but serves only dists (PEP 825 index support pending)",
            )
        )
    return files, checks


def _tampered_copy(wheel: Path, out_dir: Path) -> Path:
    # Same file name, different bytes: a valid wheel whose zip comment differs.
    out_dir.mkdir(parents=True, exist_ok=True)
    copy = out_dir / wheel.name
    shutil.copyfile(wheel, copy)
    with zipfile.ZipFile(copy, "a") as archive:
        archive.comment = b"rehearsal: second upload of an existing file name"
    return copy


def _second_upload(files: ReleaseFiles, server: IndexServer, work: Path) -> Check:
    before = served_hashes(server.simple_url)
    on_disk = {p.name: sha256_of(p) for p in server.directory.iterdir() if p.is_file()}
    target = files.wheels[0].path
    copy = _tampered_copy(target, work / "second-upload")
    refused = False
    detail = ""
    with _rehearsal_credentials():
        try:
            publish.twine_upload([copy], f"{server.url}/", skip_existing=False)
        except CommandError as exc:
            refused = True
            lines = (exc.stderr or exc.stdout).strip().splitlines()
            detail = lines[-1] if lines else ""
    after = served_hashes(server.simple_url)
    after_disk = {p.name: sha256_of(p) for p in server.directory.iterdir() if p.is_file()}
    intact = before == after and on_disk == after_disk
    return Check(
        name="second upload",
        expected="refused, served files unchanged",
        observed=("refused" if refused else "ACCEPTED")
        + (", unchanged" if intact else ", CHANGED"),
        ok=refused and intact,
        detail=detail,
    )


# --- the rehearsal ------------------------------------------------------------------


def print_table(checks: Sequence[Check]) -> None:
    """The final summary: one row per check."""
    headers = ("check", "expected", "observed", "result")
    rows = [(c.name, c.expected, c.observed, "ok" if c.ok else "FAIL") for c in checks]
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(4)]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    print(line.format(*headers))
    print(line.format(*("-" * w for w in widths)))
    for row, check in zip(rows, checks):
        print(line.format(*row))
        if check.detail and not check.ok:
            print(f"    {check.detail}")


def rehearse(options: RehearsalOptions) -> list[Check]:
    """Run the rehearsal; return its checks (the caller prints and judges them)."""
    deadline = Deadline(options.budget)
    with contextlib.ExitStack() as stack:
        work = work_folder(stack, options.workdir, "tcde-rehearse-")
        # On GitHub Actions each step is a group of the log.
        if options.dist is None:
            with ghactions.group("rehearsal: build"):
                dist = _build(options.cells, work / "dist", deadline)
        else:
            dist = options.dist
        server = stack.enter_context(IndexServer(work / "index", log=work / "pypiserver.log"))
        with ghactions.group("rehearsal: publish to the local index"):
            files, checks = _publish(dist, server)
        if all(c.ok for c in checks):
            with ghactions.group("rehearsal: install scenarios"):
                checks += install_scenarios(
                    files, server, work, old_torch=options.old_torch, deadline=deadline
                )
            with ghactions.group("rehearsal: second upload"):
                log("second upload of an existing file name")
                checks.append(_second_upload(files, server, work))
        if files.variants_index is not None:
            with ghactions.group("rehearsal: the variant index, installs with uv's preview"):
                rows = variant_rehearsal(dist, work / "variants", old_torch=options.old_torch)
                checks += [Check(*row) for row in rows]
        return checks
