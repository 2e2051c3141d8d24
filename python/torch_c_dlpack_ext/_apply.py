"""The full selector, run only off the import's common path: it reads the settings, the
running torch and the manifest, decides with :func:`._decide.decide` and acts on the
decision (fallbacks, the legacy int, a ``LIBRARY`` override, the JIT), with the one warning
and its wording; it also builds the status (:func:`status_of`) and runs
:func:`build_for_current_torch`.

:func:`._loader.load_common` handles the common case; this module runs when
anything is unusual (a ``TORCH_C_DLPACK_EXT_*`` variable, an attribute on
``torch.Tensor`` to judge, no valid manifest, no matching library, a library that
fails), and for :func:`torch_c_dlpack_ext.status`, the diagnostics and an explicit
build. It reads settings, torch and the manifest, decides with :func:`._decide.decide`
and acts. Nothing here lets an expected failure escape :func:`select_and_load`: every
one becomes the fields of a :class:`._status.Status` with the cause, and one
:class:`TorchCDLPackExtWarning` (the package's ``__init__`` catches the unexpected).
"""

from __future__ import annotations

import os
import re
import sys
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from _torch_c_dlpack_ext_core.errors import (
    BuildError,
    ConfigError,
    InstallSource,
    LibraryLoadError,
    ManifestError,
    PackageInArchiveError,
    TorchCDLPackExtError,
    TorchCDLPackExtWarning,
    TorchHalfImportedError,
    TorchInstallError,
    install_source_of,
    reinstall_remedy,
)
from _torch_c_dlpack_ext_core.files import load_manifest, read_verified
from _torch_c_dlpack_ext_core.manifest import ManifestEntry
from _torch_c_dlpack_ext_core.naming import (
    DIST_NAME,
    MANIFEST_NAME,
    PORTABLE,
    Backend,
    env_var,
    python_serves,
    running_python,
)

from ._decide import (
    Decision,
    DecisionKind,
    Settings,
    compiled_wheel_remedy,
    decide,
    describe_entry,
    gpu_library_remedy,
    manifest_needed,
    native_out_of_reach,
)
from ._library import LoadedLibrary, open_library, read_library
from ._library import short_path as _short_path
from ._loader import (
    CAPSULE_ATTR,
    ENV_PREFIX,
    LEGACY_INT_ATTR,
    LOCK,
    make_capsule,
    publish,
)
from ._status import Status, StatusFields
from ._torchinfo import TorchInfo, check_legacy_pointer

if TYPE_CHECKING:
    from types import ModuleType

    from _torch_c_dlpack_ext_core.trust import TrustedOwners

__all__ = [
    "build_for_current_torch",
    "deferred_status",
    "install_source",
    "override_mismatch",
    "report_remedy",
    "select_and_load",
    "settings_of",
    "status_of",
    "torch_import_failed",
]


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


def _one_line(exc: BaseException, limit: int = 300) -> str:
    """The first line of an error's message, cut to ``limit`` characters (compiler output
    and long paths stay in :func:`status` and the diagnostics, not in the warning)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text if len(text) <= limit else text[:limit] + "..."


def _with_tool_tail(exc: BaseException, lines: int = 3, limit: int = 600) -> str:
    """:func:`_one_line` of ``exc`` and, for a failed build, its tool's last lines
    (clipped): the warning, ``status().reason`` and the diagnostics all show what the
    compiler said, never only "...failed (exit 1):". The first line of one of our errors
    is whole: it ends in the fix, often a command, which must never be cut."""
    first = str(exc).strip().partition("\n")[0] if isinstance(exc, TorchCDLPackExtError) else ""
    first = first or _one_line(exc)
    details = exc.details if isinstance(exc, BuildError) else ""
    kept = [line.strip() for line in details.splitlines() if line.strip()][-lines:]
    if not kept:
        return first
    tail = " / ".join(kept)
    return f"{first} {tail if len(tail) <= limit else '...' + tail[-limit:]}"


def _cause(exc: BaseException) -> str:
    """An error's cause without its remedy (the caller names one remedy for all causes)."""
    return str(getattr(exc, "cause", None) or _one_line(exc))


#: Names spelled in lower case even at the start of a sentence.
_LOWER_CASE_NAMES = frozenset({"torch", "torch's", "tvm-ffi", "pip"})


