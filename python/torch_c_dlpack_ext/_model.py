"""The selector's records: the facts it decides on (:class:`TorchInfo`, the running torch;
:class:`Settings`, the overrides in force) and its verdict (:class:`Decision`,
:class:`DecisionKind`). Plain immutable records, easy to fake: gathering the facts is
:mod:`._torchinfo`'s and :mod:`._settings`'s job, deciding :mod:`._decide`'s.

Imports nothing of the package (the bottom of the selector's rooms).
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import NamedTuple

from _torch_c_dlpack_ext_core.manifest import ManifestEntry
from _torch_c_dlpack_ext_core.naming import Backend, torch_minor

__all__ = [
    "OWN_LIBRARY",
    "Decision",
    "DecisionKind",
    "SettingProblem",
    "Settings",
    "TorchInfo",
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
    #: One more account whose files a JIT cache or ``LIBRARY`` may belong to (a uid; ``None``:
    #: only root and this process's user; :mod:`_torch_c_dlpack_ext_core.trust`).
    trusted_owner: int | None = None
    #: Seconds a JIT build waits for another process's build of the same library
    #: (``None``: the driver's default).
    lock_timeout: float | None = None
    #: Load the portable table even where a native library (or torch's own table, on
    #: torch >= 2.10) would serve: for tests and comparisons (``TORCH_C_DLPACK_EXT_PORTABLE``).
    portable: bool = False
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
    #: No native library serves this torch: load the portable table (``Decision.entry``;
    #: ``None``: build it with the JIT, which ``JIT`` opted into), which calls torch
    #: through its Python-level functions (``torch._C._to_dlpack``...).
    PORTABLE = "portable"
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
    #: The portable library to load where ``LOAD``'s libraries or the ``JIT`` build
    #: fail (``None``: none is bundled for this Python, or torch lacks ``_to_dlpack``).
    portable: ManifestEntry | None = None


class TorchInfo(NamedTuple):
    """What the selector needs to know about the running torch (``_replace`` makes a
    changed copy, as the tests do)."""

    #: ``torch.__version__`` including its local part (``2.6.0+cu124``, ``2.8.0a0+abc``).
    version: str
    #: Backend by :func:`._torchinfo.detect_backend`.
    backend: Backend
    #: ``torch.compiled_with_cxx11_abi()``; ``None`` where not applicable (Windows, macOS).
    cxx11_abi: bool | None
    #: ``torch.version.cuda`` / ``torch.version.hip`` (``None`` when absent).
    cuda_version: str | None
    hip_version: str | None
    #: ``torch.Tensor`` has a *valid* capsule attribute (torch >= 2.10, or set earlier).
    has_capsule: bool
    #: ``torch.Tensor`` has no valid capsule but a *valid* legacy int attribute.
    has_legacy_int: bool
    #: Why an attribute that is present was judged bogus (then it is ignored, not trusted).
    bogus_attributes: tuple[str, ...] = ()
    #: Who made the valid capsule: ``""`` for torch, :data:`._torchinfo.OWN_LIBRARY` when it is the
    #: table of a library of this package (an earlier import in this process), else the
    #: image that published it (``libtorch_c_dlpack_addon_torch28-cpu.so (...)``).
    capsule_origin: str = ""
    #: ``torch._C._to_dlpack`` exists: the portable table can serve this torch.
    has_to_dlpack: bool = True
    #: ``((major, minor), free-threaded build)`` of the interpreter whose libraries are
    #: chosen (:func:`~_torch_c_dlpack_ext_core.naming.running_python`); ``None``: the
    #: running one (tests give others).
    python: tuple[tuple[int, int], bool] | None = None

    @property
    def major_minor(self) -> tuple[int, int]:
        return torch_minor(self.version)


#: :func:`_table_provenance` of a table from a torch-c-dlpack-ext library of this package
#: (it exports ``TorchCDLPackExtBuildInfo``).
OWN_LIBRARY = "a torch-c-dlpack-ext library"
