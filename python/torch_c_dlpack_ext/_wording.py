"""The wording of everything the selector says, in one place: the remedies (what to
install, set or build: :func:`gpu_library_remedy`, :func:`compiled_wheel_remedy`,
:func:`build_remedy`, :func:`broken_manifest_remedy`, :func:`report_remedy`), why a native
library is out of reach and how to get native speed (:func:`native_out_of_reach`,
:func:`native_speed`, :func:`cost_line`), how messages name a library, a torch or an
error (:func:`describe_entry`, :func:`one_line`, :func:`with_tool_tail`), and the one
warning an import emits, with the stack level that points at the importer
(:func:`announce`).

Off the import's common path; imports only the records (:mod:`._model`) and, lazily (only
when a message names them), the cost figures (:mod:`._costs`) and the core's commands
(:mod:`_torch_c_dlpack_ext_core.remedies`).
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Sequence
from types import FrameType
from typing import TYPE_CHECKING

from _torch_c_dlpack_ext_core.errors import (
    BuildError,
    ConfigError,
    TorchCDLPackExtError,
    TorchCDLPackExtWarning,
    TorchHalfImportedError,
    brief,
)
from _torch_c_dlpack_ext_core.manifest import ManifestEntry
from _torch_c_dlpack_ext_core.naming import NATIVE_BACKENDS, TORCH_RANGE, Backend, env_var
from _torch_c_dlpack_ext_core.version import __version__

from ._model import Settings, TorchInfo

if TYPE_CHECKING:
    from _torch_c_dlpack_ext_core.installsource import InstallSource

__all__ = [
    "announce",
    "broken_manifest_remedy",
    "build_remedy",
    "cause_of",
    "compiled_wheel_remedy",
    "cost_line",
    "describe_entry",
    "describe_torch_build",
    "details_elsewhere",
    "gpu_library_remedy",
    "native_out_of_reach",
    "native_speed",
    "one_line",
    "reinstall",
    "report_remedy",
    "run_as_diagnostics",
    "sentence",
    "torch_failure_message",
    "with_tool_tail",
]


def cost_line(native: str = "") -> str:
    """The portable table's per-call cost beside the native one, for status and the
    diagnostics, then ``native``: how to get native speed here, or why it is out of
    reach (:func:`native_speed`)."""
    from ._costs import MEASURED_ON
    from ._costs import PORTABLE_COST as c

    return (
        f"portable table: ~{c['portable_export_ns']} ns per export and "
        f"~{c['portable_allocator_ns']} ns per allocation, against ~{c['native_export_ns']} "
        f"and ~{c['native_allocator_ns']} ns for the native library (nox -s bench: "
        f"{MEASURED_ON})" + (f"; {native}" if native else "")
    )


def _range_text() -> str:
    (lo, hi) = TORCH_RANGE
    return f"{lo[0]}.{lo[1]}-{hi[0]}.{hi[1]}"


def native_out_of_reach(info: TorchInfo, backend: Backend) -> str | None:
    """Why no native library can be built for this torch, JIT or not (``None``: the JIT
    could build one where a C++ compiler and torch's headers exist): no native library
    exists for its backend (XPU), its version names no release, or it lies outside
    :data:`TORCH_RANGE`, the ``THPVariable`` layouts the driver checks (the one source of
    the range: the decision's reason and the status's native-speed line both read it)."""
    if backend not in NATIVE_BACKENDS:
        return f"no native library exists for {backend.value} torches"
    try:
        version = info.major_minor
    except ConfigError:
        return (
            f"torch's version {brief(info.version)} names no release (a dev build?), so no "
            "native library can be matched to it or built for it"
        )
    (lo, hi) = TORCH_RANGE
    if version < lo:
        return (
            f"torch {info.version} is older than any native build (torch-c-dlpack-ext "
            f"{__version__} builds for torch {_range_text()}; torch 2.10 and later provide "
            "__dlpack_c_exchange_api__ themselves)"
        )
    if version > hi:
        return (
            f"torch {info.version} is newer than any native build of torch-c-dlpack-ext "
            f"{__version__} (torch {_range_text()}): a later release may build for it"
        )
    return None


def native_speed(
    info: TorchInfo | None, settings: Settings | None = None, *, headers: str = ""
) -> str:
    """Where the portable table serves: how to get the native library's speed instead, or
    why it is out of reach here. The JIT is offered only where it could build a native
    library for this torch (:func:`native_out_of_reach`; ``headers``: why torch's C++
    headers cannot be compiled against, ``""`` where they can or nobody looked) and is not
    set already; ``PORTABLE`` and ``LIBRARY`` chose the portable table themselves."""
    settings = settings or Settings()
    if settings.portable:
        return f"for native speed unset {env_var('PORTABLE')}, which asks for the portable table"
    if settings.library is not None:
        return f"for native speed point {env_var('LIBRARY')} at a native library, or unset it"
    if info is None:
        return ""
    jit = env_var("JIT")
    beyond = native_out_of_reach(info, settings.backend or info.backend) or headers
    if beyond:
        return f"native speed is out of reach: {beyond}"
    if settings.jit:
        # JIT was set and a native library was in reach: its build failed, and the
        # import's warning (status().warnings) said why.
        return f"{jit} is set, but its build of the native library failed (the warning says why)"
    return (
        f"for native speed set {jit}=1, which builds the native library once where a C++ "
        "compiler and torch's headers exist"
    )


def describe_entry(entry: ManifestEntry) -> str:
    """``torch 2.6 cuda cxx11abi0`` — how messages name a library (``the portable
    table (abi3)`` for the torch-agnostic one)."""
    if entry.backend is None:
        return f"the portable table ({entry.python})"
    abi = "" if entry.cxx11_abi is None else f" cxx11abi{int(entry.cxx11_abi)}"
    return f"torch {entry.torch} {entry.backend.value}{abi}"


def describe_torch_build(info: TorchInfo, backend: Backend) -> str:
    abi = "" if info.cxx11_abi is None else f" cxx11abi{int(info.cxx11_abi)}"
    return f"torch {info.version} ({backend.value}{abi})"


def reinstall(source: InstallSource | None = None) -> str:
    """How to repair this installation, from where ``source`` says it came from
    (:func:`~_torch_c_dlpack_ext_core.remedies.reinstall_remedy`)."""
    from _torch_c_dlpack_ext_core.remedies import reinstall_remedy

    return reinstall_remedy(source)


def _from_index(source: InstallSource | None) -> bool:
    """Whether ``source`` is an index install (the default where nothing was read)."""
    from _torch_c_dlpack_ext_core.installsource import InstallKind

    return source is None or source.kind == InstallKind.INDEX


def gpu_library_remedy(backend: Backend, source: InstallSource | None = None) -> str:
    """What to do when a GPU torch has no usable library of its backend (``source``: where
    this installation came from; a pinned version only for an index install)."""
    from _torch_c_dlpack_ext_core.remedies import build_from_source_command, reinstall_command

    if _from_index(source):
        install = (
            f"install a torch-c-dlpack-ext wheel that bundles it ({reinstall_command(source)})"
        )
    else:
        install = (
            f"build it from this installation's source ({build_from_source_command(source=source)})"
        )
    return (
        f"set {env_var('JIT')}=1 to build the {backend.value} library for this torch, or "
        f"{install}; "
        f"{env_var('BACKEND')}=cpu uses the CPU library, which serves CPU tensors only"
    )


def build_remedy(manifest: Sequence[ManifestEntry], source: InstallSource | None = None) -> str:
    """What to do where no bundled library serves: build one from source, or the JIT."""
    from _torch_c_dlpack_ext_core.remedies import build_from_source_command

    manifest = [e for e in manifest if e.backend is not None]
    if manifest:
        listed = "; ".join(describe_entry(e) for e in manifest[:8])
        more = f" and {len(manifest) - 8} more" if len(manifest) > 8 else ""
        have = f"This installation bundles libraries for: {listed}{more}."
    else:
        have = "This installation bundles no libraries (a universal wheel)."
    return (
        f"{have} Build one from source after installing torch: "
        f"{build_from_source_command(source=source)}; or set {env_var('JIT')}=1 to build one "
        "on first import"
    )


def broken_manifest_remedy(source: InstallSource | None = None) -> str:
    return f"{reinstall(source)}; or set {env_var('JIT')}=1 to build a library for this torch"


def compiled_wheel_remedy(source: InstallSource | None = None) -> str:
    """How to get an installation that bundles the portable table: a compiled wheel from
    the index where this copy came from one (the version pinned), else a build from this
    installation's source, which compiles it where a C compiler exists."""
    from _torch_c_dlpack_ext_core.remedies import build_from_source_command, reinstall_command

    if _from_index(source):
        return (
            "install a compiled torch-c-dlpack-ext wheel, which bundles the portable table "
            f"({reinstall_command(source)})"
        )
    return (
        "build torch-c-dlpack-ext from source, which compiles the portable table where a C "
        f"compiler exists ({build_from_source_command(source=source)})"
    )


_PACKAGE_PREFIX = os.path.dirname(__file__) + os.sep


def _importer_stacklevel() -> int:
    """The ``stacklevel`` that points a warning at the first caller outside this
    package (the line that imported it), whatever path led here. Like ``warnings``
    itself, importlib's frames are skipped without being counted."""
    level = 1
    frame: FrameType | None = sys._getframe(1)  # the function about to call warnings.warn
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_PREFIX):
        frame = frame.f_back
        while (
            frame is not None
            and "importlib" in frame.f_code.co_filename
            and ("_bootstrap" in frame.f_code.co_filename)
        ):
            frame = frame.f_back
        level += 1
    return level


