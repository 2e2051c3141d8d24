"""What the benchmarks measure: our libraries, torch environments, the 0.1.5 release.

Everything here is fetched or built once and cached under the bench work directory
(``build/bench`` by default), so a second run measures instead of rebuilding.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from devtools.base.hostenv import find_cpython

from _torch_c_dlpack_ext_core.errors import ConfigError, TorchInstallError
from _torch_c_dlpack_ext_core.manifest import ManifestEntry
from _torch_c_dlpack_ext_core.naming import Backend
from _torch_c_dlpack_ext_core.run import run

from .report import Progress

__all__ = [
    "CUDA_TORCH",
    "LEGACY_VERSION",
    "OLD_TORCH",
    "ROOT",
    "BenchContext",
    "BuiltLibrary",
    "LegacyRelease",
    "OldTorchEnv",
    "build_baseline_library",
    "build_our_library",
    "build_portable",
    "cuda_torch_env",
    "fetch_legacy_release",
    "old_torch_env",
    "running_torch_dir",
    "subprocess_env",
]

ROOT = Path(__file__).resolve().parent.parent
#: The published release we compare against.
LEGACY_VERSION = "0.1.5"
#: The old torch both libraries are compared on (0.1.5 ships a CPU library for it).
OLD_TORCH = "2.8.0"
#: PyPI's CUDA build of torch that the GPU machine runs (docs/facts.md), timed here without
#: a GPU, on CPU tensors: its Python level costs more than the CPU build's. On the GPU
#: machine's CPython.
CUDA_TORCH = "2.11.0"
CUDA_TORCH_PYTHON = "3.12"
#: The extras of the GPU work's local environment of that torch (the CUDA headers it
#: compiles against, apache-tvm-ffi, pytest), so that both use one cached environment
#: instead of two copies of its CUDA wheels.
CUDA_TORCH_EXTRAS = (
    "pytest",
    "hypothesis",
    "ninja",
    "apache-tvm-ffi==0.1.15.post2",
    "typing-extensions>=4.13",
    "filelock>=3.12",
    "nvidia-cuda-runtime==13.0.*",
    "nvidia-cuda-crt==13.0.*",
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class BenchContext:
    """Settings and shared state of one ``python -m benchmarks`` run."""

    quick: bool
    full: bool
    work_dir: Path
    results_dir: Path
    progress: Progress
    #: Another checkout measured beside this one in the same interleaved rounds
    #: (``--baseline DIR``: a change against the tree before it): the import benchmark
    #: times its package, the exchange and portable benchmarks the libraries its own driver
    #: builds from its csrc/ (:func:`build_baseline_library`); None: none.
    baseline: Path | None = None


def subprocess_env(
    *,
    pythonpath: tuple[Path, ...] = (ROOT / "python", ROOT),
    keep_settings: bool = False,
    **extra: str,
) -> dict[str, str]:
    """The environment for a benchmark subprocess: ours with ``pythonpath`` and ``extra``.

    Unless ``keep_settings``, this project's variables (``TORCH_C_DLPACK_EXT_FORCE``,
    ``..._LIBRARY``, ...) are dropped: a measured import or exchange must take the path a
    user without overrides takes. Build steps keep them (a compiler override applies).
    """
    env = {
        k: v
        for k, v in os.environ.items()
        if keep_settings or not k.startswith("TORCH_C_DLPACK_EXT_")
    }
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in pythonpath)
    # numpy is absent from some environments; torch's warning about it is noise here.
    env["PYTHONWARNINGS"] = "ignore"
    env.update(extra)
    return env


def running_torch_dir() -> Path:
    """The torch package directory of this interpreter, found without importing torch."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        raise TorchInstallError(
            f"{sys.executable} has no torch; run the benchmarks through `nox -s bench`, "
            "which installs torch 2.13"
        )
    return Path(next(iter(spec.submodule_search_locations)))


@dataclasses.dataclass(frozen=True, kw_only=True)
class BuiltLibrary:
    """One of our libraries, compiled by the project's driver."""

    path: Path
    entry: ManifestEntry
    #: Wall time of the call that produced it (near zero when the driver's cache answered).
    seconds: float