def _sentence(message: str) -> str:
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


def _run_as_diagnostics() -> bool:
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


def _details_elsewhere() -> str:
    """`` (python -m torch_c_dlpack_ext shows details)`` to end a remedy with, or ``""``
    in the diagnostics themselves: they show those details, and a page must not send the
    user to itself."""
    return "" if _run_as_diagnostics() else f" ({_DIAGNOSTICS} shows details)"


def report_remedy() -> str:
    """How to report an unexpected failure: with the diagnostics' output, or, in the
    diagnostics themselves, with this report."""
    if _run_as_diagnostics():
        return "report it with this report"
    return f"report it with the output of {_DIAGNOSTICS}"


def _announce(messages: Sequence[str]) -> str | None:
    """Emit everything this import has to say as ONE warning; return its text (kept by
    :func:`torch_c_dlpack_ext.status` even when nothing is emitted)."""
    if not messages:
        return None
    sentences = [_sentence(m) for m in messages]
    text = "torch-c-dlpack-ext: " + " ".join(sentences)
    if _run_as_diagnostics():
        return text
    try:
        warnings.warn(text, TorchCDLPackExtWarning, stacklevel=_importer_stacklevel())
    except Warning:  # the user's filters made it an error (-W error): they asked for that
        raise
    except Exception:  # it cannot be displayed (closed stderr, a failing hook):
        pass  # the import must not fail for that; status() still holds the text
    return text


