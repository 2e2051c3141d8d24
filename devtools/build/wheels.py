"""Assemble dist/: combined, variant and universal wheels, the variants index and the sdist.

All wheels are written by the in-tree backend's one writer
(:func:`build_backend._wheel.assemble_wheel`), so tags (``packaging.tags``),
metadata, the manifest and reproducibility (``SOURCE_DATE_EPOCH``) come from one
place.

- **combined** (one per platform and Python ABI: the ``cp39-abi3`` wheel every
  CPython >= 3.9 with the GIL installs, and one ``cp314-cp314t`` wheel per
  free-threaded Python): every library built for it, the group's portable table
  included; on Linux ``auditwheel repair``
  gives it its manylinux tag with torch's and the GPU runtimes' libraries excluded
  (:mod:`devtools.build.repair`; they come from the user's torch install);
- **variant** (PEP 825, one per torch minor, label ``t28``): every library of that minor
  the combined wheel carries (each backend, each C++ ABI) and the group's portable table,
  with ``*.dist-info/variant.json`` (:mod:`devtools.build.variants`) declaring only
  ``abi_dependency :: torch :: X.Y``; the platform tag is the combined wheel's (same
  libraries, same policy). Whatever an installer selects for a torch of that minor, the
  selector then decides what it would decide with the combined wheel
  (:mod:`devtools.release.variantcheck` checks it; docs/building.md says why);
- **universal** ``py3-none-any``: no library (defers on torch >= 2.10, explains
  or JIT-compiles elsewhere);
- ``torch_c_dlpack_ext-<version>-variants.json`` for the index;
- the sdist.

Two sources: the group folders ``nox -s build`` filled (:func:`assemble_dist`), or CI's
job wheels (:func:`assemble_from_wheels`, read by :mod:`devtools.build.jobwheels`).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path

from build_backend._metadata import project_metadata
from build_backend._wheel import assemble_wheel

from _torch_c_dlpack_ext_core.errors import BuildError
from _torch_c_dlpack_ext_core.files import atomic_write_bytes, load_manifest
from _torch_c_dlpack_ext_core.manifest import ManifestEntry
from _torch_c_dlpack_ext_core.naming import MANIFEST_NAME
from devtools.base import ghactions
from devtools.base.errors import ReleaseError
from devtools.base.paths import ROOT
from devtools.base.wheelnames import combined_platform, is_variant_name, platform_tag
from devtools.build.jobwheels import gather
from devtools.build.repair import auditwheel_repair
from devtools.build.variants import variant_json, variant_label, variants_index
from devtools.matrix.cells import cell_for_entry, portable_cell_for_entry
from devtools.matrix.model import Matrix
from devtools.matrix.reader import load_matrix
from devtools.matrix.tables import host_os

__all__ = ["assemble_dist", "assemble_from_wheels", "assemble_group", "universal_wheel"]


def assemble_group(
    libs: Path,
    out: Path,
    *,
    matrix: Matrix,
    repair: bool,
    platform_override: str | None = None,
    only: Collection[str] | None = None,
) -> list[Path]:
    """Combined and variant wheels of one platform x Python ABI group directory.

    ``only`` (library file names, as the manifest lists them) packs those libraries
    alone: the group directory is a build cache that can hold libraries of cells an
    earlier run selected, and dist/ holds what this run selected, nothing more.
    """
    meta = project_metadata(ROOT)
    entries = load_manifest(libs / MANIFEST_NAME)
    if only is not None:
        missing = sorted(set(only) - {e.file for e in entries})
        if missing:
            raise BuildError(f"{libs / MANIFEST_NAME} lists no {', '.join(missing)}")
        entries = tuple(e for e in entries if e.file in only)
    if not entries:
        return []
    # Every library's cell before anything is packed: an entry without a cell id fails
    # here, naming the manifest, not after half the wheels are written.
    all_cells = matrix.cells()
    portable = [e for e in entries if e.portable]
    for entry in portable:
        portable_cell_for_entry(all_cells, entry, libs / MANIFEST_NAME)
    by_minor: dict[str, list[ManifestEntry]] = {}
    for entry in entries:
        if not entry.portable:
            cell = cell_for_entry(all_cells, entry, libs / MANIFEST_NAME)
            by_minor.setdefault(cell.torch.minor, []).append(entry)
    made: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="tcde-wheels-") as tmp:
        work = Path(tmp)
        pairs = [(e, libs / e.file) for e in entries]
        plain = assemble_wheel(work, meta=meta, libraries=pairs, platform=platform_override)
        platform = platform_override
        if platform is None and repair and host_os() == "linux":
            platform = platform_tag(auditwheel_repair(plain, work).name)
        if platform is not None:
            # auditwheel writes its own zip (timestamps, order): re-pack with our writer
            # and the repaired tag, so the combined wheel stays byte-reproducible.
            combined = assemble_wheel(out, meta=meta, libraries=pairs, platform=platform)
        else:
            combined = out / plain.name
            _atomic_move(plain, combined)
        made.append(combined)
        for minor, native in sorted(by_minor.items()):
            made.append(
                assemble_wheel(
                    out,
                    meta=meta,
                    libraries=[(e, libs / e.file) for e in [*native, *portable]],
                    platform=platform,
                    label=variant_label(minor),
                    variant_json=variant_json(minor),
                )
            )
    return made


def assemble_dist(
    groups: Mapping[Path, Collection[str]],
    out: Path,
    *,
    matrix: Matrix | None = None,
    repair: bool = True,
) -> list[Path]:
    """Everything dist/ holds, from the group directories ``nox -s build`` filled:
    ``groups`` maps each directory to the library files of the selected cells."""

    matrix = load_matrix() if matrix is None else matrix

    def make(staging: Path) -> list[Path]:
        made: list[Path] = []
        for libs, files in sorted(groups.items()):
            with ghactions.group(f"assemble the wheels of {libs.name}"):
                made += assemble_group(libs, staging, matrix=matrix, repair=repair, only=files)
        return _finish_dist(staging, made)

    return _publish_all(out, make)


def _publish_all(out: Path, make: Callable[[Path], list[Path]]) -> list[Path]:
    """Let ``make`` write the whole set into a temp dir beside ``out``, then move each file
    into ``out``: a failure half-way (a bad input, a full disk) leaves ``out`` as it was,
    never a dist/ with some wheels and no sdist or variants index. Returns the moved paths."""
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", suffix=".tmp", dir=out.parent))
    try:
        made = make(staging)
        out.mkdir(parents=True, exist_ok=True)
        moved = []
        for path in made:
            target = out / path.relative_to(staging)
            os.replace(path, target)  # same file system: each move is atomic
            moved.append(target)
        return moved
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _finish_dist(out: Path, made: list[Path]) -> list[Path]:
    """Add what every dist/ holds besides the platform wheels in ``made``: the universal
    wheel, the sdist and, when there are variant wheels, the index's variants.json."""
    from build_backend._sdist import build_sdist_impl

    made = [*made, universal_wheel(out), out / build_sdist_impl(str(out))]
    variant_wheels = [p for p in made if is_variant_name(p.name)]
    if variant_wheels:
        meta = project_metadata(ROOT)
        index = out / f"{meta.name}-{meta.version}-variants.json"
        _write_json(index, variants_index(variant_wheels))
        made.append(index)
    return made


