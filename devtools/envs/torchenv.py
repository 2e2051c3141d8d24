"""Cached virtual environments holding a given torch release (tests, ``nox -s build``, benchmarks).

``torch_env("2.6.0", kind=EnvKind.IMPORTABLE)`` returns a venv with PyPI's torch 2.6.0,
created once with uv and reused afterwards. Its :class:`EnvKind` says what it holds:

* always: ``torch==<version>`` installed ``--no-deps`` (enough to compile against;
  :attr:`EnvKind.NO_DEPS` is just that);
* :attr:`EnvKind.IMPORTABLE`: also torch's own runtime requirements, read from the
  installed torch's ``METADATA`` with their pins, minus the ones ``import torch``
  does not need (:data:`NOT_NEEDED_TO_IMPORT`: NVTX, NVRTC, cuSOLVER, triton; see
  docs/facts.md), plus numpy (< 2 for torch < 2.3: :func:`numpy_for`); the env is
  checked with ``import torch; torch.ones(2)`` and, while that fails, the skipped
  requirements are added back one at a time in that order (torch 2.2-2.4 need NVTX,
  and nothing more: their triton alone is 0.4-0.55 GB);
* :attr:`EnvKind.COMPILE_ONLY`: only what a build reads. torch is installed
  without uv's cache and its GPU kernels (:data:`COMPILE_ONLY_DROPPED`,
  ``libtorch_cuda*.so``: 0.5-1.1 GB a release, never linked by a build) are deleted, so
  the env costs ~0.6 GB and uv's cache keeps nothing of it: for releases the suite only
  compiles against;
* ``extra``: more requirements (``pytest``, ``psutil``).

Environments live under ``$TCDE_DEV_CACHE/envs`` (default
``~/.cache/torch-c-dlpack-ext-dev/envs``), one directory per (Python, torch,
kind, extra). Creation holds a file lock, and a marker file written last
says the env is complete: an env a killed run left half-built has no marker and
is rebuilt. Packages come through uv's cache, which this module never deletes,
so several envs share one copy of the multi-GB NVIDIA wheels (hard links).

Creating an env takes minutes on a cold cache, so it reports progress: which env,
what is being installed, the elapsed time, and a line every 30 s while uv runs. The
lines go to stderr, or to :func:`set_progress`'s sink (``tests/conftest.py`` sends them
to pytest's terminal, past its output capture). The caller's ``observer`` (an
:class:`EnvObserver`, several as :class:`Observers`; a parameter, never a registry here)
hears of the env or tree before it is used or made and after it is ready: the test
suite's shard check refuses an env its shard does not provide, and its footprint report
measures what each env added to the disk. A test shard set in ``$TCDE_SHARD`` (by ``pytest
--shard``, also for subprocesses) is obeyed here too (:mod:`devtools.envs.shardcheck`).

Command line: ``python -m devtools torchenv 2.6.0 --kind importable [--extra pytest]``
prints the env's path (:mod:`devtools.commands.torchenv`).
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import re
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from _torch_c_dlpack_ext_core.errors import CommandError, ConfigError
from _torch_c_dlpack_ext_core.files import atomic_write_bytes
from _torch_c_dlpack_ext_core.run import run
from devtools.base.errors import ProvisionError
from devtools.base.hostenv import dev_cache_root, venv_python
from devtools.base.steps import Progress, find_uv
from devtools.envs.shardcheck import refuse_outside_shard

__all__ = [
    "COMPILE_ONLY_DROPPED",
    "MARKER",
    "NOT_NEEDED_TO_IMPORT",
    "EnvKind",
    "EnvObserver",
    "Observers",
    "TorchEnv",
    "TorchTree",
    "numpy_for",
    "set_progress",
    "torch_env",
    "torch_tree",
]

#: Requirements of torch that ``import torch`` of a torch >= 2.5 does not load (checked,
#: see docs/facts.md), in the order an env whose smoke import fails adds them back, one
#: at a time: smallest first (torch 2.2-2.4 link libnvToolsExt, so NVTX is enough there;
#: triton, 0.4-0.55 GB, has never been needed).
NOT_NEEDED_TO_IMPORT = (
    "nvidia-nvtx-cu12",
    "nvidia-cuda-nvrtc-cu12",
    "nvidia-cusolver-cu12",
    "triton",
)
#: What a compile-only env deletes from torch's ``lib/``: the GPU kernels, which a build
#: never links (the gnu toolchain links libc10, libtorch_cpu and libc10_cuda/_hip) and
#: the ABI audit does not need (it reads the libraries that are there, smallest first).
COMPILE_ONLY_DROPPED = ("libtorch_cuda*.so*", "libtorch_hip*.so*")
#: The file a complete env or tree holds, written last: its creation record (JSON).
MARKER = ".torchenv-complete.json"
_VERSION_RE = re.compile(r"^\d+\.\d+(\.\d+)?([a-z0-9.+]*)$")
#: ``3.12``, or a free-threaded ``3.14t`` (then ``interpreter`` must be given).
_PYTHON_RE = re.compile(r"^3\.\d+t?$")
_SMOKE = "import torch; torch.ones(2); print(torch.__version__)"
#: Creating an importable env downloads ~2.5 GB on a cold cache.
_LOCK_TIMEOUT_S = 3600.0
#: A matrix platform -> uv's ``--python-platform`` for a tree of that platform's wheels
#: (a cross build's torch: installed for the target, never run here). manylinux_2_28
#: admits the older manylinux2014 wheels too (PyPI's aarch64 torch 2.4.1 and 2.5.1).
UV_PLATFORMS = {
    "linux_aarch64": "aarch64-manylinux_2_28",
    "linux_x86_64": "x86_64-manylinux_2_28",
}


class EnvKind(enum.Enum):
    """What an env holds besides ``torch==<version>`` installed ``--no-deps``; the value
    is the kind's name in the footprint report."""

    #: torch alone, through uv's cache: enough to compile against.
    NO_DEPS = "no-deps"
    #: Also what ``import torch`` needs (checked by importing it).
    IMPORTABLE = "importable"
    #: torch alone, without its GPU kernels and kept out of uv's cache: a build reads it.
    COMPILE_ONLY = "compile-only"


