"""The selection policy: which library (if any) ``import torch_c_dlpack_ext`` loads.

Pure: no I/O, no imports of torch. The caller reads the environment, the running
torch and the manifest, and acts on the returned :class:`Decision`.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from _torch_c_dlpack_ext_core.errors import (
    REINSTALL,
    ConfigError,
    InstallSource,
    ManifestError,
    PackageInArchiveError,
    build_from_source_command,
    reinstall_command,
)
from _torch_c_dlpack_ext_core.manifest import ManifestEntry
from _torch_c_dlpack_ext_core.naming import TORCH_RANGE, Backend, env_var
from _torch_c_dlpack_ext_core.version import __version__

from ._torchinfo import OWN_LIBRARY, TorchInfo

REINSTALL_COMMAND = REINSTALL.partition(": ")[2]

__all__ = [
    "Decision",
    "DecisionKind",
    "SettingProblem",
    "Settings",
    "decide",
    "describe_entry",
    "gpu_library_remedy",
    "manifest_needed",
]


class SettingProblem(NamedTuple):
    """One variable that could not be honoured, and why."""

    variable: str
    message: str


class Settings(NamedTuple):
    """The runtime overrides in force. Read by :func:`._settings.read_settings`; ``Settings()`` is
    what an environment without any ``TORCH_C_DLPACK_EXT_*`` variable gives."""

    #: Load nothing, change nothing.
    disable: bool = False
    #: Load our library even when torch already provides the API (replaces the attribute).
    force: bool = False
    #: Load this file instead of consulting the manifest (no sha256 check is possible).
    library: Path | None = None
    #: Use this backend instead of the detected one.
    backend: Backend | None = None
    #: Build a library for the running torch when no bundled one applies.
    jit: bool = False
    #: Where JIT builds go (``None``: :func:`._naming.default_cache_dir`).
    cache_dir: Path | None = None
    #: Variables that were set but could not be honoured.
    problems: tuple[SettingProblem, ...] = ()
    #: Every prefixed variable that was set (name -> value), for diagnostics.
    in_force: tuple[tuple[str, str], ...] = ()


class DecisionKind(str, enum.Enum):
    """What the selector decided to do."""

    #: torch provides ``__dlpack_c_exchange_api__`` itself: load nothing, change nothing.
    DEFER = "defer"
    #: torch has only the legacy int ``__c_dlpack_exchange_api__``: publish a capsule for it.
    PUBLISH_LEGACY = "publish_legacy"
    #: Load ``Decision.entry`` (then ``fallbacks`` in order), or the ``LIBRARY`` override.
    LOAD = "load"
    #: No bundled library applies and the user opted into building one for this torch.
    JIT = "jit"
    #: ``TORCH_C_DLPACK_EXT_DISABLE`` is set: load nothing, change nothing.
    DISABLED = "disabled"
    #: Nothing applies: load nothing; ``reason`` and ``remedy`` say why and what to do.
    UNAVAILABLE = "unavailable"

    def __str__(self) -> str:
        return self.value


class Decision(NamedTuple):
    """The selector's verdict. Immutable, so it can be stored in ``Status`` as is."""

    kind: DecisionKind
    #: Backend the choice was made for (detected, or ``TORCH_C_DLPACK_EXT_BACKEND``).
    backend: Backend | None = None
    #: First library to try (``LOAD`` from the manifest).
    entry: ManifestEntry | None = None
    #: Libraries to try, in order, if ``entry`` fails to load.
    fallbacks: tuple[ManifestEntry, ...] = ()
    #: ``TORCH_C_DLPACK_EXT_LIBRARY`` (``LOAD`` without a manifest entry).
    library: Path | None = None
    reason: str = ""
    remedy: str = ""
    #: Messages the caller must announce as warnings.
    warnings: tuple[str, ...] = ()


def describe_entry(entry: ManifestEntry) -> str:
    """``torch 2.6 cuda cxx11abi0`` — how messages name a library."""
    abi = "" if entry.cxx11_abi is None else f" cxx11abi{int(entry.cxx11_abi)}"
    return f"torch {entry.torch} {entry.backend.value}{abi}"


def _describe_torch(info: TorchInfo, backend: Backend) -> str:
    abi = "" if info.cxx11_abi is None else f" cxx11abi{int(info.cxx11_abi)}"
    return f"torch {info.version} ({backend.value}{abi})"