def one_line(exc: BaseException, limit: int = 300) -> str:
    """The first line of an error's message, cut to ``limit`` characters (compiler output
    and long paths stay in :func:`status` and the diagnostics, not in the warning)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text if len(text) <= limit else text[:limit] + "..."


def with_tool_tail(exc: BaseException, lines: int = 3, limit: int = 600) -> str:
    """:func:`one_line` of ``exc`` and, for a failed build, its tool's last lines
    (clipped): the warning, ``status().reason`` and the diagnostics all show what the
    compiler said, never only "...failed (exit 1):". The first line of one of our errors
    is whole: it ends in the fix, often a command, which must never be cut."""
    first = str(exc).strip().partition("\n")[0] if isinstance(exc, TorchCDLPackExtError) else ""
    first = first or one_line(exc)
    details = exc.details if isinstance(exc, BuildError) else ""
    kept = [line.strip() for line in details.splitlines() if line.strip()][-lines:]
    if not kept:
        return first
    tail = " / ".join(kept)
    return f"{first} {tail if len(tail) <= limit else '...' + tail[-limit:]}"


def cause_of(exc: BaseException) -> str:
    """An error's cause without its remedy (the caller names one remedy for all causes)."""
    return str(getattr(exc, "cause", None) or one_line(exc))


