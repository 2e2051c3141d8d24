"""The headers a build compiles against, found and versioned: DLPack, CUDA / ROCm, Python,
and what the Python headers build (``abi3``, or a free-threaded target such as ``3.14t``).

Each finder takes an explicit override first, then the places a user's environment
provides, and raises a typed error listing what it tried and how to fix it.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import sysconfig
from collections.abc import Mapping
from pathlib import Path

from .errors import BuildError, DLPackHeaderNotFoundError, GPUHeadersNotFoundError
from .naming import ABI3, ABI3_FLOOR, Backend
from .torchinstall import TorchInstall

__all__ = [
    "MIN_DLPACK",
    "check_target_pyconfig",
    "cuda_header_wheels",
    "cuda_mismatch_note",
    "cuda_wheel_home",
    "find_dlpack_include",
    "find_gpu_toolkit",
    "find_python_include",
    "python_of_headers",
    "python_target_of_headers",
]

#: The oldest DLPack header that defines ``DLPackExchangeAPI``.
MIN_DLPACK = (1, 2)
_CUDA_MARKER = "cuda_runtime_api.h"
_CUDA_CRT = "crt/host_defines.h"
_HIP_MARKER = "hip/hip_runtime_api.h"
#: The first CUDA major whose header wheels share one toolkit-like tree (nvidia/cu<major>).
_SHARED_TREE_MAJOR = 13
_WANT_DLPACK = (
    "pass dlpack_include=<dir holding dlpack/dlpack.h> or install apache-tvm-ffi, "
    "which ships DLPack 1.3 ('pip install apache-tvm-ffi')"
)


def _read_define(header: Path, name: str) -> int | None:
    match = re.search(
        rf"^\s*#\s*define\s+{name}\s+(\d+)",
        header.read_text(encoding="utf-8", errors="replace"),
        re.M,
    )
    return int(match.group(1)) if match else None


def find_dlpack_include(dlpack_include: Path | None = None) -> tuple[Path, str]:
    """A directory holding ``dlpack/dlpack.h`` >= 1.2, and that header's version.

    ``dlpack_include`` if given, else apache-tvm-ffi's copy. Raises
    :class:`DLPackHeaderNotFoundError` when none is found or it is too old.
    """
    if dlpack_include is None:
        # Located, not imported: tvm_ffi's __init__ imports torch, and a build must
        # never import the torch it compiles against (it may not even be importable).
        import importlib.util

        spec = importlib.util.find_spec("tvm_ffi")
        if spec is None or not spec.submodule_search_locations:
            raise DLPackHeaderNotFoundError(
                f"no DLPack >= {MIN_DLPACK[0]}.{MIN_DLPACK[1]} header: apache-tvm-ffi is "
                f"not installed in {sys.prefix}; {_WANT_DLPACK}"
            )
        dlpack_include = Path(next(iter(spec.submodule_search_locations))) / "include"
    header = Path(dlpack_include) / "dlpack" / "dlpack.h"
    if not header.is_file():
        raise DLPackHeaderNotFoundError(f"{header} does not exist; {_WANT_DLPACK}")
    major = _read_define(header, "DLPACK_MAJOR_VERSION")
    minor = _read_define(header, "DLPACK_MINOR_VERSION")
    if major is None or minor is None or (major, minor) < MIN_DLPACK:
        found = "no DLPACK_MAJOR/MINOR_VERSION" if major is None else f"DLPack {major}.{minor}"
        raise DLPackHeaderNotFoundError(
            f"{header} has {found}; DLPackExchangeAPI needs DLPack >= "
            f"{MIN_DLPACK[0]}.{MIN_DLPACK[1]}; {_WANT_DLPACK}"
        )
    return Path(dlpack_include).resolve(), f"{major}.{minor}"


def _cuda_version(include: Path) -> str | None:
    for header, name in (("cuda_runtime_api.h", "CUDART_VERSION"), ("cuda.h", "CUDA_VERSION")):
        if (include / header).is_file():
            value = _read_define(include / header, name)
            if value is not None:
                return f"{value // 1000}.{value % 1000 // 10}"
    return None


def _rocm_version(home: Path) -> str | None:
    info = home / ".info" / "version"
    if info.is_file():
        return info.read_text(encoding="utf-8").strip().split("-")[0] or None
    header = home / "include" / "hip" / "hip_version.h"
    if header.is_file():
        major = _read_define(header, "HIP_VERSION_MAJOR")
        minor = _read_define(header, "HIP_VERSION_MINOR")
        if major is not None and minor is not None:
            return f"{major}.{minor}"
    return None


def _site_packages_dirs(torch: TorchInstall) -> list[Path]:
    current = [Path(sysconfig.get_paths()["purelib"]), Path(sysconfig.get_paths()["platlib"])]
    return list(dict.fromkeys([torch.site_packages, *current]))


#: Where a CUDA toolkit lives when nothing names it (the Linux installers' link to the
#: current toolkit). Tried last, after ``nvcc`` on PATH too: an ``nvcc`` that is a wrapper
#: script outside the toolkit (``/usr/local/bin/nvcc`` exec'ing the real one) leads
#: nowhere, and torch's cpp_extension, which looks here only without nvcc, stops there.
_STANDARD_CUDA_HOMES: tuple[Path, ...] = () if os.name == "nt" else (Path("/usr/local/cuda"),)
#: Windows' CUDA installer sets one ``CUDA_PATH_V<major>_<minor>`` per toolkit.
_CUDA_PATH_VERSIONED = re.compile(r"CUDA_PATH_V(\d+)_(\d+)")


def _versioned_cuda_paths(
    environ: Mapping[str, str], cuda_version: str | None
) -> list[tuple[str, Path]]:
    """``CUDA_PATH_V<major>_<minor>`` toolkits: those of torch's CUDA major first, then
    newest first (``CUDA_PATH`` names only the last one installed)."""
    found = []
    for name, value in environ.items():
        match = _CUDA_PATH_VERSIONED.fullmatch(name.upper())
        if match is not None and value:
            found.append(((int(match.group(1)), int(match.group(2))), name, Path(value)))
    major = _cuda_major(cuda_version)
    found.sort(key=lambda item: (item[0][0] != major, [-part for part in item[0]]))
    return [(f"${name}", path) for _, name, path in found]


def _cuda_homes(
    torch: TorchInstall, gpu_home: Path | None, environ: Mapping[str, str]
) -> list[tuple[str, Path]]:
    """CUDA toolkit roots to try, in order, each with where it came from: ``$CUDA_HOME``,
    ``$CUDA_PATH``, ``$CUDA_PATH_V*``, the toolkit of ``nvcc`` on PATH (through its
    links, and as found), NVIDIA's header wheels, :data:`_STANDARD_CUDA_HOMES`. Every
    one is tried until one has the headers; each place once. The header wheels come
    before the standard location: they are complete only where a user installed the
    ``crt/`` one on purpose, and then match torch's CUDA version, which an unnamed
    ``/usr/local/cuda`` need not (here it is CUDA 13.0 beside torch's 12.8 wheels)."""
    if gpu_home is not None:
        return [("gpu_home", gpu_home)]
    homes = [(f"${v}", Path(environ[v])) for v in ("CUDA_HOME", "CUDA_PATH") if environ.get(v)]
    homes += _versioned_cuda_paths(environ, torch.cuda_version)
    nvcc = shutil.which("nvcc", path=environ.get("PATH", ""))
    if nvcc is not None:
        homes.append(("nvcc on PATH", Path(nvcc).resolve().parent.parent))
        homes.append(("nvcc on PATH", Path(nvcc).absolute().parent.parent))
    for site in _site_packages_dirs(torch):
        homes += [("nvidia-cuda-runtime wheel", t) for t in _wheel_trees(site, torch.cuda_version)]
    homes += [("standard location", home) for home in _STANDARD_CUDA_HOMES]
    unique: dict[Path, str] = {}
    for origin, home in homes:
        unique.setdefault(home, origin)
    return [(origin, home) for home, origin in unique.items()]


def _cuda_major(cuda_version: str | None) -> int | None:
    major = cuda_version.split(".")[0] if cuda_version else ""
    return int(major) if major.isdigit() else None


def _wheel_trees(site: Path, cuda_version: str | None) -> list[Path]:
    """The trees NVIDIA's CUDA header wheels may have installed into ``site``.

    CUDA 12's wheels install per component (``nvidia/cuda_runtime``, ``nvidia/cuda_nvcc``);
    CUDA 13's (nvidia-cuda-runtime, nvidia-cuda-crt 13.x) share one toolkit-like tree,
    ``nvidia/cu13``. The shared tree of ``cuda_version``'s major is tried first.
    """
    wanted = f"cu{_cuda_major(cuda_version)}"
    trees = sorted((site / "nvidia").glob("cu[0-9]*"), key=lambda p: p.name != wanted)
    return [*trees, site / "nvidia" / "cuda_runtime"]


def cuda_wheel_home(site_packages: Path, cuda_version: str | None) -> Path:
    """The CUDA headers NVIDIA's wheels (:func:`cuda_header_wheels`) installed into
    ``site_packages`` (a torch environment), for a torch built with CUDA ``cuda_version``:
    the first complete tree of those wheels' layouts (CUDA 13's ``nvidia/cu13``; CUDA
    12's ``nvidia/cuda_runtime``, whose ``crt/`` the sibling ``nvidia/cuda_nvcc`` holds).

    With none complete, the tree ``cuda_version``'s wheels would make, so that
    :func:`find_gpu_toolkit` given it as ``gpu_home`` names it in its error.
    """
    trees = _wheel_trees(site_packages, cuda_version)
    for tree in trees:
        if _cuda_includes(tree) is not None:
            return tree
    major = _cuda_major(cuda_version)
    if major is not None and major >= _SHARED_TREE_MAJOR:
        return site_packages / "nvidia" / f"cu{major}"
    return trees[-1]


def _rocm_homes(gpu_home: Path | None, environ: Mapping[str, str]) -> list[tuple[str, Path]]:
    """ROCm roots to try, in order, each with where it came from."""
    if gpu_home is not None:
        return [("gpu_home", gpu_home)]
    homes = [(f"${v}", Path(environ[v])) for v in ("ROCM_PATH", "ROCM_HOME") if environ.get(v)]
    return [*homes, ("standard location", Path("/opt/rocm"))]


def _cuda_includes(home: Path) -> tuple[Path, ...] | None:
    """Include dirs of the CUDA headers under ``home``, or ``None`` if they are incomplete.

    A toolkit has everything in ``include/``. NVIDIA's wheels split it: the
    runtime headers (``nvidia/cuda_runtime``) include ``crt/host_defines.h``,
    which only ``nvidia-cuda-nvcc-cu12`` (``nvidia/cuda_nvcc``) ships.
    """
    include = home / "include"
    if not (include / _CUDA_MARKER).is_file():
        return None
    if (include / _CUDA_CRT).is_file():
        return (include.resolve(),)
    nvcc_include = home.parent / "cuda_nvcc" / "include"
    if (nvcc_include / _CUDA_CRT).is_file():
        return include.resolve(), nvcc_include.resolve()
    return None


def cuda_header_wheels(cuda_version: str | None) -> str:
    """The PyPI requirements that supply the CUDA headers (``cuda_runtime_api.h`` and
    ``crt/host_defines.h``) for a torch built with CUDA ``cuda_version`` (``"12.8"``).

    CUDA 12: ``nvidia-cuda-runtime-cu12`` + ``nvidia-cuda-nvcc-cu12`` (the only one with
    ``crt/``); CUDA 13 renamed them: ``nvidia-cuda-runtime`` + ``nvidia-cuda-crt`` (checked
    on PyPI's 13.0.96 / 13.0.88 wheels, which install into ``nvidia/cu13/include``).
    """
    pin = f"=={cuda_version}.*" if cuda_version else ""
    major = _cuda_major(cuda_version)
    if major is not None and major >= _SHARED_TREE_MAJOR:
        return f"nvidia-cuda-runtime{pin} nvidia-cuda-crt{pin}"
    return f"nvidia-cuda-runtime-cu12{pin} nvidia-cuda-nvcc-cu12{pin}"


def find_gpu_toolkit(
    backend: Backend,
    torch: TorchInstall,
    gpu_home: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> tuple[tuple[Path, ...], str | None]:
    """``(include dirs, toolkit version)`` of the CUDA / ROCm headers; ``((), None)`` for CPU.

    CUDA: ``gpu_home``, else ``$CUDA_HOME`` / ``$CUDA_PATH`` / ``$CUDA_PATH_V*``, else
    the toolkit of ``nvcc`` on PATH, else NVIDIA's header wheels in the target
    environment or this one, else ``/usr/local/cuda`` (not on Windows): the first of
    these that has the headers (:func:`cuda_header_wheels`: CUDA 12's ``nvidia/cuda_runtime`` plus
    ``nvidia/cuda_nvcc`` for ``crt/``; CUDA 13's ``nvidia/cu13``). ROCm:
    ``gpu_home``, ``$ROCM_PATH``, ``$ROCM_HOME``, ``/opt/rocm``. An explicit
    ``gpu_home`` is used or rejected, never skipped. Raises
    :class:`GPUHeadersNotFoundError` listing what was tried.
    """
    if backend is Backend.CPU:
        return (), None
    environ = os.environ if environ is None else environ
    if backend is Backend.CUDA:
        homes = _cuda_homes(torch, gpu_home, environ)
        for _origin, home in homes:
            includes = _cuda_includes(home)
            if includes is not None:
                return includes, _cuda_version(includes[0])
        marker = f"{_CUDA_MARKER} and {_CUDA_CRT}"
        fix = (
            "pass gpu_home=<CUDA toolkit root>, set CUDA_HOME, put nvcc on PATH, or install "
            f"the CUDA headers ('pip install {cuda_header_wheels(torch.cuda_version)}') "
            f"into {torch.site_packages}"
        )
    else:
        homes = _rocm_homes(gpu_home, environ)
        for _origin, home in homes:
            if (home / "include" / _HIP_MARKER).is_file():
                return ((home / "include").resolve(),), _rocm_version(home)
        marker = _HIP_MARKER
        fix = "pass gpu_home=<ROCm root> or set ROCM_PATH to the ROCm installation"
    tried = "; ".join(f"{origin}: {home / 'include'}" for origin, home in homes)
    raise GPUHeadersNotFoundError(
        f"no complete {backend.value.upper()} headers ({marker}) for the {backend.value} "
        f"build; tried {tried or 'nothing'}. Fix: {fix}"
    )


def cuda_mismatch_note(torch: TorchInstall, toolkit: str | None) -> str | None:
    """What to tell a user whose CUDA headers (``toolkit``) are of another major version
    than the CUDA ``torch`` was built with, or ``None``. A note about one build, said by
    the driver when that build compiles (:attr:`.driver.BuildPlan.notes`), never when a
    cached build is reused; it names what a user can set, not an internal parameter."""
    wanted = torch.cuda_version
    if not (wanted and toolkit) or wanted.split(".")[0] == toolkit.split(".")[0]:
        return None
    major = wanted.split(".")[0]
    return (
        f"CUDA {toolkit} headers for torch {torch.version} (built with CUDA {wanted}); if "
        f"the build fails, set CUDA_HOME to a CUDA {major}.x toolkit, or install its header "
        f"wheels ('pip install {cuda_header_wheels(wanted)}')"
    )


def find_python_include(python_include: Path | None = None) -> Path:
    """The directory holding ``Python.h``: ``python_include``, else the running Python's.

    Raises :class:`BuildError` when it holds no ``Python.h``.
    """
    include = Path(python_include or sysconfig.get_paths()["include"])
    if not (include / "Python.h").is_file():
        raise BuildError(
            f"no Python.h in {include}; install the Python development headers "
            "(e.g. apt install python3-dev) or pass python_include=<dir holding Python.h>"
        )
    return include.resolve()


def check_target_pyconfig(include: Path, triplet: str) -> None:
    """A cross build for ``triplet`` (``aarch64-linux-gnu``) with the headers in
    ``include``: Debian's and Ubuntu's CPython headers are multiarch, their ``pyconfig.h``
    only includes ``<TRIPLET/python3.X/pyconfig.h>`` for the architecture compiled for.
    Raises :class:`BuildError` saying what to install when the target's is absent."""
    wanted = f"{triplet}/{include.name}/pyconfig.h"
    if f"<{wanted}>" not in _read_python_header(include, "pyconfig.h"):
        return
    places = (include.parent / wanted, Path("/usr") / triplet / "include" / include.name)
    if (include.parent / wanted).is_file() or (places[1] / "pyconfig.h").is_file():
        return
    version = include.name.removeprefix("python")
    arch = {"aarch64": "arm64"}.get(triplet.split("-", 1)[0], triplet.split("-", 1)[0])
    raise BuildError(
        f"the CPython headers in {include} are Debian's multiarch ones: their pyconfig.h "
        f"includes <{wanted}>, the {triplet} configuration, which is not installed "
        f"(looked in {places[0].parent} and {places[1]}). Install it (dpkg "
        f"--add-architecture {arch} && apt-get update && apt-get install "
        f"libpython{version}-dev:{arch}), or build with a CPython whose headers are not "
        "multiarch (uv python install, pyenv, python.org), or pass python_include=<dir>"
    )


def _read_python_header(include_dir: Path, name: str) -> str:
    """The text of the CPython header ``name`` in ``include_dir``; a :class:`BuildError`
    naming the dir as incomplete when it cannot be read."""
    try:
        return (include_dir / name).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise BuildError(
            f"cannot read {include_dir / name} ({exc.strerror}): {include_dir} is "
            "not a complete CPython include dir; pass python_include=<dir holding Python.h>"
        ) from None


def python_of_headers(include_dir: Path) -> str:
    """``3.11``: the CPython version of the headers in ``include_dir`` (``patchlevel.h``,
    which ``Python.h`` includes), i.e. the Python a library compiled against them serves."""
    text = _read_python_header(include_dir, "patchlevel.h")
    found = [
        re.search(rf"^#define\s+{name}\s+(\d+)\b", text, re.MULTILINE)
        for name in ("PY_MAJOR_VERSION", "PY_MINOR_VERSION")
    ]
    if found[0] is None or found[1] is None:
        raise BuildError(f"{include_dir / 'patchlevel.h'} defines no PY_MAJOR/MINOR_VERSION")
    return f"{found[0].group(1)}.{found[1].group(1)}"


def _free_threaded_headers(include_dir: Path) -> bool:
    """The headers are a free-threaded CPython's: ``pyconfig.h`` defines
    ``Py_GIL_DISABLED`` to 1 (Debian's multiarch ``pyconfig.h``, which only includes
    the architecture's own, belongs to a GIL build: Debian ships no free-threaded one)."""
    text = _read_python_header(include_dir, "pyconfig.h")
    return re.search(r"^\s*#\s*define\s+Py_GIL_DISABLED\s+1\b", text, re.MULTILINE) is not None


def python_target_of_headers(include_dir: Path) -> str:
    """What a library compiled against the CPython headers in ``include_dir`` serves, as
    its manifest's ``python`` says it: ``"abi3"`` for a CPython with the GIL (the build
    defines ``Py_LIMITED_API``, so it serves every CPython from 3.9 on), ``"3.14t"`` for
    a free-threaded one (no limited API there: that interpreter only).

    Raises :class:`BuildError` for headers older than 3.9 or not CPython's.
    """
    version = python_of_headers(include_dir)
    major, minor = (int(part) for part in version.split("."))
    if _free_threaded_headers(include_dir):
        return f"{version}t"
    if (major, minor) < ABI3_FLOOR:
        raise BuildError(
            f"the Python headers in {include_dir} are CPython {version}; the limited API "
            f"build needs CPython {ABI3_FLOOR[0]}.{ABI3_FLOOR[1]} or newer headers "
            "(pass python_include=<dir holding Python.h of a newer CPython>)"
        )
    return ABI3
