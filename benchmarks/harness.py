"""Build the C timing harness (``exchange_harness.c``) for a given Python interpreter.

The harness includes only ``Python.h`` and DLPack's header, so it is compiled with the
system C compiler in well under a second, once per target interpreter, at bench time.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from _torch_c_dlpack_ext_core.errors import CompilerNotFoundError, DLPackHeaderNotFoundError
from _torch_c_dlpack_ext_core.run import run

from .exchange_worker import HARNESS_FUNCTIONS

__all__ = ["HARNESS_SOURCE", "build_harness", "dlpack_include_dir", "python_include_dir"]

HARNESS_SOURCE = Path(__file__).with_name("exchange_harness.c")

#: The harness entry points, in the order the reports show them (defined once, in the
#: standalone worker that runs inside each torch environment).
FUNCTIONS = HARNESS_FUNCTIONS


def dlpack_include_dir() -> Path:
    """The directory holding ``dlpack/dlpack.h`` (>= 1.2) from apache-tvm-ffi."""
    try:
        from tvm_ffi import libinfo
    except ImportError:
        raise DLPackHeaderNotFoundError(
            "the benchmark harness needs DLPack >= 1.2 from apache-tvm-ffi; "
            "install it (`pip install apache-tvm-ffi`) or run `nox -s bench`"
        ) from None
    include = Path(libinfo.find_dlpack_include_path())
    if not (include / "dlpack" / "dlpack.h").is_file():
        raise DLPackHeaderNotFoundError(f"{include} has no dlpack/dlpack.h")
    return include


def python_include_dir(python: Path) -> Path:
    """The ``Python.h`` directory of the interpreter ``python`` (asked in a subprocess, since
    it may be another environment's interpreter)."""
    code = "import sysconfig, json; print(json.dumps(sysconfig.get_paths()['include']))"
    include = Path(json.loads(run([python, "-c", code], echo=False).stdout))
    if not (include / "Python.h").is_file():
        raise CompilerNotFoundError(
            f"{python} has no Python.h under {include}; install the Python development headers"
        )
    return include


def build_harness(python: Path, output_dir: Path, *, cc: str | None = None) -> Path:
    """Compile the harness for ``python`` into ``output_dir`` and return the library path.

    The file name carries a hash of the source, the include directories and the compiler,
    so a changed input yields a new file and an unchanged one is reused.
    """
    compiler = cc or os.environ.get("CC", "cc")
    if shutil.which(compiler) is None:
        raise CompilerNotFoundError(f"C compiler {compiler!r} not found; set CC to a C compiler")
    py_include = python_include_dir(python)
    dl_include = dlpack_include_dir()
    key = hashlib.sha256()
    for part in (HARNESS_SOURCE.read_bytes(), str(py_include).encode(), str(dl_include).encode()):
        key.update(part)
        key.update(b"\0")
    key.update(compiler.encode())
    library = output_dir / f"exchange_harness-{key.hexdigest()[:16]}.so"
    if library.is_file():
        return library
    output_dir.mkdir(parents=True, exist_ok=True)
    # Compile to a temporary name and rename, so an interrupted build leaves no library
    # that a later run would take for complete.
    fd, tmp = tempfile.mkstemp(prefix=".exchange_harness.", suffix=".so", dir=output_dir)
    os.close(fd)
    try:
        run(
            [
                compiler,
                "-O2",
                "-std=c11",
                "-Wall",
                "-Wextra",
                "-Werror",
                "-fPIC",
                "-shared",
                "-fvisibility=hidden",
                f"-I{py_include}",
                f"-I{dl_include}",
                HARNESS_SOURCE,
                "-o",
                tmp,
            ]
        )
        os.replace(tmp, library)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return library
