"""What a release's ``dist/`` holds: its wheels (combined, variant, universal) read
without extracting them, the sdist and the variants index, checked to be of this
project and version; and moving the variant files aside."""

from __future__ import annotations

import dataclasses
import json
import zipfile
from pathlib import Path

from packaging.tags import sys_tags
from packaging.utils import canonicalize_name
from packaging.version import Version

from _torch_c_dlpack_ext_core.files import atomic_write_bytes
from _torch_c_dlpack_ext_core.manifest import ManifestEntry
from _torch_c_dlpack_ext_core.naming import DIST_NAME, MANIFEST_NAME, PACKAGE
from _torch_c_dlpack_ext_core.version import __version__
from devtools.base.errors import ReleaseError
from devtools.base.wheelnames import dist_name_version, parse_wheel_name

__all__ = [
    "ReleaseFiles",
    "WheelInfo",
    "collect",
    "installs_here",
    "read_wheel",
    "split_variants",
    "variants_index_name",
]

#: Where the one version is defined (named in the errors a stale file gets).
VERSION_FILE = "python/_torch_c_dlpack_ext_core/version.py"


def variants_index_name(version: str = __version__) -> str:
    """``torch_c_dlpack_ext-0.2.0-variants.json``: the PEP 825 index file of a version."""
    return f"{PACKAGE}-{version}-variants.json"


@dataclasses.dataclass(frozen=True)
class WheelInfo:
    """What a release needs to know about one built wheel."""

    path: Path
    #: ``py3-none-any`` style tag triples the wheel's file name declares.
    tags: frozenset[str]
    #: The wheel carries ``*.dist-info/variant.json`` (a PEP 825 variant wheel).
    variant: bool
    #: Libraries its manifest lists (empty for the universal wheel).
    libraries: tuple[ManifestEntry, ...]
    #: The PEP 825 variant label of its file name (``None``: none).
    label: str | None = None

    @property
    def universal(self) -> bool:
        return not self.libraries


@dataclasses.dataclass(frozen=True)
class ReleaseFiles:
    """The publishable content of a ``dist/`` folder, validated."""

    version: str
    wheels: tuple[WheelInfo, ...]
    sdists: tuple[Path, ...]
    #: ``{name}-{version}-variants.json``, when the build produced one.
    variants_index: Path | None

    def dists(self, *, variant_wheels: bool = True) -> tuple[Path, ...]:
        """Files ``twine`` uploads: wheels (optionally without variant wheels), then sdists."""
        wheels = tuple(w.path for w in self.wheels if variant_wheels or not w.variant)
        return wheels + self.sdists


def read_wheel(path: Path) -> WheelInfo:
    """Read a wheel's tags, variant marker and bundled manifest (no extraction)."""
    name = parse_wheel_name(path.name)
    try:
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
            variant = any(n.endswith(".dist-info/variant.json") for n in names)
            manifest_name = f"{PACKAGE}/{MANIFEST_NAME}"
            libraries: tuple[ManifestEntry, ...] = ()
            if manifest_name in names:
                data = json.loads(archive.read(manifest_name))
                libraries = tuple(
                    ManifestEntry.from_json(item) for item in data.get("libraries", [])
                )
    except (OSError, zipfile.BadZipFile, json.JSONDecodeError) as exc:
        raise ReleaseError(f"{path.name}: not a readable wheel ({exc}); rebuild it") from None
    return WheelInfo(
        path=path, tags=name.tag_strings, variant=variant, libraries=libraries, label=name.label
    )


def _check_dist_file(path: Path, version: str) -> None:
    if not path.name.endswith((".whl", ".tar.gz")):
        raise ReleaseError(
            f"{path}: not a wheel, sdist or variants index; "
            "remove it, dist/ is published as a whole"
        )
    dist_name, parsed_version = dist_name_version(path.name)
    if dist_name != canonicalize_name(DIST_NAME):
        raise ReleaseError(f"{path}: belongs to {dist_name!r}, not {DIST_NAME!r}")
    if parsed_version != Version(version):
        raise ReleaseError(
            f"{path}: version {parsed_version}, but {VERSION_FILE} says {version}; "
            "remove stale files from dist/ and rebuild"
        )


def collect(dist: Path, *, version: str = __version__, require_sdist: bool = True) -> ReleaseFiles:
    """Validate ``dist`` and return what a release of ``version`` publishes.

    Every wheel and sdist must be of this project and of ``version``: a stale
    file from an earlier build would otherwise be published under the wrong
    version. Raises :class:`ReleaseError` naming the offending file.
    """
    if not dist.is_dir():
        raise ReleaseError(f"{dist}: no such directory; run `nox -s build` first")
    wheels: list[WheelInfo] = []
    sdists: list[Path] = []
    index: Path | None = None
    for path in sorted(dist.iterdir()):
        if path.name.startswith(".") or path.is_dir():
            continue  # temp files of an atomic write, caches
        if path.name.endswith("-variants.json"):
            if path.name != variants_index_name(version):
                raise ReleaseError(
                    f"{path}: variants index of another version; "
                    f"expected {variants_index_name(version)} (remove stale files)"
                )
            index = path
            continue
        _check_dist_file(path, version)
        if path.name.endswith(".whl"):
            wheels.append(read_wheel(path))
        else:
            sdists.append(path)
    if not wheels:
        raise ReleaseError(f"{dist}: no wheels of {DIST_NAME} {version}; run `nox -s build`")
    if require_sdist and not sdists:
        raise ReleaseError(f"{dist}: no sdist of {DIST_NAME} {version}; run `nox -s build`")
    if not any(w.universal for w in wheels):
        raise ReleaseError(
            f"{dist}: no universal (py3-none-any) wheel; without it platforms with no "
            "combined wheel cannot install the package"
        )
    return ReleaseFiles(
        version=version, wheels=tuple(wheels), sdists=tuple(sdists), variants_index=index
    )


def split_variants(dist: Path, dest: Path) -> list[Path]:
    """Move the PEP 825 variant wheels and the variants index from ``dist`` to
    ``dest``, so ``dist`` holds only what PyPI accepts today (combined and
    universal wheels, sdist). Returns the moved files' new paths."""
    index = dist / variants_index_name()
    if not index.is_file():
        raise ReleaseError(f"{index}: missing; `nox -s build` writes it next to the wheels")
    moving = [index] + [p for p in sorted(dist.glob("*.whl")) if read_wheel(p).variant]
    dest.mkdir(parents=True, exist_ok=True)
    moved = []
    for source in moving:
        target = dest / source.name
        atomic_write_bytes(target, source.read_bytes())
        source.unlink()
        moved.append(target)
    return moved


def installs_here(wheel: WheelInfo) -> bool:
    """The wheel's tags include one this interpreter supports."""
    supported = {str(tag) for tag in sys_tags()}
    return bool(wheel.tags & supported)
