"""``$CXX`` as users set it, through the real driver and a real compiler (issue 21).

A wrapper (``ccache g++``), flags (``g++ -DX=9``), a program that is no compiler
(``/bin/true``) and one that exits 0 without writing anything. Each compiles a tiny
source against the running torch (no torch header is included: about a second),
with the ELF audit, which asks the same compiler command where libstdc++ is.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest

from _torch_c_dlpack_ext_core.driver import BuildRequest, compile_library
from _torch_c_dlpack_ext_core.errors import BuildError
from _torch_c_dlpack_ext_core.files import verify_file

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="g++ and the ELF audit"),
]

GXX = shutil.which("g++")


@pytest.fixture(scope="module")
def running_torch() -> Path:
    torch = pytest.importorskip("torch")
    return Path(torch.__file__).parent


def _sources(tmp_path: Path, body: str) -> Path:
    src = tmp_path / "csrc"
    src.mkdir()
    (src / "tiny.cc").write_text(
        f'extern "C" __attribute__((visibility("default"))) int tiny(void) {{ {body} }}\n',
        encoding="utf-8",
    )
    return src


def _script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body, encoding="utf-8")
    path.chmod(0o755)
    return path


def _build(running_torch: Path, tmp_path: Path, body: str = "return 7;") -> Path:
    """Compile with the compiler ``$CXX`` names (the driver's default lookup)."""
    out = tmp_path / "out"
    entry = compile_library(
        BuildRequest(
            torch=running_torch, backend="cpu", output_dir=out, source_dir=_sources(tmp_path, body)
        )
    )
    verify_file(entry, out)
    assert entry.toolchain.startswith("g++ ")
    return out / entry.file


@pytest.mark.skipif(GXX is None, reason="needs g++")
def test_a_wrapper_in_cxx_compiles_and_audits(
    running_torch: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "wrapper.log"
    # What ccache does, observable: log the command, then run it.
    wrapper = _script(tmp_path / "bin" / "fake-ccache", f'echo "$*" >> "{log}"\nexec "$@"\n')
    monkeypatch.setenv("CXX", f"{wrapper} g++")
    # puts: a symbol the audit must find in the C runtime, which the compiler locates.
    _build(running_torch, tmp_path, body='return __builtin_puts("tiny");')
    calls = log.read_text(encoding="utf-8").splitlines()
    assert calls[0] == "g++ --version"
    assert any(c.startswith("g++ -O2 -fPIC -shared") for c in calls)
    # The audit asked the same command where the C/C++ runtime is, and passed.
    assert "g++ -print-file-name=libc.so.6" in calls


@pytest.mark.skipif(GXX is None, reason="needs g++")
def test_flags_in_cxx_reach_the_compiler(
    running_torch: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CXX", "g++ -DTINY_VALUE=9")
    # Compiles only if -DTINY_VALUE=9 is passed as an argument of its own.
    assert _build(running_torch, tmp_path, body="return TINY_VALUE;").is_file()


def test_cxx_true_is_refused_with_what_went_wrong(
    running_torch: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    true = shutil.which("true") or "/bin/true"
    monkeypatch.setenv("CXX", true)
    with pytest.raises(BuildError) as info:
        _build(running_torch, tmp_path)
    # GNU true answers --version (so the lookup accepts it) and then compiles nothing;
    # busybox's prints nothing at all. Either way the message says what is wrong.
    assert re.search(
        rf"{re.escape(true)}( --version' printed nothing| exited 0 but wrote no library); "
        r"is (it|CXX) a C\+\+ compiler\?",
        str(info.value),
    ), info.value
    out = tmp_path / "out"
    assert not out.exists() or [p.name for p in out.iterdir() if p.suffix != ".lock"] == []


def test_a_compiler_that_writes_nothing_is_named(
    running_torch: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lazy = _script(
        tmp_path / "bin" / "lazy-g++",
        'if [ "$1" = --version ]; then echo "g++ (GCC) 12.2.0"; fi\nexit 0\n',
    )
    monkeypatch.setenv("CXX", str(lazy))
    with pytest.raises(BuildError) as info:
        _build(running_torch, tmp_path)
    assert f"{lazy} exited 0 but wrote no library; is CXX a C++ compiler?" in str(info.value)
    out = tmp_path / "out"
    assert [p.name for p in out.iterdir() if p.suffix != ".lock"] == []


@pytest.mark.skipif(GXX is None, reason="needs g++")
def test_a_failed_compile_shows_the_compilers_last_lines(
    running_torch: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CXX", "g++")
    body = " ".join(f"undefined_{i}();" for i in range(40)) + " return 0;"
    with pytest.raises(BuildError) as info:
        _build(running_torch, tmp_path, body=body)
    error = info.value
    assert error.summary.endswith("failed: g++ exited with status 1")
    assert "undefined_39" in error.details  # the last error is in the tail
    assert len(error.details.splitlines()) <= 21
    assert "undefined_0" in error.output  # the whole output is kept