class _Action:
    """Carries out one decision. Whatever it has to say (the decision's notes, a
    fallback, a failure and its remedy) is collected and emitted as one warning."""

    def __init__(
        self,
        torch: ModuleType,
        info: TorchInfo,
        decision: Decision,
        settings: Settings,
        package_dir: Path,
    ) -> None:
        self.torch = torch
        self.info = info
        self.decision = decision
        self.settings = settings
        self.package_dir = package_dir
        self.messages: list[str] = list(decision.warnings)
        self._source: InstallSource | None = None

    def source(self) -> InstallSource:
        """How this copy was installed (read once, and only when a remedy names a command)."""
        if self._source is None:
            self._source = install_source(self.package_dir)
        return self._source

    def finish(
        self, kind: DecisionKind, library: Path | None = None, reason: str = "", remedy: str = ""
    ) -> StatusFields:
        text = _announce(self.messages)
        return {
            "kind": kind,
            "library": library,
            "torch": self.info,
            "reason": reason or self.decision.reason,
            "remedy": remedy or self.decision.remedy,
            "warnings": (text,) if text else (),
            "decision": self.decision,
            "settings": self.settings,
        }

    def unavailable(self, reason: str, remedy: str = "") -> StatusFields:
        """The outcome of a failed selection; torch is left as it was."""
        remedy = remedy or self.decision.remedy
        self.messages += [reason, *([remedy] if remedy else [])]
        self.messages.append("Nothing published: torch.Tensor left unchanged")
        return self.finish(DecisionKind.UNAVAILABLE, reason=reason, remedy=remedy)

    def run(self) -> StatusFields:
        handlers = {
            DecisionKind.DEFER: self.nothing,
            DecisionKind.DISABLED: self.nothing,
            DecisionKind.UNAVAILABLE: lambda: self.unavailable(self.decision.reason),
            DecisionKind.PUBLISH_LEGACY: self.publish_legacy,
            DecisionKind.LOAD: self.load,
            DecisionKind.JIT: self.jit,
            DecisionKind.PORTABLE: self.portable,
        }
        return handlers[self.decision.kind]()

    def portable(self, why: str = "") -> StatusFields:
        """Load the portable table: the decision's (or a fallback's) bundled library, or,
        where none is bundled, one the JIT builds (only C and Python.h needed). ``why``:
        the failure that led here, announced (a chosen portable table is silent)."""
        entry = self.decision.entry if self.decision.kind is DecisionKind.PORTABLE else None
        entry = entry or self.decision.portable
        if why:
            self.messages.append(f"{why}; using the portable table instead")
        if entry is not None:
            failures: list[str] = []
            loaded = self.try_entries([entry], failures)
            if loaded is not None:
                return self.finish(DecisionKind.PORTABLE, loaded.path, why)
            return self.unavailable(
                "the portable table failed its load check: " + "; ".join(failures),
                reinstall_remedy(self.source()),
            )
        from . import _jit

        try:
            loaded = open_library(*_jit.build_portable(self.settings))
        except TorchCDLPackExtError as exc:
            # Unsetting JIT helps only where PORTABLE did not ask for this table.
            chose = env_var("PORTABLE" if self.settings.portable else "JIT")
            return self.unavailable(
                f"the JIT build of the portable table failed: {_with_tool_tail(exc)}",
                f"install a C compiler and the Python headers (python3-dev), "
                f"{compiled_wheel_remedy(self.source())}, or unset {chose}",
            )
        mismatch = override_mismatch(loaded, self.info, self.settings)
        if mismatch is not None:
            return self.unavailable(*mismatch)
        publish(self.torch, loaded.pointer)
        return self.finish(DecisionKind.PORTABLE, loaded.path, why)

    def nothing(self) -> StatusFields:
        return self.finish(self.decision.kind)

    def publish_legacy(self) -> StatusFields:
        try:
            pointer, _ = check_legacy_pointer(getattr(self.torch.Tensor, LEGACY_INT_ATTR))
        except (AttributeError, LibraryLoadError) as exc:
            return self.unavailable(
                f"torch's legacy {LEGACY_INT_ATTR} is unusable: {_cause(exc)}",
                f"unset it, or set {env_var('FORCE')}=1 to load a bundled library instead",
            )
        with LOCK:
            setattr(self.torch.Tensor, CAPSULE_ATTR, make_capsule(pointer))
        return self.finish(DecisionKind.PUBLISH_LEGACY)

    def load(self) -> StatusFields:
        if self.decision.library is not None:
            return self.load_override(self.decision.library)
        failures: list[str] = []
        candidates = [self.decision.entry, *self.decision.fallbacks] if self.decision.entry else []
        loaded_entry = self.try_entries(candidates, failures)
        if loaded_entry is not None:
            return self.finish(DecisionKind.LOAD, loaded_entry.path)
        if self.settings.jit:
            # Opted into JIT: build for this torch rather than give up.
            return self.jit(
                f"{'; '.join(failures)}; {env_var('JIT')} asks to build a library instead"
            )
        if self.decision.portable is not None:
            return self.portable("no native library could be loaded: " + "; ".join(failures))
        backend = self.decision.backend
        source = self.source()
        # The JIT only where it could build for this torch (a bundled library may serve a
        # torch outside the range the driver checks).
        jit = native_out_of_reach(self.info, backend or self.info.backend) is None
        remedy = (
            gpu_library_remedy(backend, source)
            if backend is not None and backend is not Backend.CPU
            else reinstall_remedy(source)
            + (f"; or set {env_var('JIT')}=1 to build a library for this torch" if jit else "")
        )
        return self.unavailable("no library could be loaded: " + "; ".join(failures), remedy)

    def load_override(self, path: Path) -> StatusFields:
        """Load ``TORCH_C_DLPACK_EXT_LIBRARY``'s file, if its build info allows it here."""
        try:
            data = read_library(path, self.owners())
            # What the file says it was built for, read before dlopen: a library of
            # another torch minor would only fail there, on an undefined symbol.
            early = build_info_in(data)
            mismatch = _mismatch(early, path, self.info, self.settings) if early else None
            if mismatch is None:
                loaded = open_library(path, data)
                mismatch = override_mismatch(loaded, self.info, self.settings)
        except LibraryLoadError as exc:
            return self.unavailable(_cause(exc), f"fix or unset {env_var('LIBRARY')}")
        if mismatch is not None:
            return self.unavailable(*mismatch)
        publish(self.torch, loaded.pointer)
        self.messages.append(
            f"loaded {loaded.path} from {env_var('LIBRARY')}: no manifest, so no "
            "size/sha256 check was done"
        )
        self.note_trusted_owner(loaded.path)
        portable = _parse_build_info(loaded.build_info()).get("table") == PORTABLE
        return self.finish(DecisionKind.PORTABLE if portable else DecisionKind.LOAD, loaded.path)

    def try_entries(
        self, entries: Sequence[ManifestEntry], failures: list[str]
    ) -> LoadedLibrary | None:
        """Verify, open and publish the first entry that works; record why others failed."""
        for entry in entries:
            try:
                loaded = open_library(*read_verified(entry, self.package_dir))
            except (ManifestError, LibraryLoadError) as exc:
                failures.append(_cause(exc))
                continue
            if failures:
                self.messages.append(f"using {describe_entry(entry)} after: {'; '.join(failures)}")
            publish(self.torch, loaded.pointer)
            return loaded
        return None

    def jit(self, reason: str = "") -> StatusFields:
        from . import _jit

        backend = self.decision.backend or self.info.backend
        try:
            loaded = open_library(*_jit.build(self.torch, self.info, backend, self.settings))
        except TorchCDLPackExtError as exc:
            # FORCE past torch's own table asks for the native library only.
            forced_past = self.info.has_capsule or self.info.has_legacy_int
            if self.decision.portable is not None or (self.info.has_to_dlpack and not forced_past):
                # The portable table: the bundled one, else one the JIT builds with C only.
                return self.portable(
                    f"the JIT build of the {backend.value} library for torch "
                    f"{self.info.version} failed: {_with_tool_tail(exc)}"
                )
            return self.unavailable(
                f"the JIT build of the {backend.value} library for torch {self.info.version} "
                f"failed: {_with_tool_tail(exc)}",
                f"fix that cause{_details_elsewhere()}, or unset {env_var('JIT')}",
            )
        publish(self.torch, loaded.pointer)
        self.note_trusted_owner(loaded.path)
        return self.finish(DecisionKind.JIT, loaded.path, reason)

    def owners(self) -> TrustedOwners:
        """Who may own a ``LIBRARY`` or JIT file loaded here (root, this user, and the
        ``TRUSTED_OWNER`` setting's account)."""
        from _torch_c_dlpack_ext_core.trust import TrustedOwners

        return TrustedOwners(self.settings.trusted_owner)

    def note_trusted_owner(self, path: Path) -> None:
        """Announce a file that was loaded because ``TRUSTED_OWNER`` trusts its owner."""
        owner = self.settings.trusted_owner
        you = getattr(os, "geteuid", lambda: 0)()
        try:
            uid = os.stat(path).st_uid
        except OSError:
            return
        if owner is not None and uid == owner and uid not in (0, you):
            self.messages.append(
                f"loaded {path}, owned by uid {uid}, which {env_var('TRUSTED_OWNER')} trusts"
            )