@dataclasses.dataclass(frozen=True)
class TorchEnv:
    """A complete environment holding one torch release."""

    root: Path
    python: Path
    site_packages: Path
    torch_dir: Path
    version: str
    kind: EnvKind


#: Which env is being created, what is installing, the elapsed time; a "still running"
#: line every 30 s while uv works.
PROGRESS = Progress("torchenv")


def set_progress(sink: Callable[[str], None] | None) -> None:
    """Send progress lines to ``sink`` (``None``: back to stderr)."""
    PROGRESS.set_sink(sink)


class EnvObserver(Protocol):
    """Told of the env or tree of each call it is passed to."""

    def before(self, root: Path) -> None:
        """``root`` is about to be used, and made first if it is not complete; raising
        here stops the call before anything is downloaded."""

    def after(self, root: Path, created: bool) -> None:
        """``root`` is complete; ``created``: this call made it (its marker holds the
        creation record)."""


@dataclasses.dataclass(frozen=True)
class Observers:
    """Several observers as one, told in their order."""

    members: tuple[EnvObserver, ...]

    def before(self, root: Path) -> None:
        for observer in self.members:
            observer.before(root)

    def after(self, root: Path, created: bool) -> None:
        for observer in self.members:
            observer.after(root, created)


def _observed(
    root: Path, create: Callable[[], dict[str, object]], observer: EnvObserver | None
) -> None:
    if observer is not None:
        observer.before(root)
    # After the observer (the test process's own check names the running test).
    refuse_outside_shard(root)
    created = _create_once(root, create)
    if observer is not None:
        observer.after(root, created)


#: The env name's suffix of each kind (the names of envs already cached).
_NAME_SUFFIX = {EnvKind.NO_DEPS: "", EnvKind.IMPORTABLE: "-import", EnvKind.COMPILE_ONLY: "-build"}


def _env_name(
    version: str,
    python: str,
    kind: EnvKind,
    extra: Sequence[str],
    index_url: str | None = None,
) -> str:
    name = f"py{python}-torch{version}" + _NAME_SUFFIX[kind]
    if index_url:
        name += "-i" + hashlib.sha256(index_url.encode()).hexdigest()[:8]
    if extra:
        digest = hashlib.sha256("\n".join(sorted(extra)).encode()).hexdigest()[:8]
        name += f"-x{digest}"
    return name


def _site_packages(root: Path) -> Path:
    found = sorted(root.glob("lib/python3*/site-packages")) or [root / "Lib" / "site-packages"]
    return found[0]


