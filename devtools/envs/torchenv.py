"""Cached virtual environments holding a given torch release (tests, ``nox -s build``, benchmarks).

``torch_env("2.6.0", kind=EnvKind.IMPORTABLE)`` returns a venv with PyPI's torch 2.6.0,
created once with uv and reused afterwards. What each :class:`EnvKind` holds, the env's
name and its requirements are :mod:`devtools.envs.envspec`'s (re-exported here).

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
:class:`EnvObserver`, several as :class:`Observers`: :mod:`devtools.envs.envobserver`)
hears of the env or tree before it is used or made and after it is ready: the test
suite's shard check refuses an env its shard does not provide, and its footprint report
measures what each env added to the disk. A test shard set in ``$TCDE_SHARD`` (by ``pytest
--shard``, also for subprocesses) is obeyed here too (:mod:`devtools.envs.shardcheck`).

Command line: ``python -m devtools torchenv 2.6.0 --kind importable [--extra pytest]``
prints the env's path (:mod:`devtools.commands.torchenv`).
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from _torch_c_dlpack_ext_core.errors import CommandError, ConfigError
from _torch_c_dlpack_ext_core.files import atomic_write_bytes
from _torch_c_dlpack_ext_core.run import run
from devtools.base.errors import ProvisionError
from devtools.base.hostenv import dev_cache_root, venv_python
from devtools.base.steps import Progress, find_uv
from devtools.envs.envobserver import EnvObserver, Observers
from devtools.envs.envspec import (
    COMPILE_ONLY_DROPPED,
    NOT_NEEDED_TO_IMPORT,
    EnvKind,
    drop_gpu_kernels,
    env_name,
    import_requirements,
    numpy_for,
)
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
        dropped = drop_gpu_kernels(_site_packages(root) / "torch")
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
    root = envs / env_name(version, python, kind, extra, index_url)
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
    root = envs / ("tree-" + where + env_name(version, python, EnvKind.NO_DEPS, extra, index_url))

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