#: Names spelled in lower case even at the start of a sentence.
_LOWER_CASE_NAMES = frozenset({"torch", "torch's", "tvm-ffi", "pip"})


def sentence(message: str) -> str:
    """``message`` as a sentence: capitalised (unless it starts with an identifier such as
    ``torch.Tensor`` or a name spelled in lower case, such as ``torch``) and ending in a
    full stop."""
    first = message.split(" ", 1)[0]
    if (
        message[:1].islower()
        and not any(c in first for c in "._/=")
        and first not in _LOWER_CASE_NAMES
    ):
        message = message[0].upper() + message[1:]
    return message if message.endswith(".") else message + "."


def run_as_diagnostics() -> bool:
    """Whether this import is ``python -m torch_c_dlpack_ext`` locating its ``__main__``:
    the report it prints says everything the warning would (repeating it above the report,
    as ``<frozen runpy>:...: TorchCDLPackExtWarning``, only confuses). While ``-m`` locates
    the module, ``sys.argv[0]`` is ``"-m"``; ``sys.orig_argv`` (3.10+) names the module."""
    if sys.argv[:1] != ["-m"]:
        return False
    argv: list[str] | None = getattr(sys, "orig_argv", None)
    if argv is None:  # Python 3.9: "-m" alone says a module is being located
        return True
    try:
        return argv[argv.index("-m") + 1] == "torch_c_dlpack_ext"
    except (ValueError, IndexError):
        return False


#: The diagnostics' command, where a message sends the user for more.
_DIAGNOSTICS = "python -m torch_c_dlpack_ext"


def details_elsewhere() -> str:
    """`` (python -m torch_c_dlpack_ext shows details)`` to end a remedy with, or ``""``
    in the diagnostics themselves: they show those details, and a page must not send the
    user to itself."""
    return "" if run_as_diagnostics() else f" ({_DIAGNOSTICS} shows details)"


def report_remedy() -> str:
    """How to report an unexpected failure: with the diagnostics' output, or, in the
    diagnostics themselves, with this report."""
    if run_as_diagnostics():
        return "report it with this report"
    return f"report it with the output of {_DIAGNOSTICS}"


def announce(messages: Sequence[str]) -> str | None:
    """Emit everything this import has to say as ONE warning; return its text (kept by
    :func:`torch_c_dlpack_ext.status` even when nothing is emitted)."""
    if not messages:
        return None
    sentences = [sentence(m) for m in messages]
    text = "torch-c-dlpack-ext: " + " ".join(sentences)
    if run_as_diagnostics():
        return text
    try:
        warnings.warn(text, TorchCDLPackExtWarning, stacklevel=_importer_stacklevel())
    except Warning:  # the user's filters made it an error (-W error): they asked for that
        raise
    except Exception:  # it cannot be displayed (closed stderr, a failing hook):
        pass  # the import must not fail for that; status() still holds the text
    return text


def torch_failure_message(exc: Exception) -> tuple[str, str]:
    """Why torch could not be imported, and what to do (reason, remedy): not installed,
    or its own import failed (a warning of its made an error by the warnings filter, or
    any other exception), with the first line of what it raised."""
    said = f"{type(exc).__name__}: {one_line(exc, 300)}"
    if isinstance(exc, ModuleNotFoundError) and exc.name == "torch":
        return (
            f"torch is not importable ({said})",
            "install torch, then import torch_c_dlpack_ext again",
        )
    if isinstance(exc, TorchHalfImportedError):  # from the package's __init__
        return f"torch cannot be used: {exc.cause}", exc.remedy
    if isinstance(exc, Warning):
        kind = type(exc)
        category = kind.__qualname__
        if kind.__module__ != "builtins":
            category = f"{kind.__module__}.{category}"
        return (
            f"torch's own import failed: it emitted a {kind.__name__}, which the warnings "
            f"filter (python -W error, or pytest's filterwarnings = error) turned into an "
            f"error ({said})",
            f"remove that warning's cause, or let it through (-W default::{category} after "
            "-W error); python -W error -c 'import torch' shows it without this package",
        )
    return (
        f"torch's own import failed ({said})",
        "repair the torch installation: python -c 'import torch' shows the whole error",
    )