def gpu_library_remedy(backend: Backend, source: InstallSource | None = None) -> str:
    """What to do when a GPU torch has no usable library of its backend (``source``: where
    this installation came from; a pinned version only for an index install)."""
    if source is None or source.kind == "index":
        install = f"install a torch-c-dlpack-ext wheel that bundles it ({REINSTALL_COMMAND})"
    else:
        install = (
            f"build it from this installation's source ({build_from_source_command(source=source)})"
        )
    return (
        f"set {env_var('JIT')}=1 to build the {backend.value} library for this torch, or "
        f"{install}; "
        f"{env_var('BACKEND')}=cpu uses the CPU library, which serves CPU tensors only"
    )


def _build_remedy(manifest: Sequence[ManifestEntry], source: InstallSource | None = None) -> str:
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


def _broken_manifest_remedy(source: InstallSource | None = None) -> str:
    return (
        f"reinstall torch-c-dlpack-ext: {reinstall_command(source)}; or set {env_var('JIT')}=1 "
        "to build a library for this torch"
    )


def _rule_bad_settings(info: TorchInfo, settings: Settings) -> Decision | None:
    if not settings.problems:
        return None
    names = ", ".join(sorted({p.variable for p in settings.problems}))
    return Decision(
        kind=DecisionKind.UNAVAILABLE,
        reason="; ".join(p.message for p in settings.problems)
        + " (nothing loaded; torch's own API, if any, is unaffected)",
        remedy=f"fix or unset {names}",
    )


def _rule_backend_conflict(info: TorchInfo, settings: Settings) -> Decision | None:
    wanted = settings.backend
    if wanted is None or wanted is Backend.CPU or wanted is info.backend:
        return None
    var = env_var("BACKEND")
    if info.backend is Backend.CPU:
        build = f"torch {info.version} is a CPU build (neither torch.version.cuda nor .hip)"
        remedy = (
            f"unset {var} (a CPU torch uses the CPU library), or install a "
            f"{wanted.value} build of torch"
        )
    else:
        flavour, version = (
            ("ROCm", f"torch.version.hip {info.hip_version}")
            if info.backend is Backend.ROCM
            else ("CUDA", f"torch.version.cuda {info.cuda_version}")
        )
        build = f"torch {info.version} is a {flavour} build ({version})"
        remedy = (
            f"unset {var} to use this torch's {info.backend.value} library, or set "
            f"{var}=cpu to use the CPU library (CPU tensors only)"
        )
    return Decision(
        kind=DecisionKind.UNAVAILABLE,
        backend=info.backend,
        reason=f"{var}={wanted.value} conflicts with the torch build: {build}, and a "
        f"{wanted.value} library works only with a {wanted.value} build of torch (nothing "
        "loaded; torch's own API, if any, is unaffected)",
        remedy=remedy,
    )


def _rule_disabled(info: TorchInfo, settings: Settings) -> Decision | None:
    if not settings.disable:
        return None
    return Decision(
        kind=DecisionKind.DISABLED,
        reason=f"{env_var('DISABLE')} is set: nothing loaded, torch left unchanged",
        remedy=f"unset {env_var('DISABLE')} to enable the selector",
    )


def _rule_defer(info: TorchInfo, settings: Settings) -> Decision | None:
    if not info.has_capsule or settings.force:
        return None
    warnings: tuple[str, ...] = ()
    if settings.library is not None:
        warnings = (
            f"{env_var('LIBRARY')} is ignored: torch {info.version} provides "
            f"__dlpack_c_exchange_api__ itself; also set {env_var('FORCE')}=1 to replace it",
        )
    if info.capsule_origin == OWN_LIBRARY:
        provider = (
            f"{info.capsule_origin} (an earlier import in this process) already published "
            f"__dlpack_c_exchange_api__ on torch {info.version}"
        )
    elif info.capsule_origin:  # someone else's table: deferred to, and named as theirs
        provider = (
            f"{info.capsule_origin} already published __dlpack_c_exchange_api__ on torch "
            f"{info.version}: it is used, not this package's library "
            f"({env_var('FORCE')}=1 replaces it)"
        )
    else:
        provider = f"torch {info.version} provides __dlpack_c_exchange_api__ itself"
    return Decision(kind=DecisionKind.DEFER, reason=provider, warnings=warnings)


def _rule_legacy(info: TorchInfo, settings: Settings) -> Decision | None:
    if not info.has_legacy_int or settings.force:
        return None
    return Decision(
        kind=DecisionKind.PUBLISH_LEGACY,
        reason=f"torch {info.version} provides only the legacy int "
        "__c_dlpack_exchange_api__; publishing a capsule for the same table",
    )


def _rule_library_override(info: TorchInfo, settings: Settings) -> Decision | None:
    if settings.library is None:
        return None
    return Decision(
        kind=DecisionKind.LOAD,
        backend=settings.backend or info.backend,
        library=settings.library,
        reason=f"{env_var('LIBRARY')} names {settings.library} (no manifest, so no "
        "size/sha256 check was done)",
    )


