"""The manifest: what libraries a wheel bundles, and how to verify them before dlopen: its
schema, parsed (:func:`parse_manifest`) and written as canonical bytes
(:func:`dump_manifest`), with no file I/O (:mod:`.files` reads and writes it). Each
:class:`ManifestEntry` (a ``NamedTuple``) records its library's torch, backend, C++ ABI,
toolchain, target Python, size and sha256, and, written by ``nox -s build``, its matrix cell
id (optional, never read by the selector); the portable table's entry is torch-agnostic:
``"any"`` torch, torch_build and backend, null C++ ABI and GPU toolkit, all five or refused.

``manifest.json`` lives next to the package's ``__init__.py``::

    {"schema": 1,
     "libraries": [{"file": "libs/libtorch_c_dlpack_ext-torch2.6-cpu-cxx11abi0.so",
                    "torch": "2.6", "torch_build": "2.6.0+cu124", "backend": "cpu",
                    "cxx11_abi": false, "dlpack": "1.3", "toolchain": "g++ 12.2.0",
                    "gpu_toolkit": null, "platform": "linux_x86_64", "python": "abi3",
                    "size": 178000, "sha256": "...", "cell": "linux_x86_64-t26_cpu_abi0"}]}

The selector reads this file; it never globs or parses file names. Size and
sha256 are checked before a library is loaded, because dlopen of a truncated
file can kill the process with SIGBUS where no ``except`` helps. ``cell`` (optional)
is for the developer tools only: the selector never reads it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import NamedTuple, Union

from .errors import REINSTALL, ManifestError, brief
from .naming import ABI3, ANY, NATIVE_BACKENDS, Backend

__all__ = [
    "MAX_MANIFEST_BYTES",
    "REQUIRED_FIELDS",
    "SCHEMA_VERSION",
    "JSONField",
    "ManifestEntry",
    "check_library_path",
    "dump_manifest",
    "parse_manifest",
]

SCHEMA_VERSION = 1
#: What a field of an entry's JSON object holds.
JSONField = Union[str, int, bool, None]


class ManifestEntry(NamedTuple):
    """One bundled library and the exact target it was built for (``_replace`` makes a
    changed copy; ``_fields`` lists the fields, which are the JSON keys)."""

    #: Path relative to the directory holding ``manifest.json`` (POSIX separators).
    file: str
    #: Torch ``major.minor`` the library targets (what the selector matches on);
    #: :data:`~.naming.ANY` for the portable library.
    torch: str
    #: Full version of the torch it was compiled against (``2.6.0+cu124``); ``any``.
    torch_build: str
    #: The backend it serves; ``None`` for the portable library (``"any"`` in JSON).
    backend: Backend | None
    #: libstdc++ dual ABI (``_GLIBCXX_USE_CXX11_ABI``); ``None`` where not applicable.
    cxx11_abi: bool | None
    #: DLPack version of the header the library was compiled with (``1.3``).
    dlpack: str
    #: Compiler identity (``g++ 12.2.0``).
    toolchain: str
    #: CUDA / ROCm version the GPU variant was compiled with, else ``None``.
    gpu_toolkit: str | None
    #: Wheel platform tag of the build host (``linux_x86_64``).
    platform: str
    #: The CPythons it serves, which give the wheel its Python tags (every library of
    #: one wheel has the same): ``"abi3"`` (built with ``Py_LIMITED_API`` = 3.9: every
    #: CPython >= 3.9 with the GIL), ``"3.14t"`` (that free-threaded CPython only), or,
    #: in manifests written before abi3, ``"3.11"`` (that CPython with the GIL only).
    #: :func:`.naming.parse_python_target` reads it.
    python: str
    size: int
    sha256: str
    #: The ``matrix.toml`` cell the library was built for (``linux_x86_64-t28_cpu``),
    #: recorded by ``nox -s build`` so that wheel assembly finds the cell by its id.
    #: ``None``: built outside the matrix (a source build, the JIT) or listed in a
    #: manifest written before cell ids. Optional, and never read by the selector.
    cell: str | None = None

    @property
    def portable(self) -> bool:
        """The torch-agnostic portable library (``torch``, ``torch_build`` and
        ``backend`` are ``any``)."""
        return self.backend is None

    @property
    def torch_version(self) -> tuple[int, int]:
        """``(major, minor)`` of a native library's torch; raises ``ValueError`` for the
        portable library, which has none."""
        major, minor = self.torch.split(".")
        return int(major), int(minor)

    def to_json(self) -> dict[str, JSONField]:
        """The entry as its manifest's JSON object (``backend``: its name, or ``any``)."""
        data: dict[str, JSONField] = self._asdict()
        data["backend"] = ANY if self.backend is None else self.backend.value
        if self.cell is None:
            # Left out rather than null: a library built outside the matrix gets the
            # manifest it got before cell ids existed, byte for byte.
            del data["cell"]
        return data

    @classmethod
    def from_json(cls, data: object, where: str = "manifest entry") -> ManifestEntry:
        """Validate one manifest entry (see :func:`.files.load_manifest` for the schema).

        Raises :class:`ManifestError` naming ``where`` (``manifest …: libraries[2]``),
        the field, what it holds (shortened) and what it must be.
        """
        if not isinstance(data, dict):
            raise ManifestError(f"{where} is {_json_type(data)}, expected an object", REINSTALL)
        missing = [name for name in REQUIRED_FIELDS if name not in data]
        if missing:
            raise ManifestError(f"{where} lacks {', '.join(missing)}", REINSTALL)
        portable = _check_portable(where, data)
        values = {
            name: None if portable and name == "backend" else _check_field(where, name, data[name])
            for name in REQUIRED_FIELDS
            if not (portable and name in _AGNOSTIC)
        }
        if portable:
            values.update(torch=ANY, torch_build=ANY, backend=None)
        values["cell"] = _read_cell(data.get("cell"))
        return cls._make(values[name] for name in cls._fields)


