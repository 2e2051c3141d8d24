"""Gather what the offline GPU machine lacks for the GPU check (``tests/gpu/gpu_run.py``),
into one folder; and the GPU machine's twin without a GPU, where the check is dry-run.

The GPU machine (docs/gpu-check.md) has an NVIDIA GPU, CUDA 13 with nvcc, Python
3.12 with torch 2.11.0+cu130, pytest, numpy, hypothesis and ninja, the checkout, and no
network; whatever else the check needs travels with the checkout, 64 MiB in all.
The check imports this project from the checkout (never installed) and needs, besides
torch and the compiler:

* ``apache-tvm-ffi``: the DLPack >= 1.2 header the build includes first, and
  ``tvm_ffi.testing.echo`` for the seed test (cp312 manylinux x86_64 wheel, ~3.3 MB);
* ``typing-extensions >= 4.13``: apache-tvm-ffi's only requirement (torch's own pin is
  older, so the preinstalled copy may be too old);
* ``filelock``: the build driver's lock (torch requires it, carried in case);
* apache-tvm-ffi's sdist (~3.3 MB), for its own GPU tests (:data:`TVM_FFI_TESTS`, under
  ``tests/python``), which the check runs with our tables forced in
  (:func:`extract_consumer_tests` unpacks them there).

``python -m devtools gpu-carry`` (also spelled ``python -m devtools.envs.gpu_carry``) downloads
exactly those (no dependencies resolved beyond them: the list above is checked against
each wheel's ``Requires-Dist``, the sdist for the test files) into ``.gpu-carry/``
(git-ignored) through a temporary folder renamed into place, checks the total stays under
the limit, and prints the one line that installs them offline and runs the check there.

:func:`twin_env` is that machine without its GPU: an importable torch 2.11.0+cu130 on
CPython 3.12 with what the GPU machine has and what is carried, and NVIDIA's CUDA header
wheels in place of its nvcc (its cost: docs/facts.md), in which the test suite runs
``tests/gpu`` and the check's command.
"""

from __future__ import annotations

import os
import shutil
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from _torch_c_dlpack_ext_core.headers import cuda_header_wheels
from _torch_c_dlpack_ext_core.naming import python_target_tags
from _torch_c_dlpack_ext_core.run import run
from devtools.base.errors import ProvisionError
from devtools.base.hostenv import find_cpython
from devtools.base.wheelnames import parse_wheel_name
from devtools.envs.torchenv import EnvKind, EnvObserver, TorchEnv, torch_env

__all__ = [
    "CARRY_DIR",
    "LIMIT_BYTES",
    "PREINSTALLED",
    "SDIST",
    "TVM_FFI_TESTS",
    "WHEELS",
    "extract_consumer_tests",
    "gather",
    "install_line",
    "twin_env",
]

#: The carry folder, relative to the checkout (ignored by .gitignore).
CARRY_DIR = ".gpu-carry"
#: The machine takes the checkout plus carried files up to 64 MiB in all.
LIMIT_BYTES = 64 * 1024 * 1024
#: What the check needs that the GPU machine lacks (pinned: the versions checked here).
WHEELS = ("apache-tvm-ffi==0.1.15.post2", "typing-extensions>=4.13", "filelock>=3.12")
#: The sdist whose tests the check runs (the carried wheel's version).
SDIST = "apache-tvm-ffi==0.1.15.post2"
#: apache-tvm-ffi's GPU tests the check runs, in the sdist's ``tests/python``: the stream
#: (``current_work_stream`` of a torch stream, inline extensions that need ninja), the
#: exchange table's members, tensors and containers through DLPack.
TVM_FFI_TESTS = (
    "test_current_work_stream_gpu.py",
    "test_stream.py",
    "test_dlpack_exchange_api.py",
    "test_tensor.py",
    "test_container_dlpack_conversion.py",
)
TVM_FFI_TESTS_DIR = "tests/python"
#: What the GPU machine has already (its torch's own requirements included).
PREINSTALLED = frozenset(
    {"torch", "pytest", "numpy", "hypothesis", "ninja", "sympy", "networkx", "jinja2", "fsspec"}
)
#: The GPU machine's interpreter and platform, and its torch.
PYTHON = "3.12"
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
TORCH = "2.11.0"
TORCH_CUDA = "13.0"
#: The check, as the GPU machine runs it from the checkout's root ($OUT: the folder whose
#: files come back from the device).
CHECK = 'python tests/gpu/gpu_run.py --out "$OUT" --require-gpu'


