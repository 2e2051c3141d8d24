"""The ONE reader of ``matrix.toml``, and ``nox -s matrix`` (CI's job matrix as JSON).

``nox -s build``, ``nox -s matrix``, the release tools, the dataflow rehearsal and the
tests all call :func:`load_matrix`; a source build never does (the sdist carries
neither this file nor ``matrix.toml``). The file is validated on read: an unknown
key, platform, backend or index raises :class:`~devtools.errors.MatrixError` with a
"did you mean" hint; a selection that matches nothing is a bad argument
(:class:`~_torch_c_dlpack_ext_core.errors.ConfigError`).

A *cell* is one library: (platform, torch minor, backend, C++ ABI, Python ABI). The
Python ABI is ``abi3`` for every normal cell (compiled once with the limited API, it
serves every CPython with the GIL from 3.9 on: no CPython version is part of its
identity) or a free-threaded CPython (``3.13t``, ``3.14t``) for the torch minors that
ship free-threaded wheels on that platform. Each ``[[torch.wheel]]`` flavour yields
its own backend's library and the CPU library of the same ABI; when two flavours yield
the same cell the first listed wins. A torch minor's ``python`` list (its CPythons
with the GIL) only bounds the abi3 cells: the oldest entry inside the project's
``requires-python`` (read from the ``pyproject.toml`` next to ``matrix.toml``) is the
floor, and the release's ``verify`` installs the abi3 wheel on the oldest and the
newest of them.

Identities (:class:`Cell`; the one place they are spelled):

- cell id ``<platform>-<label>[-cp3XYt]``: ``linux_x86_64-t28_cpu``,
  ``linux_x86_64-t26_cuda_abi0``, ``linux_x86_64-t29_cpu-cp314t``;
- job id ``<platform>-<flavour backend>[<toolkit>][-cp3XYt]``: ``linux_x86_64-cuda``,
  ``linux_x86_64-rocm6.4``, ``linux_x86_64-cuda-cp314t``;
- variant label ``t<major><minor>_<backend>[_abi<0|1>]`` (PEP 825): ``t28_cpu``. The
  label carries no Python: an abi3 and a free-threaded variant wheel of one cell share
  it, their wheel tags (``cp39-abi3``, ``cp314-cp314t``) tell them apart.
"""

from __future__ import annotations

import dataclasses
import difflib
import fnmatch
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from _torch_c_dlpack_ext_core.errors import ConfigError
from _torch_c_dlpack_ext_core.naming import (
    ABI3,
    Backend,
    library_filename,
    parse_backend,
    python_target_tags,
    variant_label,
)
from devtools.errors import MatrixError
from devtools.hostenv import requires_python

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.9/3.10 only
    import tomli as tomllib

__all__ = [
    "MATRIX_FILE",
    "Cell",
    "Matrix",
    "Platform",
    "TorchMinor",
    "TorchWheel",
    "load_matrix",
    "parse_matrix",
]

#: ``matrix.toml`` at the repository root.
MATRIX_FILE = Path(__file__).resolve().parents[1] / "matrix.toml"
SCHEMA = 1

_TOP_KEYS = ("schema", "platforms", "indexes", "backends", "freethreaded", "torch")
_PLATFORM_KEYS = ("os", "machine", "runner", "cibw_platform", "cibw_arch", "image")
_BACKEND_KEYS = ("toolchain", "images", "allow_failure")
_TORCH_KEYS = ("minor", "release", "python", "freethreaded", "python_exclude", "wheel")
_WHEEL_KEYS = (
    "index",
    "backend",
    "toolkit",
    "toolkit_requirements",
    "platforms",
    "cxx11_abi",
    "freethreaded",
)
_FREETHREADED_KEYS = ("release", "reason")
_OSES = ("linux", "windows", "macos")


#: How many close matches an unknown cell id is answered with.
_CLOSE_MATCHES = 5


def _hint(value: str, choices: Iterable[str]) -> str:
    choices = list(choices)
    close = difflib.get_close_matches(value, choices, n=1)
    listed = ", ".join(choices)
    return f" (did you mean {close[0]!r}?)" if close else f" (expected one of: {listed})"


def _check_keys(where: str, table: Mapping[str, Any], allowed: Sequence[str]) -> None:
    for key in table:
        if key not in allowed:
            raise MatrixError(f"matrix.toml: unknown key {key!r} in {where}{_hint(key, allowed)}")


