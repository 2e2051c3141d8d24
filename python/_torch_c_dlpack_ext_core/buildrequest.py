"""What a caller asks of the compiler driver, as frozen records built once and passed down:
:class:`BuildRequest` (the native library's target and inputs), :class:`PortableRequest`
(the portable table's) and :class:`BuildPolicy` (which audits run, ``echo=False`` for a
quiet caller such as the JIT, the trusted owners, the lock timeout).

:class:`BuildRequest` (the native library) and :class:`PortableRequest` (the portable table)
say what to build and from which inputs; :class:`BuildPolicy` says how: which audits run,
what is echoed, whose files a loading caller trusts and how long a build waits for another.
The driver (:mod:`.driver`) plans from a request, then compiles under a policy; each caller
(the build tools, the build backend, the JIT, the benchmarks) builds its records once.

Python 3.9 runs this module (the JIT), so the records cannot be ``kw_only``; construct
them with keywords. The required fields come first and have no default: leaving one out
is a :class:`TypeError`; a field cannot be changed once built
(:class:`dataclasses.FrozenInstanceError`; ``dataclasses.replace`` makes a changed copy).
A path given as a ``str`` is stored as a :class:`~pathlib.Path`, a backend given by name
as its :class:`~.naming.Backend` (an unknown name raises
:class:`~.errors.InvalidBackendError` here, before anything is planned), and
``sanitizers`` given by name (``"address,undefined"``) as a tuple of
:class:`~.toolchains.sanitizers.Sanitizer` (an unknown name raises
:class:`~.errors.ConfigError` here).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from .naming import Backend, parse_backend
from .toolchains.sanitizers import Sanitizer, parse_sanitizers
from .torchinstall import TorchInstall

if TYPE_CHECKING:
    from .trust import TrustedOwners

__all__ = ["BuildPolicy", "BuildRequest", "PortableRequest", "Sanitizer"]

#: The optional path fields the records coerce from ``str``.
_PATH_FIELDS = (
    "gpu_home",
    "dlpack_include",
    "python_include",
    "source_dir",
    "python_exports",
    "python_lib",
)


def _coerce_fields(record: BuildRequest | PortableRequest) -> None:
    """Store each path field given as a ``str`` as a :class:`Path`, and the sanitizers as
    :func:`~.toolchains.sanitizers.parse_sanitizers` reads them (frozen: through
    ``object.__setattr__``, in ``__post_init__`` only)."""
    object.__setattr__(record, "sanitizers", parse_sanitizers(record.sanitizers))
    object.__setattr__(record, "output_dir", Path(record.output_dir))
    for name in _PATH_FIELDS:
        value = getattr(record, name, None)
        if value is not None and not isinstance(value, Path):
            object.__setattr__(record, name, Path(value))


@dataclasses.dataclass(frozen=True)
class BuildRequest:
    """One native library to build: the target (``torch``, ``backend``, ``cxx11_abi``,
    ``python``, ``platform``), where it lands (``output_dir``), and overrides of what the
    driver finds by itself.

    ``torch``: a :class:`TorchInstall`, or a path :meth:`TorchInstall.from_path` accepts
    (read for ``platform`` when the plan is made). ``cxx11_abi``: checked against the
    installation (``None``: the installation's). ``cxx``, ``gpu_home``,
    ``dlpack_include``, ``python_include``, ``source_dir``: overrides of the toolchain's
    compiler lookup, :mod:`.headers` and :func:`.driver.find_sources`. ``python``: the
    expected target (``abi3``, ``3.14t``), checked against the Python headers.
    ``python_exports``: the target interpreter's libpython or executable for the ELF
    audit. ``python_lib``: Windows only, the Python import library to link.
    ``platform`` (default ``sys.platform``) selects the toolchain (a cross target such as
    ``linux_aarch64`` its cross toolchain). ``environ`` (default ``os.environ``): where
    ``$CXX`` and the GPU homes are read. ``sanitizers``: a sanitizer build for the tests
    (``"address,undefined"``; :mod:`.toolchains.sanitizers`), never one to ship: its file
    name carries a tag (``-asan-ubsan``), and the audits accept its runtime's symbols.
    """

    torch: TorchInstall | Path
    backend: Backend
    output_dir: Path
    cxx11_abi: bool | None = None
    cxx: str | os.PathLike[str] | None = None
    gpu_home: Path | None = None
    dlpack_include: Path | None = None
    python_include: Path | None = None
    source_dir: Path | None = None
    python: str | None = None
    python_exports: Path | None = None
    python_lib: Path | None = None
    platform: str | None = None
    environ: Mapping[str, str] | None = None
    sanitizers: tuple[Sanitizer, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "backend", parse_backend(self.backend))
        if not isinstance(self.torch, TorchInstall):
            object.__setattr__(self, "torch", Path(self.torch))
        _coerce_fields(self)


@dataclasses.dataclass(frozen=True)
class PortableRequest:
    """One portable library (the torch-agnostic table) to build: no torch. The fields
    mean what :class:`BuildRequest`'s do; ``cc`` is the C compiler (default ``$CC``, then
    the toolchain's), ``source_dir`` the ``csrc/`` holding ``portable/*.c`` and
    ``exports.map``, and ``python`` may also name ``abi3.12`` (the limited API of 3.12,
    which needs those headers)."""

    output_dir: Path
    cc: str | os.PathLike[str] | None = None
    dlpack_include: Path | None = None
    python_include: Path | None = None
    source_dir: Path | None = None
    python: str | None = None
    python_exports: Path | None = None
    python_lib: Path | None = None
    platform: str | None = None
    environ: Mapping[str, str] | None = None
    sanitizers: tuple[Sanitizer, ...] = ()

    def __post_init__(self) -> None:
        _coerce_fields(self)


@dataclasses.dataclass(frozen=True)
class BuildPolicy:
    """How a build runs and reports, native or portable.

    ``audit``: run the toolchain's audit (the ELF ABI audit on Linux; the torch-free
    audit of the portable table) and, for an abi3 library, the stable ABI audit
    (:func:`.stableabi.audit_stable_abi`) before publishing; ``stable_abi_audit``:
    ``True`` requires the latter (abi3audit must be installed), ``None`` runs it when
    abi3audit is installed.

    ``echo``: print the compiler command, the time it took and a cache hit to stderr
    (the build tools' log); ``False`` prints nothing on success (the JIT at import).

    ``owners``: for a caller that loads what is built (the JIT), who may own the output
    directory, every directory above it and a cached build (:mod:`.trust`); anything else
    raises :class:`~.errors.UntrustedPathError`. ``None`` (the build tools and the build
    backend, which package what they build from a source tree its builder already
    trusts, such as a checkout another uid owns in a container): not checked.

    ``lock_timeout``: how long to wait for another process's build of the same library
    (``None``: :data:`.buildlock.LOCK_TIMEOUT_S`); a waiter says so at once on stderr.
    """

    audit: bool = True
    stable_abi_audit: bool | None = None
    echo: bool = True
    owners: TrustedOwners | None = None
    lock_timeout: float | None = None

    @property
    def timeout(self) -> float:
        """:attr:`lock_timeout`, or the lock's default when unset."""
        from .buildlock import LOCK_TIMEOUT_S

        return LOCK_TIMEOUT_S if self.lock_timeout is None else self.lock_timeout
