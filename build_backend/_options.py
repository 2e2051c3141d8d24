"""The backend's settings: one frozen dataclass read through ONE precedence chain.

defaults -> ``[tool.torch-c-dlpack-ext]`` in pyproject.toml -> PEP 517
``config_settings`` -> environment variables ``TORCH_C_DLPACK_EXT_<KEY>``
(``libs-dir`` -> ``TORCH_C_DLPACK_EXT_LIBS_DIR``). The environment wins last so
a CI job can steer a build whose frontend command it does not control.

The backend only packs. A wheel holds one of:

``libs-dir``
    A directory holding prebuilt libraries and their ``manifest.json`` (as
    ``python -m devtools.build --libs-dir`` writes them, in CI cibuildwheel's
    ``before-build``); the wheel packs exactly those, tagged for the Python their
    manifest entries name.
``universal``
    ``true``: a ``py3-none-any`` wheel with no library (sources only, for the JIT).
(neither)
    The libraries compiled against the build environment's torch, for this Python:

``torch``
    The torch installation to compile against when nothing above is given
    (default: the ``torch`` importable in the build environment, found without
    importing it).
``backends``
    Comma-separated backends to compile when building against the build
    environment's torch (default: every backend that torch supports).
``build-dir``
    Where compiled libraries are kept between builds (default ``build/backend``).
``variant-label``
    Make a PEP 825 variant wheel with this label (needs libraries).

Not a setting but read by the hooks' error boundary (:mod:`._boundary`):
``TORCH_C_DLPACK_EXT_BUILD_TRACEBACK=1`` shows the full traceback of a failed build.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from _torch_c_dlpack_ext_core.errors import ConfigError
from _torch_c_dlpack_ext_core.naming import ENV_PREFIX

__all__ = ["BackendOptions", "read_options"]

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


@dataclasses.dataclass(frozen=True)
class BackendOptions:
    """Every setting of the in-tree backend (see the module docstring)."""

    libs_dir: Path | None = None
    variant_label: str | None = None
    universal: bool = False
    torch: Path | None = None
    backends: tuple[str, ...] = ()
    build_dir: Path = Path("build/backend")


_FIELDS = {f.name.replace("_", "-"): f for f in dataclasses.fields(BackendOptions)}


def _hint(key: str) -> str:
    close = difflib.get_close_matches(key, list(_FIELDS), n=1)
    return f"did you mean {close[0]!r}?" if close else f"known settings: {', '.join(_FIELDS)}"


def _parse_bool(key: str, value: Any, source: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text not in _TRUE + _FALSE:
        raise ConfigError(f"{source}: {key} = {value!r} is not a boolean; use true or false")
    return text in _TRUE


def _convert(key: str, value: Any, source: str, root: Path) -> Any:
    field = _FIELDS[key]
    if field.name == "universal":
        return _parse_bool(key, value, source)
    if field.name == "backends":
        items = value if isinstance(value, (list, tuple)) else str(value).split(",")
        return tuple(str(item).strip() for item in items if str(item).strip())
    if not isinstance(value, str):
        raise ConfigError(f"{source}: {key} = {value!r} must be a string")
    if field.name in ("libs_dir", "torch", "build_dir"):
        if not value.strip():
            return None if field.name != "build_dir" else BackendOptions.build_dir
        path = Path(value).expanduser()
        return path if path.is_absolute() else root / path
    return value.strip() or None


def _layer(
    values: dict[str, Any], table: Mapping[str, Any], source: str, root: Path, *, strict: bool
) -> None:
    for raw_key, value in table.items():
        key = raw_key.strip().lower().replace("_", "-")
        if key not in _FIELDS:
            if strict:
                raise ConfigError(f"{source}: unknown setting {raw_key!r}; {_hint(key)}")
            continue
        values[_FIELDS[key].name] = _convert(key, value, source, root)


def read_options(
    *,
    pyproject: Mapping[str, Any],
    config_settings: Mapping[str, Any] | None,
    environ: Mapping[str, str] | None = None,
    root: Path,
) -> BackendOptions:
    """Resolve the settings. Raises :class:`ConfigError` for an unknown key or a bad value."""
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    tool = pyproject.get("tool", {}).get("torch-c-dlpack-ext", {})
    _layer(values, tool, "pyproject.toml [tool.torch-c-dlpack-ext]", root, strict=True)
    # Frontends pass their own keys through config_settings too ("--global-option"
    # style, pip's "--build-option"); PEP 517 leaves them to the backend to reject.
    _layer(values, dict(config_settings or {}), "config_settings", root, strict=True)
    env_table = {
        name[len(ENV_PREFIX) :]: value
        for name, value in environ.items()
        if name.startswith(ENV_PREFIX)
        and name[len(ENV_PREFIX) :].lower().replace("_", "-") in _FIELDS
    }
    _layer(values, env_table, f"environment ({ENV_PREFIX}*)", root, strict=False)
    options = BackendOptions(**values)
    if options.libs_dir is not None and options.universal:
        raise ConfigError(
            "settings libs-dir and universal exclude each other: a wheel packs prebuilt "
            "libraries (libs-dir), compiles against the build environment's torch, or has "
            "no library (universal)"
        )
    if options.variant_label is not None and options.universal:
        raise ConfigError("variant-label needs libraries: drop universal=true")
    return options
