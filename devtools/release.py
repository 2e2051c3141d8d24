"""Release steps: check and publish ``dist/``, plus the small steps the release
workflow runs between nox sessions.

``nox -s release -- --repository-url URL`` calls :func:`publish`; ``nox -s rehearse``
calls the same function against a local index. Subcommands (``python -m
devtools.release --help``):

- ``upload``: ``twine check --strict``, then ``twine upload`` of the wheels and the
  sdist; the variants index (``{name}-{version}-variants.json``) goes to
  ``--variants-dir`` when given (a directory an index serves), because no
  upload API takes it yet (PyPI's PEP 825 support is pending);
- ``check-tag TAG``: the pushed tag names the version in ``_version.py``;
- ``publish-target --event E --ref R --publish BOOL``: where this run may publish
  (the publish guard): PyPI only from a pushed tag ``v<version>``, TestPyPI at
  most from a manual run, nothing otherwise; ``$GITHUB_OUTPUT`` lines;
- ``github-matrix FILE``: turn ``nox -s matrix`` output into ``$GITHUB_OUTPUT`` lines
  (the build jobs, and the verify jobs: each torch minor on its oldest and newest
  CPython, the free-threaded wheels on theirs);
- ``check-repaired DIR``: no wheel in DIR has libraries a repair tool grafted in;
- ``contents --matrix FILE --dist DIST [--cells DIR] [--out DIR]``: the release's
  contents, cell by cell (present, or absent and why), as JSON and Markdown notes;
- ``split-variants DIST DEST``: move the variant wheels and the variants index out
  of the files PyPI accepts today;
- ``test-installed``: cibuildwheel's test command for one job's wheel;
- ``verify DIST [--expect FILE] [--torch 2.8,2.9]``: every expected cell is in the
  release exactly once (absent only where matrix.toml allows its job to fail), then
  install each wheel that fits this interpreter with each torch it serves (or the
  minors ``--torch`` names) into a fresh environment and check what ``python -m
  torch_c_dlpack_ext --json`` decides.

Credentials come only from the environment (``TWINE_USERNAME`` /
``TWINE_PASSWORD``, or Trusted Publishing in CI) and are never printed.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import urllib.parse
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.tags import sys_tags
from packaging.utils import canonicalize_name, parse_sdist_filename
from packaging.version import InvalidVersion, Version

from _torch_c_dlpack_ext_core.errors import CommandError, ConfigError
from _torch_c_dlpack_ext_core.manifest import (
    ManifestEntry,
    atomic_write_bytes,
)
from _torch_c_dlpack_ext_core.naming import DIST_NAME, MANIFEST_NAME, PACKAGE
from _torch_c_dlpack_ext_core.run import run
from _torch_c_dlpack_ext_core.version import __version__
from devtools import ROOT
from devtools.errors import HANDLED, MatrixError, ReleaseError

__all__ = [
    "CellStatus",
    "PublishTarget",
    "ReleaseFiles",
    "WheelInfo",
    "check_repaired",
    "check_tag",
    "collect",
    "github_matrix",
    "installs_here",
    "publish",
    "publish_target",
    "read_wheel",
    "release_contents",
    "requires_python",
    "split_variants",
    "twine_check",
    "twine_upload",
    "validate_repository_url",
    "variants_index_name",
    "verify_matrix",
]

#: Time limits (seconds) so a stuck index or resolver never hangs a release.
TWINE_CHECK_TIMEOUT = 300.0
TWINE_UPLOAD_TIMEOUT = 1800.0
INSTALL_TIMEOUT = 1800.0
DIAGNOSE_TIMEOUT = 300.0


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


def _wheel_tags(name: str) -> frozenset[str]:
    # PEP 825 appends "-{label}" after the platform tag; PEP 427 allows an optional
    # build tag (starting with a digit) after the version. Parse both shapes.
    parts = name[: -len(".whl")].split("-")
    if len(parts) == 6 and not parts[2][:1].isdigit():
        py, abi, plat = parts[2:5]
    elif len(parts) in (5, 6):
        py, abi, plat = parts[-3:]
    else:
        raise ReleaseError(f"{name}: not a wheel file name (dist-version-py-abi-platform.whl)")
    return frozenset(
        f"{p}-{a}-{pl}" for p in py.split(".") for a in abi.split(".") for pl in plat.split(".")
    )


def read_wheel(path: Path) -> WheelInfo:
    """Read a wheel's tags, variant marker and bundled manifest (no extraction)."""
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
    return WheelInfo(path=path, tags=_wheel_tags(path.name), variant=variant, libraries=libraries)


