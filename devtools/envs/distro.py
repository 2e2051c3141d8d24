"""Debian's own torch (``python3-torch``) in a cached Debian root, for the proofs that
the portable table serves a torch no native library does (issue 30, item 5).

Debian 13 (trixie) ships torch 2.6.0 built with the cxx11 ABI, CPU only, for its
CPython 3.13 (docs/facts.md, "Torches outside the matrix"): no library of the matrix
serves it (PyPI's 2.6.0 is pre-cxx11). What is made here, once, under the dev cache:

* the root (:func:`provision_root`): ``debootstrap --variant=minbase
  --include=python3,python3-torch,python3-venv,python3-pip trixie`` (~2 min), through
  :func:`devtools.envs.emulation.debootstrap_root` (lock, temp name, rename, marker); the
  host's CA bundle and ``/etc/resolv.conf`` are copied to the same paths inside (pip's
  registry access: :func:`copy_registry_access`), and the
  marker records the root's torch and CPython and which compilers it has (none:
  ``minbase`` brings no ``cc``);
* a wheelhouse inside it (:func:`wheelhouse`): apache-tvm-ffi and this project's
  runtime requirements, downloaded once by the root's own pip, so each run's venv
  installs offline.

Each run (:func:`fresh_venv`) makes a new ``python3 -m venv --system-site-packages``
venv in the root (it sees Debian's torch) and installs the wheel under test with the
root's pip from that wheelhouse; :func:`run_in_venv` runs that venv's python in the
root. Every command in the root runs under ``chroot`` with ``/proc`` mounted for it alone
(``in_root(private_proc=True)``: a mount namespace of its own), so nothing stays mounted
and concurrent runs sharing the root cannot unmount each other's ``/proc``.
Needs root (debootstrap, unshare, chroot, mount): :func:`check_host` says why not.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from _torch_c_dlpack_ext_core.files import atomic_write_bytes
from devtools.base.errors import EmulationUnavailableError, ProvisionError
from devtools.base.hostenv import dev_cache_root
from devtools.envs.emulation import (
    capture,
    debootstrap_root,
    in_root,
    last_lines,
    read_root_record,
)
from devtools.matrix.tables import host_os

__all__ = [
    "CA_BUNDLE",
    "TRIXIE",
    "Distro",
    "Run",
    "check_host",
    "copy_registry_access",
    "fresh_venv",
    "provision_root",
    "root_record",
    "run_in_venv",
    "wheelhouse",
]

#: Where Debian (host and root alike) keeps the CA bundle pip reads.
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
_RESOLV_CONF = Path("/etc/resolv.conf")
#: What a venv in the root runs its programs with (no host variables leak in).
_BASE_PATH = "/usr/bin:/bin"
#: Compilers whose presence the root's marker records (and the proofs' spies shadow).
COMPILERS = ("cc", "c++", "gcc", "g++", "clang", "clang++")
_WHEELHOUSE_MARKER = ".tcde-wheelhouse-complete.json"
#: Inside the root.
_WHEELHOUSES = Path("opt/tcde/wheelhouse")
RUNS = Path("opt/tcde/runs")

_TORCH_FACTS = (
    "import json, sys, torch; print(json.dumps({'torch': torch.__version__, "
    "'cxx11_abi': bool(torch.compiled_with_cxx11_abi()), 'cuda': torch.version.cuda, "
    "'hip': torch.version.hip, 'python': '%d.%d.%d' % sys.version_info[:3], "
    "'to_dlpack': hasattr(torch._C, '_to_dlpack'), "
    "'exchange_api': hasattr(torch.Tensor, '__dlpack_c_exchange_api__')}))"
)


@dataclasses.dataclass(frozen=True)
class Distro:
    """A Debian release whose own torch package no library of the matrix serves."""

    #: debootstrap's suite.
    suite: str
    #: The packages ``--include`` adds to minbase.
    packages: tuple[str, ...]
    #: The CPython the suite ships (``X.Y``), and its torch's ``major.minor``.
    python: str
    torch_minor: str


TRIXIE = Distro(
    suite="trixie",
    packages=("python3", "python3-torch", "python3-venv", "python3-pip"),
    python="3.13",
    torch_minor="2.6",
)


def log(message: str) -> None:
    """One progress line on stderr."""
    print(f"distro: {message}", file=sys.stderr, flush=True)


def check_host() -> None:
    """Raise :class:`EmulationUnavailableError` (one line: why) unless this host can make
    and enter a Debian root: Linux, root, ``chroot``, and ``debootstrap`` (installed with
    apt-get where missing and possible)."""
    if host_os() != "linux":
        raise EmulationUnavailableError(f"a Debian root needs a Linux host; this is {sys.platform}")
    if os.geteuid() != 0:
        raise EmulationUnavailableError(
            "a Debian root needs root (debootstrap, chroot, mount /proc); run as root"
        )
    for tool, package in (("chroot", "coreutils"), ("unshare", "util-linux")):
        if shutil.which(tool) is None:
            raise EmulationUnavailableError(f"no {tool} on PATH ({package})")
    if shutil.which("debootstrap") is None:
        if shutil.which("apt-get") is None:
            raise EmulationUnavailableError(
                "debootstrap is missing and there is no apt-get to install it"
            )
        log("apt-get install debootstrap")
        proc = capture(["apt-get", "install", "-y", "-q", "debootstrap"], timeout=900)
        if proc.returncode != 0:
            # A fresh machine may have no package lists yet.
            log("apt-get update, then apt-get install debootstrap again")
            capture(["apt-get", "update", "-q"], timeout=900)
            proc = capture(["apt-get", "install", "-y", "-q", "debootstrap"], timeout=900)
        if proc.returncode != 0 or shutil.which("debootstrap") is None:
            raise EmulationUnavailableError(
                f"debootstrap is missing; apt-get install debootstrap failed: {last_lines(proc, 2)}"
            )


def copy_registry_access(root: Path) -> None:
    """The host's CA bundle and resolver configuration into ``root``, at the same paths:
    what the root's pip needs to reach the registry from this host (refreshed before each
    download: a cached root may outlive the network it was made on)."""
    for path in (CA_BUNDLE, _RESOLV_CONF):
        if path.is_file():
            target = root / path.relative_to("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.unlink(missing_ok=True)  # a symlink in the root must not be followed
            shutil.copyfile(path, target)


def provision_root(distro: Distro = TRIXIE) -> Path:
    """The cached root of ``distro`` with its torch (made on first use, ~2 min)."""

    def prepare(staging: Path) -> dict[str, object]:
        copy_registry_access(staging)
        proc = in_root(staging, [], ["-c", _TORCH_FACTS], env={}, timeout=300, private_proc=True)
        if proc.returncode != 0:
            raise ProvisionError(f"import torch fails in the new root: {last_lines(proc)}")
        facts: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
        compilers = [c for c in COMPILERS for d in ("usr/bin", "bin") if (staging / d / c).exists()]
        log(f"root's torch: {facts}; compilers: {compilers or 'none'}")
        return {"facts": facts, "compilers": sorted(set(compilers))}

    root = dev_cache_root() / "distro" / f"debian-{distro.suite}-torch"
    return debootstrap_root(root, suite=distro.suite, include=distro.packages, prepare=prepare)


def root_record(root: Path) -> dict[str, object]:
    """What a root's marker says (here: its torch and CPython, which compilers it has)."""
    return read_root_record(root)


