"""The ABI audit on real libraries: it passes on every library the tests build, and it
catches a library paired with the wrong torch (the torch-c-dlpack-ext 0.1.5 failure:
``undefined symbol: _ZNK3c106Device3strB5cxx11Ev`` on PyPI's torch 2.6.0)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from devtools.envs.torchenv import TorchEnv

from _torch_c_dlpack_ext_core.driver import BuildPolicy, BuildRequest, compile_library
from _torch_c_dlpack_ext_core.errors import ABIAuditError
from _torch_c_dlpack_ext_core.manifest import ManifestEntry
from _torch_c_dlpack_ext_core.toolchains import AuditOutcome, toolchain_for
from _torch_c_dlpack_ext_core.toolchains.elf import (
    dynamic_symbols,
    undefined_symbols_not_provided,
)
from _torch_c_dlpack_ext_core.torchinstall import TorchInstall

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ELF audit: Linux only"),
]

GNU = toolchain_for("linux")


def _cxx() -> str:
    """The compiler whose C/C++ runtime the audit counts as provided (the driver's choice)."""
    return GNU.find_compiler(None, os.environ).path


def _built(
    old_torch_env: Callable[[str], TorchEnv], build_cache: Path, version: str
) -> tuple[TorchInstall, Path]:
    """(install, library) of the CPU library for ``version``; a cache hit after the first build."""
    install = TorchInstall.from_path(old_torch_env(version).torch_dir)
    out = build_cache / f"torch{version}"
    entry = compile_library(BuildRequest(torch=install, backend="cpu", output_dir=out))
    return install, out / entry.file


@pytest.mark.parametrize("version", ["2.6.0", "2.8.0"])
def test_audit_passes_on_old_torch_libraries(
    old_torch_env: Callable[[str], TorchEnv], build_cache: Path, version: str
) -> None:
    install, library = _built(old_torch_env, build_cache, version)
    assert undefined_symbols_not_provided(library, install, "cpu", cxx=_cxx()) == ()
    assert GNU.audit(library, install, "cpu") is AuditOutcome.PASSED


def test_audit_passes_on_the_torch213_library(torch213_library: tuple[Path, ManifestEntry]) -> None:
    import torch

    library, _ = torch213_library
    install = TorchInstall.from_path(Path(torch.__file__).parent)
    assert GNU.audit(library, install, "cpu") is AuditOutcome.PASSED
    # The library really needs the Python C API (provided by the interpreter, not linked).
    assert any(name.startswith("Py") for name in dynamic_symbols(library, defined=False))


def test_cxx11_library_against_pre_cxx11_torch_fails_naming_symbols(
    old_torch_env: Callable[[str], TorchEnv], build_cache: Path
) -> None:
    _, library28 = _built(old_torch_env, build_cache, "2.8.0")
    install26 = TorchInstall.from_path(old_torch_env("2.6.0").torch_dir)
    missing = undefined_symbols_not_provided(library28, install26, "cpu", cxx=_cxx())
    assert missing, "a cxx11 library must not pass against a pre-cxx11 torch"
    assert any("B5cxx11" in name for name in missing)
    with pytest.raises(ABIAuditError) as info:
        GNU.audit(library28, install26, "cpu")
    message = str(info.value)
    assert info.value.missing == missing
    assert f"built with _GLIBCXX_USE_CXX11_ABI=1 but torch {install26.version} uses 0" in message
    assert "[abi:cxx11]" in message, "symbols are shown demangled"
    assert f"needs {len(missing)} symbol(s)" in message


def test_pre_cxx11_library_against_cxx11_torch_fails(
    old_torch_env: Callable[[str], TorchEnv], build_cache: Path
) -> None:
    _, library26 = _built(old_torch_env, build_cache, "2.6.0")
    install28 = TorchInstall.from_path(old_torch_env("2.8.0").torch_dir)
    with pytest.raises(ABIAuditError, match=r"missing|symbol") as info:
        GNU.audit(library26, install28, "cpu")
    assert info.value.missing


def test_a_made_up_python_symbol_is_not_waved_through(tmp_path: Path) -> None:
    """Py* symbols count as provided only if this interpreter really exports them; a library
    failing the audit inside the driver is never published."""
    torch = pytest.importorskip("torch")
    src = tmp_path / "csrc"
    src.mkdir()
    (src / "bad.cc").write_text(
        'extern "C" int PyTCDE_NoSuchFunction(void);\n'
        'extern "C" __attribute__((visibility("default"))) int f(void) '
        "{ return PyTCDE_NoSuchFunction(); }\n",
        encoding="utf-8",
    )
    out = tmp_path / "out"
    with pytest.raises(ABIAuditError) as info:
        compile_library(
            BuildRequest(
                torch=Path(torch.__file__).parent, backend="cpu", output_dir=out, source_dir=src
            )
        )
    assert info.value.missing == ("PyTCDE_NoSuchFunction",)
    assert [p.name for p in out.iterdir() if not p.name.endswith(".lock")] == []


def test_not_applicable_off_linux(torch213_library: tuple[Path, ManifestEntry]) -> None:
    import torch

    library, _ = torch213_library
    install = TorchInstall.from_path(Path(torch.__file__).parent)
    for platform in ("darwin", "win32"):
        outcome = toolchain_for(platform).audit(library, install, "cpu")
        assert outcome is AuditOutcome.NOT_APPLICABLE


# --- the stable ABI audit (abi3audit) ------------------------------------------------

_STABLE_C = """
#include <Python.h>
__attribute__((visibility("default"))) int tcde_probe(PyObject *o) {
  PyErr_SetString(PyExc_ValueError, "x");
  return PyType_IsSubtype(Py_TYPE(o), &PyBaseObject_Type);
}
"""
#: ``PyUnicode_AsUTF8AndSize`` entered the stable ABI in 3.10; ``_PyObject_GetDictPtr``
#: was never in it: a library built for abi3 3.9 must use neither.
_UNSTABLE_C = """
#include <Python.h>
__attribute__((visibility("default"))) const char *tcde_probe(PyObject *o) {
  Py_ssize_t n;
  (void)_PyObject_GetDictPtr(o);
  return PyUnicode_AsUTF8AndSize(o, &n);
}
"""


def _c_library(tmp_path: Path, source: str, *, limited: bool) -> Path:
    import subprocess
    import sysconfig

    src = tmp_path / "probe.c"
    src.write_text(source, encoding="utf-8")
    out = tmp_path / "libprobe.so"
    define = ["-DPy_LIMITED_API=0x03090000"] if limited else []
    cc = os.environ.get("CC") or "cc"
    subprocess.run(
        [cc, "-shared", "-fPIC", *define, f"-I{sysconfig.get_paths()['include']}", str(src),
         "-o", str(out)],
        check=True, capture_output=True,
    )  # fmt: skip
    return out


def test_stable_abi_audit_passes_on_a_limited_api_library(tmp_path: Path) -> None:
    from _torch_c_dlpack_ext_core.stableabi import audit_stable_abi

    library = _c_library(tmp_path, _STABLE_C, limited=True)
    assert audit_stable_abi(library, name="libprobe.so", required=True) is True


def test_stable_abi_audit_names_symbols_outside_abi3_39(tmp_path: Path) -> None:
    from _torch_c_dlpack_ext_core.stableabi import audit_stable_abi

    library = _c_library(tmp_path, _UNSTABLE_C, limited=False)
    with pytest.raises(ABIAuditError) as info:
        audit_stable_abi(library, name="libprobe.so", required=True)
    message = str(info.value)
    assert "stable ABI of CPython 3.9 (abi3)" in message
    assert "_PyObject_GetDictPtr" in message
    assert "PyUnicode_AsUTF8AndSize" in message  # in the stable ABI only from 3.10


def test_stable_abi_audit_required_without_abi3audit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from _torch_c_dlpack_ext_core import stableabi
    from _torch_c_dlpack_ext_core.errors import BuildError

    monkeypatch.setattr(stableabi, "abi3audit_available", lambda: False)
    library = _c_library(tmp_path, _STABLE_C, limited=True)
    with pytest.raises(BuildError, match=r"needs abi3audit, which is not installed"):
        stableabi.audit_stable_abi(library, required=True)
    # Not required (a user's source build or JIT): skipped, and said so.
    assert stableabi.audit_stable_abi(library) is False


def test_real_library_is_abi3(old_torch_env: Callable[[str], TorchEnv], build_cache: Path) -> None:
    """The library of a real torch, compiled by the driver (with Py_LIMITED_API), passes
    the stable ABI audit and says so in its manifest entry and build info."""
    from _torch_c_dlpack_ext_core.stableabi import audit_stable_abi

    install = TorchInstall.from_path(old_torch_env("2.8.0").torch_dir)
    out = build_cache / "torch2.8.0"
    entry = compile_library(
        BuildRequest(torch=install, backend="cpu", output_dir=out),
        BuildPolicy(stable_abi_audit=True),
    )
    assert entry.python == "abi3"
    library = out / entry.file
    assert audit_stable_abi(library, required=True) is True
    assert b'"python": "abi3"' in library.read_bytes()