def _name_version(filename: str) -> tuple[str, str]:
    if filename.endswith(".whl"):
        name, version = filename.split("-")[:2]
        return name, version
    name, parsed = parse_sdist_filename(filename)
    return name, str(parsed)


def _check_dist_file(path: Path, version: str) -> None:
    if not path.name.endswith((".whl", ".tar.gz")):
        raise ReleaseError(
            f"{path}: not a wheel, sdist or variants index; "
            "remove it, dist/ is published as a whole"
        )
    try:
        dist_name, file_version = _name_version(path.name)
        parsed_version = Version(file_version)
    except (ValueError, InvalidVersion):
        raise ReleaseError(f"{path}: cannot read name and version") from None
    if canonicalize_name(dist_name) != canonicalize_name(DIST_NAME):
        raise ReleaseError(f"{path}: belongs to {dist_name!r}, not {DIST_NAME!r}")
    if parsed_version != Version(version):
        raise ReleaseError(
            f"{path}: version {parsed_version}, but _version.py says {version}; "
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


def validate_repository_url(url: str) -> str:
    """Accept an http(s) upload URL without embedded credentials."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ConfigError(
            f"--repository-url {url!r} is not an http(s) URL "
            "(e.g. https://upload.pypi.org/legacy/ or http://127.0.0.1:8080/)"
        )
    if parsed.username or parsed.password:
        raise ConfigError(
            "--repository-url must not carry credentials (they would be echoed); "
            "set TWINE_USERNAME and TWINE_PASSWORD in the environment instead"
        )
    return url


def _twine() -> list[str]:
    return [sys.executable, "-m", "twine"]


def twine_check(files: Sequence[Path]) -> None:
    """``twine check --strict``: metadata renders and nothing is merely warned about."""
    run([*_twine(), "check", "--strict", *files], timeout=TWINE_CHECK_TIMEOUT)


def twine_upload(files: Sequence[Path], repository_url: str, *, skip_existing: bool) -> None:
    """Upload ``files`` with twine; credentials come from the environment only."""
    cmd = [*_twine(), "upload", "--non-interactive", "--disable-progress-bar"]
    cmd += ["--repository-url", validate_repository_url(repository_url)]
    if skip_existing:
        cmd.append("--skip-existing")
    run([*cmd, *files], timeout=TWINE_UPLOAD_TIMEOUT)


def publish(
    dist: Path,
    *,
    repository_url: str | None,
    skip_existing: bool = False,
    variants_dir: Path | None = None,
    variant_wheels: bool = True,
    check_only: bool = False,
) -> ReleaseFiles:
    """Check, then upload, one release from ``dist``.

    ``variants_dir``: a directory the target index serves files from; the
    variants index is copied there (atomically). Without it the variants index
    is reported and left in ``dist`` (no index's upload API accepts it yet).
    ``variant_wheels=False`` leaves PEP 825 variant wheels out (for indexes that
    reject their file names).
    """
    if not check_only:
        # Bad arguments fail before any work is done.
        if repository_url is None:
            raise ConfigError("--repository-url is required to upload (or pass --check-only)")
        validate_repository_url(repository_url)
    files = collect(dist)
    dists = files.dists(variant_wheels=variant_wheels)
    print(f"release {files.version}: {len(dists)} file(s) from {dist}", file=sys.stderr)
    twine_check(dists)
    if check_only or repository_url is None:
        return files
    twine_upload(dists, repository_url, skip_existing=skip_existing)
    if files.variants_index is not None:
        if variants_dir is not None:
            atomic_write_bytes(
                variants_dir / files.variants_index.name, files.variants_index.read_bytes()
            )
            print(f"placed {files.variants_index.name} into {variants_dir}", file=sys.stderr)
        else:
            print(
                f"note: {files.variants_index.name} was not uploaded: index upload APIs "
                "do not accept it yet (PEP 825 support pending); it stays in "
                f"{dist} and in the release workflow's attested artifacts",
                file=sys.stderr,
            )
    return files


def check_tag(tag: str, version: str = __version__) -> None:
    """The release tag must be ``v`` + the version in ``_version.py``."""
    if tag != f"v{version}":
        raise ReleaseError(
            f"tag {tag!r} does not match python/_torch_c_dlpack_ext_core/version.py "
            f"({version!r}); tag v{version}, or bump _version.py and CHANGELOG.md first"
        )


@dataclasses.dataclass(frozen=True)
class PublishTarget:
    """Where a release workflow run may upload (``index`` ``"none"``: nowhere)."""

    index: str
    repository_url: str = ""
    project_url: str = ""

    def output_lines(self) -> list[str]:
        return [
            f"index={self.index}",
            f"repository_url={self.repository_url}",
            f"project_url={self.project_url}",
        ]


def publish_target(
    event: str, ref: str, publish: bool, *, version: str = __version__
) -> PublishTarget:
    """The publish guard: PyPI only from a pushed tag ``v<version>`` (every cell of
    matrix.toml: a tag push has no ``cells`` input), TestPyPI at most from a manual
    run (``publish`` true), nothing otherwise. A file name burned on PyPI can never
    be uploaded again, so a partial or untagged build must never reach it."""
    if event == "push":
        if not ref.startswith("refs/tags/"):
            raise ReleaseError(f"push of {ref!r} is not a tag push; only tags v<version> publish")
        check_tag(ref.removeprefix("refs/tags/"), version)
        return PublishTarget(
            index="pypi",
            repository_url="https://upload.pypi.org/legacy/",
            project_url=f"https://pypi.org/project/{DIST_NAME}/{version}/",
        )
    if event == "workflow_dispatch":
        if not publish:
            return PublishTarget(index="none")
        return PublishTarget(
            index="testpypi",
            repository_url="https://test.pypi.org/legacy/",
            project_url=f"https://test.pypi.org/project/{DIST_NAME}/{version}/",
        )
    raise ReleaseError(f"event {event!r} never publishes; expected push or workflow_dispatch")


def _python_version(python: str) -> Version:
    """``3.12`` or a free-threaded ``3.14t`` as a :class:`Version` (the ``t`` dropped)."""
    return Version(python.removesuffix("t"))


def verify_matrix(jobs: Sequence[dict[str, Any]]) -> list[dict[str, str]]:
    """The verify job's matrix: the abi3 wheel is installed on the oldest and the newest
    CPython each torch minor supports on the platform (the jobs' ``torch`` field), with
    that minor's torch; a free-threaded wheel on its own Python. One entry per (runner,
    Python), naming the torch minors it checks (``"2.4,2.5"``); a runner installs only
    wheels of its own platform."""
    wanted: dict[tuple[str, str], set[str]] = {}
    for job in jobs:
        for minor, pythons in dict(job.get("torch") or {}).items():
            if not pythons:
                continue
            ordered = sorted(pythons, key=_python_version)
            for python in {ordered[0], ordered[-1]}:
                wanted.setdefault((str(job["runner"]), python), set()).add(str(minor))
    ordered_pairs = sorted(wanted, key=lambda pair: (pair[0], _python_version(pair[1]), pair[1]))
    return [
        {
            "runner": runner,
            "python": python,
            "torch": ",".join(sorted(wanted[runner, python], key=Version)),
        }
        for runner, python in ordered_pairs
    ]


def github_matrix(matrix: Any, *, requires_python: str | None = None) -> dict[str, Any]:
    """From ``nox -s matrix`` JSON, the build matrix and the verify matrix.

    The build matrix keeps the jobs as they are (``{"include": [jobs]}``). The
    matrix yields no job for a Python outside ``requires_python``; one in the
    input (a hand-made file) is an error, since cibuildwheel would select
    nothing for it. The verify matrix is :func:`verify_matrix`'s.
    """
    if not isinstance(matrix, dict) or not isinstance(matrix.get("include"), list):
        raise MatrixError('matrix JSON must be an object with an "include" list of jobs')
    jobs = matrix["include"]
    bad = [
        job for job in jobs if not isinstance(job, dict) or not {"runner", "python"} <= job.keys()
    ]
    if bad:
        raise MatrixError(f"matrix job lacks 'runner' or 'python': {bad[0]!r}")
    if requires_python is not None:
        allowed = SpecifierSet(requires_python)
        outside = [job for job in jobs if _python_version(str(job["python"])) not in allowed]
        if outside:
            raise MatrixError(
                f"job {outside[0].get('id')!r}: Python {outside[0]['python']} is outside "
                f"requires-python {requires_python!r}; regenerate the file with `nox -s matrix`"
            )
    if not jobs:
        raise MatrixError("the matrix selects no jobs; check --only against matrix.toml")
    verify = {"include": verify_matrix(jobs)}
    if not verify["include"]:
        raise MatrixError(
            "no job names the CPythons of its torch minors ('torch'); regenerate the file "
            "with `nox -s matrix`"
        )
    return {"cells": {**matrix, "include": jobs}, "verify": verify}


def requires_python(pyproject: Path = ROOT / "pyproject.toml") -> str | None:
    """``[project] requires-python`` of the project."""
    from build_backend._metadata import load_pyproject

    value = load_pyproject(pyproject.parent).get("project", {}).get("requires-python")
    return str(value) if value is not None else None


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


def check_repaired(directory: Path) -> list[Path]:
    """Every wheel in ``directory`` bundles only its own libraries: a repair tool that
    grafted a copy of torch's (or anything else) is an error naming the files."""
    from devtools.wheels import grafted_libraries

    found = sorted(directory.glob("*.whl"))
    if not found:
        raise ReleaseError(f"{directory}: no wheels; did the build and repair steps run?")
    for wheel in found:
        grafted = grafted_libraries(wheel)
        if grafted:
            raise ReleaseError(
                f"{wheel.name}: the repair step grafted {', '.join(grafted[:5])}; "
                "exclude them in [tool.cibuildwheel] (devtools/wheels.py AUDITWHEEL_EXCLUDES)"
            )
    return found


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

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["combined"], data["variants"] = list(self.combined), list(self.variants)
        return data


def _label_of(wheel: WheelInfo) -> str:
    parts = wheel.path.name[: -len(".whl")].split("-")
    return parts[-1]


def _cells_in_wheels(
    matrix: Any, wheels: Sequence[WheelInfo]
) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """``{cell id: [wheel names]}`` for combined and for variant wheels."""
    from devtools.wheels import cell_for_entry

    combined: dict[str, list[str]] = {}
    variants: dict[str, list[str]] = {}
    for wheel in wheels:
        if wheel.universal:
            continue
        for entry in wheel.libraries:
            try:
                cell = cell_for_entry(matrix, entry)
            except MatrixError:
                cell_id = f"{wheel.path.name}:{entry.file}"
            else:
                cell_id = cell.id
                if wheel.variant and cell.label != _label_of(wheel):
                    continue  # the CPU fallback a GPU variant wheel carries
            (variants if wheel.variant else combined).setdefault(cell_id, []).append(
                wheel.path.name
            )
    return combined, variants


def release_contents(
    jobs: Sequence[dict[str, Any]], wheels: Sequence[WheelInfo], *, arrived: set[str] | None = None
) -> list[CellStatus]:
    """Cell by cell, what the release holds of the cells ``jobs`` (``nox -s matrix``
    entries) promise: a cell is present when exactly one combined wheel carries its
    library and exactly one variant wheel is labelled for it. ``arrived``: ids of the
    jobs whose artifact reached the assemble job, to say why a cell is absent."""
    from devtools.matrix import load_matrix

    combined, variants = _cells_in_wheels(load_matrix(), wheels)
    expected = {cell: job for job in jobs for cell in job.get("cells", [])}
    statuses: list[CellStatus] = []
    for cell_id, job in expected.items():
        where_c = tuple(combined.get(cell_id, ()))
        where_v = tuple(variants.get(cell_id, ()))
        allowed = str(job.get("allow_failure") or "")
        job_id = str(job.get("id", ""))
        if len(where_c) > 1 or len(where_v) > 1:
            state, reason = "duplicate", "in more than one wheel of a kind"
        elif where_c and where_v:
            state, reason = "present", ""
        else:
            state = "absent"
            if arrived is not None and job_id not in arrived:
                reason = f"job {job_id} uploaded no wheels (it failed or was cancelled)"
            else:
                missing = " or ".join(
                    kind for kind, where in (("combined", where_c), ("variant", where_v))
                    if not where
                )  # fmt: skip
                reason = f"no {missing} wheel holds it"
        statuses.append(CellStatus(cell_id, job_id, state, where_c, where_v, reason, allowed))
    statuses.extend(
        CellStatus(
            cell_id, "", "unexpected", tuple(combined.get(cell_id, ())),
            tuple(variants.get(cell_id, ())), "no job of the matrix builds it",
        )
        for cell_id in sorted((combined.keys() | variants.keys()) - expected.keys())
    )  # fmt: skip
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
            + (" (`devtools/release.py verify --expect` fails)." if blocking else "."),
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


def load_jobs(path: Path) -> list[dict[str, Any]]:
    """The jobs of a ``nox -s matrix`` JSON file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise MatrixError(f"{path}: not readable JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("include"), list):
        raise MatrixError(f'{path}: expected `nox -s matrix` output (an "include" list)')
    return list(data["include"])


def arrived_jobs(cells_dir: Path) -> set[str]:
    """Job ids whose artifact (``cell-<job id>/``, as download-artifact lays them out)
    holds at least one wheel."""
    prefix = "cell-"
    if not cells_dir.is_dir():
        return set()
    return {
        d.name[len(prefix) :]
        for d in cells_dir.iterdir()
        if d.is_dir() and d.name.startswith(prefix) and any(d.rglob("*.whl"))
    }


def write_contents(
    matrix_file: Path, dists: Sequence[Path], *, cells_dir: Path | None, out: Path | None
) -> list[CellStatus]:
    """``contents``: print the release notes; with ``out``, also write
    ``release-contents.json`` and ``NOTES.md`` there. Never fails on absent cells
    (the verify step does): the notes must be written especially then."""
    jobs = load_jobs(matrix_file)
    wheels = [read_wheel(p) for d in dists for p in sorted(d.glob("*.whl"))]
    arrived = arrived_jobs(cells_dir) if cells_dir is not None else None
    statuses = release_contents(jobs, wheels, arrived=arrived)
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
        if entry.backend.value == backend and entry.torch == torch and entry.cxx11_abi == cxx11_abi:
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
    run(["uv", "venv", "--python", sys.executable, root], timeout=INSTALL_TIMEOUT)
    return root / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


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
                    ["uv", "pip", "install", "--python", python, f"torch=={torch}.*", wheel.path],
                    timeout=INSTALL_TIMEOUT,
                )
                line = check_against_torch(python, wheel.libraries, torch)
                results.append(f"{wheel.path.name}: {line}")
                shutil.rmtree(python.parent.parent, ignore_errors=True)
        for wheel in wheels:
            if wheel.universal:
                python = _venv(Path(tmp) / "universal")
                run(
                    ["uv", "pip", "install", "--python", python, wheel.path],
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


def _installed_manifest(python: Path) -> tuple[ManifestEntry, ...]:
    # Locate the installed package without importing it (importing would run the
    # selector before the matching torch is installed).
    probe = (
        "import importlib.util, sys; "
        f"spec = importlib.util.find_spec({PACKAGE!r}); "
        "sys.stdout.write(spec.submodule_search_locations[0])"
    )
    package_dir = Path(run([python, "-c", probe], timeout=DIAGNOSE_TIMEOUT).stdout.strip())
    path = package_dir / MANIFEST_NAME
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ReleaseError(f"{path}: installed wheel has no readable manifest ({exc})") from None
    return tuple(ManifestEntry.from_json(item) for item in data.get("libraries", []))


#: GitHub's own marker of a hosted run (``true``), passed into the build container by
#: ``[tool.cibuildwheel] environment-pass``: only there may the test step delete the
#: build's caches (see :func:`free_build_cache`). Not a project variable on purpose:
#: the runtime reports unknown ``TORCH_C_DLPACK_EXT_*`` names and loads nothing.
FREE_BUILD_CACHE = "GITHUB_ACTIONS"


def _uv_cache_dir(environ: Mapping[str, str]) -> Path:
    # uv's documented default locations (UV_CACHE_DIR wins).
    if environ.get("UV_CACHE_DIR"):
        return Path(environ["UV_CACHE_DIR"])
    if os.name == "nt":
        return Path(environ.get("LOCALAPPDATA", Path.home() / "AppData" / "Local")) / "uv" / "cache"
    return Path(environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "uv"


def _tree_size(path: Path) -> int:
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += (Path(folder) / name).lstat().st_size
    return total


def free_build_cache(environ: Mapping[str, str] = os.environ) -> list[tuple[Path, int]]:
    """Between a release job's build and its test: delete the cells' torch build
    environments (``$TCDE_DEV_CACHE/envs``) and uv's cache, which hold
    ~12 GB on a CUDA job (7 torch envs of 1.6-1.7 GB; uv hard-links them from its
    cache, so both must go) before the test installs a ~5 GB importable torch.
    Only on GitHub Actions (``GITHUB_ACTIONS=true``: the runners are thrown away; a
    developer's caches are not). Returns ``[(path, bytes freed)]``."""
    if environ.get(FREE_BUILD_CACHE) != "true":
        print(f"build caches kept ({FREE_BUILD_CACHE} is not true)", file=sys.stderr)
        return []
    dev = environ.get("TCDE_DEV_CACHE")
    envs = (Path(dev) if dev else Path.home() / ".cache" / "torch-c-dlpack-ext-dev") / "envs"
    freed = []
    for path in (envs, _uv_cache_dir(environ)):
        if path.is_dir():
            size = _tree_size(path)
            shutil.rmtree(path, ignore_errors=True)
            freed.append((path, size))
            print(f"freed {size / 2**30:.1f} GiB: {path}", file=sys.stderr)
    return freed


def check_installed_job(python: Path) -> str:
    """cibuildwheel's test command. The job's wheel is installed in ``python``'s
    environment: free the build's caches (release runners only), install the newest
    torch minor it bundles (from the index, as a user would) and check the decision.
    The verify job covers every minor."""
    free_build_cache()
    entries = _installed_manifest(python)
    if not entries:
        raise ReleaseError(
            "the job's wheel bundles no library; check TCDE_JOB_CELLS and before-build"
        )
    torch = max({e.torch for e in entries}, key=lambda v: tuple(int(p) for p in v.split(".")))
    # No pip cache: a CUDA torch is ~3 GB of wheels the runner's disk cannot spare.
    run(
        [python, "-m", "pip", "install", "--no-cache-dir", f"torch=={torch}.*"],
        timeout=INSTALL_TIMEOUT,
    )
    return check_against_torch(python, entries, torch)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="release", description=__doc__.split("\n\n")[0])
    parser.add_argument("--traceback", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", required=True)

    upload = sub.add_parser("upload", help="twine check --strict, then twine upload")
    upload.add_argument("--dist", type=Path, default=ROOT / "dist")
    upload.add_argument("--repository-url", help="upload endpoint of the index")
    upload.add_argument("--check-only", action="store_true", help="run twine check only")
    upload.add_argument(
        "--skip-existing", action="store_true", help="skip files the index already has"
    )
    upload.add_argument(
        "--variants-dir", type=Path, help="directory the index serves; gets variants.json"
    )
    upload.add_argument(
        "--no-variant-wheels",
        dest="variant_wheels",
        action="store_false",
        help="leave PEP 825 variant wheels out (indexes that reject their names)",
    )

    tag = sub.add_parser("check-tag", help="the tag is v<version of _version.py>")
    tag.add_argument("tag")

    target = sub.add_parser("publish-target", help="where this run may publish (the guard)")
    target.add_argument("--event", required=True, help="github.event_name")
    target.add_argument("--ref", required=True, help="github.ref")
    target.add_argument("--publish", default="false", help="the dispatch input (true/false)")

    gh = sub.add_parser("github-matrix", help="nox -s matrix JSON -> $GITHUB_OUTPUT lines")
    gh.add_argument("matrix", type=Path)

    repaired = sub.add_parser("check-repaired", help="no wheel in DIR has grafted libraries")
    repaired.add_argument("directory", type=Path)

    contents = sub.add_parser("contents", help="cell by cell: what the release holds, and why not")
    contents.add_argument("--matrix", type=Path, required=True, help="nox -s matrix JSON")
    contents.add_argument("--dist", type=Path, action="append", required=True)
    contents.add_argument("--cells", type=Path, help="the downloaded job artifacts (cell-<job>/)")
    contents.add_argument("--out", type=Path, help="write release-contents.json and NOTES.md")

    split = sub.add_parser(
        "split-variants", help="move variant wheels and variants.json out of dist/"
    )
    split.add_argument("dist", type=Path)
    split.add_argument("dest", type=Path)

    ver = sub.add_parser("verify", help="install each wheel with its torch; check the selector")
    ver.add_argument("dist", type=Path)
    ver.add_argument("--expect", type=Path, help="nox -s matrix JSON: every cell must be there")
    ver.add_argument(
        "--no-install", dest="install", action="store_false", help="check contents only"
    )
    ver.add_argument(
        "--torch", default=None, help="comma-separated torch minors to install (default: all)"
    )

    sub.add_parser(
        "test-installed", help="cibuildwheel test: install the cell's torch, run diagnostics"
    )
    return parser


def _cmd_upload(args: argparse.Namespace) -> None:
    publish(
        args.dist,
        repository_url=args.repository_url,
        skip_existing=args.skip_existing,
        variants_dir=args.variants_dir,
        variant_wheels=args.variant_wheels,
        check_only=args.check_only,
    )


def _cmd_publish_target(args: argparse.Namespace) -> None:
    flag = args.publish.strip().lower()
    if flag not in ("true", "false", ""):
        raise ConfigError(f"--publish {args.publish!r}: expected true or false")
    for line in publish_target(args.event, args.ref, flag == "true").output_lines():
        print(line)


def _cmd_github_matrix(args: argparse.Namespace) -> None:
    try:
        data = json.loads(args.matrix.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise MatrixError(f"{args.matrix}: not readable JSON ({exc})") from None
    for key, value in github_matrix(data, requires_python=requires_python()).items():
        print(f"{key}={json.dumps(value, separators=(',', ':'))}")


def _cmd_check_repaired(args: argparse.Namespace) -> None:
    for path in check_repaired(args.directory):
        print(f"{path.name}: bundles only its own libraries")


def _cmd_split_variants(args: argparse.Namespace) -> None:
    for path in split_variants(args.dist, args.dest):
        print(path)


def _cmd_verify(args: argparse.Namespace) -> None:
    expect = load_jobs(args.expect) if args.expect is not None else None
    torch = None
    if args.torch is not None:
        torch = [m.strip() for m in args.torch.split(",") if m.strip()]
        if not torch:
            raise ConfigError(f"--torch {args.torch!r} names no torch minor (e.g. 2.8,2.9)")
    verify(args.dist, expect=expect, install=args.install, torch=torch)


_COMMANDS: dict[str, Any] = {
    "upload": _cmd_upload,
    "check-tag": lambda args: check_tag(args.tag),
    "publish-target": _cmd_publish_target,
    "github-matrix": _cmd_github_matrix,
    "check-repaired": _cmd_check_repaired,
    "contents": lambda args: write_contents(
        args.matrix, args.dist, cells_dir=args.cells, out=args.out
    ),
    "split-variants": _cmd_split_variants,
    "verify": _cmd_verify,
    "test-installed": lambda args: print(check_installed_job(Path(sys.executable))),
}


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; errors become one line and a stable exit code."""
    args = _parser().parse_args(argv)
    try:
        _COMMANDS[args.command](args)
    except HANDLED as exc:
        if args.traceback:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
