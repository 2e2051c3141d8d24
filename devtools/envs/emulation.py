"""How this host runs another architecture's programs (``nox -s emulated``): the
:class:`Emulation` of each foreign matrix platform, the host side and the root.

* the host side (:func:`check_host`): ``qemu-user-static``, ``binfmt-support`` and
  ``debootstrap`` (apt-get, when missing), binfmt_misc mounted (``mount -t binfmt_misc``)
  and qemu's aarch64 handler enabled (``update-binfmts``; qemu-user-static registers it
  with the ``F`` flag, so the kernel runs aarch64 programs inside a chroot too). A host that
  cannot (not root, no binfmt_misc, no qemu-user) raises
  :class:`~devtools.base.errors.EmulationUnavailableError` (exit code 14);
* the root (:func:`provision_root`): an arm64 Debian bookworm root (``debootstrap
  --variant=minbase``, with ``python3``: bookworm's CPython 3.11) under
  ``$TCDE_DEV_CACHE/emulated/`` with a completeness marker, like the torch environments of
  :mod:`devtools.envs.torchenv`;
* inside it (:func:`in_root`, with :class:`Mounted`'s ``/proc``): the root's python3 under
  ``chroot``, with a clean environment.

What runs there, per torch minor: :mod:`devtools.envs.emulated`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform as host_platform
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from _torch_c_dlpack_ext_core.errors import CommandTimeoutError
from _torch_c_dlpack_ext_core.files import atomic_write_bytes
from _torch_c_dlpack_ext_core.run import run
from devtools.base.errors import EmulationUnavailableError, ProvisionError
from devtools.base.hostenv import dev_cache_root
from devtools.matrix.tables import host_os

__all__ = [
    "EMULATED",
    "STEP_TIMEOUT_S",
    "Emulation",
    "Mounted",
    "capture",
    "check_host",
    "debootstrap_root",
    "in_root",
    "last_lines",
    "log",
    "provision_root",
    "read_root_record",
]


@dataclasses.dataclass(frozen=True)
class Emulation:
    """How one foreign platform is emulated here."""

    #: Debian's name of the architecture (debootstrap ``--arch``).
    debian_arch: str
    #: The binfmt_misc handler qemu-user-static registers (``update-binfmts`` name).
    binfmt: str
    #: ``uname -m`` inside the emulation.
    machine: str
    #: The Debian release of the root and the CPython it ships.
    suite: str
    python: str
    #: uv's ``--python-platform`` for what runs in the root: its glibc's manylinux tag, so
    #: uv installs what pip in the root would (bookworm: glibc 2.36).
    uv_platform: str


#: Matrix platform -> its emulation (bookworm's python3 is CPython 3.11).
EMULATED = {
    "linux_aarch64": Emulation(
        debian_arch="arm64",
        binfmt="qemu-aarch64",
        machine="aarch64",
        suite="bookworm",
        python="3.11",
        uv_platform="aarch64-manylinux_2_36",
    ),
}
#: The Debian packages the host needs.
HOST_PACKAGES = ("qemu-user-static", "binfmt-support", "debootstrap")
BINFMT_DIR = Path("/proc/sys/fs/binfmt_misc")
#: Where packages for the root come from (override: ``TCDE_DEBIAN_MIRROR``).
DEFAULT_MIRROR = "http://deb.debian.org/debian"
MIRROR_VAR = "TCDE_DEBIAN_MIRROR"
_MARKER = ".emulated-root-complete.json"
#: Seconds each in-emulator step may take.
STEP_TIMEOUT_S = 600.0


def log(message: str) -> None:
    """One progress line of ``nox -s emulated`` on stderr."""
    print(f"emulated: {message}", file=sys.stderr, flush=True)


def capture(
    cmd: Sequence[str], *, timeout: float = STEP_TIMEOUT_S
) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` with its output captured; its exit status is the caller's to judge
    (a failure here is a finding, such as a host without binfmt_misc)."""
    return run(cmd, echo=False, timeout=timeout, check=False)


def last_lines(proc: subprocess.CompletedProcess[str], lines: int = 3) -> str:
    """The last ``lines`` lines of what ``proc`` printed, on one line (or its exit status)."""
    text = (proc.stderr or proc.stdout or "").strip().splitlines()
    return " | ".join(text[-lines:]) if text else f"exit {proc.returncode}"


