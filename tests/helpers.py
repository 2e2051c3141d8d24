"""Test helpers: an installed-looking package with chosen libraries, a fake library,
and a bounded subprocess runner.

``make_package`` stands in for the wheel builder: it copies the package sources,
puts libraries into ``libs/`` and writes ``manifest.json`` with ``write_manifest``,
so a test can point ``PYTHONPATH`` at the result in any environment (the running
Python, or an old-torch env from ``devtools.envs.torchenv``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from _torch_c_dlpack_ext_core.files import sha256_of, write_manifest
from _torch_c_dlpack_ext_core.manifest import ManifestEntry
from _torch_c_dlpack_ext_core.naming import (
    CORE_PACKAGE,
    ENV_PREFIX,
    LIBS_DIR,
    MANIFEST_NAME,
    PACKAGE,
    Backend,
    library_filename,
)

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_SOURCE = ROOT / "python" / PACKAGE
CORE_SOURCE = ROOT / "python" / CORE_PACKAGE
CSRC = ROOT / "csrc"
#: The portable table's sources (the driver compiles every ``*.c`` of the folder).
PORTABLE_SOURCES = tuple(sorted((CSRC / "portable").glob("*.c")))
FAKE_LIBRARY_SOURCE = (
    Path(__file__).resolve().parent / "integration" / "fixtures" / "fake_exchange.c"
)

__all__ = [
    "CSRC",
    "CUDA_SPY",
    "CUDA_TORCH",
    "IMPORT_PROBE",
    "ROOT",
    "Bundled",
    "build_fake_library",
    "build_portable_library",
    "bundle_portable",
    "clean_env",
    "make_package",
    "probe_import",
    "run_python",
    "suite_env",
]


@dataclasses.dataclass(frozen=True)
class Bundled:
    """A library to bundle, and the cell the manifest claims it was built for."""

    source: Path
    torch: str
    backend: Backend
    cxx11_abi: bool | None
    torch_build: str = ""
    #: Manifest values to use instead of the file's real size / sha256.
    size: int | None = None
    sha256: str | None = None


def torch_info(
    version: str = "2.8.0+cpu",
    backend: Backend = Backend.CPU,
    *,
    cxx11_abi: bool | None = True,
    cuda_version: str | None = None,
    hip_version: str | None = None,
    has_capsule: bool = False,
    has_legacy_int: bool = False,
) -> Any:
    """A ``TorchInfo`` (of a torch without the exchange API, by default a CPU 2.8 with
    the cxx11 ABI). Imported here, not at the top: importing the face runs the selector,
    which a test importing these helpers may not want."""
    from torch_c_dlpack_ext._torchinfo import TorchInfo

    return TorchInfo(
        version=version,
        backend=backend,
        cxx11_abi=cxx11_abi,
        cuda_version=cuda_version,
        hip_version=hip_version,
        has_capsule=has_capsule,
        has_legacy_int=has_legacy_int,
    )


def build_fake_library(dest: Path, *defines: str, name: str = "libfake.so") -> Path:
    """Compile ``fixtures/fake_exchange.c`` with ``-D<define>`` for each define."""
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / name
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or "gcc"
    subprocess.run(
        [
            cc,
            "-shared",
            "-fPIC",
            "-O1",
            "-fvisibility=hidden",
            *(f"-D{d}" for d in defines),
            "-o",
            str(out),
            str(FAKE_LIBRARY_SOURCE),
        ],
        check=True,
        timeout=120,
    )
    return out


def build_portable_library(
    dest: Path,
    *,
    limited_api: int | None = 0x03090000,
    python_include: Path | None = None,
    name: str = "libtorch_c_dlpack_ext-portable.so",
    extra_flags: Sequence[str] = (),
) -> Path:
    """Compile the portable table (``csrc/portable``) as the release driver will (Linux gcc).

    A stand-in for the official driver build, for tests: ``limited_api`` is the
    ``Py_LIMITED_API`` value (``0x03090000``: abi3; ``0x030C0000``: abi3 with vectorcall,
    needs CPython >= 3.12 headers; ``None``: the full API of the interpreter whose headers
    are used), ``python_include`` defaults to the running interpreter's. Warnings are errors.
    """
    import sysconfig

    import tvm_ffi.libinfo

    dest.mkdir(parents=True, exist_ok=True)
    out = dest / name
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc") or "gcc"
    include = python_include or Path(sysconfig.get_paths()["include"])
    api = [] if limited_api is None else [f"-DPy_LIMITED_API={limited_api:#010x}"]
    command = [
        cc, "-std=c11", "-O2", "-fPIC", "-shared", "-fvisibility=hidden",
        "-Wall", "-Wextra", "-Werror", *api, '-DTCDE_TOOLCHAIN="test build"',
        f"-I{include}", f"-I{tvm_ffi.libinfo.find_dlpack_include_path()}", *extra_flags,
        "-o", str(out), *map(str, PORTABLE_SOURCES),
        f"-Wl,--version-script={CSRC / 'exports.map'}",
    ]  # fmt: skip
    subprocess.run(command, check=True, timeout=120)
    return out


def make_package(root: Path, bundled: Sequence[Bundled] = (), *, manifest: bool = True) -> Path:
    """Create ``root/torch_c_dlpack_ext`` holding ``bundled`` and its manifest, beside
    ``root/_torch_c_dlpack_ext_core`` (the wheel installs both).

    Returns the directory to put on ``PYTHONPATH``. The repository's ``csrc/`` is
    copied in as the wheel does, so the JIT can compile from the copy.
    """
    package = root / PACKAGE
    shutil.copytree(
        PACKAGE_SOURCE, package, ignore=shutil.ignore_patterns("__pycache__", "*.so", "libs")
    )
    shutil.copytree(CORE_SOURCE, root / CORE_PACKAGE, ignore=shutil.ignore_patterns("__pycache__"))
    if CSRC.is_dir():
        shutil.copytree(CSRC, package / "csrc")
    entries = []
    for item in bundled:
        major, minor = (int(x) for x in item.torch.split("."))
        name = library_filename(major, minor, item.backend, item.cxx11_abi)
        target = package / LIBS_DIR / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(item.source, target)
        entries.append(
            ManifestEntry(
                file=f"{LIBS_DIR}/{name}",
                torch=item.torch,
                torch_build=item.torch_build or f"{item.torch}.0",
                backend=item.backend,
                cxx11_abi=item.cxx11_abi,
                dlpack="1.3",
                toolchain="test",
                gpu_toolkit=None,
                platform="linux_x86_64",
                python="3.11",
                size=item.size if item.size is not None else target.stat().st_size,
                sha256=item.sha256 or sha256_of(target),
            )
        )
    if manifest:
        write_manifest(package / MANIFEST_NAME, entries)
    return root


def clean_env(**extra: str) -> dict[str, str]:
    """The current environment without this project's variables, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    env.update(extra)
    return env