#: The fields every entry has (the JSON keys a manifest must give); ``cell`` is optional.
REQUIRED_FIELDS = tuple(name for name in ManifestEntry._fields if name != "cell")
#: What a torch-agnostic entry says: ``any`` in each of these fields...
_AGNOSTIC = ("torch", "torch_build", "backend")
#: ...and null in these.
_AGNOSTIC_NULL = ("cxx11_abi", "gpu_toolkit")


def _check_portable(where: str, data: Mapping[str, object]) -> bool:
    """Whether ``data`` is a torch-agnostic entry: ``any`` in all of :data:`_AGNOSTIC`
    and null in :data:`_AGNOSTIC_NULL`. ``any`` in some of them only (a native entry
    that lost its torch, or a portable one that gained a backend) is refused: a native
    library must name its torch and backend, and nothing torch-specific may be claimed of
    one built against no torch."""
    anys = [name for name in _AGNOSTIC if data[name] == ANY]
    if not anys:
        return False
    nulls = [name for name in _AGNOSTIC_NULL if data[name] is not None]
    if len(anys) < len(_AGNOSTIC) or nulls:
        raise ManifestError(
            f"{where} mixes a torch-agnostic library's 'any' ({', '.join(anys)}) with "
            f"torch-specific fields: a portable library says 'any' in "
            f"{', '.join(_AGNOSTIC)} and null in {', '.join(_AGNOSTIC_NULL)}, a native one "
            "names its torch and backend",
            REINSTALL,
        )
    return True


def _read_cell(value: object) -> str | None:
    """``cell`` when it is plain text, else ``None``: the selector never reads the field
    (the runtime's fast path skips it), so a value it cannot use is ignored like an
    unknown key instead of refusing a manifest whose libraries are fine. The developer
    tools then report the library as having no cell id."""
    if isinstance(value, str) and value and _is_plain_text(value, MAX_TEXT):
        return value
    return None


#: Bounds of the manifest schema. A real manifest is a few kB: one entry per bundled library.
MAX_MANIFEST_BYTES = 1 << 20
MAX_ENTRIES = 1024
MAX_TEXT = 256
MAX_FILE_PATH = 512
MAX_LIBRARY_BYTES = 1 << 32


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({value!r})"
    if isinstance(value, (int, float)):
        return f"a number ({brief(value)})"
    if isinstance(value, str):
        return f"a string ({brief(value)})"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _is_plain_text(value: str, limit: int) -> bool:
    return len(value) <= limit and value.isprintable()