def override_mismatch(
    loaded: LoadedLibrary, info: TorchInfo, settings: Settings
) -> tuple[str, str] | None:
    """Why a ``TORCH_C_DLPACK_EXT_LIBRARY`` library must not be published on this torch
    (reason, remedy), from its ``TorchCDLPackExtBuildInfo``; ``None`` if it may.

    The manifest's checks, done on what the library says it is: another torch minor is
    always refused (``THPVariable``'s layout and ATen's ABI differ between minors, so
    the first call could crash); another Python ABI (``"python"``: ``abi3`` on a
    free-threaded CPython, ``3.13t`` on 3.13 with the GIL, another version: the
    interpreter's is its build's, ``Py_GIL_DISABLED``), which can crash at dlopen; another
    C++ ABI too; another backend than the one this
    torch needs (the CPU library on a GPU torch would answer ``current_work_stream``
    without torch's stream) unless ``TORCH_C_DLPACK_EXT_BACKEND`` asks for exactly it.
    A library that does not say its backend is refused on a GPU torch for that reason.
    """
    return _mismatch(_parse_build_info(loaded.build_info()), loaded.path, info, settings)


#: How ``TorchCDLPackExtBuildInfo``'s JSON (csrc/build_info.cc) stands in the file: a
#: NUL-terminated string constant that begins with the torch build.
_BUILD_INFO_IN_FILE = re.compile(
    rb'\{(?:"table": "[a-z]{1,20}", )?"torch": "[^"\x00]{1,200}", "torch_major": '
    rb"[^\x00]{1,2000}?\}\x00"
)


def build_info_in(data: bytes) -> dict[str, object]:
    """The build info a library's bytes hold (its ``TorchCDLPackExtBuildInfo`` string
    constant), read without loading it; ``{}`` when there is none."""
    match = _BUILD_INFO_IN_FILE.search(data)
    return _parse_build_info(match.group()[:-1].decode("utf-8", "replace") if match else None)