def devtools_env(**extra: str) -> dict[str, str]:
    """:func:`clean_env` for ``python -m devtools.<tool>`` run from the repository root, as
    the nox sessions run it: the shipped building blocks (``python/``) on ``PYTHONPATH``."""
    return clean_env(PYTHONPATH=str(ROOT / "python"), **extra)


#: Python source for a fresh interpreter that has imported torch: wraps every CUDA query
#: torch has (those this build defines) so each call is appended to ``CUDA_CALLS``; the
#: import-must-not-touch-CUDA checks (totality worker, tests/integration) run it first.
CUDA_SPY = r"""
CUDA_CALLS = []

def spy(owner, name):
    real = getattr(owner, name, None)
    if real is None:
        return
    def spying(*args, **kwargs):
        CUDA_CALLS.append(name)
        return real(*args, **kwargs)
    setattr(owner, name, spying)

for name in ("is_available", "device_count", "init", "_lazy_init"):
    spy(torch.cuda, name)
for name in ("_cuda_getDeviceCount", "_cuda_init"):
    spy(torch._C, name)
"""


def run_python(
    code: str,
    *,
    pythonpath: Sequence[Path] = (),
    env: Mapping[str, str] | None = None,
    python: Path | str = sys.executable,
    timeout: float = 300,
    args: Sequence[str] = (),
) -> subprocess.CompletedProcess[str]:
    """Run ``python -c code`` in a fresh process (so a crash is a return code, not a
    dead test runner), with ``pythonpath`` first on ``PYTHONPATH``."""
    environ = dict(clean_env() if env is None else env)
    paths = [str(p) for p in pythonpath]
    if environ.get("PYTHONPATH"):
        paths.append(environ["PYTHONPATH"])
    environ["PYTHONPATH"] = os.pathsep.join(paths)
    return subprocess.run(
        [str(python), "-c", code, *args],
        env=environ,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


#: Makes the running torch a CUDA build as the selector sees it (the backend is the build
#: flavour, ``torch.version.cuda``): a :func:`probe_import` prelude, to test a GPU torch's
#: selection on a CPU torch without ``TORCH_C_DLPACK_EXT_BACKEND`` (which conflicts with a
#: CPU torch's build).
CUDA_TORCH = "import torch\ntorch.version.cuda = '12.8'\ntorch.version.hip = None\n"


#: Imports the package after torch and reports what it did, as JSON on the last line
#: of stdout: the decision, the warnings of our category, whether the capsule was
#: replaced (and the pointer in it), the legacy int attribute, the package's path.
IMPORT_PROBE = r"""
import ctypes, json, warnings
import torch
had = torch.Tensor.__dict__.get("__dlpack_c_exchange_api__")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import torch_c_dlpack_ext as pkg
status = pkg.status()
capsule = torch.Tensor.__dict__.get("__dlpack_c_exchange_api__")
pointer = None
if capsule is not None:
    get = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
        ("PyCapsule_GetPointer", ctypes.pythonapi))
    pointer = get(capsule, b"dlpack_exchange_api")
print(json.dumps({
    "kind": status.kind.value,
    "library": str(status.library) if status.library else None,
    "reason": status.reason,
    "remedy": status.remedy,
    "warnings": [str(w.message) for w in caught
                 if issubclass(w.category, pkg.TorchCDLPackExtWarning)],
    "replaced": capsule is not had,
    "pointer": pointer,
    "legacy": torch.Tensor.__dict__.get("__c_dlpack_exchange_api__"),
    "package": pkg.__file__,
}))
"""


def probe_import(
    root: Path,
    *,
    python: Path | str = sys.executable,
    timeout: float = 120,
    prelude: str = "",
    **env: str,
) -> dict[str, Any]:
    """Run :data:`IMPORT_PROBE` in a fresh process with ``root`` (from :func:`make_package`)
    first on ``PYTHONPATH`` and ``env`` added to a clean environment; return its report.
    ``prelude``: code run first (such as :data:`CUDA_TORCH`, to make the torch a CUDA build).

    Fails the test if the import died (a signal such as SIGBUS is a negative return
    code: the fault was not contained) or imported the package from anywhere else.
    """
    proc = run_python(
        prelude + IMPORT_PROBE,
        pythonpath=[root],
        env=clean_env(**env),
        python=python,
        timeout=timeout,
    )
    assert proc.returncode == 0, f"import died with {proc.returncode}:\n{proc.stderr[-3000:]}"
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["package"].startswith(str(root)), result["package"]
    return result


#: A PyPI torch older than the matrix (native libraries: 2.4-2.9; 2.10+ defer), served by
#: the portable table only; a CUDA 12.1 build (pre-cxx11 ABI) for CPython <= 3.12.
OLD_TORCH = "2.3.1"
#: The apache-tvm-ffi of the portable table's proofs (docs/facts.md checked this release);
#: pinned, so the cached envs and the Debian root's wheelhouse hold the same one.
TVM_FFI = "apache-tvm-ffi==0.1.15.post2"
#: The extras of the suite's importable env of each old torch release (CPython 3.11 unless
#: a test needs another): one set for every test, so the tests of a release share one env
#: instead of making one per extras set (2.8.0 had seven; each took 15-60 s to make). The
#: exchange suite's pytest and psutil, the conformance suite's hypothesis, the drop-in
#: tests' apache-tvm-ffi.
SUITE_EXTRAS = ("pytest", "psutil", "hypothesis", TVM_FFI)
#: The releases whose suite env also holds CUDA header wheels, and their CUDA: the CUDA
#: library compiles against 2.8.0's (``cuda_header_wheels``: nvidia-cuda-runtime-cu12 and
#: nvidia-cuda-nvcc-cu12 12.8.*, ~0.1 GB).
SUITE_CUDA_HEADERS = {"2.8.0": "12.8"}


def suite_env(version: str, *, observer: Any, python: str | None = None) -> Any:
    """The suite's importable env of PyPI's torch ``version`` (a
    ``devtools.envs.torchenv.TorchEnv``; made once, then cached): :data:`SUITE_EXTRAS`
    and, for :data:`SUITE_CUDA_HEADERS`, the CUDA header wheels. ``python``: default this
    interpreter's. ``observer``: the ``env_observer`` fixture (the run's shard guard and
    footprint recorder)."""
    from devtools.envs.torchenv import EnvKind, torch_env

    from _torch_c_dlpack_ext_core.headers import cuda_header_wheels

    cuda = SUITE_CUDA_HEADERS.get(version)
    headers = tuple(cuda_header_wheels(cuda).split()) if cuda else ()
    return torch_env(
        version,
        kind=EnvKind.IMPORTABLE,
        python=python,
        extra=SUITE_EXTRAS + headers,
        observer=observer,
    )


def suite_python(version: str, *, observer: Any) -> Path | str:
    """The interpreter of torch ``version`` for a test parametrized over releases:
    ``"running"`` is this one (the test session's torch), any other the Python of its
    :func:`suite_env` (``observer``: as there)."""
    if version == "running":
        return sys.executable
    return Path(suite_env(version, observer=observer).python)


def bundle_portable(root: Path, library: Path, *, python: str = "abi3") -> Path:
    """Add the portable library (the torch-agnostic table) to the package
    :func:`make_package` made at ``root``, with the manifest entry the build writes for
    it (``any`` in ``torch``, ``torch_build`` and ``backend``; null in ``cxx11_abi`` and
    ``gpu_toolkit``). Returns ``root``."""
    from _torch_c_dlpack_ext_core.files import load_manifest
    from _torch_c_dlpack_ext_core.naming import ANY, portable_library_filename

    package = root / PACKAGE
    name = portable_library_filename(python)
    target = package / LIBS_DIR / name
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(library, target)
    entry = ManifestEntry(
        file=f"{LIBS_DIR}/{name}",
        torch=ANY,
        torch_build=ANY,
        backend=None,
        cxx11_abi=None,
        dlpack="1.3",
        toolchain="test",
        gpu_toolkit=None,
        platform="linux_x86_64",
        python=python,
        size=target.stat().st_size,
        sha256=sha256_of(target),
    )
    write_manifest(package / MANIFEST_NAME, [*load_manifest(package / MANIFEST_NAME), entry])
    return root