def _uv(uv: str, *args: str) -> None:
    started = time.monotonic()
    with PROGRESS.heartbeat(
        f"running uv {' '.join(a for a in args if not a.startswith('/'))[:80]}"
    ):
        proc = run([uv, *args])
    # uv's summary lines ("Prepared 11 packages in ...", "Installed ...") are the progress report.
    for line in proc.stderr.splitlines():
        if line.strip().startswith(("Prepared", "Installed", "Resolved", "Using")):
            PROGRESS.log(f"  uv: {line.strip()}")
    PROGRESS.log(f"  done in {time.monotonic() - started:.1f} s")


def import_requirements(
    site_packages: Path, version: str, python: str
) -> tuple[list[str], list[str]]:
    """torch's requirements from its METADATA, split into (needed to import, not needed:
    in :data:`NOT_NEEDED_TO_IMPORT`'s order).

    Markers are evaluated for this machine and the env's Python; torch's own extras
    are not requested, but a requirement's extras are kept (torch >= 2.11 needs
    ``cuda-toolkit[cublas,cudart,...]``: without them libcufile etc. are missing).
    """
    dist_infos = sorted(site_packages.glob("torch-*.dist-info/METADATA"))
    if not dist_infos:
        raise ProvisionError(f"no torch-*.dist-info in {site_packages}: the torch install failed")
    text = dist_infos[0].read_text(encoding="utf-8")
    environment: dict[str, str] = {str(k): str(v) for k, v in default_environment().items()}
    version = python.removesuffix("t")  # markers know no free-threaded spelling
    environment.update(python_version=version, python_full_version=f"{version}.0", extra="")
    needed: list[str] = []
    skipped: list[str] = []
    for line in text.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = Requirement(line.split(":", 1)[1].strip())
        if req.marker is not None and not req.marker.evaluate(environment):
            continue
        extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
        spec = f"{req.name}{extras}{req.specifier}"
        (skipped if canonicalize_name(req.name) in NOT_NEEDED_TO_IMPORT else needed).append(spec)
    # In the order they are added back when the smoke import fails.
    skipped.sort(
        key=lambda spec: NOT_NEEDED_TO_IMPORT.index(canonicalize_name(Requirement(spec).name))
    )
    return needed, skipped


def numpy_for(version: str) -> str:
    """The numpy requirement of an importable env of torch ``version``: torch < 2.3 was
    built against numpy 1.x and prints a page of warnings on import beside numpy 2
    (checked: torch 2.2.2 with numpy 2.4)."""
    release = tuple(int(part) for part in re.findall(r"\d+", version)[:2])
    return "numpy<2" if release < (2, 3) else "numpy"


def _last_line(exc: CommandError) -> str:
    lines = exc.stderr.strip().splitlines()
    return lines[-1] if lines else f"exit code {exc.returncode}"


def _add_until_import_works(
    uv: str, env_py: str, version: str, skipped: Sequence[str], failure: CommandError
) -> list[str]:
    """Add the ``skipped`` requirements back one at a time, in their order, until the
    smoke import works; the ones it took. A torch that still fails with all of them is a
    :class:`ProvisionError` saying why."""
    added: list[str] = []
    for requirement in skipped:
        PROGRESS.log(f"import torch failed ({_last_line(failure)}); adding {requirement}")
        _uv(uv, "pip", "install", "--python", env_py, requirement)
        added.append(requirement)
        try:
            run([env_py, "-c", _SMOKE])
        except CommandError as exc:
            failure = exc
            continue
        PROGRESS.log(f"  import torch works with {', '.join(added)} added back")
        return added
    raise ProvisionError(
        f"import torch {version} fails even with {', '.join(skipped) or 'all its requirements'}"
        f" installed: {_last_line(failure)}"
    )


def _drop_gpu_kernels(torch_dir: Path) -> dict[str, int]:
    """Delete :data:`COMPILE_ONLY_DROPPED` from ``torch_dir/lib``; their sizes by name."""
    dropped: dict[str, int] = {}
    for pattern in COMPILE_ONLY_DROPPED:
        for path in sorted((torch_dir / "lib").glob(pattern)):
            dropped[path.name] = path.stat().st_size
            path.unlink()
    return dropped