def _choice(where: str, value: Any, choices: Iterable[str]) -> str:
    choices = list(choices)
    if not isinstance(value, str) or value not in choices:
        raise MatrixError(
            f"matrix.toml: {where} = {value!r} is not known{_hint(str(value), choices)}"
        )
    return value


def _str(where: str, table: Mapping[str, Any], key: str, *, required: bool = True) -> str | None:
    value = table.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        raise MatrixError(f"matrix.toml: {where} needs {key} as a non-empty string, got {value!r}")
    return value


def _version_tuple(where: str, value: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in value.split("."))
    except ValueError:
        raise MatrixError(f"matrix.toml: {where}: {value!r} is not a dotted version") from None


@dataclasses.dataclass(frozen=True)
class Platform:
    """A wheel platform the matrix builds for (``linux_x86_64``...)."""

    name: str
    os: str
    #: ``platform.machine()`` on that platform (``x86_64``, ``AMD64``, ``arm64``).
    machine: str
    runner: str
    cibw_platform: str
    cibw_arch: str
    #: manylinux image cibuildwheel builds in (Linux only).
    image: str | None

    @property
    def dual_abi(self) -> bool:
        """libstdc++'s dual ABI applies (Linux): library names and cells carry it."""
        return self.os == "linux"

    @property
    def sys_platform(self) -> str:
        return {"linux": "linux", "windows": "win32", "macos": "darwin"}[self.os]


@dataclasses.dataclass(frozen=True)
class TorchWheel:
    """One torch wheel flavour we compile against (an index, a backend, an ABI per platform)."""

    index: str
    index_url: str
    backend: Backend
    #: CUDA / ROCm version of that torch build (``None`` for CPU builds).
    toolkit: str | None
    #: Extra requirements supplying GPU headers at build time.
    toolkit_requirements: tuple[str, ...]
    platforms: tuple[str, ...]
    cxx11_abi: Mapping[str, bool]
    #: The flavour's index ships the torch minor's free-threaded wheels (checked for
    #: PyPI; ``freethreaded = false`` where that was not verified).
    freethreaded: bool = True


@dataclasses.dataclass(frozen=True)
class FreeThreaded:
    """``[freethreaded."3.13t"]``: whether the release workflow builds this Python's cells."""

    python: str
    #: The release has jobs for it (``False``: ``nox -s build`` builds its cells, CI not).
    release: bool
    #: Why not (required when ``release`` is false).
    reason: str = ""


@dataclasses.dataclass(frozen=True)
class TorchMinor:
    """A torch minor version and the release built against."""

    minor: str
    release: str
    #: The CPythons with the GIL torch publishes wheels of (oldest first): the abi3
    #: cells' floor and verify's oldest and newest.
    python: tuple[str, ...]
    python_exclude: Mapping[str, tuple[str, ...]]
    wheels: tuple[TorchWheel, ...]
    #: The free-threaded CPythons torch publishes wheels of (``3.13t``).
    freethreaded: tuple[str, ...] = ()

    @property
    def version(self) -> tuple[int, int]:
        major, minor = self.minor.split(".")
        return int(major), int(minor)

    def pythons_for(self, platform: str) -> tuple[str, ...]:
        """The CPython versions (with the GIL) torch publishes wheels of on ``platform``."""
        excluded = self.python_exclude.get(platform, ())
        return tuple(p for p in self.python if p not in excluded)

    def freethreaded_for(self, platform: str) -> tuple[str, ...]:
        """The free-threaded CPythons torch publishes wheels of on ``platform``."""
        excluded = self.python_exclude.get(platform, ())
        return tuple(p for p in self.freethreaded if p not in excluded)