def build_our_library(
    torch_dir: Path, output_dir: Path, *, python: Path, backend: Backend = Backend.CPU
) -> BuiltLibrary:
    """Compile (or take from the driver's cache) our library for the torch at ``torch_dir``,
    with the headers of the interpreter ``python`` that will load it."""
    from _torch_c_dlpack_ext_core.driver import BuildRequest, compile_library

    from .harness import python_include_dir

    started = time.perf_counter()
    entry = compile_library(
        BuildRequest(
            torch=torch_dir,
            backend=backend,
            output_dir=output_dir,
            python_include=python_include_dir(python),
        )
    )
    seconds = time.perf_counter() - started
    return BuiltLibrary(path=output_dir / entry.file, entry=entry, seconds=seconds)


#: Run by this interpreter with only the baseline checkout's python/ on its path: the
#: baseline's own driver compiles the baseline's csrc/ with the flags and layout that tree
#: ships (this tree's driver may expect files the older csrc/ lacks). Prints the library's
#: path as JSON on its last line.
_BASELINE_BUILD = """\
import json, sys
from pathlib import Path
from _torch_c_dlpack_ext_core.buildrequest import BuildPolicy, BuildRequest, PortableRequest
from _torch_c_dlpack_ext_core.driver import compile_library, compile_portable_library

args = json.loads(sys.argv[1])
output_dir = Path(args["output_dir"])
common = dict(
    output_dir=output_dir,
    python_include=Path(args["python_include"]),
    source_dir=Path(args["source_dir"]),
)
if args["torch"] is not None:
    entry = compile_library(
        BuildRequest(torch=Path(args["torch"]), backend=args["backend"], **common)
    )
else:
    entry = compile_portable_library(
        PortableRequest(python=args["target"], **common),
        BuildPolicy(stable_abi_audit=False if args["target"] != "abi3" else None),
    )
print(json.dumps(str(output_dir / entry.file)))
"""


def build_baseline_library(
    baseline: Path,
    output_dir: Path,
    *,
    python: Path,
    torch_dir: Path | None = None,
    backend: Backend = Backend.CPU,
    target: str = "abi3",
) -> Path:
    """The library the checkout ``baseline`` builds from its own csrc/ with its own driver
    (cached by that driver): native for the torch at ``torch_dir``, or without one the
    portable table for ``target``; against the headers of the interpreter ``python`` that
    will load it. A :class:`ConfigError` when ``baseline`` is no checkout of this project."""
    from .harness import python_include_dir

    missing = [
        part
        for part in ("python/_torch_c_dlpack_ext_core", "csrc")
        if not (baseline / part).is_dir()
    ]
    if missing:
        raise ConfigError(
            f"--baseline {baseline}: no {' or '.join(missing)} there; pass a checkout of "
            "torch-c-dlpack-ext (the tree to measure this one against)"
        )
    request = {
        "output_dir": str(output_dir.resolve()),
        "python_include": str(python_include_dir(python)),
        "source_dir": str((baseline / "csrc").resolve()),
        "torch": None if torch_dir is None else str(torch_dir.resolve()),
        "backend": backend.value,
        "target": target,
    }
    # Run in the output folder: `-c` puts the working directory first on sys.path, and this
    # tree's must not shadow the baseline's driver.
    output_dir.mkdir(parents=True, exist_ok=True)
    result = run(
        [sys.executable, "-c", _BASELINE_BUILD, json.dumps(request)],
        cwd=output_dir,
        env=subprocess_env(pythonpath=(baseline.resolve() / "python",), keep_settings=True),
        echo=False,
    )
    return Path(json.loads(result.stdout.strip().splitlines()[-1]))


@dataclasses.dataclass(frozen=True, kw_only=True)
class OldTorchEnv:
    """An environment holding a real, importable old torch."""

    python: Path
    torch_dir: Path
    version: str


def old_torch_env(version: str = OLD_TORCH) -> OldTorchEnv:
    """A cached uv environment with an importable torch ``version`` (devtools/envs/torchenv.py).

    ``packaging`` and ``filelock`` are added because both our package and 0.1.5 import
    them at import time.
    """
    from devtools.envs.torchenv import EnvKind, torch_env

    env = torch_env(version, kind=EnvKind.IMPORTABLE, extra=("packaging", "filelock"))
    return OldTorchEnv(python=Path(env.python), torch_dir=Path(env.torch_dir), version=env.version)