#: Rules 1-5 of :func:`decide`, in order; none of them reads the manifest.
_RULES_BEFORE_MANIFEST = (
    _rule_bad_settings,
    _rule_backend_conflict,
    _rule_disabled,
    _rule_defer,
    _rule_legacy,
    _rule_library_override,
)


def manifest_needed(info: TorchInfo, settings: Settings) -> bool:
    """Whether :func:`decide` reads the manifest for these inputs.

    The caller loads the manifest only when this is true, so a torch that provides
    the API (on any backend) never touches it.
    """
    return all(rule(info, settings) is None for rule in _RULES_BEFORE_MANIFEST)


def decide(
    info: TorchInfo,
    manifest: Sequence[ManifestEntry] | ManifestError,
    settings: Settings,
    *,
    source: InstallSource | None = None,
) -> Decision:
    """Decide what importing the package does. The rules, first match wins:

    1. A variable that could not be honoured (bad value, unknown name, missing
       ``LIBRARY`` file) -> ``UNAVAILABLE`` naming it: a typo must never load the
       wrong thing. torch's own API, if any, is left alone. So is a ``BACKEND`` naming
       a GPU backend that is not torch's build flavour (rocm on a CUDA torch, cuda on a
       CPU one): ``UNAVAILABLE`` saying the override conflicts with the torch build,
       JIT or not (no library of that backend can be built or loaded for this torch).
    2. ``DISABLE`` -> ``DISABLED``.
    3. torch already has a *valid* ``__dlpack_c_exchange_api__`` (a PyCapsule named
       ``dlpack_exchange_api``) -> ``DEFER`` on every backend, without consulting the
       manifest; ``FORCE`` skips this rule (A/B tests). The reason names who published
       it: torch, an earlier import of this package, or another library's image (such as
       tvm-ffi's own JIT-built addon), never the latter as ours.
    4. torch has only a *valid* legacy int attribute (an address inside a loaded
       shared object whose table checks out) -> ``PUBLISH_LEGACY`` (unless ``FORCE``).
       A bogus attribute (``5``, ``None``, a capsule of another name, an int that is
       no such address) is never deferred to and never dereferenced: it is ignored,
       the rules below run, and the one warning names it (a library published by
       them replaces it).
    5. ``LIBRARY`` -> ``LOAD`` that file (no manifest, so no size/sha256 check).
    6. The manifest is unusable -> ``JIT`` if opted in, else ``UNAVAILABLE`` naming
       the cause and the reinstall command. The package imported from a zip archive
       (:class:`PackageInArchiveError`) -> ``UNAVAILABLE`` saying so, JIT or not: no
       library can be loaded from inside a zip, nor built from its zipped sources.
    7. The backend is ``BACKEND`` if set, else ``info.backend``: the build flavour of
       torch (``torch.version.hip`` -> rocm, else ``torch.version.cuda`` -> cuda, else
       cpu; ``_torchinfo.detect_backend``), never a device query, so a CUDA torch on a
       host without a GPU gets the CUDA library (which serves CPU tensors too). The rule
       once asked ``torch.cuda.is_available()`` (as the package this one replaces did),
       which initialises CUDA at import; see docs/facts.md, "The backend is the build
       flavour".
       Entries must match torch ``major.minor`` (local versions such as
       ``2.8.0a0+abc`` count as 2.8), the backend, and the C++ ABI exactly (``None``
       matches only ``None``). Matching entries -> ``LOAD`` the first (one built
       against the exact running torch first), the others of the same backend as
       ``fallbacks``. A library of another backend is never a fallback.
    8. A GPU backend (cuda, rocm) with no library of that backend -> ``JIT`` if
       opted in (it builds the backend's library), else ``UNAVAILABLE`` with the
       remedies, even when a CPU library of the same torch is bundled: it would hand
       GPU tensors' consumers no stream of torch's, so consumers must use their own
       path. ``BACKEND=cpu`` is the explicit way to use the CPU library on a GPU torch.
    9. Nothing matches and torch is outside ``naming.TORCH_RANGE`` (2.4-2.15, the
       layouts the driver checks) -> ``UNAVAILABLE`` saying so with the range, JIT or
       not: no library can be built for it.
    10. Nothing matches -> ``JIT`` if opted in, else ``UNAVAILABLE`` listing the
        bundled libraries, the build-from-source command and the JIT variable.

    The commands of a remedy install from ``source``, where this installation came from
    (PEP 610; default: an index, so the version is pinned).
    """
    decision = _decide(info, manifest, settings, source)
    if info.bogus_attributes and decision.kind not in (DecisionKind.DEFER, DecisionKind.DISABLED):
        # Named in the one warning of whatever happens next.
        notes = tuple(f"{problem}: ignored" for problem in info.bogus_attributes)
        decision = decision._replace(warnings=notes + decision.warnings)
    return decision