def wheelhouse(root: Path, requirements: Sequence[str]) -> Path:
    """A folder inside ``root`` holding wheels of ``requirements`` and their dependencies,
    downloaded once by the root's pip (so they are the wheels that pip would pick there).
    One folder per requirement list."""
    from filelock import FileLock

    digest = hashlib.sha256("\n".join(sorted(requirements)).encode()).hexdigest()[:12]
    house = root / _WHEELHOUSES / digest
    marker = house / _WHEELHOUSE_MARKER
    house.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(house) + ".lock", timeout=1800):
        if marker.is_file():
            return house
        shutil.rmtree(house, ignore_errors=True)
        copy_registry_access(root)
        started = time.monotonic()
        log(f"pip download {' '.join(requirements)} (the root's pip, from PyPI)")
        proc = in_root(
            root,
            [],
            [
                "-m", "pip", "download", "--isolated", "--disable-pip-version-check",
                "--no-cache-dir", "--only-binary", ":all:", "--dest", f"/{house.relative_to(root)}",
                *requirements,
            ],
            env={"HOME": "/root"},
            timeout=900,
            private_proc=True,
        )  # fmt: skip
        if proc.returncode != 0:
            shutil.rmtree(house, ignore_errors=True)
            raise ProvisionError(f"pip download in the root failed: {last_lines(proc)}")
        record = {
            "requirements": list(requirements),
            "wheels": sorted(p.name for p in house.glob("*.whl")),
            "seconds": round(time.monotonic() - started, 1),
        }
        atomic_write_bytes(marker, (json.dumps(record, indent=2) + "\n").encode())
    return house


