""":class:`TorchInstall`: a torch installation described from its files, without importing
it.

The build compiles against torch releases that cannot be imported here (another
Python, a CUDA build on a machine without the NVIDIA wheels, a different C++ ABI),
so everything the driver needs is read from the installed files: the version from
``torch/version.py`` (parsed with :mod:`ast`, never executed), the libstdc++ dual
ABI from torch's CMake config or, where that is silent, from ``libc10``'s dynamic
symbols, and the available backends from which libraries are present.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import sys
from pathlib import Path

from .errors import CommandError, TorchInstallError
from .files import sha256_of
from .naming import Backend, torch_minor
from .toolchains import Toolchain, toolchain_for
from .toolchains.elf import dynamic_symbols

__all__ = ["TorchInstall"]

_CMAKE_FILES = ("share/cmake/Torch/TorchConfig.cmake", "share/cmake/Caffe2/Caffe2Config.cmake")
_CMAKE_ABI_RE = re.compile(r"_GLIBCXX_USE_CXX11_ABI=([01])")
#: The tag GCC puts on every symbol whose signature involves the C++11 ``std::string``.
_CXX11_TAG = "B5cxx11"

#: Library stems whose presence in ``torch/lib`` means the backend's kernels were built
#: (matched as substrings: ``libc10_cuda.so``, ``libc10_cuda.dylib``, ``c10_cuda.dll``/``.lib``).
_BACKEND_MARKERS = {Backend.CUDA: "c10_cuda", Backend.ROCM: "c10_hip"}


def _candidate_torch_dirs(path: Path) -> list[Path]:
    """Where a ``torch`` package may sit relative to ``path`` (package, site-packages, prefix)."""
    candidates = [path, path / "torch"]
    for libdir in ("lib", "lib64"):
        candidates.extend(sorted((path / libdir).glob("python3*/site-packages/torch")))
    candidates.append(path / "Lib" / "site-packages" / "torch")
    return candidates


def _is_torch_dir(path: Path) -> bool:
    return (path / "version.py").is_file() and (path / "include").is_dir()


def _not_found(given: Path, candidates: list[Path]) -> str:
    """Why ``given`` holds no torch to compile against: the files looked for and where,
    and what to install. A torch whose headers are missing is named with its version
    (reinstall that release); nothing is suggested that ``given`` does not say."""
    for candidate in candidates:
        if (candidate / "version.py").is_file() and not (candidate / "include").is_dir():
            version = _read_version_module(candidate / "version.py").get("__version__")
            release = (version or "").split("+")[0]
            pin = f"torch=={release}" if release else "torch"
            return (
                f"the torch {version or '(version unknown)'} at {candidate} has no C++ "
                f"headers: {candidate / 'include'} does not exist (a build compiles against "
                f"torch/include, which every torch wheel ships); reinstall that release "
                f"there ('pip install --force-reinstall --no-deps {pin}') or pass another "
                "torch installation"
            )
    patterns = [given, given / "torch", given / "lib*" / "python3*" / "site-packages" / "torch",
                given / "Lib" / "site-packages" / "torch"]  # fmt: skip
    looked = ", ".join(str(p) for p in patterns)
    return (
        f"no torch installation at {given}: looked for version.py and the C++ headers "
        f"(include/) of a torch package in {looked}"
        f"{'' if given.exists() else f' ({given} does not exist)'}; pass the torch package "
        "directory, the site-packages or the environment that holds it, or install the "
        "torch you build for there ('uv pip install --python <env> torch==<its version>')"
    )


def _read_version_module(path: Path) -> dict[str, str | None]:
    """Module-level string/None assignments of ``torch/version.py``, read with :mod:`ast`."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, SyntaxError, UnicodeDecodeError) as exc:
        raise TorchInstallError(
            f"cannot read {path}: {exc}; the torch installation looks damaged, reinstall torch"
        ) from None
    values: dict[str, str | None] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if (
            isinstance(target, ast.Name)
            and isinstance(value, ast.Constant)
            and (value.value is None or isinstance(value.value, str))
        ):
            values[target.id] = value.value
    return values


def _abi_from_cmake(root: Path) -> bool | None:
    """The ABI torch's CMake config tells dependents to use, or ``None`` if it is silent.

    Torch <= 2.6 writes ``-D_GLIBCXX_USE_CXX11_ABI=0|1`` there; later releases only
    support the C++11 ABI and no longer write it.
    """
    for relative in _CMAKE_FILES:
        try:
            text = (root / relative).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        match = _CMAKE_ABI_RE.search(text)
        if match is not None:
            return match.group(1) == "1"
    return None