@dataclasses.dataclass(frozen=True)
class Cell:
    """One library to build: (platform, torch minor, backend, C++ ABI, Python ABI)."""

    platform: Platform
    torch: TorchMinor
    backend: Backend
    cxx11_abi: bool | None
    #: The torch flavour compiled against.
    wheel: TorchWheel
    #: The torch minor ships with both ABIs on this platform (labels must tell them apart).
    abi_ambiguous: bool
    #: ``"abi3"`` (every CPython >= 3.9 with the GIL) or a free-threaded ``"3.14t"``: the
    #: library's manifest ``python``.
    python: str = ABI3
    #: The CPythons with the GIL this torch minor supports on the platform (inside
    #: ``requires-python``), oldest first: the interpreters an abi3 library of the cell
    #: serves, and which the release's verify installs it on (the oldest and the newest).
    pythons: tuple[str, ...] = ()
    #: Builder image of the cell's job (``None``: the platform's default image, if any).
    image: str | None = None
    #: The flavour's toolkit when its backend has one builder image per toolkit version
    #: (ROCm): jobs are split by it, since one job runs in one image.
    job_toolkit: str | None = None
    #: Why the cell's job may fail without failing the release (``""``: it may not).
    allow_failure: str = ""
    #: Why the release builds no job for the cell (``""``: it does).
    not_released: str = ""

    @property
    def freethreaded(self) -> bool:
        return self.python != ABI3

    @property
    def python_tag(self) -> str:
        """``abi3``, or the free-threaded interpreter's ``cp314t``."""
        return python_target_tags(self.python)[1]

    @property
    def label(self) -> str:
        """PEP 825 variant label (``t26_cuda`` or ``t26_cuda_abi0``); no Python in it."""
        major, minor = self.torch.version
        return variant_label(
            major, minor, self.backend, self.cxx11_abi, with_abi=self.abi_ambiguous
        )

    @property
    def id(self) -> str:
        """``linux_x86_64-t26_cuda_abi0`` or ``linux_x86_64-t29_cpu-cp314t``: unique in
        the matrix, stable across runs."""
        suffix = f"-{self.python_tag}" if self.freethreaded else ""
        return f"{self.platform.name}-{self.label}{suffix}"

    @property
    def job_id(self) -> str:
        """The cibuildwheel job building this cell: ``linux_x86_64-cuda`` (every Python),
        ``linux_x86_64-cuda-cp314t`` (the free-threaded cells).

        A GPU flavour's job also builds its CPU libraries, so CPU cells of a
        platform that has GPU flavours belong to the first GPU group that
        yields them; CPU-only platforms have one ``cpu`` job. A backend with
        one builder image per toolkit version has one job per version
        (``linux_x86_64-rocm6.1``): a job runs in one image.
        """
        toolkit = self.job_toolkit or ""
        suffix = f"-{self.python_tag}" if self.freethreaded else ""
        return f"{self.platform.name}-{self.wheel.backend.value}{toolkit}{suffix}"

    @property
    def library(self) -> str:
        major, minor = self.torch.version
        return library_filename(
            major, minor, self.backend, self.cxx11_abi, platform=self.platform.sys_platform
        )

    @property
    def toolkit(self) -> str | None:
        return self.wheel.toolkit if self.backend is not Backend.CPU else None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "job": self.job_id,
            "python": self.python,
            "pythons": list(self.pythons),
            "platform": self.platform.name,
            "torch": self.torch.minor,
            "torch_release": self.torch.release,
            "backend": self.backend.value,
            "cxx11_abi": self.cxx11_abi,
            "index": self.wheel.index,
            "index_url": self.wheel.index_url,
            "toolkit": self.toolkit,
            "label": self.label,
            "library": self.library,
        }


def _newest(versions: Iterable[str]) -> str:
    return max(versions, key=lambda v: _version_tuple("python", v.removesuffix("t")))


