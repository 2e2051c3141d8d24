"""The full selector, run only off the import's common path: it gathers the facts (the
settings, the running torch, the manifest), decides with :func:`._decide.decide` and acts
on the decision (fallbacks, the legacy int, a ``LIBRARY`` override, the JIT), announcing
what it has to say as one warning (worded by :mod:`._wording`); it also builds the status
(:func:`status_of`).

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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from _torch_c_dlpack_ext_core.errors import (
    LibraryLoadError,
    ManifestError,
    TorchCDLPackExtError,
)
from _torch_c_dlpack_ext_core.files import load_manifest, read_verified
from _torch_c_dlpack_ext_core.manifest import ManifestEntry
from _torch_c_dlpack_ext_core.naming import MANIFEST_NAME, PORTABLE, Backend, env_var

from ._decide import decide, manifest_needed
from ._loader import CAPSULE_ATTR, LEGACY_INT_ATTR, LOCK, make_capsule, publish
from ._model import Decision, DecisionKind, Settings, TorchInfo
from ._settings import settings_of
from ._torchinfo import check_legacy_pointer, describe_torch
from ._wording import (
    announce,
    cause_of,
    compiled_wheel_remedy,
    describe_entry,
    details_elsewhere,
    gpu_library_remedy,
    native_out_of_reach,
    one_line,
    reinstall,
    report_remedy,
    torch_failure_message,
    with_tool_tail,
)

if TYPE_CHECKING:
    from types import ModuleType

    from _torch_c_dlpack_ext_core.installsource import InstallSource
    from _torch_c_dlpack_ext_core.trust import TrustedOwners

    from ._library import LoadedLibrary
    from ._status import Status, StatusFields

__all__ = [
    "deferred_status",
    "select_and_load",
    "status_of",
    "torch_import_failed",
]


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
            from ._install import install_source

            self._source = install_source(self.package_dir)
        return self._source

    def reinstall(self) -> str:
        """How to repair this installation, from where it came from."""
        return reinstall(self.source())

    def finish(
        self, kind: DecisionKind, library: Path | None = None, reason: str = "", remedy: str = ""
    ) -> StatusFields:
        text = announce(self.messages)
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
        from ._library import open_library, override_mismatch

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
                self.reinstall(),
            )
        from . import _jit

        try:
            loaded = open_library(*_jit.build_portable(self.settings))
        except TorchCDLPackExtError as exc:
            # Unsetting JIT helps only where PORTABLE did not ask for this table.
            chose = env_var("PORTABLE" if self.settings.portable else "JIT")
            return self.unavailable(
                f"the JIT build of the portable table failed: {with_tool_tail(exc)}",
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
                f"torch's legacy {LEGACY_INT_ATTR} is unusable: {cause_of(exc)}",
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
        # The JIT only where it could build for this torch (a bundled library may serve a
        # torch outside the range the driver checks).
        jit = native_out_of_reach(self.info, backend or self.info.backend) is None
        remedy = (
            gpu_library_remedy(backend, self.source())
            if backend is not None and backend is not Backend.CPU
            else self.reinstall()
            + (f"; or set {env_var('JIT')}=1 to build a library for this torch" if jit else "")
        )
        return self.unavailable("no library could be loaded: " + "; ".join(failures), remedy)

    def load_override(self, path: Path) -> StatusFields:
        """Load ``TORCH_C_DLPACK_EXT_LIBRARY``'s file, if its build info allows it here."""
        from ._library import (
            build_info_in,
            build_mismatch,
            open_library,
            override_mismatch,
            parse_build_info,
            read_library,
        )

        try:
            data = read_library(path, self.owners())
            # What the file says it was built for, read before dlopen: a library of
            # another torch minor would only fail there, on an undefined symbol.
            early = build_info_in(data)
            mismatch = build_mismatch(early, path, self.info, self.settings) if early else None
            if mismatch is None:
                loaded = open_library(path, data)
                mismatch = override_mismatch(loaded, self.info, self.settings)
        except LibraryLoadError as exc:
            return self.unavailable(cause_of(exc), f"fix or unset {env_var('LIBRARY')}")
        if mismatch is not None:
            return self.unavailable(*mismatch)
        publish(self.torch, loaded.pointer)
        self.messages.append(
            f"loaded {loaded.path} from {env_var('LIBRARY')}: no manifest, so no "
            "size/sha256 check was done"
        )
        self.note_trusted_owner(loaded.path)
        portable = parse_build_info(loaded.build_info()).get("table") == PORTABLE
        return self.finish(DecisionKind.PORTABLE if portable else DecisionKind.LOAD, loaded.path)

    def try_entries(
        self, entries: Sequence[ManifestEntry], failures: list[str]
    ) -> LoadedLibrary | None:
        """Verify, open and publish the first entry that works; record why others failed."""
        from ._library import open_library

        for entry in entries:
            try:
                loaded = open_library(*read_verified(entry, self.package_dir))
            except (ManifestError, LibraryLoadError) as exc:
                failures.append(cause_of(exc))
                continue
            if failures:
                self.messages.append(f"using {describe_entry(entry)} after: {'; '.join(failures)}")
            publish(self.torch, loaded.pointer)
            return loaded
        return None

    def jit(self, reason: str = "") -> StatusFields:
        from . import _jit
        from ._library import open_library

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
                    f"{self.info.version} failed: {with_tool_tail(exc)}"
                )
            return self.unavailable(
                f"the JIT build of the {backend.value} library for torch {self.info.version} "
                f"failed: {with_tool_tail(exc)}",
                f"fix that cause{details_elsewhere()}, or unset {env_var('JIT')}",
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


def _failed_before_deciding(reason: str, remedy: str) -> StatusFields:
    """torch could not be imported or described: nothing is decided, one warning says why."""
    text = announce([reason, remedy, "Nothing published"])
    return {
        "kind": DecisionKind.UNAVAILABLE,
        "reason": reason,
        "remedy": remedy,
        "warnings": (text,) if text else (),
    }


def torch_import_failed(exc: Exception) -> StatusFields:
    """The import's outcome when ``import torch`` failed (the package's ``__init__``
    imported it once, and does not again): nothing decided, one warning naming torch's
    failure. Where the user's filters make that warning an error, torch's own exception
    is its cause."""
    with LOCK:
        try:
            return _failed_before_deciding(*torch_failure_message(exc))
        except Warning as made_error:
            raise made_error from exc


def deferred_status() -> Status:
    """The :class:`Status` of an import that deferred on the fast path (torch had the
    API and no override was set); describes torch without acting on anything."""
    import torch

    from ._status import Status

    try:
        info = describe_torch(torch)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # status() must not raise where the import did not
        reason = (
            "torch provides __dlpack_c_exchange_api__ itself (it cannot be described "
            f"further: {type(exc).__name__}: {one_line(exc, 200)})"
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
    from ._status import Status

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

    from ._status import Status

    settings = Settings()
    try:
        info: TorchInfo | None = describe_torch(torch)._replace(
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
            return _failed_before_deciding(*torch_failure_message(exc))
        try:
            info = describe_torch(torch)
        except Exception as exc:  # an odd torch build must not break every importer
            return _failed_before_deciding(
                f"cannot describe the running torch ({type(exc).__name__}: {one_line(exc, 200)})",
                report_remedy(),
            )
        settings = settings_of(environ)
        manifest: tuple[ManifestEntry, ...] | ManifestError = ()
        if manifest_needed(info, settings):
            try:
                manifest = load_manifest(package_dir / MANIFEST_NAME)
            except ManifestError as exc:
                from ._install import in_archive

                manifest = in_archive(package_dir) or exc
        decision = decide(info, manifest, settings)
        if decision.remedy and manifest_needed(info, settings):
            # Its commands reinstall from where this installation came from (read only now:
            # a message is being formatted).
            from ._install import install_source

            source = install_source(package_dir)
            decision = decide(info, manifest, settings, source=source)
        return _Action(torch, info, decision, settings, package_dir).run()
