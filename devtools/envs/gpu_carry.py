"""Gather what the offline GPU machine lacks for ``tests/gpu/gpu_check.py``, into one folder.

The GPU machine (docs/gpu-check.md) has an NVIDIA GPU, CUDA 13 with nvcc, Python
3.12 with torch 2.11.0+cu130, pytest, numpy, hypothesis and ninja, the checkout, and no
network; whatever else the check needs travels with the checkout as wheels, 64 MiB in all.
The check imports this project from the checkout (never installed) and needs, besides
torch and the compiler:

* ``apache-tvm-ffi``: the DLPack >= 1.2 header the build includes first, and
  ``tvm_ffi.testing.echo`` for the seed test (cp312 manylinux x86_64 wheel, ~3.3 MB);
* ``typing-extensions >= 4.13``: apache-tvm-ffi's only requirement (torch's own pin is
  older, so the preinstalled copy may be too old);
* ``filelock``: the build driver's lock (torch requires it, carried in case).

``python -m devtools gpu-carry`` (also spelled ``python -m devtools.envs.gpu_carry``) downloads
exactly those (no dependencies resolved beyond them: the list above is checked against
each wheel's ``Requires-Dist``) into ``.gpu-carry/`` (git-ignored) through a temporary
folder renamed into place, checks the total stays under the limit, and prints the one line
that installs them offline and runs the check there.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from _torch_c_dlpack_ext_core.naming import python_target_tags
from _torch_c_dlpack_ext_core.run import run
from devtools.base.errors import ProvisionError
from devtools.base.wheelnames import parse_wheel_name

__all__ = ["CARRY_DIR", "LIMIT_BYTES", "PREINSTALLED", "WHEELS", "gather", "install_line"]

#: The carry folder, relative to the checkout (ignored by .gitignore).
CARRY_DIR = ".gpu-carry"
#: The machine takes the checkout plus carried files up to 64 MiB in all.
LIMIT_BYTES = 64 * 1024 * 1024
#: What the check needs that the GPU machine lacks (pinned: the versions checked here).
WHEELS = ("apache-tvm-ffi==0.1.15.post2", "typing-extensions>=4.13", "filelock>=3.12")
#: What the GPU machine has already (its torch's own requirements included).
PREINSTALLED = frozenset(
    {"torch", "pytest", "numpy", "hypothesis", "ninja", "sympy", "networkx", "jinja2", "fsspec"}
)
#: The GPU machine's interpreter and platform.
PYTHON = "3.12"
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
#: The check, as the GPU machine runs it from the checkout's root.
CHECK = "python tests/gpu/gpu_check.py --require-gpu"


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


def gather(dest: Path, *, limit: int = LIMIT_BYTES) -> list[Path]:
    """Download :data:`WHEELS` into ``dest`` (replaced as a whole) and return the wheels.

    Raises :class:`~devtools.base.errors.ProvisionError` when a wheel needs something
    neither carried nor preinstalled on the GPU machine, or when the total exceeds
    ``limit``.
    """
    dest = dest.resolve()
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        _log(f"downloading {' '.join(WHEELS)} ({python_target_tags(PYTHON)[1]}, manylinux x86_64)")
        _download(WHEELS, staging)
        wheels = sorted(staging.glob("*.whl"))
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
        total = sum(w.stat().st_size for w in wheels)
        if total > limit:
            raise ProvisionError(
                f"the carried wheels take {total / 2**20:.1f} MiB, over the "
                f"{limit / 2**20:.0f} MiB the GPU machine accepts; carry fewer or smaller wheels"
            )
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(staging, dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    result = sorted(dest.glob("*.whl"))
    for wheel in result:
        _log(f"  {wheel.name}: {wheel.stat().st_size / 2**20:.2f} MiB")
    _log(f"total {sum(w.stat().st_size for w in result) / 2**20:.2f} MiB in {dest}")
    return result


def install_line(folder: str = CARRY_DIR) -> str:
    """The GPU machine's one line: install the carried wheels offline, then run the check."""
    names = " ".join(Requirement(r).name for r in WHEELS)
    return f"python -m pip install --no-index --find-links {folder} {names} && {CHECK}"


if __name__ == "__main__":  # the older spelling of `python -m devtools gpu-carry`
    from devtools.base.cli import main

    sys.exit(main(["gpu-carry", *sys.argv[1:]]))
