"""The selection policy (the pure decision): which library ``import torch_c_dlpack_ext``
loads, ``(TorchInfo, manifest, settings) -> Decision`` (:func:`decide`, whose docstring is
the spec; table-tested): defer, native, JIT, the portable table (``DecisionKind.PORTABLE``,
``Decision.portable`` as the last resort) or unavailable.

Pure: a function of the gathered facts (:mod:`._model`'s records), no I/O, no imports of
torch. The caller reads the environment, the running torch and the manifest, and acts on
the returned :class:`Decision`; the remedies' wording is :mod:`._wording`'s. The records
are re-exported here, the policy's vocabulary.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from _torch_c_dlpack_ext_core.errors import ConfigError, ManifestError, PackageInArchiveError
from _torch_c_dlpack_ext_core.manifest import ManifestEntry
from _torch_c_dlpack_ext_core.naming import (
    NATIVE_BACKENDS,
    TORCH_RANGE,
    Backend,
    env_var,
    python_serves,
    running_python,
)
from _torch_c_dlpack_ext_core.version import __version__

from ._model import OWN_LIBRARY, Decision, DecisionKind, SettingProblem, Settings, TorchInfo
from ._wording import (
    broken_manifest_remedy,
    build_remedy,
    compiled_wheel_remedy,
    describe_entry,
    describe_torch_build,
    gpu_library_remedy,
    native_out_of_reach,
    reinstall,
)

if TYPE_CHECKING:
    from _torch_c_dlpack_ext_core.installsource import InstallSource

__all__ = [
    "Decision",
    "DecisionKind",
    "SettingProblem",
    "Settings",
    "TorchInfo",
    "decide",
    "manifest_needed",
]


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
    own = f"unset {var} to use this torch's {info.backend.value} library"
    if info.backend is Backend.CPU:
        build = f"torch {info.version} is a CPU build (no torch.version.cuda, .hip or .xpu)"
        own = (
            f"unset {var} (a CPU torch uses the CPU library), or install a {wanted.value} "
            "build of torch"
        )
    elif info.backend is Backend.CUDA:
        build = f"torch {info.version} is a CUDA build (torch.version.cuda {info.cuda_version})"
    elif info.backend is Backend.ROCM:
        build = f"torch {info.version} is a ROCm build (torch.version.hip {info.hip_version})"
    else:  # XPU: no native library; unset, the portable table serves it
        build = f"torch {info.version} is an {info.backend.value.upper()} build"
        own = f"unset {var} to use what serves this torch"
    remedy = (
        own
        if info.backend is Backend.CPU
        else f"{own}, or set {var}=cpu to use the CPU library (CPU tensors only)"
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
    if not info.has_capsule or settings.force or settings.portable:
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
    if not info.has_legacy_int or settings.force or settings.portable:
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
    6. The package imported from a zip archive (:class:`PackageInArchiveError`) ->
       ``UNAVAILABLE`` saying so, whatever ``JIT`` and ``PORTABLE`` say: no library can be
       loaded from inside a zip, nor built from its zipped sources.
    6b. ``PORTABLE`` (below) is decided next, before the manifest's state: with no
        usable manifest it still asks for the portable table.
    6c. The manifest is unusable -> ``JIT`` if opted in, else ``UNAVAILABLE`` naming
        the cause and the reinstall command (for how this copy was installed). For a
        torch no native library can be built for (rules 8b and 9), rule 11 instead:
        the JIT builds the portable table when opted in, and the remedy offers that.
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
       layouts the driver checks), or its version names no release -> ``UNAVAILABLE``
       saying so with the range, JIT or not: no library can be built for it.
    10. Nothing matches -> ``JIT`` if opted in, else ``UNAVAILABLE`` listing the
        bundled libraries, the build-from-source command and the JIT variable.

    The portable table (issue 30: defer -> native -> JIT -> portable -> unavailable):

    6a. Only libraries whose ``python`` serves this interpreter count (``abi3`` on a
        GIL CPython >= 3.9, ``abi3.12`` on >= 3.12, ``3.14t`` on a free-threaded 3.14
        BUILD: ``info.python``, from ``Py_GIL_DISABLED``, never the runtime GIL flag).
    6b. ``PORTABLE`` -> ``PORTABLE`` with the bundled portable library, over a native
        one and over torch's own table (rule 3 and 4 skip it: differential tests); none
        bundled, or no usable manifest -> the JIT builds it when ``JIT`` is set and torch
        has ``torch._C._to_dlpack``, else ``UNAVAILABLE`` naming ``PORTABLE`` and why
        (never the native library in its place).
    8b. An XPU torch (``torch.version.xpu``; never taken for CPU) has no native
        library: rule 11.
    9.  (torch older than the range, such as 2.2-2.3, and other torches outside it: no
        native library, rule 11.)
    11. Where rules 7-10 end in ``UNAVAILABLE`` and torch has ``torch._C._to_dlpack``,
        the bundled portable library -> ``PORTABLE`` (silent: the import succeeded);
        none bundled (a universal wheel) and ``JIT`` set -> ``PORTABLE`` without an
        entry: the JIT builds it (C and Python.h only). ``LOAD`` and ``JIT`` carry the
        portable library in ``Decision.portable``: a native library that fails to
        load, or a failed JIT build, falls back to it with a warning saying why.
        Never when rule 3 or 4 was passed over by ``FORCE``: FORCE means our NATIVE
        library, and never puts the slower table over torch's own.
    12. A torch without ``torch._C._to_dlpack``, or no portable library -> the
        ``UNAVAILABLE`` of rules 7-10 (the reason says why the portable table cannot
        serve).

    The commands of a remedy install from ``source``, where this installation came from
    (its installation record; default: an index, so the version is pinned). A remedy
    offers the JIT only where it could serve (rules 8b, 9 and 11: the portable table
    where no native library can be built).
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
    if isinstance(manifest, ManifestError):
        return _unusable_manifest(info, settings, backend, manifest, source)
    version_info, freethreaded = info.python or running_python()
    # Only libraries this interpreter may load (rule 6a).
    usable = [e for e in manifest if python_serves(e.python, version_info, freethreaded)]
    portable = _portable_entry(info, usable)
    if settings.portable:
        return _forced_portable(info, settings, backend, portable, source)
    try:
        version = info.major_minor
    except ConfigError as exc:
        # No native library can be matched or built (rule 9): the portable table, if any.
        decision = Decision(
            kind=DecisionKind.UNAVAILABLE,
            backend=backend,
            reason=str(exc),
            remedy="use a torch whose __version__ names its release (such as 2.6.0)",
        )
        return _or_portable(decision, info, settings, portable)
    native = [e for e in usable if e.backend is not None]
    decision = _match_manifest(
        info, native, settings, backend, version, listed=manifest, source=source
    )
    return _or_portable(decision, info, settings, portable)


def _unusable_manifest(
    info: TorchInfo,
    settings: Settings,
    backend: Backend,
    manifest: ManifestError,
    source: InstallSource | None,
) -> Decision:
    """Rules 6, 6b and 6c: no manifest this package can use. A zip archive first (nothing
    can be loaded or built from inside it), then ``PORTABLE`` (never the native library
    in its place), then the manifest's own rule."""
    if isinstance(manifest, PackageInArchiveError):  # no JIT either: its sources are zipped
        return Decision(
            kind=DecisionKind.UNAVAILABLE,
            backend=backend,
            reason=manifest.cause,
            remedy=manifest.remedy,
        )
    broken = f"no usable manifest: {manifest.cause}"
    if settings.portable:
        return _forced_portable(info, settings, backend, None, source, broken=broken)
    return _broken_manifest(info, settings, backend, broken, source)


