"""What the per-cell builds produce (:mod:`devtools.build.cellbuild` runs them), and what
becomes of it: each cell's :class:`CellResult`, the progress line with its ETA
(:func:`eta_seconds`), a failure as a GitHub Actions annotation, the manifest of each
group of libraries (``build/cells/<platform>-abi3/``) and the copy of one job's cells
for the backend's ``libs-dir=`` (:func:`copy_libs`).
"""

from __future__ import annotations

import dataclasses
import shutil
import sys
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path

from _torch_c_dlpack_ext_core.errors import ConfigError
from _torch_c_dlpack_ext_core.files import write_manifest
from _torch_c_dlpack_ext_core.manifest import ManifestEntry
from _torch_c_dlpack_ext_core.naming import MANIFEST_NAME
from devtools.base import ghactions
from devtools.base.errors import CellsNotBuiltError
from devtools.matrix.cells import Cell, PortableCell, group_dir

__all__ = [
    "NOTE_WIDTH",
    "CellResult",
    "annotate_failed",
    "clip",
    "copy_libs",
    "eta_seconds",
    "progress_line",
    "write_group_manifests",
]


#: Width of the note column of the final table (and of a progress line's detail).
NOTE_WIDTH = 90


@dataclasses.dataclass(frozen=True)
class CellResult:
    """What happened to one cell."""

    cell: str
    status: str  # built | cached | skipped | failed
    seconds: float = 0.0
    size: int = 0
    reason: str = ""
    #: The library's manifest entry (naming the cell); ``None`` unless built or cached.
    entry: ManifestEntry | None = None
    #: Of ``seconds``, the one-time set-up this cell happened to pay: its torch tree
    #: provisioned, a free-threaded CPython built from source (cached afterwards).
    setup_seconds: float = 0.0

    @classmethod
    def failed(
        cls, cell: str, exc: BaseException, started: float, setup: float | None = 0.0
    ) -> CellResult:
        """``cell`` failed with ``exc`` after starting at ``started`` (``time.monotonic()``),
        having paid ``setup`` seconds of set-up; ``None``: it failed during the set-up,
        so all its time is set-up."""
        elapsed = time.monotonic() - started
        return cls(
            cell=cell,
            status="failed",
            seconds=round(elapsed, 1),
            reason=f"{type(exc).__name__}: {str(exc).strip()[-3000:]}",
            setup_seconds=round(elapsed if setup is None else setup, 1),
        )

    def to_json(self) -> dict[str, object]:
        """The report's record: the fields, the entry as its manifest JSON."""
        data: dict[str, object] = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["entry"] = None if self.entry is None else self.entry.to_json()
        return data


def eta_seconds(finished: Sequence[CellResult], remaining: int, jobs: int) -> float:
    """Seconds until the ``remaining`` cells to build are done, ``jobs`` at a time.

    The mean compile time of the cells finished so far (their seconds less their
    set-up) times the remaining cells, over the jobs that can run at once. Set-up is a
    one-time cost: a free-threaded CPython built from source (~15 minutes each on 2
    cores) or a torch downloaded, paid by whichever cell needs it first, then cached;
    counting it as every cell's time made the ETA ten hours with ten minutes left.
    Skipped cells take no time and are not counted. 0 when nothing is left or no cell
    has finished yet.
    """
    timed = [r for r in finished if r.status != "skipped"]
    if remaining <= 0 or not timed:
        return 0.0
    per_cell = sum(max(r.seconds - r.setup_seconds, 0.0) for r in timed) / len(timed)
    return per_cell * remaining / max(1, min(jobs, remaining))


