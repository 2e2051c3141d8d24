"""The small facts about this checkout and host that several developer tools need, kept
once: a virtual environment's interpreter, a CPython of a given version on this host
(:func:`find_cpython`), the developer cache root and the project's ``requires-python``
(read next to :data:`~devtools.base.paths.ROOT`).
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from collections.abc import Mapping
from pathlib import Path

from _torch_c_dlpack_ext_core.errors import ConfigError
from _torch_c_dlpack_ext_core.naming import DEV_ENV_PREFIX
from _torch_c_dlpack_ext_core.run import run
from devtools.base.paths import ROOT

__all__ = [
    "DEV_CACHE_VAR",
    "dev_cache_root",
    "find_cpython",
    "requires_python",
    "venv_python",
]

#: Where the developer tools cache torch environments and Pythons (own prefix).
DEV_CACHE_VAR = DEV_ENV_PREFIX + "DEV_CACHE"


def venv_python(root: Path, *, platform: str | None = None) -> Path:
    """The interpreter of the virtual environment at ``root`` (``platform``: default this
    process's ``sys.platform``, read at the call)."""
    if (sys.platform if platform is None else platform) == "win32":
        return root / "Scripts" / "python.exe"
    return root / "bin" / "python"


def find_cpython(version: str) -> Path | None:
    """A CPython ``version`` (``"3.12"``, with the GIL) of this host: this interpreter, one
    uv finds without downloading, or one pyenv installed (its shims hide the others from
    uv); None when there is none."""
    running = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if running == version and not sysconfig.get_config_var("Py_GIL_DISABLED"):
        return Path(sys.executable)
    uv = shutil.which("uv")
    if uv is not None:
        found = run([uv, "python", "find", "--no-python-downloads", version], echo=False,
                    timeout=60, check=False)  # fmt: skip
        if found.returncode == 0 and found.stdout.strip():
            return Path(found.stdout.strip())
    pyenv = shutil.which("pyenv")
    if pyenv is not None:
        root = run([pyenv, "root"], echo=False, timeout=60, check=False)
        installed = sorted(
            Path(root.stdout.strip()).glob(f"versions/{version}.*/bin/python{version}")
        )
        if root.returncode == 0 and installed:
            return installed[-1]
    return None


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
    from build_backend._metadata import load_pyproject, toml_table
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    value = toml_table(load_pyproject(pyproject.parent), "project").get("requires-python")
    if value is None:
        return None
    try:
        SpecifierSet(str(value))
    except InvalidSpecifier:
        raise ConfigError(f"{pyproject}: requires-python {value!r} is not a specifier") from None
    return str(value)
