"""``devtools.envs.freethreaded`` for real: a free-threaded CPython built from Debian's sources
(cached in the dev cache after the first run: a cold build takes about 10 minutes here, see
docs/facts.md), whose headers build an extension that imports without the GIL, and the error
a host that cannot reach the archive gets."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from devtools.base.errors import ProvisionError
from devtools.envs import debsource, freethreaded
from devtools.envs.freethreaded import free_threaded_python
from tests.helpers import ROOT, devtools_env

Progress = Callable[[str], None]

needs_apt = pytest.mark.skipif(
    shutil.which("apt-get") is None or not debsource.KEYRING.is_file(),
    reason="builds from Debian's source packages: needs apt-get and the archive keyring",
)

# Runs in the built interpreter; prints what a free-threaded build must show.
PROBE = """\
import sys, sysconfig, threading
print(sysconfig.get_config_var("Py_GIL_DISABLED"), sys._is_gil_enabled(), sys.abiflags)
print(sysconfig.get_paths()["include"])
import ssl, ctypes, zlib, bz2, lzma, sqlite3, decimal, venv
"""


PROBE_MODULE = """\
#include <Python.h>
static PyObject *gil_disabled(PyObject *self, PyObject *unused) {
#ifdef Py_GIL_DISABLED
    return PyLong_FromLong(Py_GIL_DISABLED);
#else
    return PyLong_FromLong(0);
#endif
}
static PyMethodDef methods[] = {{"gil_disabled", gil_disabled, METH_NOARGS, NULL}, {NULL}};
static PyModuleDef_Slot slots[] = {{Py_mod_gil, Py_MOD_GIL_NOT_USED}, {0, NULL}};
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "tcde_ft_probe", NULL, 0, methods, slots};
PyMODINIT_FUNC PyInit_tcde_ft_probe(void) { return PyModuleDef_Init(&def); }
"""


def compile_probe_module(include_dir: Path, python: Path, where: Path) -> Path:
    """A tiny extension compiled against ``include_dir``, named for ``python``'s ABI."""
    ask = "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))"
    suffix = subprocess.run(
        [str(python), "-I", "-c", ask], capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()
    assert "314t" in suffix, suffix
    source = where / "tcde_ft_probe.c"
    source.write_text(PROBE_MODULE, encoding="utf-8")
    output = where / f"tcde_ft_probe{suffix}"
    cc = shutil.which("cc") or "gcc"
    command = [cc, "-shared", "-fPIC", "-O1", f"-I{include_dir}", str(source), "-o", str(output)]
    subprocess.run(command, capture_output=True, text=True, check=True, timeout=120)
    return output


@needs_apt
@pytest.mark.slow
def test_provisions_a_free_threaded_314(progress: Progress, tmp_path: Path) -> None:
    freethreaded.set_progress(progress)
    try:
        found = free_threaded_python("3.14t")
    finally:
        freethreaded.set_progress(None)
    assert found.version == "3.14t"
    assert found.python_version.startswith("3.14.")
    assert found.executable.name == "python3.14t"
    assert found.source.startswith("python3.14 3.14.")
    proc = subprocess.run(
        [str(found.executable), "-I", "-c", PROBE],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    flags, include = proc.stdout.splitlines()
    assert flags == "1 False t"
    assert Path(include) == found.include_dir
    pyconfig = (found.include_dir / "pyconfig.h").read_text(encoding="utf-8")
    assert "#define Py_GIL_DISABLED 1" in pyconfig
    assert (found.include_dir / "Python.h").is_file()

    # The headers build a free-threaded extension, which imports without the GIL coming back.
    module = compile_probe_module(found.include_dir, found.executable, tmp_path)
    code = "import sys, tcde_ft_probe; print(tcde_ft_probe.gil_disabled(), sys._is_gil_enabled())"
    check = subprocess.run(
        [str(found.executable), "-E", "-s", "-W", "error", "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        cwd=module.parent,
    )
    assert check.stdout.split() == ["1", "False"]

    # The command line reuses the cached build and prints the interpreter.
    cli = subprocess.run(
        [sys.executable, "-m", "devtools", "freethreaded", "3.14t"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=devtools_env(),
        check=True,
        timeout=120,
    )
    assert cli.stdout == f"{found.executable}\n"


@needs_apt
def test_an_unreachable_archive_is_a_provision_error_with_apts_own_words(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TCDE_DEV_CACHE", str(tmp_path / "cache"))
    # Only the archive is unusable here; a host without the build dependencies would
    # fail the check before it, with its own message (unit-tested).
    monkeypatch.setattr(freethreaded, "_preflight", lambda install_build_deps: None)
    with pytest.raises(ProvisionError) as info:
        free_threaded_python("3.13t", mirror="http://127.0.0.1:9/debian")
    message = str(info.value)
    assert "apt-get update of a private deb-src list (sid, trixie at http://127.0.0.1:9/" in message
    assert "last lines of its output:" in message
    assert "127.0.0.1:9" in message.split("last lines of its output:")[1]
    # Nothing half-built is left: no staging folder, no prefix.
    assert sorted(p.name for p in (tmp_path / "cache" / "python").iterdir()) == ["3.13t.lock"]