def _parse_build_info(raw: str | None) -> dict[str, object]:
    import json

    try:
        described = json.loads(raw) if raw else None
    except (ValueError, RecursionError):
        described = None
    return described if isinstance(described, dict) else {}


def _mismatch(
    built: dict[str, object], path: Path, info: TorchInfo, settings: Settings
) -> tuple[str, str] | None:
    """:func:`override_mismatch` on a build info already read (``{}``: nothing known)."""
    var = env_var("LIBRARY")
    name = _short_path(path)
    fix = (
        f"point {var} at a library built for this torch, set {env_var('JIT')}=1 instead, "
        "or unset it"
    )
    python_or_portable = _python_mismatch(built, name, info)
    if python_or_portable is not None or built.get("table") == PORTABLE:
        # The portable table is torch-agnostic: no torch minor, ABI or backend to match.
        return python_or_portable
    major, minor = built.get("torch_major"), built.get("torch_minor")
    if isinstance(major, int) and isinstance(minor, int):
        try:
            running = info.major_minor
        except TorchCDLPackExtError:
            running = None
        if running is not None and (major, minor) != running:
            return (
                f"{name} (from {var}) was built for torch {major}.{minor}, this is torch "
                f"{info.version}: a library works only with the torch minor it was built for",
                fix,
            )
    abi = built.get("cxx11_abi")
    if (
        isinstance(abi, int)
        and not isinstance(abi, bool)
        and info.cxx11_abi is not None
        and bool(abi) != info.cxx11_abi
    ):
        return (
            f"{name} (from {var}) was built for the cxx11 ABI {abi}, this torch uses "
            f"{int(info.cxx11_abi)}",
            fix,
        )
    wanted = settings.backend or info.backend
    backend = built.get("backend")
    if backend != wanted.value and (backend is not None or wanted is not Backend.CPU):
        known = isinstance(backend, str) and backend in {b.value for b in Backend}
        said = f"the {backend} backend" if known else "an unknown backend"
        asked = (
            f"{env_var('BACKEND')} asks for {wanted.value}"
            if settings.backend is not None
            else f"this torch needs {wanted.value}"
            + (
                " (a GPU torch gets a library that answers its streams)"
                if wanted is not Backend.CPU
                else ""
            )
        )
        return (
            f"{name} (from {var}) was built for {said}, {asked}",
            f"point {var} at a {wanted.value} library"
            + (f", set {env_var('BACKEND')}={backend} to use it anyway" if known else "")
            + ", or unset it",
        )
    return None


def _python_mismatch(
    built: dict[str, object], name: str, info: TorchInfo
) -> tuple[str, str] | None:
    """Why a library whose build info is ``built`` may not be loaded by this interpreter
    (its ``python``: an abi3 library on a free-threaded build, a 3.14t one elsewhere), or,
    for the portable table, by this torch (it calls ``torch._C._to_dlpack``)."""
    var = env_var("LIBRARY")
    python = built.get("python")
    version_info, freethreaded = info.python or running_python()
    if isinstance(python, str) and not python_serves(python, version_info, freethreaded):
        build = "a free-threaded" if freethreaded else "a GIL"
        return (
            f"{name} (from {var}) was built for Python {python}, this is {build} CPython "
            f"{version_info[0]}.{version_info[1]}: its objects' layout would not match, and "
            "loading it could crash the process",
            f"point {var} at a library built for this Python, set {env_var('JIT')}=1 to "
            "build one for it, or unset it",
        )
    if built.get("table") == PORTABLE and not info.has_to_dlpack:
        return (
            f"{name} is the portable table, which calls torch._C._to_dlpack; torch "
            f"{info.version} has none",
            f"unset {var}",
        )
    return None


def _failed_before_deciding(reason: str, remedy: str) -> StatusFields:
    """torch could not be imported or described: nothing is decided, one warning says why."""
    text = _announce([reason, remedy, "Nothing published"])
    return {
        "kind": DecisionKind.UNAVAILABLE,
        "reason": reason,
        "remedy": remedy,
        "warnings": (text,) if text else (),
    }