def _log(message: str) -> None:
    print(f"gpu_carry: {message}", file=sys.stderr, flush=True)


def _download(requirements: Sequence[str], dest: Path) -> None:
    """pip download for CPython 3.12 on manylinux x86_64, binary wheels only, no deps."""
    command = [
        sys.executable, "-m", "pip", "--isolated", "download", "--no-deps",
        "--only-binary", ":all:", "--python-version", PYTHON, "--implementation", "cp",
        "--abi", python_target_tags(PYTHON)[1], "--abi", "abi3", "--abi", "none",
        *(arg for platform in PLATFORMS for arg in ("--platform", platform)),
        "--dest", str(dest), *requirements,
    ]  # fmt: skip
    run(command)


def _requirements_of(wheel: Path) -> list[Requirement]:
    """The wheel's unconditional runtime requirements for Python 3.12 on Linux."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        text = archive.read(name).decode("utf-8")
    env: dict[str, str] = {str(k): str(v) for k, v in default_environment().items()}
    env.update(python_version=PYTHON, python_full_version=f"{PYTHON}.0", extra="")
    env.update(sys_platform="linux", platform_system="Linux", platform_machine="x86_64")
    found = []
    for line in text.splitlines():
        if line.startswith("Requires-Dist:"):
            req = Requirement(line.split(":", 1)[1].strip())
            if req.marker is None or req.marker.evaluate(env):
                found.append(req)
    return found


def _download_sdist(requirement: str, dest: Path) -> None:
    """pip download of ``requirement``'s sdist, no deps. pip prepares its metadata, which
    installs the build backend: as wheels (``--only-binary :all:`` for everything else),
    never compiled from source."""
    name = Requirement(requirement).name
    command = [
        sys.executable, "-m", "pip", "--isolated", "download", "--no-deps",
        "--only-binary", ":all:", "--no-binary", name, "--dest", str(dest), requirement,
    ]  # fmt: skip
    run(command)


def _consumer_tests_in(sdist: Path) -> dict[str, tarfile.TarInfo]:
    """The regular files under the sdist's ``tests/python`` by their path there."""
    found: dict[str, tarfile.TarInfo] = {}
    with tarfile.open(sdist, "r:gz") as archive:
        for member in archive.getmembers():
            top, _, inner = member.name.partition("/")
            if member.isfile() and top and inner.startswith(TVM_FFI_TESTS_DIR + "/"):
                found[inner[len(TVM_FFI_TESTS_DIR) + 1 :]] = member
    return found


def _check_wheels(wheels: list[Path]) -> None:
    carried = {parse_wheel_name(w.name).name for w in wheels}
    wanted = {canonicalize_name(Requirement(r).name) for r in WHEELS}
    if carried != wanted:
        raise ProvisionError(f"pip downloaded {sorted(carried)}, expected {sorted(wanted)}")
    for wheel in wheels:
        for req in _requirements_of(wheel):
            name = canonicalize_name(req.name)
            if name not in carried and name not in PREINSTALLED:
                raise ProvisionError(
                    f"{wheel.name} requires {req}, which the GPU machine lacks and "
                    "devtools/envs/gpu_carry.py does not carry; add it to WHEELS"
                )


def _check_sdist(found: list[Path]) -> None:
    if len(found) != 1:
        names = [p.name for p in found]
        raise ProvisionError(f"pip downloaded {names} for {SDIST}, expected one sdist")
    tests = _consumer_tests_in(found[0])
    missing = [name for name in TVM_FFI_TESTS if name not in tests]
    if missing:
        raise ProvisionError(
            f"{found[0].name} has no {TVM_FFI_TESTS_DIR}/{', '.join(missing)}: the check runs "
            "those tests; pin SDIST to a release that has them, or update TVM_FFI_TESTS"
        )