@dataclasses.dataclass(frozen=True)
class Matrix:
    """The whole build matrix."""

    path: Path
    platforms: Mapping[str, Platform]
    indexes: Mapping[str, str]
    #: Builder image per toolkit version (``[backends.X.images]``), per backend.
    backend_images: Mapping[Backend, Mapping[str, str]]
    torch: tuple[TorchMinor, ...]
    #: ``[project] requires-python``: Pythons outside it yield no cell.
    requires_python: str | None = None
    #: ``[backends.X] allow_failure``: why that backend's jobs may fail.
    allow_failure: Mapping[Backend, str] = dataclasses.field(default_factory=dict)
    #: ``[freethreaded."3.Xt"]``: which free-threaded Pythons the release builds.
    freethreaded: Mapping[str, FreeThreaded] = dataclasses.field(default_factory=dict)

    def supports_python(self, python: str) -> bool:
        """``python`` (``"3.11"``, ``"3.14t"``) is inside the project's ``requires-python``."""
        if self.requires_python is None:
            return True
        from packaging.specifiers import SpecifierSet

        return SpecifierSet(self.requires_python).contains(f"{python.removesuffix('t')}.0")

    def cells(self) -> tuple[Cell, ...]:
        """Every cell, in matrix order (torch minor, flavour, platform, Python ABI, backend):
        per platform the abi3 cell, then one per free-threaded Python torch ships there."""
        seen: dict[tuple[str, str, Backend, bool | None, str], Cell] = {}
        for minor in self.torch:
            abis: dict[str, set[bool]] = {}
            for wheel in minor.wheels:
                for plat, abi in wheel.cxx11_abi.items():
                    abis.setdefault(plat, set()).add(abi)
            for wheel in minor.wheels:
                backends = [wheel.backend] + (
                    [Backend.CPU] if wheel.backend is not Backend.CPU else []
                )
                images = self.backend_images.get(wheel.backend, {})
                for plat_name in wheel.platforms:
                    platform = self.platforms[plat_name]
                    cell_abi = wheel.cxx11_abi.get(plat_name) if platform.dual_abi else None
                    pythons = tuple(
                        p for p in minor.pythons_for(plat_name) if self.supports_python(p)
                    )
                    targets = [ABI3] if pythons else []
                    if wheel.freethreaded:
                        targets += [
                            p for p in minor.freethreaded_for(plat_name) if self.supports_python(p)
                        ]
                    for python in targets:
                        for backend in backends:
                            key = (plat_name, minor.minor, backend, cell_abi, python)
                            if key in seen:
                                continue
                            released = self.freethreaded.get(python)
                            seen[key] = Cell(
                                platform=platform,
                                torch=minor,
                                backend=backend,
                                cxx11_abi=cell_abi,
                                wheel=wheel,
                                abi_ambiguous=len(abis.get(plat_name, ())) > 1,
                                python=python,
                                pythons=pythons,
                                image=images.get(wheel.toolkit or "", platform.image),
                                job_toolkit=wheel.toolkit if images else None,
                                allow_failure=self.allow_failure.get(wheel.backend, ""),
                                not_released=(
                                    released.reason
                                    if released is not None and not released.release
                                    else ""
                                ),
                            )
        return tuple(seen.values())

    def pythons(self) -> tuple[str, ...]:
        """Every CPython with the GIL of the matrix inside ``requires-python``, oldest first."""
        found = {p for minor in self.torch for p in minor.python if self.supports_python(p)}
        return tuple(sorted(found, key=lambda v: _version_tuple("python", v)))

    def python_abis(self) -> tuple[str, ...]:
        """The Python ABIs of the cells: ``abi3`` and the free-threaded Pythons."""
        free = {p for minor in self.torch for p in minor.freethreaded if self.supports_python(p)}
        ordered = sorted(free, key=lambda v: _version_tuple("python", v.removesuffix("t")))
        return (ABI3, *ordered)

    def select(
        self,
        patterns: Sequence[str] = (),
        *,
        python: Sequence[str] = (),
        platform: Sequence[str] = (),
    ) -> tuple[Cell, ...]:
        """Cells matching every filter given.

        ``patterns``: cell ids, job ids or ``fnmatch`` patterns of either
        (``*-t26_*``). A pattern that matches nothing is an error with a hint, so
        a typo in CI's ``--only`` never silently builds nothing. ``python``: Python
        ABIs (``abi3``, ``3.14t``).
        """
        cells = self.cells()
        for value in python:
            known = self.python_abis()
            if value not in known:
                raise ConfigError(
                    f"python {value!r} is no Python ABI of the matrix{_hint(value, known)}"
                )
        for value in platform:
            if value not in self.platforms:
                raise ConfigError(f"platform {value!r} is not known{_hint(value, self.platforms)}")
        if python:
            cells = tuple(c for c in cells if c.python in python)
        if platform:
            cells = tuple(c for c in cells if c.platform.name in platform)
        patterns = [p.strip() for p in patterns if p.strip()]
        if not patterns:
            return cells
        chosen: list[Cell] = []
        for pattern in patterns:
            hits = [
                c
                for c in cells
                if fnmatch.fnmatchcase(c.id, pattern) or fnmatch.fnmatchcase(c.job_id, pattern)
            ]
            if not hits:
                names = sorted({c.id for c in cells} | {c.job_id for c in cells})
                close = difflib.get_close_matches(pattern, names, n=_CLOSE_MATCHES, cutoff=0.6)
                hint = f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""
                if re.match(r"cp3\d+-", pattern):
                    hint = (
                        " (cells carry no CPython version any more: one abi3 library serves "
                        "every CPython >= 3.9; only free-threaded cells end in -cp3XYt)"
                    )
                raise ConfigError(
                    f"no matrix cell matches {pattern[:80]!r}{hint}; "
                    "`nox -s matrix -- --list` prints every cell id"
                )
            chosen.extend(c for c in hits if c not in chosen)
        return tuple(chosen)

    def job_python(self, cells: Sequence[Cell]) -> str:
        """The CPython a job's cibuildwheel builds with: the free-threaded Python of
        free-threaded cells; for abi3 cells the newest CPython every one of the job's
        torch minors supports on the platform (its test step installs the newest of
        them), else the newest any of them supports."""
        if cells[0].freethreaded:
            return cells[0].python
        common = set(cells[0].pythons).intersection(*(c.pythons for c in cells[1:]))
        return _newest(common or {p for c in cells for p in c.pythons})

    def jobs(self, cells: Sequence[Cell] | None = None) -> list[dict[str, Any]]:
        """CI's job matrix: one entry per cibuildwheel job (platform x torch flavour, and
        per free-threaded Python). Cells the release does not build (``[freethreaded]``
        ``release = false``) get no job."""
        grouped: dict[str, list[Cell]] = {}
        for cell in self.cells() if cells is None else cells:
            if not cell.not_released:
                grouped.setdefault(cell.job_id, []).append(cell)
        jobs = []
        for job_id, members in grouped.items():
            first = members[0]
            python = self.job_python(members)
            jobs.append(
                {
                    "id": job_id,
                    "python": python,
                    "platform": first.platform.name,
                    "backend": first.wheel.backend.value,
                    "runner": first.platform.runner,
                    "cibw_build": f"cp{python.replace('.', '')}-*",
                    "arch": first.platform.cibw_arch,
                    "image": first.image or "",
                    "toolkit": first.job_toolkit or "",
                    "allow_failure": first.allow_failure,
                    "cells": [c.id for c in members],
                    # The CPythons each torch minor of the job serves (for verify).
                    "torch": {
                        c.torch.minor: [c.python] if c.freethreaded else list(c.pythons)
                        for c in members
                    },
                }
            )
        return jobs