def check_host(emulation: Emulation, *, install: bool = True) -> None:
    """Make this host run ``emulation``'s programs, or raise
    :class:`EmulationUnavailableError` saying why not (in one line).

    Installs the missing :data:`HOST_PACKAGES` with apt-get (``install``), mounts
    binfmt_misc and enables qemu's handler. Needs root (mount, chroot, debootstrap).
    """
    if host_os() != "linux":
        raise EmulationUnavailableError(f"emulation needs a Linux host; this is {sys.platform}")
    if host_platform.machine() == emulation.machine:
        return  # a native host runs the programs itself
    if os.geteuid() != 0:
        raise EmulationUnavailableError(
            "emulation needs root (binfmt_misc, debootstrap, chroot); run as root"
        )
    missing = [p for p in HOST_PACKAGES if not _package_installed(p)]
    if missing:
        if not install or shutil.which("apt-get") is None:
            raise EmulationUnavailableError(
                f"missing Debian packages {' '.join(missing)}; apt-get install {' '.join(missing)}"
            )
        log(f"apt-get install {' '.join(missing)}")
        proc = capture(["apt-get", "install", "-y", "-q", *missing], timeout=900)
        if proc.returncode != 0:
            raise EmulationUnavailableError(
                f"apt-get install {' '.join(missing)} failed: {last_lines(proc, 2)}"
            )
    if not (BINFMT_DIR / "status").is_file():
        proc = capture(["mount", "-t", "binfmt_misc", "binfmt_misc", str(BINFMT_DIR)])
        if proc.returncode != 0:
            raise EmulationUnavailableError(
                f"binfmt_misc is not mounted and cannot be ({last_lines(proc, 1)}); this host "
                "(a container without it?) cannot run foreign programs"
            )
    handler = BINFMT_DIR / emulation.binfmt
    if not handler.is_file() or "enabled" not in handler.read_text(errors="replace"):
        proc = capture(["update-binfmts", "--enable", emulation.binfmt])
        if proc.returncode != 0 or not handler.is_file():
            raise EmulationUnavailableError(
                f"cannot register the {emulation.binfmt} binfmt_misc handler: {last_lines(proc, 1)}"
            )
    flags = next(
        (line for line in handler.read_text().splitlines() if line.startswith("flags:")), ""
    )
    if "F" not in flags:
        raise EmulationUnavailableError(
            f"{handler} has no F flag ({flags.strip() or 'none'}): qemu cannot be found inside "
            "a chroot; reinstall qemu-user-static (its handlers are registered with F)"
        )


def _package_installed(name: str) -> bool:
    # dpkg's status is "want ok state": "install ok installed" when installed; a package
    # removed or never installed but known to dpkg reads "... not-installed" or
    # "... config-files", and dpkg-query fails for one it has never heard of.
    proc = capture(["dpkg-query", "-W", "-f=${Status}", name], timeout=30)
    return proc.returncode == 0 and proc.stdout.split()[-1:] == ["installed"]


def provision_root(emulation: Emulation) -> Path:
    """The cached Debian root of ``emulation`` (made with debootstrap on first use)."""
    root = dev_cache_root() / "emulated" / f"debian-{emulation.suite}-{emulation.debian_arch}"
    return debootstrap_root(
        root,
        suite=emulation.suite,
        arch=emulation.debian_arch,
        include=("python3", "libstdc++6"),
    )