def gather(dest: Path, *, limit: int = LIMIT_BYTES) -> list[Path]:
    """Download :data:`WHEELS` and the :data:`SDIST` into ``dest`` (replaced as a whole)
    and return the files.

    Raises :class:`~devtools.base.errors.ProvisionError` when a wheel needs something
    neither carried nor preinstalled on the GPU machine, when the sdist lacks one of
    :data:`TVM_FFI_TESTS`, or when the total exceeds ``limit``.
    """
    dest = dest.resolve()
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        _log(f"downloading {' '.join(WHEELS)} ({python_target_tags(PYTHON)[1]}, manylinux x86_64)")
        _download(WHEELS, staging)
        _check_wheels(sorted(staging.glob("*.whl")))
        _log(f"downloading the sdist of {SDIST} (its tests)")
        _download_sdist(SDIST, staging)
        _check_sdist(sorted(staging.glob("*.tar.gz")))
        files = sorted(p for p in staging.iterdir() if p.is_file())
        total = sum(p.stat().st_size for p in files)
        if total > limit:
            raise ProvisionError(
                f"the carried files take {total / 2**20:.1f} MiB, over the "
                f"{limit / 2**20:.0f} MiB the GPU machine accepts; carry fewer or smaller ones"
            )
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(staging, dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    result = sorted(p for p in dest.iterdir() if p.is_file())
    for path in result:
        _log(f"  {path.name}: {path.stat().st_size / 2**20:.2f} MiB")
    _log(f"total {sum(p.stat().st_size for p in result) / 2**20:.2f} MiB in {dest}")
    return result


def install_line(folder: str = CARRY_DIR) -> str:
    """The GPU machine's one line: install the carried wheels offline (wheels only: the
    sdist is there for its tests), then run the check."""
    names = " ".join(Requirement(r).name for r in WHEELS)
    check = CHECK if folder == CARRY_DIR else CHECK.replace(" --out", f" --carry {folder} --out")
    return (
        f"python -m pip install --no-index --only-binary :all: --find-links {folder} {names} "
        f"&& {check}"
    )


def extract_consumer_tests(carry: Path, dest: Path) -> Path:
    """Unpack :data:`TVM_FFI_TESTS_DIR` of the carried sdist (``carry``) into ``dest``
    (regular files only, each path checked to stay inside) and return ``dest``.

    Raises :class:`~devtools.base.errors.ProvisionError` without exactly one sdist of
    apache-tvm-ffi in ``carry``, or when it lacks one of :data:`TVM_FFI_TESTS`.
    """
    prefix = canonicalize_name(Requirement(SDIST).name).replace("-", "_")
    found = sorted(carry.glob(f"{prefix}-*.tar.gz"))
    if not found:
        raise ProvisionError(
            f"no {prefix}-*.tar.gz in {carry}: run `python -m devtools gpu-carry` on a machine "
            "with network and carry its folder with the checkout"
        )
    _check_sdist(found)
    dest = dest.resolve()
    with tarfile.open(found[0], "r:gz") as archive:
        for inner, member in _consumer_tests_in(found[0]).items():
            target = (dest / inner).resolve()
            if not target.is_relative_to(dest):
                raise ProvisionError(f"{found[0].name}: {member.name} points outside its folder")
            source = archive.extractfile(member)
            if source is None:
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source.read())
    return dest


#: The twin's requirements besides torch's: what the GPU machine has, what is carried to
#: it, and the CUDA headers its nvcc provides there.
TWIN_EXTRA = ("pytest", "hypothesis", "ninja", *WHEELS, *cuda_header_wheels(TORCH_CUDA).split())


def twin_env(observer: EnvObserver | None = None) -> TorchEnv:
    """The GPU machine without its GPU (created once, cached): PyPI's torch 2.11.0+cu130,
    importable, on CPython 3.12 (this host's, else one uv provides), with
    :data:`TWIN_EXTRA`. ``observer``: as :func:`~devtools.envs.torchenv.torch_env`'s."""
    return torch_env(
        TORCH,
        kind=EnvKind.IMPORTABLE,
        python=PYTHON,
        interpreter=find_cpython(PYTHON),
        extra=TWIN_EXTRA,
        observer=observer,
    )


if __name__ == "__main__":  # the older spelling of `python -m devtools gpu-carry`
    from devtools.base.cli import main

    sys.exit(main(["gpu-carry", *sys.argv[1:]]))