def _decide(
    info: TorchInfo,
    manifest: Sequence[ManifestEntry] | ManifestError,
    settings: Settings,
    source: InstallSource | None,
) -> Decision:
    for rule in _RULES_BEFORE_MANIFEST:
        decision = rule(info, settings)
        if decision is not None:
            return decision
    backend = settings.backend or info.backend
    if isinstance(manifest, PackageInArchiveError):  # no JIT either: its sources are zipped
        return Decision(
            kind=DecisionKind.UNAVAILABLE,
            backend=backend,
            reason=manifest.cause,
            remedy=manifest.remedy,
        )
    if isinstance(manifest, ManifestError):
        return _nothing_matches(
            settings,
            backend,
            f"no usable manifest: {getattr(manifest, 'cause', manifest)}",
            _broken_manifest_remedy(source),
        )
    try:
        version = info.major_minor
    except ConfigError as exc:
        return _nothing_matches(settings, backend, str(exc), _build_remedy(manifest, source))
    return _match_manifest(info, manifest, settings, backend, version, source=source)


def _match_manifest(
    info: TorchInfo,
    manifest: Sequence[ManifestEntry],
    settings: Settings,
    backend: Backend,
    version: tuple[int, int],
    *,
    source: InstallSource | None = None,
) -> Decision:
    def matching(wanted: Backend) -> list[ManifestEntry]:
        found = [
            e
            for e in manifest
            if e.torch_version == version
            and e.backend is wanted
            and e.cxx11_abi == info.cxx11_abi
            # ``==`` alone would let None match False.
            and (e.cxx11_abi is None) == (info.cxx11_abi is None)
        ]
        # Prefer the build of the exact running torch; then a stable order.
        return sorted(found, key=lambda e: (e.torch_build != info.version, e.file))

    primary = matching(backend)
    if primary:
        return Decision(
            kind=DecisionKind.LOAD,
            backend=backend,
            entry=primary[0],
            fallbacks=tuple(primary[1:]),
            reason=f"{describe_entry(primary[0])} matches {_describe_torch(info, backend)}",
        )
    cpu = matching(Backend.CPU) if backend is not Backend.CPU else []
    if cpu:
        why = f"no bundled {backend.value} library for {_describe_torch(info, backend)}"
        if settings.jit:
            return Decision(
                kind=DecisionKind.JIT,
                backend=backend,
                reason=f"{why}; {env_var('JIT')} asks to build one",
            )
        return Decision(
            kind=DecisionKind.UNAVAILABLE,
            backend=backend,
            reason=f"{why} (the bundled CPU library, {describe_entry(cpu[0])}, is not used "
            f"on a {backend.value} torch: it cannot give {backend.value} tensors torch's stream)",
            remedy=gpu_library_remedy(backend, source),
        )
    unsupported = _unsupported_torch(info, version)
    if unsupported is not None:
        return unsupported
    return _nothing_matches(
        settings,
        backend,
        f"no bundled library matches {_describe_torch(info, backend)}",
        _build_remedy(manifest, source),
    )


def _unsupported_torch(info: TorchInfo, version: tuple[int, int]) -> Decision | None:
    """A torch outside :data:`TORCH_RANGE` that nothing bundled serves: no library can be
    built for it either (the JIT would fail on the unchecked THPVariable layout), so it
    is told so, with the range, and never pointed at the JIT."""
    (lo, hi) = TORCH_RANGE
    if lo <= version <= hi:
        return None
    supported = f"{lo[0]}.{lo[1]}-{hi[0]}.{hi[1]}"
    if version < lo:
        remedy = (
            f"use torch {lo[0]}.{lo[1]} or newer (torch 2.10 and later provide "
            "__dlpack_c_exchange_api__ themselves)"
        )
    else:
        remedy = (
            "upgrade torch-c-dlpack-ext to a release that supports this torch; "
            f"{env_var('DISABLE')}=1 silences this"
        )
    return Decision(
        kind=DecisionKind.UNAVAILABLE,
        reason=f"torch {info.version} is not supported: torch-c-dlpack-ext "
        f"{__version__} builds for torch {supported}",
        remedy=remedy,
    )


def _nothing_matches(settings: Settings, backend: Backend, why: str, remedy: str) -> Decision:
    if settings.jit:
        return Decision(
            kind=DecisionKind.JIT,
            backend=backend,
            reason=f"{why}; {env_var('JIT')} asks to build one",
        )
    return Decision(kind=DecisionKind.UNAVAILABLE, backend=backend, reason=why, remedy=remedy)