@dataclasses.dataclass(frozen=True)
class Run:
    """One run's folder inside a root (under :data:`RUNS`), holding a new venv."""

    root: Path
    folder: Path

    @property
    def venv(self) -> Path:
        return self.folder / "venv"

    def inside(self, path: Path) -> str:
        """``path`` (on this host, below the root) as the root sees it."""
        return f"/{path.relative_to(self.root)}"

    def copy_in(self, source: Path) -> str:
        """Copy ``source`` (a file or folder on this host) into the run's folder; its
        path inside the root."""
        target = self.folder / source.name
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copyfile(source, target)
        return self.inside(target)

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


#: A run's folder older than this was left by a killed run (each command has a timeout).
_STALE_RUN_S = 24 * 3600.0


def _remove_stale_runs(runs: Path) -> None:
    now = time.time()
    for folder in runs.glob("run-*"):
        try:
            stale = now - folder.stat().st_mtime > _STALE_RUN_S
        except FileNotFoundError:  # another run removed it meanwhile
            continue
        if stale:
            shutil.rmtree(folder, ignore_errors=True)


def fresh_venv(
    root: Path, house: Path, requirements: Sequence[str], *, wheel: Path | None = None
) -> tuple[Run, str]:
    """A new ``python3 -m venv --system-site-packages`` venv inside ``root`` (it sees the
    distribution's torch) with ``wheel`` (a file on this host; optional) and
    ``requirements`` installed by the root's pip, offline, from ``house``. Returns the run
    (the caller removes it: :meth:`Run.remove`) and pip's output."""
    runs = root / RUNS
    runs.mkdir(parents=True, exist_ok=True)
    _remove_stale_runs(runs)
    run = Run(root, Path(tempfile.mkdtemp(prefix="run-", dir=runs)))
    try:
        targets = [run.copy_in(wheel)] if wheel is not None else []
        proc = in_root(
            root, [], ["-m", "venv", "--system-site-packages", run.inside(run.venv)], env={},
            timeout=300, private_proc=True,
        )  # fmt: skip
        if proc.returncode != 0:
            raise ProvisionError(f"python3 -m venv in the root failed: {last_lines(proc)}")
        pip = in_root(
            root,
            [],
            [
                "-m", "pip", "install", "--isolated", "--disable-pip-version-check",
                "--no-cache-dir", "--no-index", "--find-links", f"/{house.relative_to(root)}",
                *targets, *requirements,
            ],
            env={"HOME": "/root"},
            timeout=600,
            program=f"{run.inside(run.venv)}/bin/python",
            private_proc=True,
        )  # fmt: skip
        if pip.returncode != 0:
            raise ProvisionError(f"pip install in the root's venv failed: {last_lines(pip)}")
    except BaseException:
        run.remove()
        raise
    return run, pip.stdout


def run_in_venv(
    run: Run,
    argv: Sequence[str],
    *,
    pythonpath: Sequence[str] = (),
    env: dict[str, str] | None = None,
    timeout: float = 600,
) -> subprocess.CompletedProcess[str]:
    """The run's venv python with ``argv``, inside the root, in an environment of its own
    (``pythonpath``: paths inside the root; ``env`` overrides ``PATH``, ``HOME``)."""
    return in_root(
        run.root,
        [],
        argv,
        env={
            "PATH": _BASE_PATH,
            "HOME": "/root",
            "PYTHONPATH": ":".join(pythonpath),
            **(env or {}),
        },
        timeout=timeout,
        program=f"{run.inside(run.venv)}/bin/python",
        private_proc=True,
    )
