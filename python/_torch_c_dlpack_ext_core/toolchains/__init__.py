"""Everything that differs per platform, behind one :class:`Toolchain` protocol
(CONTRIBUTING.md, "Toolchains"), and the registry of the toolchains: gnu, darwin, msvc and
the cross gnu-aarch64. Each also gives the portable table its C compiler
(``find_c_compiler``, ``$CC``) and its torch-free audit (``audit_torch_free``: no torch
library in ``DT_NEEDED``, every symbol from the C runtime or Python).

:func:`toolchain_for` is the one place a platform string turns into behaviour:
everything the build does differently per platform is a method or attribute of
the toolchain it returns (see :mod:`.protocol`); a cross target (``linux_aarch64``)
is a toolchain like the others. The platform-to-toolchain map
and the shared-library file names are data of :mod:`..naming`, the one source
that the runtime also reads.

Modules: :mod:`.protocol` (the protocol and its data types), :mod:`.unix` (what
gnu and darwin share), :mod:`.gnu`, :mod:`.cross` (gnu with a target-prefixed
compiler), :mod:`.darwin`, :mod:`.msvc`, :mod:`.elf` (``nm``-based symbol reading and
the ELF ABI audit the gnu toolchain runs) and :mod:`.sanitizers` (the sanitizer builds
the tests make: flags, names, the runtime symbols the audits accept from them).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping

from ..naming import toolchain_name
from .protocol import AuditOutcome, CompileJob, Compiler, Toolchain, TorchFiles

__all__ = [
    "TOOLCHAINS",
    "AuditOutcome",
    "CompileJob",
    "Compiler",
    "Toolchain",
    "TorchFiles",
    "toolchain_for",
]

#: Where each toolchain is defined: name -> (module, attribute), in the registry's order.
_DEFINED_IN = {
    "gnu": (".gnu", "GNU"),
    "darwin": (".darwin", "DARWIN"),
    "msvc": (".msvc", "MSVC"),
    "gnu-aarch64": (".cross", "GNU_AARCH64"),
}


class _Registry(Mapping[str, Toolchain]):
    """The toolchains by name, each module imported when its toolchain is first asked for:
    a build on Linux never imports the MSVC or the macOS toolchain."""

    def __getitem__(self, name: str) -> Toolchain:
        module, attribute = _DEFINED_IN[name]
        toolchain: Toolchain = getattr(importlib.import_module(module, __name__), attribute)
        return toolchain

    def __iter__(self) -> Iterator[str]:
        return iter(_DEFINED_IN)

    def __len__(self) -> int:
        return len(_DEFINED_IN)


#: Every toolchain, by name (the values of :data:`..naming.PLATFORM_TOOLCHAINS`).
TOOLCHAINS: Mapping[str, Toolchain] = _Registry()


def toolchain_for(platform: str) -> Toolchain:
    """The toolchain that builds for ``platform`` (as ``sys.platform`` spells it:
    ``linux``, ``darwin``, ``win32``; or a cross target: ``linux_aarch64``).

    Raises :class:`~..errors.ConfigError` naming the supported platforms for any other.
    """
    return TOOLCHAINS[toolchain_name(platform)]
