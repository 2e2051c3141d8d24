"""A release's contents, cell by cell: which cells the matrix's jobs promise, which
the wheels hold (present, absent and why, duplicate, unexpected), the Markdown
release notes and the assemble job's ``release-contents.json``."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from _torch_c_dlpack_ext_core.files import atomic_write_bytes
from _torch_c_dlpack_ext_core.naming import DIST_NAME
from _torch_c_dlpack_ext_core.version import __version__
from devtools.base.errors import MatrixError, ReleaseError
from devtools.build.variants import variant_label
from devtools.matrix.cells import cell_for_entry, portable_cell_for_entry
from devtools.matrix.jobs import JobRecord, job_str, job_strings
from devtools.matrix.model import Matrix
from devtools.release.distfiles import WheelInfo, read_wheel
from devtools.release.releaseflow import CELL_ARTIFACT_PREFIX

__all__ = [
    "CellStatus",
    "arrived_jobs",
    "check_contents",
    "load_jobs",
    "release_contents",
    "release_notes",
    "write_contents",
]


@dataclasses.dataclass(frozen=True)
class CellStatus:
    """One expected (or unexpected) cell of a release, as found in its wheels."""

    cell: str
    #: The job that builds it (``""`` for a cell no job expects).
    job: str
    #: ``present`` (one combined and one variant wheel hold it), ``absent``,
    #: ``duplicate`` (more than one of either) or ``unexpected`` (no job expects it).
    state: str
    combined: tuple[str, ...] = ()
    variants: tuple[str, ...] = ()
    reason: str = ""
    #: matrix.toml's ``allow_failure`` reason for the job (``""``: not allowed).
    allowed: str = ""

    @property
    def acceptable(self) -> bool:
        return self.state == "present" or (self.state == "absent" and bool(self.allowed))

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = dataclasses.asdict(self)
        data["combined"], data["variants"] = list(self.combined), list(self.variants)
        return data


def _cells_in_wheels(
    matrix: Matrix, wheels: Sequence[WheelInfo]
) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """``{cell id: [wheel names]}`` for combined and for variant wheels; a library whose
    cell id the matrix does not know (or that has none) counts as ``<wheel>:<file>``."""
    cells = matrix.cells()
    combined: dict[str, list[str]] = {}
    variants: dict[str, list[str]] = {}
    for wheel in wheels:
        if wheel.universal:
            continue
        for entry in wheel.libraries:
            if entry.portable:  # the group's portable table: counted in combined wheels
                if wheel.variant:  # (each variant wheel carries a copy)
                    continue
                try:
                    cell_id = portable_cell_for_entry(cells, entry, wheel.path.name).id
                except MatrixError:
                    cell_id = f"{wheel.path.name}:{entry.file}"
                combined.setdefault(cell_id, []).append(wheel.path.name)
                continue
            try:
                cell = cell_for_entry(cells, entry, wheel.path.name)
            except MatrixError:
                cell_id = f"{wheel.path.name}:{entry.file}"
            else:
                cell_id = cell.id
                if wheel.variant and variant_label(cell.torch.minor) != wheel.label:
                    continue  # another minor's library: the variant check refuses it
            (variants if wheel.variant else combined).setdefault(cell_id, []).append(
                wheel.path.name
            )
    return combined, variants


def release_contents(
    matrix: Matrix,
    jobs: Sequence[JobRecord],
    wheels: Sequence[WheelInfo],
    *,
    arrived: set[str] | None = None,
) -> list[CellStatus]:
    """Cell by cell, what the release holds of the cells ``jobs`` (``nox -s matrix``
    entries) promise: a cell is present when exactly one combined wheel carries its
    library and exactly one variant wheel (its minor's, ``t28``) carries it. ``arrived``: ids of the
    jobs whose artifact reached the assemble job, to say why a cell is absent. ``matrix``
    (the caller reads it: :func:`devtools.matrix.reader.load_matrix`) names the cells
    the wheels' libraries belong to."""
    combined, variants = _cells_in_wheels(matrix, wheels)
    expected = {cell: job for job in jobs for cell in job_strings(job, "cells")}
    # A group's portable table: counted in its combined wheel (variant wheels carry copies).
    portable = {cell: job for job in jobs for cell in job_strings(job, "portable")}
    statuses: list[CellStatus] = []
    for cell_id, job in {**expected, **portable}.items():
        where_c = tuple(combined.get(cell_id, ()))
        where_v = tuple(variants.get(cell_id, ()))
        allowed = job_str(job, "allow_failure")
        job_id = job_str(job, "id")
        kinds = (("combined", where_c),) if cell_id in portable else (
            ("combined", where_c), ("variant", where_v)
        )  # fmt: skip
        if len(where_c) > 1 or len(where_v) > 1:
            state, reason = "duplicate", "in more than one wheel of a kind"
        elif all(where for _, where in kinds):
            state, reason = "present", ""
        else:
            state = "absent"
            if arrived is not None and job_id not in arrived:
                reason = f"job {job_id} uploaded no wheels (it failed or was cancelled)"
            else:
                missing = " or ".join(kind for kind, where in kinds if not where)
                reason = f"no {missing} wheel holds it"
        statuses.append(CellStatus(cell_id, job_id, state, where_c, where_v, reason, allowed))
    for cell_id in sorted((combined.keys() | variants.keys()) - expected.keys() - portable.keys()):
        where_c, where_v = tuple(combined.get(cell_id, ())), tuple(variants.get(cell_id, ()))
        reason = "no job of the matrix builds it"
        statuses.append(CellStatus(cell_id, "", "unexpected", where_c, where_v, reason))
    return statuses


def release_notes(statuses: Sequence[CellStatus], version: str = __version__) -> str:
    """Markdown for the job summary and the release notes: what is in, what is not, why."""
    present = [s for s in statuses if s.state == "present"]
    expected = [s for s in statuses if s.state != "unexpected"]
    lines = [
        f"## {DIST_NAME} {version}: {len(present)} of {len(expected)} cells",
        "",
    ]
    missing = [s for s in statuses if s.state != "present"]
    if not missing:
        lines.append("Every cell of the matrix is in the release.")
    else:
        lines += ["| cell | job | state | why | allowed to fail |", "|---|---|---|---|---|"]
        lines += [
            f"| `{s.cell}` | {s.job or '-'} | {s.state} | {s.reason} | {s.allowed or 'no'} |"
            for s in missing
        ]
        blocking = [s for s in missing if not s.acceptable]
        lines += [
            "",
            f"{len(blocking)} of these block publishing"
            + (" (`python -m devtools verify --expect` fails)." if blocking else "."),
        ]
    return "\n".join(lines) + "\n"


def check_contents(statuses: Sequence[CellStatus]) -> None:
    """Raise :class:`ReleaseError` unless every cell is present or allowed to be absent."""
    bad = [s for s in statuses if not s.acceptable]
    if bad:
        shown = "; ".join(f"{s.cell}: {s.state} ({s.reason})" for s in bad[:8])
        more = f"; and {len(bad) - 8} more" if len(bad) > 8 else ""
        raise ReleaseError(
            f"{len(bad)} cell(s) not in the release as expected: {shown}{more}. "
            "Rerun the failed jobs, or mark their backend allow_failure in matrix.toml"
        )


def load_jobs(path: Path) -> list[JobRecord]:
    """The jobs of a ``nox -s matrix`` JSON file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise MatrixError(f"{path}: not readable JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("include"), list):
        raise MatrixError(f'{path}: expected `nox -s matrix` output (an "include" list)')
    jobs: list[object] = data["include"]
    bad = [job for job in jobs if not isinstance(job, dict)]
    if bad:
        raise MatrixError(f"{path}: a job is not an object: {bad[0]!r}")
    return [job for job in jobs if isinstance(job, dict)]


def arrived_jobs(cells_dir: Path) -> set[str]:
    """Job ids whose artifact (``cell-<job id>/``, as download-artifact lays them out)
    holds at least one wheel."""
    prefix = CELL_ARTIFACT_PREFIX
    if not cells_dir.is_dir():
        return set()
    return {
        d.name[len(prefix) :]
        for d in cells_dir.iterdir()
        if d.is_dir() and d.name.startswith(prefix) and any(d.rglob("*.whl"))
    }


def write_contents(
    matrix_file: Path,
    dists: Sequence[Path],
    *,
    matrix: Matrix,
    cells_dir: Path | None,
    out: Path | None,
) -> list[CellStatus]:
    """``contents``: print the release notes; with ``out``, also write
    ``release-contents.json`` and ``NOTES.md`` there. Never fails on absent cells
    (the verify step does): the notes must be written especially then."""
    jobs = load_jobs(matrix_file)
    wheels = [read_wheel(p) for d in dists for p in sorted(d.glob("*.whl"))]
    arrived = arrived_jobs(cells_dir) if cells_dir is not None else None
    statuses = release_contents(matrix, jobs, wheels, arrived=arrived)
    notes = release_notes(statuses)
    if out is not None:
        data = {
            "version": __version__,
            "expected": sum(s.state != "unexpected" for s in statuses),
            "present": sum(s.state == "present" for s in statuses),
            "cells": [s.to_json() for s in statuses],
        }
        atomic_write_bytes(
            out / "release-contents.json", (json.dumps(data, indent=2) + "\n").encode()
        )
        atomic_write_bytes(out / "NOTES.md", notes.encode())
    sys.stdout.write(notes)
    return statuses
