"""The backend's settings: one frozen dataclass (:class:`BackendOptions`) read through ONE
precedence chain, once per hook (:func:`hook_options`), and passed down.

defaults -> ``[tool.torch-c-dlpack-ext]`` in pyproject.toml -> PEP 517
``config_settings`` -> environment variables ``TORCH_C_DLPACK_EXT_<KEY>``
(``libs-dir`` -> ``TORCH_C_DLPACK_EXT_LIBS_DIR``). The environment wins last so
a CI job can steer a build whose frontend command it does not control. Each hook reads
them once (:func:`hook_options`) and hands the frozen :class:`BackendOptions` down: no
code below the hooks sees ``config_settings``.

The backend only packs. A wheel holds one of:

``libs-dir``
    A directory holding prebuilt libraries and their ``manifest.json`` (as
    ``python -m devtools build --libs-dir`` writes them, in CI cibuildwheel's
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
    environment's torch (default: every backend that torch supports). Each at most
    once: ``cpu,cpu`` is refused, since a repeat is more likely a typo for another
    backend (``cpu,cuda``) than a request, and dropping it would build less than
    the user meant without a word.
``build-dir``
    Where compiled libraries are kept between builds (default ``build/backend``).
``variant-label``
    Make a PEP 825 variant wheel with this label (needs libraries). A label is what
    PEP 825 and variantlib accept: one or more of ``0-9``, ``a-z``, ``_`` and ``.``
    (``^[0-9a-z_.]+$``), at most :data:`MAX_VARIANT_LABEL_LENGTH` characters (the
    label is part of the wheel's file name), and not ``null``, which names the variant
    without properties (ours always have some). Anything else is refused
    (:func:`check_variant_label`), an empty value included: leave the setting out
    for a plain wheel.

Not settings, but read here too:

``SOURCE_DATE_EPOCH``
    The timestamp of every file in the wheels and the sdist (reproducible builds).
    :func:`source_date_epoch` validates it before anything is built, for the backend
    and for ``devtools`` alike.
``TORCH_C_DLPACK_EXT_BUILD_TRACEBACK=1``
    Read by the hooks' error boundary (:mod:`._boundary`): show the full traceback of a
    failed build.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Union

from _torch_c_dlpack_ext_core.errors import ConfigError
from _torch_c_dlpack_ext_core.naming import ENV_PREFIX

__all__ = [
    "EPOCH_MAX",
    "MAX_VARIANT_LABEL_LENGTH",
    "VARIANT_LABEL_RULE",
    "BackendOptions",
    "ConfigSettings",
    "check_variant_label",
    "hook_options",
    "read_options",
    "source_date_epoch",
]

#: What PEP 517 passes a hook as ``config_settings`` (``-C key=value``; a key given twice
#: is a list). Only :func:`hook_options` reads it: below the hooks, code sees
#: :class:`BackendOptions`.
ConfigSettings = Mapping[str, Union[str, list[str]]]

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")

#: PEP 825's variant label (variantlib 0.2's ``VALIDATION_VARIANT_LABEL_REGEX``; a unit
#: test keeps the two equal): the label is a file name component, so nothing else.
_VARIANT_LABEL = re.compile(r"[0-9a-z._]+")
#: The label of the variant without properties (variantlib's ``NULL_VARIANT_LABEL``).
_NULL_LABEL = "null"
#: The longest label we accept. PEP 825 sets no limit, but the label is part of the
#: wheel's file name, and a file name has at most 255 bytes (NAME_MAX on Linux and macOS,
#: and Windows' path component limit). The rest of our longest name takes about 110:
#: ``.torch_c_dlpack_ext-<version>-cp314-cp314t-manylinux_2_27_x86_64.manylinux_2_28_
#: x86_64-<label>.whl.<8 random>.tmp`` (the writer's temporary name) with a long
#: version such as ``0.10.0.post12.dev3``. 128 leaves room, and ours are ~13 characters.
MAX_VARIANT_LABEL_LENGTH = 128
VARIANT_LABEL_RULE = (
    "a PEP 825 variant label is one or more of 0-9, a-z, '_' and '.' (^[0-9a-z_.]+$), "
    f"at most {MAX_VARIANT_LABEL_LENGTH} characters (it is part of the wheel's file name), "
    f"and not {_NULL_LABEL!r} (reserved for the variant without properties)"
)

#: The largest ``SOURCE_DATE_EPOCH`` every archive we write can store: gzip's header
#: keeps the sdist's mtime as a 32-bit unsigned number (2106-02-07T06:28:15Z), earlier
#: than the end of zip's DOS timestamps (2107-12-31).
EPOCH_MAX = 2**32 - 1
_EPOCH_RULE = (
    f"whole seconds since 1970-01-01 UTC, 0 to {EPOCH_MAX} (2106-02-07T06:28:15Z, the "
    "latest a gzip header holds; a zip stores times before 1980 as 1980-01-01)"
)


def source_date_epoch(environ: Mapping[str, str] | None = None) -> int | None:
    """``SOURCE_DATE_EPOCH`` as an ``int``, ``None`` when it is not set.

    Raises :class:`ConfigError` (one line: the value and the valid range) for anything
    but ASCII digits (surrounding blanks allowed) naming 0 to :data:`EPOCH_MAX`: an
    empty value, ``abc``, ``1e9``, ``-1``, ``1_000``, ``99999999999``.
    """
    environ = os.environ if environ is None else environ
    raw = environ.get("SOURCE_DATE_EPOCH")
    if raw is None:
        return None
    text = raw.strip()
    if re.fullmatch(r"[0-9]{1,20}", text) is None or int(text) > EPOCH_MAX:
        shown = raw if len(raw) <= 40 else raw[:40] + "..."
        raise ConfigError(f"SOURCE_DATE_EPOCH={shown!r} is not valid: use {_EPOCH_RULE}")
    return int(text)


def check_variant_label(label: str, source: str = "variant-label") -> str:
    """``label`` if it is a PEP 825 variant label (:data:`VARIANT_LABEL_RULE`); else
    :class:`ConfigError` naming ``source`` (the setting) and the rule."""
    too_long = len(label) > MAX_VARIANT_LABEL_LENGTH
    if _VARIANT_LABEL.fullmatch(label) is None or label == _NULL_LABEL or too_long:
        shown = label if len(label) <= 40 else label[:40] + "..."
        empty = "; leave variant-label unset for a plain wheel" if not label.strip() else ""
        length = f" ({len(label)} characters)" if too_long else ""
        raise ConfigError(f"{source} = {shown!r}{length} is refused: {VARIANT_LABEL_RULE}{empty}")
    return label


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


def _refuse_repeats(key: str, names: Sequence[str], source: str) -> None:
    """A backend named twice (case-insensitively) is refused, not quietly deduplicated
    (see the module docstring)."""
    seen: set[str] = set()
    for name in names:
        if name.lower() in seen:
            raise ConfigError(
                f"{source}: {key} = {','.join(names)!r} names {name.lower()!r} more than "
                "once; name each backend once (cpu, cuda, rocm; did you mean another one?)"
            )
        seen.add(name.lower())


def _parse_bool(key: str, value: object, source: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text not in _TRUE + _FALSE:
        raise ConfigError(f"{source}: {key} = {value!r} is not a boolean; use true or false")
    return text in _TRUE


#: A setting's value once converted (a field of :class:`BackendOptions`).
_Value = Union[Path, str, bool, tuple[str, ...], None]


def _convert(key: str, value: object, source: str, root: Path) -> _Value:
    field = _FIELDS[key]
    if field.name == "universal":
        return _parse_bool(key, value, source)
    if field.name == "backends":
        items = value if isinstance(value, (list, tuple)) else str(value).split(",")
        names = tuple(str(item).strip() for item in items if str(item).strip())
        _refuse_repeats(key, names, source)
        return names
    if not isinstance(value, str):
        raise ConfigError(f"{source}: {key} = {value!r} must be a string")
    if field.name in ("libs_dir", "torch", "build_dir"):
        if not value.strip():
            return None if field.name != "build_dir" else BackendOptions.build_dir
        path = Path(value).expanduser()
        return path if path.is_absolute() else root / path
    if field.name == "variant_label":
        # Checked as given: an empty or padded label is a mistake, not "no label".
        return check_variant_label(value, f"{source}: {key}")
    return value.strip() or None


def _layer(
    values: dict[str, _Value],
    table: Mapping[str, object],
    source: str,
    root: Path,
    *,
    strict: bool,
) -> None:
    for raw_key, value in table.items():
        key = raw_key.strip().lower().replace("_", "-")
        if key not in _FIELDS:
            if strict:
                raise ConfigError(f"{source}: unknown setting {raw_key!r}; {_hint(key)}")
            continue
        values[_FIELDS[key].name] = _convert(key, value, source, root)


def _tool_table(pyproject: Mapping[str, object]) -> Mapping[str, object]:
    """``[tool.torch-c-dlpack-ext]`` of ``pyproject`` (empty when absent)."""
    tool = pyproject.get("tool", {})
    table = tool.get("torch-c-dlpack-ext", {}) if isinstance(tool, Mapping) else None
    if not isinstance(table, Mapping):
        raise ConfigError("pyproject.toml: [tool.torch-c-dlpack-ext] must be a table")
    return {str(key): value for key, value in table.items()}


def read_options(
    *,
    pyproject: Mapping[str, object],
    config_settings: ConfigSettings | None,
    environ: Mapping[str, str] | None = None,
    root: Path,
) -> BackendOptions:
    """Resolve the settings. Raises :class:`ConfigError` for an unknown key or a bad value
    (``SOURCE_DATE_EPOCH`` included, so a bad one fails before anything is built)."""
    environ = os.environ if environ is None else environ
    source_date_epoch(environ)
    values: dict[str, _Value] = {}
    tool = _tool_table(pyproject)
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
    # Each value was converted for its own field by _convert; mypy sees only their union.
    options = dataclasses.replace(BackendOptions(), **values)  # type: ignore[arg-type]
    if options.libs_dir is not None and options.universal:
        raise ConfigError(
            "settings libs-dir and universal exclude each other: a wheel packs prebuilt "
            "libraries (libs-dir), compiles against the build environment's torch, or has "
            "no library (universal)"
        )
    if options.variant_label is not None and options.universal:
        raise ConfigError("variant-label needs libraries: drop universal=true")
    return options


def hook_options(config_settings: ConfigSettings | None) -> BackendOptions:
    """The options of one hook call, the only reader of ``config_settings``: this
    project's ``pyproject.toml``, then ``config_settings``, then the environment
    (:func:`read_options`). Raises :class:`ConfigError`."""
    from ._metadata import load_pyproject
    from ._source import ROOT

    return read_options(pyproject=load_pyproject(ROOT), config_settings=config_settings, root=ROOT)