def _torch_failure_message(exc: Exception) -> tuple[str, str]:
    """Why torch could not be imported, and what to do (reason, remedy): not installed,
    or its own import failed (a warning of its made an error by the warnings filter, or
    any other exception), with the first line of what it raised."""
    said = f"{type(exc).__name__}: {_one_line(exc, 300)}"
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


def torch_import_failed(exc: Exception) -> StatusFields:
    """The import's outcome when ``import torch`` failed (the package's ``__init__``
    imported it once, and does not again): nothing decided, one warning naming torch's
    failure. Where the user's filters make that warning an error, torch's own exception
    is its cause."""
    with LOCK:
        try:
            return _failed_before_deciding(*_torch_failure_message(exc))
        except Warning as made_error:
            raise made_error from exc


def deferred_status() -> Status:
    """The :class:`Status` of an import that deferred on the fast path (torch had the
    API and no override was set); describes torch without acting on anything."""
    import torch

    try:
        info = TorchInfo.from_torch(torch)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # status() must not raise where the import did not
        reason = (
            "torch provides __dlpack_c_exchange_api__ itself (it cannot be described "
            f"further: {type(exc).__name__}: {_one_line(exc, 200)})"
        )
        return Status(
            kind=DecisionKind.DEFER,
            reason=reason,
            decision=Decision(kind=DecisionKind.DEFER, reason=reason),
            settings=Settings(),
        )
    settings = Settings()
    # The DEFER rule's own words: torch's capsule, or one an earlier import of ours set.
    reason = decide(info, (), settings).reason
    if not info.has_capsule:  # torch's capsule was changed after the import
        reason = f"torch {info.version} provided __dlpack_c_exchange_api__ at import"
    return Status(
        kind=DecisionKind.DEFER,
        torch=info,
        reason=reason,
        decision=Decision(kind=DecisionKind.DEFER, backend=info.backend, reason=reason),
        settings=settings,
    )


def status_of(fields: StatusFields | None) -> Status:
    """The :class:`Status` of an import, from the fields it kept (``None``: it deferred on
    ``__init__``'s fast path)."""
    if fields is None:
        return deferred_status()
    library = fields.get("library")  # text from the common path (no pathlib there)
    path = None if library is None else Path(library)
    if fields.get("common_path"):
        return _common_path_status(path, DecisionKind(fields["kind"]))
    return Status(
        kind=DecisionKind(fields["kind"]),
        library=path,
        torch=fields.get("torch"),
        reason=fields.get("reason", ""),
        remedy=fields.get("remedy", ""),
        warnings=fields.get("warnings", ()),
        decision=fields.get("decision"),
        settings=fields.get("settings"),
    )


def _common_path_status(library: Path | None, kind: DecisionKind = DecisionKind.LOAD) -> Status:
    """The :class:`Status` of an import that published on the common path: the decision
    the selector makes for the same inputs (no override, neither attribute on
    ``torch.Tensor`` before, this package's manifest), made now."""
    import torch

    settings = Settings()
    try:
        info: TorchInfo | None = TorchInfo.from_torch(torch)._replace(
            has_capsule=False, has_legacy_int=False, bogus_attributes=(), capsule_origin=""
        )
    except Exception:  # status() must not raise where the import did not
        info = None
    decision = Decision(kind=kind, reason=f"loaded {library}")
    if info is not None:
        try:
            made = decide(info, load_manifest(Path(__file__).parent / MANIFEST_NAME), settings)
        except ManifestError:  # changed since the import
            made = None
        if made is not None and made.kind is kind:
            decision = made
    return Status(
        kind=kind,
        library=library,
        torch=info,
        reason=decision.reason,
        decision=decision,
        settings=settings,
    )


def _in_archive(package_dir: Path) -> PackageInArchiveError | None:
    """The error saying the package was imported from inside a zip archive (zipimport),
    if it was: the first existing path above ``package_dir`` is a zip file, not a
    directory."""
    import zipfile

    for path in (package_dir, *package_dir.parents):
        try:
            if path.is_dir():
                return None
            if not path.is_file():
                continue
            archive = zipfile.is_zipfile(path)
        except OSError:
            return None
        if not archive:
            return None
        return PackageInArchiveError(
            f"this torch-c-dlpack-ext is inside the zip archive {_short_path(path)} "
            "(imported with zipimport): a package inside a zip cannot load its library "
            "(dlopen loads only files on disk)",
            "install it unzipped (pip installs wheels unzipped), or extract the archive "
            "and put the extracted directory on sys.path instead of the zip",
        )
    return None


