"""CI's job wheels, read for the assemble step: each job wheel's libraries, checked
(its manifest's size and sha256, no grafted copies, a cell id the matrix knows) and
gathered per combined wheel (Python ABI x platform family x architecture), a library
two jobs both built kept once when the bytes are equal."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import zipfile
from collections.abc import Sequence
from pathlib import Path

from _torch_c_dlpack_ext_core.files import write_manifest
from _torch_c_dlpack_ext_core.manifest import ManifestEntry
from _torch_c_dlpack_ext_core.naming import MANIFEST_NAME, PACKAGE
from devtools.base.errors import ReleaseError
from devtools.base.wheelnames import parse_wheel_name, platform_key
from devtools.build.repair import grafted_libraries
from devtools.matrix.cells import Cell, cell_for_entry, portable_cell_for_entry

__all__ = ["JobGroup", "gather"]


@dataclasses.dataclass
class JobGroup:
    """The libraries of one combined wheel, gathered from job wheels into ``directory``
    (with their manifest, once :func:`gather` returns)."""

    directory: Path
    entries: dict[str, ManifestEntry] = dataclasses.field(default_factory=dict)
    origin: dict[str, str] = dataclasses.field(default_factory=dict)
    #: The platform tags of each job wheel, for the combined wheel's tag.
    tag_sets: list[frozenset[str]] = dataclasses.field(default_factory=list)

    def add(self, wheel: Path, platforms: frozenset[str], cells: Sequence[Cell]) -> None:
        self.tag_sets.append(platforms)
        try:
            grafted = grafted_libraries(wheel)
            if grafted:
                raise ReleaseError(
                    f"{wheel}: the repair step grafted {grafted[:3]} into the job wheel; torch's "
                    "and the GPU runtimes' libraries must be excluded (AUDITWHEEL_EXCLUDES)"
                )
            with zipfile.ZipFile(wheel) as archive:
                manifest = json.loads(archive.read(f"{PACKAGE}/{MANIFEST_NAME}"))
                for item in manifest.get("libraries", []):
                    self._add_library(wheel, archive, ManifestEntry.from_json(item), cells)
        except (KeyError, zipfile.BadZipFile, json.JSONDecodeError) as exc:
            raise ReleaseError(f"{wheel}: not a job wheel of this project ({exc})") from None

    def _add_library(
        self, wheel: Path, archive: zipfile.ZipFile, entry: ManifestEntry, cells: Sequence[Cell]
    ) -> None:
        # Job wheels are built by this version's `devtools.build.cellbuild` in the same workflow
        # run, so every entry names its cell: no fallback for entries without an id.
        if entry.portable:
            portable_cell_for_entry(cells, entry, wheel)
        else:
            cell_for_entry(cells, entry, wheel)
        name = Path(entry.file).name
        known = self.entries.get(name)
        if known is not None:
            if known.sha256 != entry.sha256:
                raise ReleaseError(
                    f"{name} differs between {self.origin[name]} and {wheel} "
                    f"(sha256 {known.sha256[:12]} vs {entry.sha256[:12]}); one cell "
                    "must be built by one job"
                )
            return
        data = archive.read(f"{PACKAGE}/{entry.file}")
        if hashlib.sha256(data).hexdigest() != entry.sha256 or len(data) != entry.size:
            raise ReleaseError(
                f"{wheel}: {entry.file} does not match its manifest entry (size or "
                "sha256); the artifact is damaged, rerun its job"
            )
        (self.directory / name).write_bytes(data)
        self.entries[name] = entry._replace(file=name)
        self.origin[name] = str(wheel)


def gather(wheels: Sequence[Path], work: Path, cells: Sequence[Cell]) -> list[JobGroup]:
    """The job ``wheels``' libraries, one :class:`JobGroup` (a folder under ``work``
    with the libraries and their manifest) per combined wheel they make."""
    groups: dict[tuple[str, str, str, str], JobGroup] = {}
    for wheel in wheels:
        tags = parse_wheel_name(wheel.name).tags
        tag = min(tags, key=str)
        family, arch = platform_key(tag.platform)
        key = (tag.interpreter, tag.abi, family, arch)
        if key not in groups:
            directory = work / "-".join(key)
            directory.mkdir()
            groups[key] = JobGroup(directory)
        groups[key].add(wheel, frozenset(t.platform for t in tags), cells)
    for group in groups.values():
        write_manifest(group.directory / MANIFEST_NAME, group.entries.values())
    return list(groups.values())
