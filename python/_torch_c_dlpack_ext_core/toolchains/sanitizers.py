"""Sanitizer builds (tests only, never shipped): :class:`Sanitizer` (AddressSanitizer,
UndefinedBehaviorSanitizer) parsed strictly (:func:`parse_sanitizers`), the compiler flags,
the tagged file name, the runtime symbols the ABI audits accept from such a build only,
and the runtime libraries a process must preload to load it.

A library built with GCC's ``-fsanitize=address`` imports ``__asan_*`` symbols from
``libasan.so``, and that runtime must be the first library of the process: Python is not
instrumented, so a test loads it with ``LD_PRELOAD`` (:func:`preload_libraries` says
which files) before Python starts. Each finding aborts the process
(``-fno-sanitize-recover=all``: a UBSan report does not scroll by in a passing run), and
the library keeps its symbols and line tables (``-g``, no ``--strip-all``) so a report
names the function and line. The file name carries a tag (``-asan-ubsan``) so a
sanitizer build never takes a release library's name in a shared output directory.

Imports only the standard library and :mod:`..errors` and :mod:`..run`.
"""

from __future__ import annotations

import difflib
import enum
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..errors import CommandError, ConfigError
from ..run import run

__all__ = [
    "Sanitizer",
    "accepted_runtime_symbol",
    "compile_flags",
    "parse_sanitizers",
    "preload_libraries",
    "tagged_filename",
]


class Sanitizer(str, enum.Enum):
    """A sanitizer a build may instrument the library with, by its ``-fsanitize=`` name."""

    ADDRESS = "address"
    UNDEFINED = "undefined"

    @property
    def tag(self) -> str:
        """Its short name in a sanitizer build's file name: ``asan``, ``ubsan``."""
        return _TAGS[self]

    @property
    def runtime(self) -> str:
        """The runtime library GCC links for it (``libasan.so``), as ``-print-file-name``
        takes the name."""
        return _RUNTIMES[self]

    @property
    def symbol_prefixes(self) -> tuple[str, ...]:
        """Prefixes of the symbols an instrumented library imports from its runtime."""
        return _PREFIXES[self]


_TAGS = {Sanitizer.ADDRESS: "asan", Sanitizer.UNDEFINED: "ubsan"}
_RUNTIMES = {Sanitizer.ADDRESS: "libasan.so", Sanitizer.UNDEFINED: "libubsan.so"}
#: What GCC 12's instrumentation calls (``nm -D --undefined-only`` of a build of csrc/
#: and csrc/portable): ``__asan_report_load8``, ``__asan_init``, ...;
#: ``__ubsan_handle_*_abort``. ``__sanitizer_`` and ``__lsan_`` are the interfaces both
#: runtimes share, which clang's instrumentation may call as well.
_PREFIXES = {
    Sanitizer.ADDRESS: ("__asan_", "__lsan_", "__sanitizer_"),
    Sanitizer.UNDEFINED: ("__ubsan_", "__sanitizer_"),
}


def parse_sanitizers(value: str | Iterable[str | Sanitizer] | None) -> tuple[Sanitizer, ...]:
    """The sanitizers ``value`` names, each once, in :class:`Sanitizer`'s order.

    ``value``: ``None`` or ``""`` (none), a comma-separated string (``"address,undefined"``,
    as ``-fsanitize=`` takes it) or an iterable of names or :class:`Sanitizer` members.
    Raises :class:`~..errors.ConfigError` naming an unknown name, the accepted ones and,
    when one is close, the likely intended one.
    """
    if value is None:
        return ()
    names = value.split(",") if isinstance(value, str) else list(value)
    found: set[Sanitizer] = set()
    for name in names:
        if isinstance(name, Sanitizer):
            found.add(name)
            continue
        if not isinstance(name, str):
            raise ConfigError(
                f"sanitizers: {name!r} ({type(name).__name__}) is not a sanitizer name; "
                f"expected {_choices()}"
            )
        word = name.strip().lower()
        if not word and isinstance(value, str):
            continue  # "" and "address," as a shell might leave them
        try:
            found.add(Sanitizer(word))
        except ValueError:
            raise ConfigError(
                f"unknown sanitizer {name!r}{_hint(word)}: expected {_choices()}"
            ) from None
    return tuple(member for member in Sanitizer if member in found)


def _choices() -> str:
    return " or ".join(repr(member.value) for member in Sanitizer) + " (comma-separated)"


def _hint(word: str) -> str:
    """`` (did you mean 'address'?)`` for a near miss, also for a short tag (``asan``)."""
    by_tag = {member.tag: member.value for member in Sanitizer}
    if word in by_tag:
        return f" (did you mean {by_tag[word]!r}?)"
    close = difflib.get_close_matches(word, [member.value for member in Sanitizer], n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def compile_flags(sanitizers: Sequence[Sanitizer]) -> tuple[str, ...]:
    """The GCC-style compile-and-link flags of a build with ``sanitizers`` (none: ``()``)."""
    if not sanitizers:
        return ()
    names = ",".join(member.value for member in sanitizers)
    return (f"-fsanitize={names}", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-g")


def tagged_filename(filename: str, sanitizers: Sequence[Sanitizer]) -> str:
    """``filename`` with the sanitizers' tag before its suffix
    (``libtorch_c_dlpack_ext-portable-asan-ubsan.so``); unchanged without sanitizers."""
    if not sanitizers:
        return filename
    stem, dot, suffix = filename.rpartition(".")
    tag = "-".join(member.tag for member in sanitizers)
    return f"{stem}-{tag}{dot}{suffix}" if dot else f"{filename}-{tag}"


def accepted_runtime_symbol(name: str, sanitizers: Sequence[Sanitizer]) -> bool:
    """``name`` is a symbol the runtime of one of ``sanitizers`` provides (always ``False``
    without sanitizers: a release library imports none of them)."""
    return any(name.startswith(member.symbol_prefixes) for member in sanitizers)


def preload_libraries(
    compiler: str | Sequence[str], sanitizers: Sequence[Sanitizer]
) -> tuple[Path, ...]:
    """The runtime library files of ``sanitizers`` that ``compiler`` (a GCC, as a path or
    an argv prefix) links, in the order ``LD_PRELOAD`` needs them (ASan's first). Raises
    :class:`~..errors.ConfigError` when the compiler does not know one (a clang, or a GCC
    without the sanitizer runtime installed: Debian's ``libasan8``, ``libubsan1``)."""
    argv = [compiler] if isinstance(compiler, str) else list(compiler)
    found: list[Path] = []
    for member in sanitizers:
        try:
            proc = run([*argv, f"-print-file-name={member.runtime}"], echo=False)
            path = Path(proc.stdout.strip())
        except CommandError as exc:
            raise ConfigError(
                f"{' '.join(argv)} -print-file-name={member.runtime} failed ({exc})"
            ) from None
        # A compiler that does not know the file echoes the bare name back.
        if not path.is_absolute() or not path.is_file():
            raise ConfigError(
                f"{' '.join(argv)} does not know {member.runtime}, the {member.value} "
                "sanitizer's runtime; install it (Debian: libasan8, libubsan1) or use the "
                "GCC that built the library"
            )
        found.append(path.resolve())
    return tuple(found)