def _create(
    root: Path,
    uv: str,
    version: str,
    *,
    python: str,
    kind: EnvKind,
    extra: Sequence[str],
    index_url: str | None = None,
    interpreter: Path | None = None,
) -> dict[str, object]:
    if interpreter is None:
        running = f"{sys.version_info[0]}.{sys.version_info[1]}"
        interpreter = Path(sys.executable) if python == running else None
    started = time.monotonic()
    PROGRESS.log(f"creating {root} (Python {python})")
    _uv(uv, "venv", "--quiet", "--python", str(interpreter or python), str(root))
    env_py = str(venv_python(root))
    index = ["--index-url", index_url] if index_url else []
    importable = kind is EnvKind.IMPORTABLE
    record: dict[str, object] = {"torch": version, "python": python, "importable": importable}
    if kind is EnvKind.COMPILE_ONLY:
        # Through a temporary cache: what stays is the env's own copy, without the GPU
        # kernels, and uv's cache (a CI runner's disk) holds nothing of this torch.
        PROGRESS.log(
            f"installing torch=={version} --no-deps, compile-only (not kept in uv's cache)"
        )
        _uv(uv, "pip", "install", "--no-cache", "--python", env_py, "--no-deps", *index,
            f"torch=={version}")  # fmt: skip
        dropped = _drop_gpu_kernels(_site_packages(root) / "torch")
        PROGRESS.log(
            f"  dropped {', '.join(dropped) or 'nothing'} ({sum(dropped.values()) >> 20} MiB)"
        )
        record.update(compile_only=True, dropped=dropped)
    else:
        PROGRESS.log(f"installing torch=={version} --no-deps from PyPI (~1 GB on a cold uv cache)")
        _uv(uv, "pip", "install", "--python", env_py, "--no-deps", *index, f"torch=={version}")
    if importable:
        needed, skipped = import_requirements(_site_packages(root), version, python)
        PROGRESS.log(f"installing what import torch needs: {' '.join(needed)} numpy")
        _uv(uv, "pip", "install", "--python", env_py, *needed, numpy_for(version), *extra)
        checked = time.monotonic()
        try:
            run([env_py, "-c", _SMOKE])
            PROGRESS.log(f"  import torch works ({time.monotonic() - checked:.1f} s)")
        except CommandError as exc:
            added = _add_until_import_works(uv, env_py, version, skipped, exc)
            needed += added
            record["added_for_import"] = added
        record["requirements"] = needed
    elif extra:
        _uv(uv, "pip", "install", "--python", env_py, *extra)
    record["extra"] = list(extra)
    record["seconds"] = round(time.monotonic() - started, 1)
    return record


def _create_once(root: Path, create: Callable[[], dict[str, object]]) -> bool:
    """Create ``root`` with ``create`` (which returns its record) unless its marker says
    it is complete; whether this call created it. The lock makes concurrent callers
    create it once, and a creation that fails or was killed leaves nothing that looks
    ready."""
    from filelock import FileLock

    with FileLock(str(root) + ".lock", timeout=_LOCK_TIMEOUT_S):
        if (root / MARKER).is_file():
            return False
        with PROGRESS.making(root.name):
            if root.exists():
                PROGRESS.log(f"removing incomplete {root} (no {MARKER}: an interrupted creation)")
                shutil.rmtree(root)
            try:
                record = create()
            except BaseException:
                shutil.rmtree(root, ignore_errors=True)
                raise
            # Written last: its presence means everything above succeeded.
            atomic_write_bytes(root / MARKER, (json.dumps(record, indent=2) + "\n").encode())
            PROGRESS.log(f"{root} ready in {record['seconds']} s")
    return True


def torch_env(
    version: str,
    *,
    kind: EnvKind,
    python: str | None = None,
    extra: Sequence[str] = (),
    index_url: str | None = None,
    interpreter: Path | None = None,
    observer: EnvObserver | None = None,
) -> TorchEnv:
    """The cached env with PyPI's ``torch==version`` (created on first use).

    ``python``: ``"3.11"`` style (default: this interpreter's). ``interpreter``: the
    CPython ``python`` names, where uv cannot find it by version (pyenv's shims hide
    theirs). ``kind``: what besides torch (:class:`EnvKind`). ``extra``: more
    requirements.
    ``index_url``: take torch from this index instead of PyPI (PyTorch's per-backend
    indexes; the env name records it). ``observer``: told before the env is used or made
    and after it is ready (:class:`EnvObserver`). Raises :class:`ConfigError` for a malformed
    version or a ``kind`` that is not an :class:`EnvKind`, and :class:`CommandError` when
    uv fails (e.g. no such torch release).
    """
    python = python or f"{sys.version_info[0]}.{sys.version_info[1]}"
    if not _VERSION_RE.match(version):
        raise ConfigError(f"torch version {version!r} is not a release version like '2.6.0'")
    if not _PYTHON_RE.match(python):
        raise ConfigError(f"python {python!r} is not a version like '3.11' or '3.14t'")
    if python.endswith("t") and interpreter is None:
        raise ConfigError(f"an environment of free-threaded {python} needs that interpreter")
    if not isinstance(kind, EnvKind):
        raise ConfigError(
            f"torch {version}: kind={kind!r} is not an environment kind; pass one of "
            + ", ".join(f"EnvKind.{k.name}" for k in EnvKind)
        )
    extra = tuple(extra)
    envs = dev_cache_root() / "envs"
    envs.mkdir(parents=True, exist_ok=True)
    root = envs / _env_name(version, python, kind, extra, index_url)
    _observed(
        root,
        lambda: _create(
            root,
            find_uv(),
            version,
            python=python,
            kind=kind,
            extra=extra,
            index_url=index_url,
            interpreter=interpreter,
        ),
        observer,
    )
    site = _site_packages(root)
    return TorchEnv(
        root=root,
        python=venv_python(root),
        site_packages=site,
        torch_dir=site / "torch",
        version=version,
        kind=kind,
    )