def install_source(package_dir: Path) -> InstallSource:
    """Where the installation holding ``package_dir`` came from, as its installation
    record says: the dist-info beside the package, its PEP 610 ``direct_url.json`` and its
    ``INSTALLER`` (read with ``importlib.metadata``, only when a message names a command).
    An index install (the version pinned) only where an installer's record says so; no
    dist-info (a source tree on ``sys.path``), one no installer wrote (an unpacked wheel)
    or one that cannot be read is ``"unrecorded"``: nothing says what it came from."""
    from importlib import metadata

    where = str(package_dir.parent)
    try:
        for dist in metadata.distributions(name=DIST_NAME, path=[where]):
            return install_source_of(
                dist.read_text("direct_url.json"), dist.read_text("INSTALLER"), location=where
            )
    except (OSError, ValueError):  # an unreadable dist-info says nothing
        pass
    return InstallSource("unrecorded", where)


def settings_of(environ: Mapping[str, str]) -> Settings:
    """The runtime settings in ``environ``: ``Settings()`` when no ``TORCH_C_DLPACK_EXT_*``
    variable is set (the common case parses nothing), else :func:`._settings.read_settings`."""
    if not any(name.startswith(ENV_PREFIX) for name in environ):
        return Settings()
    from ._settings import read_settings

    return read_settings(environ)


def select_and_load(environ: Mapping[str, str], package_dir: Path) -> StatusFields:
    """Run the whole selector once: read settings, torch and (if needed) the manifest,
    decide, and act. Never raises for a bad environment, a bad installation, a bad
    library or an odd torch; the returned fields of a :class:`._status.Status` say what
    happened, and exactly one warning is emitted whenever nothing was published (and
    whenever something needs saying after all)."""
    with LOCK:
        try:
            import torch
        # Whatever torch's own import raises (ImportError, OSError from its shared libraries...).
        except Exception as exc:
            return _failed_before_deciding(*_torch_failure_message(exc))
        try:
            info = TorchInfo.from_torch(torch)
        except Exception as exc:  # an odd torch build must not break every importer
            return _failed_before_deciding(
                f"cannot describe the running torch ({type(exc).__name__}: {_one_line(exc, 200)})",
                report_remedy(),
            )
        settings = settings_of(environ)
        manifest: tuple[ManifestEntry, ...] | ManifestError = ()
        if manifest_needed(info, settings):
            try:
                manifest = load_manifest(package_dir / MANIFEST_NAME)
            except ManifestError as exc:
                manifest = _in_archive(package_dir) or exc
        decision = decide(info, manifest, settings)
        if decision.remedy and manifest_needed(info, settings):
            # Its commands reinstall from where this installation came from (read only now:
            # a message is being formatted).
            source = install_source(package_dir)
            decision = decide(info, manifest, settings, source=source)
        return _Action(torch, info, decision, settings, package_dir).run()


def build_for_current_torch(environ: Mapping[str, str]) -> tuple[Status, Path]:
    """Build, load and publish for the running torch; the body of
    :func:`torch_c_dlpack_ext.build_for_current_torch`. Raises what the build raises."""
    from . import _jit

    try:
        import torch
    except ImportError as exc:
        raise TorchInstallError(
            f"cannot build for the current torch: torch is not importable ({exc}); install it"
        ) from None

    with LOCK:
        info = TorchInfo.from_torch(torch)
        settings = settings_of(environ)
        for problem in settings.problems:
            # A bad BACKEND must not quietly become the detected backend.
            if problem.variable in (env_var("BACKEND"), env_var("CACHE_DIR")):
                raise ConfigError(f"cannot build for the current torch: {problem.message}")
        backend = settings.backend or info.backend
        loaded = open_library(*_jit.build(torch, info, backend, settings))
        publish(torch, loaded.pointer)
        status = Status(
            kind=DecisionKind.JIT,
            library=loaded.path,
            torch=info,
            reason=f"built for torch {info.version} ({backend.value}) on request",
            settings=settings,
        )
        return status, loaded.path