def _portable_entry(info: TorchInfo, usable: Sequence[ManifestEntry]) -> ManifestEntry | None:
    """The bundled portable library this interpreter may load, if torch lets it serve
    (``torch._C._to_dlpack``): the first by file name."""
    if not info.has_to_dlpack:
        return None
    return min((e for e in usable if e.backend is None), key=lambda e: e.file, default=None)


def _no_portable_why(info: TorchInfo) -> str:
    if not info.has_to_dlpack:
        return (
            f"torch {info.version} has no torch._C._to_dlpack, which the portable table "
            "calls, so it cannot serve either"
        )
    return "no portable table is bundled for this Python (a universal wheel?)"


def _forced_portable(
    info: TorchInfo,
    settings: Settings,
    backend: Backend,
    portable: ManifestEntry | None,
    source: InstallSource | None,
    *,
    broken: str = "",
) -> Decision:
    """Rule 6b: ``PORTABLE`` asks for the portable table, over a native library and over
    torch's own table (for tests and comparisons); ``broken``: why the manifest is
    unusable (then nothing is bundled that could be loaded). Without a bundled one the
    JIT builds it, where opted in; it is never replaced by a native library."""
    var, jit = env_var("PORTABLE"), env_var("JIT")
    if portable is not None:
        return Decision(
            kind=DecisionKind.PORTABLE,
            backend=backend,
            entry=portable,
            reason=f"{var} asks for the portable table",
        )
    if not info.has_to_dlpack:
        # Nothing can make the portable table serve this torch: no reinstall, no JIT.
        return Decision(
            kind=DecisionKind.UNAVAILABLE,
            backend=backend,
            reason=f"{var} asks for the portable table, but torch {info.version} has no "
            "torch._C._to_dlpack, which the portable table calls",
            remedy=f"unset {var}",
        )
    if settings.jit:
        missing = f"there is {broken}" if broken else "none is bundled"
        return Decision(
            kind=DecisionKind.PORTABLE,
            backend=backend,
            reason=f"{var} asks for the portable table and {missing}; {jit} builds it",
        )
    install = reinstall(source) if broken else compiled_wheel_remedy(source)
    return Decision(
        kind=DecisionKind.UNAVAILABLE,
        backend=backend,
        reason=f"{var} asks for the portable table, but "
        + (f"there is {broken}" if broken else _no_portable_why(info)),
        remedy=f"{install}; or set {jit}=1 to build the portable table, or unset {var}",
    )