def debootstrap_root(
    root: Path,
    *,
    suite: str,
    arch: str | None = None,
    include: Sequence[str],
    prepare: Callable[[Path], dict[str, object]] | None = None,
) -> Path:
    """``root``, a cached Debian ``suite`` root (``debootstrap --variant=minbase
    --include=...``; ``arch``: Debian's name, default the host's), made on first use.

    Built under a lock into ``<root>.tmp``; ``prepare(staging)`` (whose record joins the
    marker's) finishes it there before the rename, so a root without its marker is one a
    killed run left, and is made again.
    """
    from filelock import FileLock

    root.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root) + ".lock", timeout=3600):
        if (root / _MARKER).is_file():
            return root
        mirror = os.environ.get(MIRROR_VAR, DEFAULT_MIRROR)
        staging = root.with_name(root.name + ".tmp")
        _remove_root(staging)
        _remove_root(root)
        started = time.monotonic()
        log(f"debootstrap {suite} {arch or 'native'} into {root} (~2-5 min)")
        cmd = [
            "debootstrap",
            *([f"--arch={arch}"] if arch else []),
            "--variant=minbase",
            f"--include={','.join(include)}",
            suite,
            str(staging),
            mirror,
        ]
        proc = capture(cmd, timeout=3600)
        if proc.returncode != 0:
            _remove_root(staging)
            raise ProvisionError(f"debootstrap failed: {last_lines(proc)}")
        record: dict[str, object] = {
            "suite": suite,
            "arch": arch,
            "include": list(include),
            "mirror": mirror,
        }
        if prepare is not None:
            try:
                record.update(prepare(staging))
            except BaseException:
                _remove_root(staging)
                raise
        staging.rename(root)
        record["seconds"] = round(time.monotonic() - started, 1)
        atomic_write_bytes(root / _MARKER, (json.dumps(record, indent=2) + "\n").encode())
    return root


def read_root_record(root: Path) -> dict[str, object]:
    """The marker of a root :func:`debootstrap_root` made (suite, packages, what its
    ``prepare`` recorded); raises ``FileNotFoundError`` for an incomplete root."""
    record = json.loads((root / _MARKER).read_text())
    if not isinstance(record, dict):
        raise ProvisionError(f"{root / _MARKER} holds no record; remove {root} to make it again")
    return record


def _remove_root(path: Path) -> None:
    # A killed run may have left /proc mounted inside: removing through it would try
    # to delete the host's /proc entries (and fail slowly); unmount first.
    proc_dir = path / "proc"
    if os.path.ismount(proc_dir):
        capture(["umount", "--lazy", str(proc_dir)])
    shutil.rmtree(path, ignore_errors=True)


class Mounted:
    """``/proc`` mounted inside the root while the checks run (unmounted on every exit)."""

    def __init__(self, root: Path) -> None:
        self.proc = root / "proc"
        self.mounted = False

    def __enter__(self) -> Mounted:
        if not os.path.ismount(self.proc):
            proc = capture(["mount", "-t", "proc", "proc", str(self.proc)])
            if proc.returncode != 0:
                raise EmulationUnavailableError(
                    f"cannot mount /proc in the root: {last_lines(proc)}"
                )
            self.mounted = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self.mounted:
            capture(["umount", "--lazy", str(self.proc)])


def in_root(
    root: Path,
    paths: Sequence[Path],
    argv: Sequence[str],
    *,
    env: dict[str, str],
    cwd: str = "/",
    timeout: float = STEP_TIMEOUT_S,
    program: str = "/usr/bin/python3",
    private_proc: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` with the root's python3 (or ``program``, a path inside the root)
    inside the root (``PYTHONPATH``: ``paths``), in an environment of its own.

    ``private_proc``: mount ``/proc`` inside the root for this command alone, in a mount
    namespace of its own (``unshare --mount``): nothing stays mounted when it ends, and
    runs that share a root never unmount each other's ``/proc`` (without it, the caller
    mounts it: :class:`Mounted`)."""
    inside = [f"/{p.relative_to(root)}" for p in paths]
    environment = {
        "PATH": "/usr/bin:/bin",
        "HOME": "/tmp",
        "LANG": "C.UTF-8",
        "PYTHONPATH": ":".join(inside),
        "PYTHONDONTWRITEBYTECODE": "1",
        **env,
    }
    inner = [
        "/usr/bin/env",
        "-C",
        cwd,
        "-i",
        *(f"{k}={v}" for k, v in environment.items()),
        program,
        *argv,
    ]
    cmd = ["chroot", str(root), *inner]
    if private_proc:
        mount_then_chroot = 'mount -t proc proc "$0/proc" && exec chroot "$0" "$@"'
        cmd = [
            "unshare", "--mount", "--propagation", "private", "--",
            "sh", "-c", mount_then_chroot, str(root), *inner,
        ]  # fmt: skip
    try:
        return capture(cmd, timeout=timeout)
    except CommandTimeoutError as exc:
        # A check that hangs under emulation is a finding like a failing one (exit 124,
        # as timeout(1) reports it), not the end of the run.
        return subprocess.CompletedProcess(cmd, 124, exc.stdout, f"timed out after {timeout:.0f} s")