def _abi_from_libc10(lib_dir: Path, toolchain: Toolchain) -> bool:
    """The ABI ``libc10`` was built with: any exported ``[abi:cxx11]`` symbol means 1."""
    libc10 = lib_dir / toolchain.link_library_name("c10")
    if not libc10.is_file():
        raise TorchInstallError(
            f"cannot tell the C++ ABI of the torch at {lib_dir.parent}: its CMake config does "
            f"not state _GLIBCXX_USE_CXX11_ABI and {libc10} is missing; reinstall torch"
        )
    try:
        exported = dynamic_symbols(libc10, defined=True)
    except CommandError as exc:
        raise TorchInstallError(
            f"cannot read the dynamic symbols of {libc10} ({exc.stderr.strip() or exc}); "
            "the torch installation looks damaged, reinstall torch"
        ) from None
    return any(_CXX11_TAG in name for name in exported)


@dataclasses.dataclass(frozen=True)
class TorchInstall:
    """A torch installation on disk: what a build against it needs to know."""

    #: The ``torch`` package directory (``.../site-packages/torch``).
    root: Path
    #: ``torch.__version__`` including the local part (``2.6.0+cu124``).
    version: str
    major: int
    minor: int
    #: libstdc++ dual ABI torch was built with; ``None`` off Linux (no dual ABI there).
    cxx11_abi: bool | None
    #: ``torch.version.cuda`` / ``torch.version.hip`` (``None`` when absent).
    cuda_version: str | None
    hip_version: str | None
    include_dirs: tuple[Path, ...]
    lib_dir: Path
    #: Backends whose torch libraries are present (always includes CPU).
    backends_available: frozenset[Backend]

    @property
    def site_packages(self) -> Path:
        """The directory holding the ``torch`` package (where its NVIDIA wheels also live)."""
        return self.root.parent

    @property
    def identity(self) -> dict[str, object]:
        """What distinguishes this torch build for build caching, and nothing about
        where it is installed (another venv of the same wheel has the same identity).

        Version and ABI alone miss a reinstall of a different build with the same
        version string (a nightly, a vendor build), so the sha256 of ``version.py``
        (which records the build's git commit and CUDA/ROCm version) and the main
        library's size are part of it; not its modification time, which every
        install sets anew.
        """
        data: dict[str, object] = {
            "version": self.version,
            "cxx11_abi": self.cxx11_abi,
            "version.py": sha256_of(self.root / "version.py"),
        }
        for path in sorted(self.lib_dir.glob("*torch_cpu*")):
            data[path.name] = path.stat().st_size
        return data

    @classmethod
    def from_path(cls, path: Path | str, *, platform: str | None = None) -> TorchInstall:
        """Read the torch installation at ``path``.

        ``path`` may be the ``torch`` package directory, a site-packages directory
        holding it, or a venv / prefix. Raises :class:`TorchInstallError` when no
        torch is found there or its files are unreadable. ``platform`` (default
        ``sys.platform``) names the toolchain whose layout the files follow, which
        decides whether a C++ ABI applies (:func:`.toolchains.toolchain_for`).
        """
        toolchain = toolchain_for(sys.platform if platform is None else platform)
        given = Path(path).expanduser()
        candidates = _candidate_torch_dirs(given)
        root = next((c for c in candidates if _is_torch_dir(c)), None)
        if root is None:
            raise TorchInstallError(_not_found(given, candidates))
        root = root.resolve()
        values = _read_version_module(root / "version.py")
        version = values.get("__version__")
        if not version:
            raise TorchInstallError(
                f"{root / 'version.py'} defines no __version__; reinstall torch"
            )
        major, minor = torch_minor(version)
        lib_dir = root / "lib"
        abi = None
        if toolchain.dual_abi:
            abi = _abi_from_cmake(root)
            if abi is None:
                abi = _abi_from_libc10(lib_dir, toolchain)
        names = [p.name for p in lib_dir.iterdir()] if lib_dir.is_dir() else []
        backends = {Backend.CPU}
        for backend, stem in _BACKEND_MARKERS.items():
            if any(stem in name for name in names):
                backends.add(backend)
        return cls(
            root=root,
            version=version,
            major=major,
            minor=minor,
            cxx11_abi=abi,
            cuda_version=values.get("cuda"),
            hip_version=values.get("hip"),
            include_dirs=(
                root / "include",
                root / "include" / "torch" / "csrc" / "api" / "include",
            ),
            lib_dir=lib_dir,
            backends_available=frozenset(backends),
        )