def _parse_wheel(
    where: str, raw: Any, platforms: Mapping[str, Platform], indexes: Mapping[str, str]
) -> TorchWheel:
    if not isinstance(raw, dict):
        raise MatrixError(f"matrix.toml: {where} must be a table")
    _check_keys(where, raw, _WHEEL_KEYS)
    index = _choice(f"{where}.index", raw.get("index"), indexes)
    try:
        backend = parse_backend(str(raw.get("backend")))
    except ConfigError as exc:
        raise MatrixError(f"matrix.toml: {where}.backend: {exc}") from None
    plats = raw.get("platforms")
    if not isinstance(plats, list) or not plats:
        raise MatrixError(f"matrix.toml: {where}.platforms must be a non-empty list")
    for plat in plats:
        _choice(f"{where}.platforms", plat, platforms)
    abi_raw = raw.get("cxx11_abi", {})
    if not isinstance(abi_raw, dict):
        raise MatrixError(f"matrix.toml: {where}.cxx11_abi must be a table platform = true|false")
    for plat, abi in abi_raw.items():
        _choice(f"{where}.cxx11_abi key", plat, plats)
        if not isinstance(abi, bool):
            raise MatrixError(f"matrix.toml: {where}.cxx11_abi.{plat} must be true or false")
    for plat in plats:
        if platforms[plat].dual_abi and plat not in abi_raw:
            raise MatrixError(
                f"matrix.toml: {where} builds for {plat} but does not say its C++ ABI; "
                f"add cxx11_abi = {{ {plat} = true|false }}"
            )
    toolkit = _str(where, raw, "toolkit", required=backend is not Backend.CPU)
    if toolkit is not None:
        _version_tuple(f"{where}.toolkit", toolkit)
    requirements = raw.get("toolkit_requirements", [])
    if not isinstance(requirements, list) or not all(isinstance(r, str) for r in requirements):
        raise MatrixError(f"matrix.toml: {where}.toolkit_requirements must be a list of strings")
    freethreaded = raw.get("freethreaded", True)
    if not isinstance(freethreaded, bool):
        raise MatrixError(f"matrix.toml: {where}.freethreaded must be true or false")
    return TorchWheel(
        index=index,
        index_url=indexes[index],
        backend=backend,
        toolkit=toolkit,
        toolkit_requirements=tuple(requirements),
        platforms=tuple(plats),
        cxx11_abi=dict(abi_raw),
        freethreaded=freethreaded,
    )


