"""The small facts about this host and checkout that several developer tools need, kept
once: the OS a ``sys.platform`` names, a virtual environment's interpreter, the
developer cache root, the project's ``requires-python`` and where uv is.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

from _torch_c_dlpack_ext_core.errors import ConfigError
from _torch_c_dlpack_ext_core.naming import DEV_ENV_PREFIX
from devtools import ROOT
from devtools.errors import ProvisionError

__all__ = [
    "DEV_CACHE_VAR",
    "OS_OF_PLATFORM",
    "dev_cache_root",
    "find_uv",
    "host_os",
    "requires_python",
    "venv_python",
]

#: ``sys.platform`` -> the OS name matrix.toml's platforms use.
OS_OF_PLATFORM: Mapping[str, str] = {"linux": "linux", "win32": "windows", "darwin": "macos"}

#: Where the developer tools cache torch environments and Pythons (own prefix).
DEV_CACHE_VAR = DEV_ENV_PREFIX + "DEV_CACHE"


def host_os(platform: str | None = None) -> str | None:
    """matrix.toml's OS name for ``platform`` (``sys.platform`` spelling; default: this
    process's, read at the call), or ``None``."""
    return OS_OF_PLATFORM.get(sys.platform if platform is None else platform)


def venv_python(root: Path, *, platform: str | None = None) -> Path:
    """The interpreter of the virtual environment at ``root`` (``platform``: default this
    process's ``sys.platform``, read at the call)."""
    if (sys.platform if platform is None else platform) == "win32":
        return root / "Scripts" / "python.exe"
    return root / "bin" / "python"


def dev_cache_root(environ: Mapping[str, str] = os.environ) -> Path:
    """``$TCDE_DEV_CACHE``, or ``~/.cache/torch-c-dlpack-ext-dev``."""
    override = environ.get(DEV_CACHE_VAR)
    if override:
        return Path(override).expanduser()
    return Path.home() / ".cache" / "torch-c-dlpack-ext-dev"


def requires_python(pyproject: Path = ROOT / "pyproject.toml") -> str | None:
    """``[project] requires-python`` of ``pyproject`` (``None``: no such file or field);
    a value that is not a version specifier is a :class:`ConfigError`."""
    if not pyproject.is_file():
        return None
    from build_backend._metadata import load_pyproject
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    value = load_pyproject(pyproject.parent).get("project", {}).get("requires-python")
    if value is None:
        return None
    try:
        SpecifierSet(str(value))
    except InvalidSpecifier:
        raise ConfigError(f"{pyproject}: requires-python {value!r} is not a specifier") from None
    return str(value)


def find_uv() -> str:
    """``uv`` on PATH, else the one the ``uv`` Python package ships."""
    found = shutil.which("uv")
    if found:
        return found
    try:
        from uv import find_uv_bin
    except ImportError:
        raise ProvisionError(
            "uv is not on PATH and the 'uv' package is not installed; 'pip install uv'"
        ) from None
    return str(find_uv_bin())