def _check_text(where: str, name: str, value: object, *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value:
        expected = "a non-empty string or null" if optional else "a non-empty string"
        raise ManifestError(
            f"{where}.{name} is {_json_type(value)}, expected {expected}", REINSTALL
        )
    if not _is_plain_text(value, MAX_TEXT):
        raise ManifestError(
            f"{where}.{name} is {brief(value)}: longer than {MAX_TEXT} characters or holds "
            "control characters",
            REINSTALL,
        )
    return value


def check_library_path(where: str, value: object) -> str:
    """A manifest ``file``: a relative POSIX path of plain names inside the package (``libs/x.so``).

    No absolute path, no ``..`` or ``.``, no empty component, no backslash or colon
    (Windows separators and drives), no NUL or other control characters, bounded length.
    Where the file really is (symlinks, file type) is checked by :func:`verify_file`.
    """
    if not isinstance(value, str) or not value:
        raise ManifestError(f"{where}.file is {_json_type(value)}, expected a file name", REINSTALL)
    parts = value.split("/")
    if (
        len(value) > MAX_FILE_PATH
        or not value.isprintable()
        or "\\" in value
        or ":" in value
        or any(part in ("", ".", "..") or len(part) > 255 for part in parts)
    ):
        raise ManifestError(
            f"{where}.file {brief(value)} may point outside the package: expected a relative "
            "path of plain names separated by '/' (no '..', at most 255 characters each)",
            REINSTALL,
        )
    return value


def _check_field(where: str, name: str, value: object) -> str | int | bool | Backend | None:
    if name == "file":
        return check_library_path(where, value)
    if name == "backend":
        if not isinstance(value, str) or value not in _BACKENDS:
            raise ManifestError(
                f"{where}.backend is {_json_type(value)}, expected one of "
                + ", ".join(repr(b) for b in _BACKENDS),
                REINSTALL,
            )
        return Backend(value)
    if name in ("cxx11_abi",):
        if value is not None and not isinstance(value, bool):
            raise ManifestError(
                f"{where}.{name} is {_json_type(value)}, expected true, false or null", REINSTALL
            )
        return value
    if name == "size":
        # bool is an int in Python; JSON true is not a size.
        if type(value) is not int or not 0 < value <= MAX_LIBRARY_BYTES:
            raise ManifestError(
                f"{where}.size is {_json_type(value)}, expected an integer number of bytes "
                f"(1 to {MAX_LIBRARY_BYTES})",
                REINSTALL,
            )
        return value
    if name == "sha256":
        if not (
            isinstance(value, str)
            and len(value) == 64
            and all(c in "0123456789abcdef" for c in value)
        ):
            raise ManifestError(
                f"{where}.sha256 is {_json_type(value)}, expected 64 lowercase hex digits",
                REINSTALL,
            )
        return value
    text = _check_text(where, name, value, optional=name == "gpu_toolkit")
    if name == "torch":
        major, dot, minor = str(text).partition(".")
        if not (dot and _is_number(major) and _is_number(minor)):
            raise ManifestError(
                f"{where}.torch is {brief(text)}, expected a torch 'major.minor' such as '2.8'",
                REINSTALL,
            )
    if name == "python":
        _check_python(where, str(text))
    return text


def _check_python(where: str, text: str) -> None:
    major, dot, minor = text.removesuffix("t").partition(".")
    if text.startswith(ABI3 + "."):  # "abi3.12": the limited API of a later CPython
        major, dot, minor = "3", ".", text[len(ABI3) + 1 :]
    if text != ABI3 and not (dot and _is_number(major) and _is_number(minor)):
        raise ManifestError(
            f"{where}.python is {brief(text)}, expected 'abi3', 'abi3.12', a free-threaded "
            "CPython such as '3.14t', or (manifests before abi3) a CPython such as '3.11'",
            REINSTALL,
        )


def _is_number(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) <= 6


#: The backends a native entry may name (``any`` is the portable library's, above).
_BACKENDS = tuple(b.value for b in NATIVE_BACKENDS)


def parse_manifest(raw: bytes, name: str) -> tuple[ManifestEntry, ...]:
    """The entries of a manifest's bytes (``name`` says which file in messages:
    ``manifest <path>``), validated as :func:`.files.load_manifest` documents. Raises
    :class:`ManifestError`."""
    if not raw.strip():
        raise ManifestError(f"{name} is empty", REINSTALL)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ManifestError(f"{name} is not UTF-8 text (byte {exc.start})", REINSTALL) from None
    try:
        data = json.loads(text)
    except RecursionError:
        raise ManifestError(f"{name} is nested too deeply", REINSTALL) from None
    except ValueError as exc:  # JSONDecodeError, or an integer too long to convert
        raise ManifestError(
            f"{name} is not valid JSON ({brief(str(exc), 100)[1:-1]})", REINSTALL
        ) from None
    if not isinstance(data, dict):
        raise ManifestError(f"{name} is {_json_type(data)}, expected a JSON object", REINSTALL)
    schema = data.get("schema")
    if type(schema) is not int or schema != SCHEMA_VERSION:
        raise ManifestError(
            f"{name} has schema {brief(schema)}, this version of torch-c-dlpack-ext "
            f"reads schema {SCHEMA_VERSION}",
            "install the torch-c-dlpack-ext release that wrote it, or " + REINSTALL,
        )
    libraries = data.get("libraries")
    if not isinstance(libraries, list) or len(libraries) > MAX_ENTRIES:
        raise ManifestError(
            f"{name}: 'libraries' is {_json_type(libraries)}, expected an array of "
            f"at most {MAX_ENTRIES} entries",
            REINSTALL,
        )
    return tuple(
        ManifestEntry.from_json(item, f"{name}: libraries[{index}]")
        for index, item in enumerate(libraries)
    )


def dump_manifest(entries: Iterable[ManifestEntry]) -> bytes:
    """Canonical, deterministic bytes of a manifest (sorted entries and keys).

    Compact JSON with one entry a line: every import parses the whole manifest, and
    the indentation a pretty-printed one carries (a third of its bytes) cost ~15-30 µs
    of that parse (CONTRIBUTING.md, "The import's common path"); a line an entry keeps
    it readable and its diffs small.
    """
    ordered = sorted(entries, key=lambda e: e.file)
    lines = [json.dumps(e.to_json(), separators=(",", ":"), sort_keys=True) for e in ordered]
    body = "".join(f"\n{line}," for line in lines).removesuffix(",")
    newline = "\n" if lines else ""
    return f'{{"libraries":[{body}{newline}],"schema":{SCHEMA_VERSION}}}\n'.encode()