def _parse_torch(
    where: str, raw: Any, platforms: Mapping[str, Platform], indexes: Mapping[str, str]
) -> TorchMinor:
    if not isinstance(raw, dict):
        raise MatrixError(f"matrix.toml: {where} must be a table")
    _check_keys(where, raw, _TORCH_KEYS)
    minor = str(_str(where, raw, "minor"))
    release = str(_str(where, raw, "release"))
    if len(_version_tuple(f"{where}.minor", minor)) != 2:
        raise MatrixError(f"matrix.toml: {where}.minor {minor!r} must be 'X.Y'")
    if not release.startswith(minor + "."):
        raise MatrixError(f"matrix.toml: {where}: release {release!r} is not a {minor}.x release")
    where = f"torch {minor}"
    pythons = raw.get("python")
    if not isinstance(pythons, list) or not pythons or not all(isinstance(p, str) for p in pythons):
        raise MatrixError(f"matrix.toml: {where}.python must be a non-empty list like ['3.11']")
    for python in pythons:
        if len(_version_tuple(f"{where}.python", python)) != 2:
            raise MatrixError(f"matrix.toml: {where}.python {python!r} must be 'X.Y'")
    free = raw.get("freethreaded", [])
    if not isinstance(free, list) or not all(
        isinstance(p, str) and p.endswith("t") and len(_version_tuple(where, p[:-1])) == 2
        for p in free
    ):
        raise MatrixError(
            f"matrix.toml: {where}.freethreaded must be a list of free-threaded CPythons "
            f"like ['3.13t'], got {free!r}"
        )
    exclude_raw = raw.get("python_exclude", {})
    if not isinstance(exclude_raw, dict):
        raise MatrixError(f"matrix.toml: {where}.python_exclude must be a table platform = [...]")
    exclude: dict[str, tuple[str, ...]] = {}
    for plat, values in exclude_raw.items():
        _choice(f"{where}.python_exclude key", plat, platforms)
        for value in values:
            _choice(f"{where}.python_exclude.{plat}", value, [*pythons, *free])
        exclude[plat] = tuple(values)
    wheels_raw = raw.get("wheel")
    if not isinstance(wheels_raw, list) or not wheels_raw:
        raise MatrixError(f"matrix.toml: {where} needs at least one [[torch.wheel]] table")
    wheels = tuple(
        _parse_wheel(f"{where} wheel #{i + 1}", w, platforms, indexes)
        for i, w in enumerate(wheels_raw)
    )
    return TorchMinor(
        minor=minor,
        release=release,
        python=tuple(pythons),
        python_exclude=exclude,
        wheels=wheels,
        freethreaded=tuple(free),
    )


def _parse_freethreaded(
    data: Mapping[str, Any], minors: Sequence[TorchMinor]
) -> dict[str, FreeThreaded]:
    """``[freethreaded."3.13t"]``: one table per free-threaded Python a torch minor lists."""
    raw = data.get("freethreaded", {})
    if not isinstance(raw, dict):
        raise MatrixError(
            'matrix.toml: [freethreaded] must hold tables like [freethreaded."3.14t"]'
        )
    listed = {p for minor in minors for p in minor.freethreaded}
    result: dict[str, FreeThreaded] = {}
    for python, table in raw.items():
        where = f'[freethreaded."{python}"]'
        _choice(f"{where} name", python, sorted(listed))
        if not isinstance(table, dict):
            raise MatrixError(f"matrix.toml: {where} must be a table")
        _check_keys(where, table, _FREETHREADED_KEYS)
        release = table.get("release", True)
        if not isinstance(release, bool):
            raise MatrixError(f"matrix.toml: {where}.release must be true or false")
        reason = _str(where, table, "reason", required=not release) or ""
        result[python] = FreeThreaded(python=python, release=release, reason=reason)
    return result


