"""What a cached torch env (:mod:`devtools.envs.torchenv`) is and holds: its kind
(:class:`EnvKind`), its directory's name (:func:`env_name`: Python, torch, kind, index and
extras), the requirements an importable env installs (torch's own from its ``METADATA``
minus what ``import torch`` does not need: :func:`import_requirements`,
:data:`NOT_NEEDED_TO_IMPORT`; the numpy pin: :func:`numpy_for`), and the GPU kernels a
compile-only env deletes (:data:`COMPILE_ONLY_DROPPED`, :func:`drop_gpu_kernels`). It
creates, locks and runs nothing. What each kind holds:

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
"""

from __future__ import annotations

import enum
import hashlib
import re
from collections.abc import Sequence
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from devtools.base.errors import ProvisionError

__all__ = [
    "COMPILE_ONLY_DROPPED",
    "NOT_NEEDED_TO_IMPORT",
    "EnvKind",
    "drop_gpu_kernels",
    "env_name",
    "import_requirements",
    "numpy_for",
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


class EnvKind(enum.Enum):
    """What an env holds besides ``torch==<version>`` installed ``--no-deps``; the value
    is the kind's name in the footprint report."""

    #: torch alone, through uv's cache: enough to compile against.
    NO_DEPS = "no-deps"
    #: Also what ``import torch`` needs (checked by importing it).
    IMPORTABLE = "importable"
    #: torch alone, without its GPU kernels and kept out of uv's cache: a build reads it.
    COMPILE_ONLY = "compile-only"


#: The env name's suffix of each kind (the names of envs already cached).
_NAME_SUFFIX = {EnvKind.NO_DEPS: "", EnvKind.IMPORTABLE: "-import", EnvKind.COMPILE_ONLY: "-build"}


def env_name(
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


def drop_gpu_kernels(torch_dir: Path) -> dict[str, int]:
    """Delete :data:`COMPILE_ONLY_DROPPED` from ``torch_dir/lib``; their sizes by name."""
    dropped: dict[str, int] = {}
    for pattern in COMPILE_ONLY_DROPPED:
        for path in sorted((torch_dir / "lib").glob(pattern)):
            dropped[path.name] = path.stat().st_size
            path.unlink()
    return dropped