def progress_line(
    done: int, total: int, started: float, finished: Sequence[CellResult], *, to_build: int,
    jobs: int,
) -> None:  # fmt: skip
    """One progress line for the last of ``finished``: its status, the time so far, the
    set-up paid so far and the ETA of the rest (:func:`eta_seconds`)."""
    result = finished[-1]
    elapsed = time.monotonic() - started
    timed = [r for r in finished if r.status != "skipped"]
    eta = eta_seconds(finished, to_build - len(timed), jobs)
    setup = sum(r.setup_seconds for r in finished)
    detail = clip(result.reason, 120) if result.reason else f"{result.size} bytes"
    setup_note = f" (set-up {setup:.0f} s, not in the ETA)" if setup >= 1 else ""
    print(
        f"[cell {done}/{total}] {result.cell}: {result.status} in {result.seconds:.1f} s "
        f"({detail}); elapsed {elapsed:.0f} s{setup_note}, ETA ~{eta:.0f} s",
        file=sys.stderr,
        flush=True,
    )


def annotate_failed(result: CellResult) -> None:
    """A failed cell as an ``::error`` annotation on GitHub Actions: its reason, at the
    compiler's ``file:line`` when the output names one."""
    if result.status != "failed":
        return
    where = ghactions.compiler_location(result.reason)
    kind = result.reason.split(":", 1)[0]
    ghactions.error(
        result.reason,
        file=where[0] if where else None,
        line=where[1] if where else None,
        title=f"cell {result.cell} failed ({kind})",
    )


def write_group_manifests(
    cells: Sequence[Cell | PortableCell], results: dict[str, CellResult], build_dir: Path
) -> None:
    groups: dict[Path, list[ManifestEntry]] = {}
    for cell in cells:
        result = results[cell.id]
        if result.entry is None:
            continue
        directory = group_dir(build_dir, cell)
        groups.setdefault(directory, []).append(result.entry)
    for directory, entries in groups.items():
        # Merge with libraries an earlier run built here (a run for a subset of cells
        # must not drop the others from the manifest).
        merged = {e.file: e for e in _read_manifest(directory)}
        merged.update({e.file: e for e in entries})
        write_manifest(directory / MANIFEST_NAME, merged.values())


def _read_manifest(directory: Path) -> list[ManifestEntry]:
    from _torch_c_dlpack_ext_core.errors import ManifestError
    from _torch_c_dlpack_ext_core.files import load_manifest

    try:
        entries = load_manifest(directory / MANIFEST_NAME)
    except ManifestError:
        return []
    return [e for e in entries if (directory / e.file).is_file()]


def copy_libs(
    cells: Sequence[Cell | PortableCell],
    results: Sequence[CellResult],
    build_dir: Path,
    libs_dir: Path,
) -> list[ManifestEntry]:
    """Copy the built ``cells`` (one platform x Python ABI) and their manifest into ``libs_dir``.

    What CI's per-job build hands to the backend's ``libs-dir=``: exactly the job's
    cells, so a cell that was skipped or failed is an error
    (:class:`~devtools.base.errors.CellsNotBuiltError`), never a smaller wheel.
    """
    missing = [r for r in results if r.entry is None]
    if missing:
        raise CellsNotBuiltError(
            "cells not built: " + "; ".join(f"{r.cell}: {r.status} ({r.reason})" for r in missing)
        )
    groups = {group_dir(build_dir, cell) for cell in cells}
    if len(groups) != 1:
        raise ConfigError(
            f"--libs-dir takes the cells of one platform and Python ABI (one wheel); the "
            f"selection spans {', '.join(sorted(g.name for g in groups))}"
        )
    (source,) = groups
    libs_dir.mkdir(parents=True, exist_ok=True)
    entries = []
    for result in results:
        entry = result.entry
        assert entry is not None  # checked above
        shutil.copy2(source / entry.file, libs_dir / entry.file)
        entries.append(entry)
    write_manifest(libs_dir / MANIFEST_NAME, entries)
    return entries


def clip(text: str, width: int = NOTE_WIDTH) -> str:
    """The first line of ``text`` in at most ``width`` characters, cut at a word
    boundary with an ellipsis (a single word longer than that is cut inside it)."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    if len(line) <= width:
        return line
    short = textwrap.shorten(line, width=width, placeholder=" \N{HORIZONTAL ELLIPSIS}")
    if short.strip() == "\N{HORIZONTAL ELLIPSIS}":  # no word boundary early enough
        return line[: width - 1] + "\N{HORIZONTAL ELLIPSIS}"
    return short