@dataclasses.dataclass(frozen=True)
class TorchTree:
    """A torch release installed into a plain folder (``uv pip install --target``): enough
    to compile against, no interpreter of its own."""

    root: Path
    #: The folder holding ``torch/`` (and ``nvidia/`` for the GPU headers): the root itself.
    site_packages: Path
    torch_dir: Path
    version: str
    #: The CPython whose wheel of torch it holds (``3.12``, ``3.14t``).
    python: str


def torch_tree(
    version: str,
    *,
    python: str,
    interpreter: Path | None = None,
    extra: Sequence[str] = (),
    index_url: str | None = None,
    platform: str | None = None,
    observer: EnvObserver | None = None,
) -> TorchTree:
    """The cached folder holding ``torch==version`` (``--no-deps``) and ``extra``, as
    torch's wheel for CPython ``python`` ships it (created on first use).

    ``platform``: a matrix platform of :data:`UV_PLATFORMS` (``linux_aarch64``) whose
    wheels the tree holds instead of this host's (a cross build compiles against them;
    nothing in the tree is ever imported or run here); the tree's name records it.
    ``observer``: as :func:`torch_env`'s.

    A build compiles against torch's headers and libraries, which are the same in the
    wheels of every CPython of a release, so no interpreter of ``python`` is needed:
    uv installs the wheel for ``--python-version python``. A free-threaded ``python``
    (``3.14t``) has no such option: ``interpreter`` must be that interpreter. Trees live
    beside the environments (``$TCDE_DEV_CACHE/envs/tree-...``), with the same lock and
    completeness marker. Raises :class:`ConfigError` for malformed versions and
    :class:`CommandError` when uv fails.
    """
    if not _VERSION_RE.match(version):
        raise ConfigError(f"torch version {version!r} is not a release version like '2.6.0'")
    if not _PYTHON_RE.match(python):
        raise ConfigError(f"python {python!r} is not a version like '3.12' or '3.14t'")
    if python.endswith("t") and interpreter is None:
        raise ConfigError(f"a torch tree for free-threaded {python} needs that interpreter")
    if platform is not None and platform not in UV_PLATFORMS:
        raise ConfigError(
            f"no torch tree for platform {platform!r}: trees of another platform's wheels "
            f"are made for {', '.join(UV_PLATFORMS)}"
        )
    extra = tuple(extra)
    envs = dev_cache_root() / "envs"
    envs.mkdir(parents=True, exist_ok=True)
    where = f"{platform}-" if platform is not None else ""
    root = envs / ("tree-" + where + _env_name(version, python, EnvKind.NO_DEPS, extra, index_url))

    def create() -> dict[str, object]:
        started = time.monotonic()
        target = (
            ["--python", str(interpreter)]
            if interpreter is not None
            else ["--python", sys.executable, "--python-version", python]
        )
        if platform is not None:
            target += ["--python-platform", UV_PLATFORMS[platform]]
        index = ["--index-url", index_url] if index_url else []
        uv = find_uv()
        wheel = f"CPython {python}" + (f" {platform}" if platform else "")
        PROGRESS.log(f"installing torch=={version} ({wheel} wheel) into {root}")
        install = [uv, "pip", "install", "--target", str(root), *target]
        _uv(*install, "--no-deps", *index, f"torch=={version}")
        if extra:
            _uv(*install, *extra)
        return {
            "torch": version,
            "python": python,
            "platform": platform,
            "extra": list(extra),
            "seconds": round(time.monotonic() - started, 1),
        }

    _observed(root, create, observer)
    return TorchTree(
        root=root, site_packages=root, torch_dir=root / "torch", version=version, python=python
    )