def _parse_backends(
    data: Mapping[str, Any],
) -> tuple[dict[Backend, dict[str, str]], dict[Backend, str]]:
    """``[backends.X]``: builder images per toolkit version, and why jobs may fail."""
    images: dict[Backend, dict[str, str]] = {}
    allow_failure: dict[Backend, str] = {}
    for name, raw in dict(data.get("backends", {})).items():
        _choice("[backends] table name", name, [b.value for b in Backend])
        where = f"[backends.{name}]"
        _check_keys(where, raw, _BACKEND_KEYS)
        table = raw.get("images", {})
        if not isinstance(table, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and v for k, v in table.items()
        ):
            raise MatrixError(f'matrix.toml: {where}.images must be a table toolkit = "image"')
        for toolkit in table:
            _version_tuple(f"{where}.images key", toolkit)
        if table:
            images[Backend(name)] = dict(table)
        reason = _str(where, raw, "allow_failure", required=False)
        if reason:
            allow_failure[Backend(name)] = reason
    return images, allow_failure


def _check_images(
    minors: Sequence[TorchMinor], images: Mapping[Backend, Mapping[str, str]]
) -> None:
    """A backend with per-version images has one for every version a flavour declares."""
    for minor in minors:
        for wheel in minor.wheels:
            known = images.get(wheel.backend)
            if known is not None and (wheel.toolkit or "") not in known:
                raise MatrixError(
                    f"matrix.toml: torch {minor.minor} {wheel.backend.value} {wheel.toolkit} "
                    f"({wheel.index}) has no builder image; add it to "
                    f"[backends.{wheel.backend.value}.images] (known: {', '.join(known)})"
                )


def parse_matrix(
    data: Mapping[str, Any], path: Path = MATRIX_FILE, *, requires_python: str | None = None
) -> Matrix:
    """Validate parsed TOML and build the :class:`Matrix`. Raises :class:`MatrixError`.

    ``requires_python``: the project's specifier; Pythons outside it yield no cell.
    """
    _check_keys("the top level", data, _TOP_KEYS)
    if data.get("schema") != SCHEMA:
        raise MatrixError(f"matrix.toml: schema {data.get('schema')!r}, this reader reads {SCHEMA}")
    platforms: dict[str, Platform] = {}
    for name, raw in dict(data.get("platforms", {})).items():
        where = f"[platforms.{name}]"
        _check_keys(where, raw, _PLATFORM_KEYS)
        os_name = _choice(f"{where}.os", raw.get("os"), _OSES)
        platforms[name] = Platform(
            name=name,
            os=os_name,
            machine=str(_str(where, raw, "machine")),
            runner=str(_str(where, raw, "runner")),
            cibw_platform=str(_str(where, raw, "cibw_platform")),
            cibw_arch=str(_str(where, raw, "cibw_arch")),
            image=_str(where, raw, "image", required=False),
        )
    if not platforms:
        raise MatrixError("matrix.toml: no [platforms.*] tables")
    indexes = dict(data.get("indexes", {}))
    for name, url in indexes.items():
        if not isinstance(url, str) or not url.startswith("https://"):
            raise MatrixError(f"matrix.toml: [indexes] {name} = {url!r} must be an https:// URL")
    images, allow_failure = _parse_backends(data)
    torch_raw = data.get("torch")
    if not isinstance(torch_raw, list) or not torch_raw:
        raise MatrixError("matrix.toml: no [[torch]] tables")
    minors = tuple(
        _parse_torch(f"[[torch]] #{i + 1}", t, platforms, indexes) for i, t in enumerate(torch_raw)
    )
    names = [m.minor for m in minors]
    if len(set(names)) != len(names):
        raise MatrixError(f"matrix.toml: a torch minor is listed twice: {names}")
    _check_images(minors, images)
    return Matrix(
        path=path,
        platforms=platforms,
        indexes=indexes,
        backend_images=images,
        torch=minors,
        requires_python=requires_python,
        allow_failure=allow_failure,
        freethreaded=_parse_freethreaded(data, minors),
    )


def load_matrix(path: Path | None = None) -> Matrix:
    """Read and validate ``matrix.toml`` (default: the one at the repository root).

    The ``pyproject.toml`` next to it, when there is one, supplies ``requires-python``.
    """
    path = MATRIX_FILE if path is None else path
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise MatrixError(f"cannot read {path}: {exc.strerror}") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise MatrixError(f"{path} is not valid TOML: {exc}") from None
    return parse_matrix(data, path, requires_python=requires_python(path.parent / "pyproject.toml"))