def universal_wheel(out: Path) -> Path:
    """The ``py3-none-any`` wheel with no library."""
    return assemble_wheel(out, meta=project_metadata(ROOT), libraries=[])


def assemble_from_wheels(cells_dir: Path, out: Path) -> list[Path]:
    """CI's assemble step: merge the single-job wheels in ``cells_dir`` into dist/.

    ``cells_dir`` is what actions/download-artifact made of the jobs' artifacts:
    one folder per artifact (jobs' wheels share file names, so they are never
    merged into one folder), searched recursively. Each job wheel carries some
    libraries and their manifest; libraries of one Python ABI (``cp39-abi3``,
    ``cp314-cp314t``) x platform family x architecture are unpacked into one group
    directory, then packed as
    :func:`assemble_dist` does, with the platform tag all its parts allow
    (:func:`combined_platform`). A library two job wheels both carry must be
    byte-identical in both; a job wheel with grafted libraries is refused.
    """
    wheels = sorted(p for p in cells_dir.rglob("*.whl") if not is_variant_name(p.name))
    if not wheels:
        raise ReleaseError(f"{cells_dir}: no wheels to assemble (did the cell jobs upload any?)")
    matrix = load_matrix()
    return _publish_all(out, lambda staging: _assemble_from(wheels, staging, matrix))


def _assemble_from(wheels: Sequence[Path], out: Path, matrix: Matrix) -> list[Path]:
    made: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="tcde-assemble-") as tmp:
        for group in gather(wheels, Path(tmp), matrix.cells()):
            made += assemble_group(
                group.directory,
                out,
                matrix=matrix,
                repair=False,
                platform_override=combined_platform(group.tag_sets),
            )
    return _finish_dist(out, made)


def _atomic_move(source: Path, target: Path) -> None:
    tmp = target.with_name(f".{target.name}.tmp")
    shutil.copyfile(source, tmp)
    tmp.chmod(0o644)
    os.replace(tmp, target)


def _write_json(target: Path, data: object) -> None:
    atomic_write_bytes(target, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode())
    target.chmod(0o644)