def _broken_manifest(
    info: TorchInfo, settings: Settings, backend: Backend, broken: str, source: InstallSource | None
) -> Decision:
    """Rule 6c: no usable manifest. ``JIT`` builds the native library where one can be
    built for this torch; elsewhere the portable table (rule 11: built by the JIT when
    opted in), and the remedy offers the JIT only for that."""
    beyond = native_out_of_reach(info, backend)
    if beyond is None:
        return _nothing_matches(settings, backend, broken, broken_manifest_remedy(source))
    remedy = reinstall(source)
    if info.has_to_dlpack:
        remedy += f"; or set {env_var('JIT')}=1 to build the portable table"
    decision = Decision(
        kind=DecisionKind.UNAVAILABLE, backend=backend, reason=f"{broken}; {beyond}", remedy=remedy
    )
    return _or_portable(decision, info, settings, None)


def _or_portable(
    decision: Decision, info: TorchInfo, settings: Settings, portable: ManifestEntry | None
) -> Decision:
    """Rule 11: rules 7-10's ``UNAVAILABLE`` becomes the portable table where one serves
    (bundled, or built by the JIT when opted in); a ``LOAD`` or ``JIT`` carries it as the
    last resort. Never where ``FORCE`` passed over torch's own table: FORCE asks for our
    native library, not for the slower portable one over torch's."""
    if info.has_capsule or info.has_legacy_int:
        return decision
    if portable is None:
        return _portable_by_jit(decision, info, settings)
    if decision.kind is DecisionKind.UNAVAILABLE:
        return Decision(
            kind=DecisionKind.PORTABLE,
            backend=decision.backend,
            entry=portable,
            reason=f"{decision.reason}: the portable table serves it",
            portable=portable,
        )
    if decision.kind in (DecisionKind.LOAD, DecisionKind.JIT):
        return decision._replace(portable=portable)
    return decision


def _portable_by_jit(decision: Decision, info: TorchInfo, settings: Settings) -> Decision:
    """Where no portable table is bundled (a universal wheel): an ``UNAVAILABLE`` becomes
    the JIT's build of the portable table when ``JIT`` opted in and torch lets it serve;
    without ``_to_dlpack`` the reason says so."""
    if decision.kind is not DecisionKind.UNAVAILABLE:
        return decision
    if not info.has_to_dlpack:
        return decision._replace(reason=f"{decision.reason}; {_no_portable_why(info)}")
    if not settings.jit:
        return decision
    return Decision(
        kind=DecisionKind.PORTABLE,
        backend=decision.backend,
        reason=f"{decision.reason}: {env_var('JIT')} builds the portable table, "
        "which serves it (no portable table is bundled)",
    )


def _match_manifest(
    info: TorchInfo,
    manifest: Sequence[ManifestEntry],
    settings: Settings,
    backend: Backend,
    version: tuple[int, int],
    *,
    listed: Sequence[ManifestEntry],
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
            reason=f"{describe_entry(primary[0])} matches {describe_torch_build(info, backend)}",
        )
    if backend not in NATIVE_BACKENDS:
        # XPU: no native library exists for it (rule 8b).
        return Decision(
            kind=DecisionKind.UNAVAILABLE,
            backend=backend,
            reason=f"no native library serves a {backend.value} torch "
            f"({describe_torch_build(info, backend)})",
            remedy=compiled_wheel_remedy(source),
        )
    cpu = matching(Backend.CPU) if backend is not Backend.CPU else []
    if cpu:
        why = f"no bundled {backend.value} library for {describe_torch_build(info, backend)}"
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
        f"no bundled library matches {describe_torch_build(info, backend)}",
        build_remedy(listed, source),
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
