"""The ONE reader of ``matrix.toml``, and ``nox -s matrix`` (CI's job matrix as JSON).

``nox -s build``, ``nox -s matrix``, the release tools, the dataflow rehearsal and the
tests all call :func:`load_matrix`; a source build never does (the sdist carries
neither this file nor ``matrix.toml``). The file is validated on read: an unknown
key, platform, backend or index raises :class:`~devtools.errors.MatrixError` with a
"did you mean" hint; a selection that matches nothing is a bad argument
(:class:`~_torch_c_dlpack_ext_core.errors.ConfigError`).

A *cell* is one library: (Python, platform, torch minor, backend, C++ ABI). Each
``[[torch.wheel]]`` flavour yields its own backend's library and the CPU library
of the same ABI; when two flavours yield the same cell the first listed wins.
Pythons outside the project's ``requires-python`` (read from the
``pyproject.toml`` next to ``matrix.toml``) yield no cell at all.
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
from _torch_c_dlpack_ext_core.naming import Backend, library_filename, parse_backend, variant_label
from devtools.errors import HANDLED, MatrixError, report

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
    "main",
    "parse_matrix",
]

#: ``matrix.toml`` at the repository root.
MATRIX_FILE = Path(__file__).resolve().parents[1] / "matrix.toml"
SCHEMA = 1

_TOP_KEYS = ("schema", "platforms", "indexes", "backends", "torch")
_PLATFORM_KEYS = ("os", "machine", "runner", "cibw_platform", "cibw_arch", "image")
_BACKEND_KEYS = ("toolchain", "images", "allow_failure")
_TORCH_KEYS = ("minor", "release", "python", "python_exclude", "wheel")
_WHEEL_KEYS = ("index", "backend", "toolkit", "toolkit_requirements", "platforms", "cxx11_abi")
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


@dataclasses.dataclass(frozen=True)
class TorchMinor:
    """A torch minor version and the release built against."""

    minor: str
    release: str
    python: tuple[str, ...]
    python_exclude: Mapping[str, tuple[str, ...]]
    wheels: tuple[TorchWheel, ...]

    @property
    def version(self) -> tuple[int, int]:
        major, minor = self.minor.split(".")
        return int(major), int(minor)

    def pythons_for(self, platform: str) -> tuple[str, ...]:
        """The CPython versions torch publishes wheels of on ``platform``."""
        excluded = self.python_exclude.get(platform, ())
        return tuple(p for p in self.python if p not in excluded)


@dataclasses.dataclass(frozen=True)
class Cell:
    """One library to build: (Python, platform, torch minor, backend, C++ ABI)."""

    python: str
    platform: Platform
    torch: TorchMinor
    backend: Backend
    cxx11_abi: bool | None
    #: The torch flavour compiled against.
    wheel: TorchWheel
    #: The torch minor ships with both ABIs on this platform (labels must tell them apart).
    abi_ambiguous: bool
    #: Builder image of the cell's job (``None``: the platform's default image, if any).
    image: str | None = None
    #: The flavour's toolkit when its backend has one builder image per toolkit version
    #: (ROCm): jobs are split by it, since one job runs in one image.
    job_toolkit: str | None = None
    #: Why the cell's job may fail without failing the release (``""``: it may not).
    allow_failure: str = ""

    @property
    def python_tag(self) -> str:
        return "cp" + self.python.replace(".", "")

    @property
    def label(self) -> str:
        """PEP 825 variant label (``t26_cuda`` or ``t26_cuda_abi0``)."""
        major, minor = self.torch.version
        return variant_label(
            major, minor, self.backend, self.cxx11_abi, with_abi=self.abi_ambiguous
        )

    @property
    def id(self) -> str:
        """``cp311-linux_x86_64-t26_cuda_abi0``: unique in the matrix, stable across runs."""
        return f"{self.python_tag}-{self.platform.name}-{self.label}"

    @property
    def job_id(self) -> str:
        """The cibuildwheel job building this cell: ``cp311-linux_x86_64-cuda``.

        A GPU flavour's job also builds its CPU libraries, so CPU cells of a
        platform that has GPU flavours belong to the first GPU group that
        yields them; CPU-only platforms have one ``cpu`` job. A backend with
        one builder image per toolkit version has one job per version
        (``cp311-linux_x86_64-rocm6.1``): a job runs in one image.
        """
        suffix = self.job_toolkit or ""
        return f"{self.python_tag}-{self.platform.name}-{self.wheel.backend.value}{suffix}"

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

    def supports_python(self, python: str) -> bool:
        """``python`` (``"3.11"``) is inside the project's ``requires-python``."""
        if self.requires_python is None:
            return True
        from packaging.specifiers import SpecifierSet

        return SpecifierSet(self.requires_python).contains(f"{python}.0")

    def cells(self) -> tuple[Cell, ...]:
        """Every cell, in matrix order (torch minor, flavour, platform, Python, backend)."""
        seen: dict[tuple[str, str, str, Backend, bool | None], Cell] = {}
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
                    for python in minor.pythons_for(plat_name):
                        if not self.supports_python(python):
                            continue
                        for backend in backends:
                            key = (python, plat_name, minor.minor, backend, cell_abi)
                            if key in seen:
                                continue
                            seen[key] = Cell(
                                python=python,
                                platform=platform,
                                torch=minor,
                                backend=backend,
                                cxx11_abi=cell_abi,
                                wheel=wheel,
                                abi_ambiguous=len(abis.get(plat_name, ())) > 1,
                                image=images.get(wheel.toolkit or "", platform.image),
                                job_toolkit=wheel.toolkit if images else None,
                                allow_failure=self.allow_failure.get(wheel.backend, ""),
                            )
        return tuple(seen.values())

    def pythons(self) -> tuple[str, ...]:
        """Every Python of the matrix inside ``requires-python``, oldest first."""
        found = {p for minor in self.torch for p in minor.python if self.supports_python(p)}
        return tuple(sorted(found, key=lambda v: _version_tuple("python", v)))

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
        a typo in CI's ``--only`` never silently builds nothing.
        """
        cells = self.cells()
        for value in python:
            if value not in self.pythons():
                where = (
                    f"outside requires-python {self.requires_python!r}"
                    if any(value in m.python for m in self.torch)
                    else "not in matrix.toml"
                )
                raise ConfigError(f"python {value!r} is {where}{_hint(value, self.pythons())}")
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
                tag = re.match(r"cp3(\d+)-", pattern)
                if tag and not self.supports_python(f"3.{tag.group(1)}"):
                    hint = (
                        f" (Python 3.{tag.group(1)} is outside requires-python "
                        f"{self.requires_python!r}: the matrix has no cp3{tag.group(1)} cells)"
                    )
                raise ConfigError(
                    f"no matrix cell matches {pattern[:80]!r}{hint}; "
                    "`nox -s matrix -- --list` prints every cell id"
                )
            chosen.extend(c for c in hits if c not in chosen)
        return tuple(chosen)

    def jobs(self, cells: Sequence[Cell] | None = None) -> list[dict[str, Any]]:
        """CI's job matrix: one entry per cibuildwheel job (Python x platform x backend group)."""
        grouped: dict[str, list[Cell]] = {}
        for cell in self.cells() if cells is None else cells:
            grouped.setdefault(cell.job_id, []).append(cell)
        jobs = []
        for job_id, members in grouped.items():
            first = members[0]
            image = first.image
            jobs.append(
                {
                    "id": job_id,
                    "python": first.python,
                    "platform": first.platform.name,
                    "backend": first.wheel.backend.value,
                    "runner": first.platform.runner,
                    "cibw_build": f"{first.python_tag}-*",
                    "arch": first.platform.cibw_arch,
                    "image": image or "",
                    "toolkit": first.job_toolkit or "",
                    "allow_failure": first.allow_failure,
                    "cells": [c.id for c in members],
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
    return TorchWheel(
        index=index,
        index_url=indexes[index],
        backend=backend,
        toolkit=toolkit,
        toolkit_requirements=tuple(requirements),
        platforms=tuple(plats),
        cxx11_abi=dict(abi_raw),
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
    exclude_raw = raw.get("python_exclude", {})
    if not isinstance(exclude_raw, dict):
        raise MatrixError(f"matrix.toml: {where}.python_exclude must be a table platform = [...]")
    exclude: dict[str, tuple[str, ...]] = {}
    for plat, values in exclude_raw.items():
        _choice(f"{where}.python_exclude key", plat, platforms)
        for value in values:
            _choice(f"{where}.python_exclude.{plat}", value, pythons)
        exclude[plat] = tuple(values)
    wheels_raw = raw.get("wheel")
    if not isinstance(wheels_raw, list) or not wheels_raw:
        raise MatrixError(f"matrix.toml: {where} needs at least one [[torch.wheel]] table")
    wheels = tuple(
        _parse_wheel(f"{where} wheel #{i + 1}", w, platforms, indexes)
        for i, w in enumerate(wheels_raw)
    )
    return TorchMinor(
        minor=minor, release=release, python=tuple(pythons), python_exclude=exclude, wheels=wheels
    )


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
    )


def _requires_python(pyproject: Path) -> str | None:
    if not pyproject.is_file():
        return None
    from build_backend._metadata import load_pyproject

    value = load_pyproject(pyproject.parent).get("project", {}).get("requires-python")
    if value is None:
        return None
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        SpecifierSet(str(value))
    except InvalidSpecifier:
        raise ConfigError(f"{pyproject}: requires-python {value!r} is not a specifier") from None
    return str(value)


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
    return parse_matrix(
        data, path, requires_python=_requires_python(path.parent / "pyproject.toml")
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``nox -s matrix``: print (or write) CI's job matrix; ``--list`` prints the cell ids.

    One entry per cibuildwheel job (Python x platform x backend group), each with the
    fields the release workflow uses (``id``, ``runner``, ``python``, ``cibw_build``,
    ``arch``, ``image``, ``toolkit``, ``allow_failure``) and the cell ids it builds
    (``cells``): the workflow passes exactly those, comma-joined, to the job's
    ``python -m devtools.build --cells`` (``TCDE_JOB_CELLS``), so ``--only`` limits the
    build to the cells it names, not to whole jobs.
    """
    import argparse
    import json

    from _torch_c_dlpack_ext_core.manifest import atomic_write_bytes

    parser = argparse.ArgumentParser(
        prog="nox -s matrix --", description="CI's job matrix as JSON, from matrix.toml"
    )
    parser.add_argument("--only", default="", help="comma-separated cell/job ids or patterns")
    parser.add_argument("--output", default=None, help="write the JSON here instead of stdout")
    parser.add_argument("--list", action="store_true", help="print one cell id per line")
    args = parser.parse_args(argv)
    try:
        matrix = load_matrix()
        cells = matrix.select([p for p in args.only.split(",") if p.strip()])
    except HANDLED as exc:
        return report(exc)
    if args.list:
        for cell in cells:
            print(cell.id)
        return 0
    text = json.dumps({"include": matrix.jobs(cells)}, indent=2) + "\n"
    if args.output:
        atomic_write_bytes(Path(args.output), text.encode())
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
