"""THE reader of ``matrix.toml``: :func:`load_matrix` reads the file and
:func:`parse_matrix` validates its data into a :class:`~devtools.matrix.model.Matrix`
(whose cells, :class:`~devtools.matrix.cells.Cell` with their ids, job ids and labels, it
derives).

An unknown key, platform, backend or index raises
:class:`~devtools.base.errors.MatrixError` with a "did you mean" hint, and so does a value
of the wrong kind (a torch minor that is not ``X.Y``, a release of another minor, a
flavour without its C++ ABI, a toolkit without a builder image); a selection that matches
nothing is a bad argument (:class:`~_torch_c_dlpack_ext_core.errors.ConfigError`).

``nox -s build``, ``nox -s matrix`` (``python -m devtools matrix``: CI's job matrix),
the release tools, the dataflow rehearsal and the tests all call :func:`load_matrix`; a
source build never does (the sdist carries neither this file nor ``matrix.toml``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from _torch_c_dlpack_ext_core.errors import ConfigError
from _torch_c_dlpack_ext_core.naming import Backend, parse_backend
from devtools.base.errors import MatrixError
from devtools.base.hostenv import requires_python
from devtools.base.paths import ROOT
from devtools.matrix.model import Matrix, choice_hint
from devtools.matrix.tables import FreeThreaded, Platform, TorchMinor, TorchWheel

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.9/3.10 only
    import tomli as tomllib

__all__ = ["MATRIX_FILE", "SCHEMA", "load_matrix", "parse_matrix"]

#: ``matrix.toml`` at the repository root.
MATRIX_FILE = ROOT / "matrix.toml"

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


def _table(where: str, value: object) -> dict[str, object]:
    """``value``, which must be a TOML table."""
    if not isinstance(value, dict):
        raise MatrixError(f"matrix.toml: {where} must be a table")
    return value


def _check_keys(where: str, table: object, allowed: Sequence[str]) -> dict[str, object]:
    """``table``, which must be a TOML table holding no key but ``allowed``."""
    checked = _table(where, table)
    for key in checked:
        if key not in allowed:
            hint = choice_hint(key, allowed)
            raise MatrixError(f"matrix.toml: unknown key {key!r} in {where}{hint}")
    return checked


def _choice(where: str, value: object, choices: Iterable[str]) -> str:
    choices = list(choices)
    if not isinstance(value, str) or value not in choices:
        raise MatrixError(
            f"matrix.toml: {where} = {value!r} is not known{choice_hint(str(value), choices)}"
        )
    return value


def _str(where: str, table: Mapping[str, object], key: str, *, required: bool = True) -> str | None:
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


def _parse_wheel(
    where: str, raw: object, platforms: Mapping[str, Platform], indexes: Mapping[str, str]
) -> TorchWheel:
    table = _check_keys(where, raw, _WHEEL_KEYS)
    index = _choice(f"{where}.index", table.get("index"), indexes)
    try:
        backend = parse_backend(str(table.get("backend")))
    except ConfigError as exc:
        raise MatrixError(f"matrix.toml: {where}.backend: {exc}") from None
    plats = table.get("platforms")
    if not isinstance(plats, list) or not plats:
        raise MatrixError(f"matrix.toml: {where}.platforms must be a non-empty list")
    for plat in plats:
        _choice(f"{where}.platforms", plat, platforms)
    abi_raw = table.get("cxx11_abi", {})
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
    toolkit = _str(where, table, "toolkit", required=backend is not Backend.CPU)
    if toolkit is not None:
        _version_tuple(f"{where}.toolkit", toolkit)
    requirements = table.get("toolkit_requirements", [])
    if not isinstance(requirements, list) or not all(isinstance(r, str) for r in requirements):
        raise MatrixError(f"matrix.toml: {where}.toolkit_requirements must be a list of strings")
    freethreaded = table.get("freethreaded", True)
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
    where: str, raw: object, platforms: Mapping[str, Platform], indexes: Mapping[str, str]
) -> TorchMinor:
    table = _check_keys(where, raw, _TORCH_KEYS)
    minor = str(_str(where, table, "minor"))
    release = str(_str(where, table, "release"))
    if len(_version_tuple(f"{where}.minor", minor)) != 2:
        raise MatrixError(f"matrix.toml: {where}.minor {minor!r} must be 'X.Y'")
    if not release.startswith(minor + "."):
        raise MatrixError(f"matrix.toml: {where}: release {release!r} is not a {minor}.x release")
    where = f"torch {minor}"
    pythons = table.get("python")
    if not isinstance(pythons, list) or not pythons or not all(isinstance(p, str) for p in pythons):
        raise MatrixError(f"matrix.toml: {where}.python must be a non-empty list like ['3.11']")
    for python in pythons:
        if len(_version_tuple(f"{where}.python", python)) != 2:
            raise MatrixError(f"matrix.toml: {where}.python {python!r} must be 'X.Y'")
    free = table.get("freethreaded", [])
    if not isinstance(free, list) or not all(
        isinstance(p, str) and p.endswith("t") and len(_version_tuple(where, p[:-1])) == 2
        for p in free
    ):
        raise MatrixError(
            f"matrix.toml: {where}.freethreaded must be a list of free-threaded CPythons "
            f"like ['3.13t'], got {free!r}"
        )
    exclude_raw = table.get("python_exclude", {})
    if not isinstance(exclude_raw, dict):
        raise MatrixError(f"matrix.toml: {where}.python_exclude must be a table platform = [...]")
    exclude: dict[str, tuple[str, ...]] = {}
    for plat, values in exclude_raw.items():
        _choice(f"{where}.python_exclude key", plat, platforms)
        for value in values:
            _choice(f"{where}.python_exclude.{plat}", value, [*pythons, *free])
        exclude[plat] = tuple(values)
    wheels_raw = table.get("wheel")
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
    data: Mapping[str, object], minors: Sequence[TorchMinor]
) -> dict[str, FreeThreaded]:
    """``[freethreaded."3.13t"]``: one table per free-threaded Python a torch minor lists."""
    raw = data.get("freethreaded", {})
    if not isinstance(raw, dict):
        raise MatrixError(
            'matrix.toml: [freethreaded] must hold tables like [freethreaded."3.14t"]'
        )
    listed = {p for minor in minors for p in minor.freethreaded}
    result: dict[str, FreeThreaded] = {}
    for python, raw_table in raw.items():
        where = f'[freethreaded."{python}"]'
        _choice(f"{where} name", python, sorted(listed))
        table = _check_keys(where, raw_table, _FREETHREADED_KEYS)
        release = table.get("release", True)
        if not isinstance(release, bool):
            raise MatrixError(f"matrix.toml: {where}.release must be true or false")
        reason = _str(where, table, "reason", required=not release) or ""
        result[python] = FreeThreaded(python=python, release=release, reason=reason)
    return result


def _parse_backends(
    data: Mapping[str, object],
) -> tuple[dict[Backend, dict[str, str]], dict[Backend, str]]:
    """``[backends.X]``: builder images per toolkit version, and why jobs may fail."""
    images: dict[Backend, dict[str, str]] = {}
    allow_failure: dict[Backend, str] = {}
    for name, raw in _table("[backends]", data.get("backends", {})).items():
        _choice("[backends] table name", name, [b.value for b in Backend])
        where = f"[backends.{name}]"
        backend = _check_keys(where, raw, _BACKEND_KEYS)
        table = backend.get("images", {})
        if not isinstance(table, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and v for k, v in table.items()
        ):
            raise MatrixError(f'matrix.toml: {where}.images must be a table toolkit = "image"')
        for toolkit in table:
            _version_tuple(f"{where}.images key", toolkit)
        if table:
            images[Backend(name)] = dict(table)
        reason = _str(where, backend, "allow_failure", required=False)
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
    data: Mapping[str, object], path: Path | None = None, *, requires_python: str | None = None
) -> Matrix:
    """Validate parsed TOML and build the :class:`Matrix`. Raises :class:`MatrixError`.

    ``path``: the file ``data`` was read from, if any. ``requires_python``: the
    project's specifier; Pythons outside it yield no cell.
    """
    _check_keys("the top level", data, _TOP_KEYS)
    if data.get("schema") != SCHEMA:
        raise MatrixError(f"matrix.toml: schema {data.get('schema')!r}, this reader reads {SCHEMA}")
    platforms: dict[str, Platform] = {}
    for name, raw_platform in _table("[platforms]", data.get("platforms", {})).items():
        where = f"[platforms.{name}]"
        raw = _check_keys(where, raw_platform, _PLATFORM_KEYS)
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
    indexes: dict[str, str] = {}
    for name, url in _table("[indexes]", data.get("indexes", {})).items():
        if not isinstance(url, str) or not url.startswith("https://"):
            raise MatrixError(f"matrix.toml: [indexes] {name} = {url!r} must be an https:// URL")
        indexes[name] = url
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
