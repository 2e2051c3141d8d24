"""Cross toolchains: the gnu toolchain with a target-prefixed GCC (Debian's cross compilers).

``gnu-aarch64`` builds aarch64 Linux libraries on any Linux host with
``aarch64-linux-gnu-g++`` (Debian/Ubuntu: ``apt-get install g++-aarch64-linux-gnu``).
Everything but the compiler and the audit is the gnu toolchain's: the same argv, file
names, dual ABI and repair list. The compiler is the ``cxx`` argument or the
target-prefixed ``g++`` on PATH, never ``$CXX`` (that names the host's compiler, which
makes host code), and it must say it targets the triplet (``-dumpmachine``). The audit
first checks that the library is an ELF file of the target machine, then runs the gnu
audit with that compiler, which locates the target's C/C++ runtime (the cross sysroot's
``libstdc++.so.6``, ``libc.so.6``, ``ld-linux-aarch64.so.1``); torch's libraries are those
of the target wheel the build compiled against. ``nm`` reads foreign ELF files (binutils'
generic ELF reader), so no target-prefixed ``nm`` is needed.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..errors import ABIAuditError, CommandError, CompilerNotFoundError
from ..naming import Backend
from ..run import run
from .gnu import GnuToolchain
from .protocol import AuditOutcome, Compiler, TorchFiles, compiler_argv, locate_compiler
from .sanitizers import Sanitizer
from .unix import find_gcc_style_compiler

__all__ = ["GNU_AARCH64", "CrossGnuToolchain", "elf_machine"]

#: ``e_machine`` of the ELF header (offset 18, two bytes in the file's byte order).
_E_MACHINE_OFFSET = 18
#: ``e_machine`` values of the machines a cross toolchain may target (the ELF gABI's).
ELF_MACHINES = {"aarch64": 183, "x86_64": 62}


def elf_machine(path: Path) -> int | None:
    """``e_machine`` of the ELF file ``path`` (``None``: not a 64-bit little-endian ELF)."""
    with open(path, "rb") as handle:
        head = handle.read(_E_MACHINE_OFFSET + 2)
    # \x7fELF, ELFCLASS64 (2), ELFDATA2LSB (1): the only kind the targets here produce.
    if len(head) < _E_MACHINE_OFFSET + 2 or head[:6] != b"\x7fELF\x02\x01":
        return None
    return int.from_bytes(head[_E_MACHINE_OFFSET:], "little")


class CrossGnuToolchain(GnuToolchain):
    """Linux on another architecture: ``<triplet>-g++``, ``lib*.so``, the ELF audit plus a
    check of the ELF machine."""

    #: No sanitizer build for another architecture has been tried (:mod:`.sanitizers`).
    sanitizers: frozenset[Sanitizer] = frozenset()

    def __init__(self, *, name: str, triplet: str, target_platform: str, package: str) -> None:
        self.name = name
        self.triplet = triplet
        self.target_platform = target_platform
        #: The Debian package that provides the compiler (for the error messages).
        self.package = package
        self.machine = triplet.split("-", 1)[0]

    def find_compiler(
        self, cxx: str | os.PathLike[str] | None, environ: Mapping[str, str]
    ) -> Compiler:
        """``cxx``, else ``<triplet>-g++`` on PATH (``$CXX`` is the host's compiler and is
        ignored); it must target :attr:`triplet`. Raises :class:`CompilerNotFoundError`."""
        return self._find(cxx, environ, c=False)

    def find_c_compiler(
        self, cc: str | os.PathLike[str] | None, environ: Mapping[str, str]
    ) -> Compiler:
        """``cc``, else ``<triplet>-gcc`` on PATH (``$CC`` is the host's compiler)."""
        return self._find(cc, environ, c=True)

    def _find(
        self, cxx: str | os.PathLike[str] | None, environ: Mapping[str, str], *, c: bool
    ) -> Compiler:
        install = f"apt-get install {self.package.replace('g++', 'gcc') if c else self.package}"
        default = f"{self.triplet}-{'gcc' if c else 'g++'}"
        if cxx is None:
            # Resolved here so that a missing cross compiler is named, not $CXX's.
            found, _, _ = locate_compiler(
                None,
                {"PATH": environ.get("PATH", "")},
                defaults=(default,),
                bad_request=install,
                none_found=(
                    f"no {self.machine} cross compiler: {default} is not on PATH; {install} "
                    f"(Debian/Ubuntu) or pass cxx=<a g++ targeting {self.triplet}>"
                ),
            )
            cxx = found
        compiler = find_gcc_style_compiler(cxx, {"PATH": environ.get("PATH", "")},
                                           install_hint=install, c=c)  # fmt: skip
        try:
            proc = run([*compiler.command, "-dumpmachine"], echo=False)
        except CommandError as exc:
            raise CompilerNotFoundError.from_command(
                f"{shlex.join(compiler.command)} -dumpmachine failed", exc, fix=install
            ) from None
        machine = proc.stdout.strip()
        if not machine.startswith(self.machine + "-"):
            raise CompilerNotFoundError(
                f"{shlex.join(compiler.command)} makes code for {machine or 'an unknown target'}, "
                f"not {self.triplet}; pass a g++ targeting {self.triplet} ({install})"
            )
        return Compiler(
            path=compiler.path,
            banner=compiler.banner,
            identity=f"{compiler.identity} {self.triplet}",
            args=compiler.args,
        )

    def audit(
        self,
        library: Path,
        torch: TorchFiles,
        backend: Backend | str,
        *,
        cxx: str | Sequence[str] | None = None,
        python_exports: Path | None = None,
        sanitizers: Sequence[Sanitizer] = (),
    ) -> AuditOutcome:
        """The target machine's ELF, then the gnu audit with the cross compiler's runtime."""
        expected = ELF_MACHINES[self.machine]
        found = elf_machine(library)
        if found != expected:
            what = "not a 64-bit little-endian ELF file" if found is None else f"e_machine {found}"
            raise ABIAuditError(
                f"{library.name} is {what}, not {self.machine} (e_machine {expected}); the "
                f"compiler does not target {self.triplet}",
                (),
            )
        compiler = cxx if cxx is not None else self.find_compiler(None, os.environ).command
        return super().audit(
            library,
            torch,
            backend,
            cxx=compiler_argv(compiler),
            python_exports=python_exports,
            sanitizers=sanitizers,
        )


GNU_AARCH64 = CrossGnuToolchain(
    name="gnu-aarch64",
    triplet="aarch64-linux-gnu",
    target_platform="linux_aarch64",
    package="g++-aarch64-linux-gnu",
)