def cuda_torch_env() -> OldTorchEnv:
    """The cached environment with PyPI's torch :data:`CUDA_TORCH` (its CUDA build, with
    the CUDA wheels ``import torch`` needs) on CPython :data:`CUDA_TORCH_PYTHON`; a
    :class:`ConfigError` when this machine has no such CPython."""
    from devtools.envs.torchenv import EnvKind, torch_env

    python = find_cpython(CUDA_TORCH_PYTHON)
    if python is None:
        raise ConfigError(
            f"no CPython {CUDA_TORCH_PYTHON} found (uv python find, pyenv) for the torch "
            f"{CUDA_TORCH} comparison; install one (e.g. `uv python install "
            f"{CUDA_TORCH_PYTHON}`)"
        )
    env = torch_env(
        CUDA_TORCH,
        kind=EnvKind.IMPORTABLE,
        python=CUDA_TORCH_PYTHON,
        interpreter=python,
        extra=CUDA_TORCH_EXTRAS,
    )
    return OldTorchEnv(python=Path(env.python), torch_dir=Path(env.torch_dir), version=env.version)


def build_portable(output_dir: Path, *, python: Path, target: str) -> Path:
    """The portable table as the release builds it (the project's driver, its audits):
    ``target`` ``"abi3"`` or ``"abi3.12"``, against the headers of the interpreter
    ``python`` (an abi3.12 build needs a CPython >= 3.12); cached by the driver.

    abi3.12 is not in the release matrix: its library skips the stable ABI audit, which
    holds every abi3 library to CPython 3.9's stable ABI (``stableabi.ABI3_FLOOR``)."""
    from _torch_c_dlpack_ext_core.buildrequest import BuildPolicy, PortableRequest
    from _torch_c_dlpack_ext_core.driver import compile_portable_library

    from .harness import python_include_dir

    entry = compile_portable_library(
        PortableRequest(
            output_dir=output_dir, python_include=python_include_dir(python), python=target
        ),
        BuildPolicy(stable_abi_audit=False if target != "abi3" else None),
    )
    return output_dir / entry.file


@dataclasses.dataclass(frozen=True, kw_only=True)
class LegacyRelease:
    """The unpacked wheel of the published release we compare against."""

    version: str
    wheel: Path
    #: Directory the wheel was unpacked into (put it on PYTHONPATH to import it).
    root: Path

    def library(self, torch_version: str, backend: Backend = Backend.CPU) -> Path:
        """The release's library for a torch ``major.minor`` (its own naming scheme)."""
        major, minor = torch_version.split(".")[:2]
        path = (
            self.root
            / "torch_c_dlpack_ext"
            / f"libtorch_c_dlpack_addon_torch{major}{minor}-{backend.value}.so"
        )
        if not path.is_file():
            raise ConfigError(
                f"torch-c-dlpack-ext {self.version} ships no {backend.value} library for "
                f"torch {major}.{minor} ({path.name} is missing from {self.wheel.name})"
            )
        return path

    def libraries(self) -> list[Path]:
        return sorted((self.root / "torch_c_dlpack_ext").glob("*.so"))


def fetch_legacy_release(work_dir: Path, version: str = LEGACY_VERSION) -> LegacyRelease:
    """Download the release's cp311 manylinux wheel with pip and unpack it (both cached)."""
    wheels_dir = work_dir / "legacy" / version / "wheel"
    root = work_dir / "legacy" / version / "unpacked"
    wheels = sorted(wheels_dir.glob("*.whl"))
    if not wheels:
        wheels_dir.mkdir(parents=True, exist_ok=True)
        run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                f"torch-c-dlpack-ext=={version}",
                "--no-deps",
                "--only-binary=:all:",
                "--python-version",
                "3.11",
                "--platform",
                "manylinux_2_28_x86_64",
                "--dest",
                wheels_dir,
            ]
        )
        wheels = sorted(wheels_dir.glob("*.whl"))
        if not wheels:
            raise ConfigError(f"pip downloaded no wheel of torch-c-dlpack-ext {version}")
    if not root.is_dir():
        # Unpack beside the final name and rename, so a half-unpacked tree is never reused.
        staging = Path(tempfile.mkdtemp(prefix=".unpacked.", dir=root.parent))
        try:
            with zipfile.ZipFile(wheels[0]) as archive:
                archive.extractall(staging)
            os.replace(staging, root)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return LegacyRelease(version=version, wheel=wheels[0], root=root)
