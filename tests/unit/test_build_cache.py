"""The driver's build cache: keyed by what decides the library, not where its inputs
are installed (issue 21 item 2), and published with the umask's mode (item 3)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import FakeTorch

from _torch_c_dlpack_ext_core import buildsteps, driver
from _torch_c_dlpack_ext_core.driver import BuildPlan, BuildRequest, plan_build
from _torch_c_dlpack_ext_core.files import atomic_write_bytes

ROOT = Path(__file__).resolve().parents[2]
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="gnu toolchain")


def _sources(at: Path) -> Path:
    at.mkdir(parents=True)
    (at / "a.cc").write_text("int a() { return 1; }\n", encoding="utf-8")
    (at / "common.h").write_text("#pragma once\n", encoding="utf-8")
    (at / "exports.map").write_text("{ global: a; local: *; };\n", encoding="utf-8")
    return at


def _plan(prefix: Path, sources: Path, dlpack: Path, out: Path, cxx: str) -> BuildPlan:
    for var in ("CUDA_HOME", "CUDA_PATH", "ROCM_PATH", "ROCM_HOME", "CXX"):
        os.environ.pop(var, None)
    return plan_build(
        BuildRequest(
            torch=prefix,
            backend="cpu",
            output_dir=out,
            dlpack_include=dlpack,
            source_dir=sources,
            cxx=cxx,
        )
    )


@pytest.fixture
def cxx() -> str:
    found = shutil.which("c++") or shutil.which("g++")
    assert found, "the test machine needs a C++ compiler (only its --version is run here)"
    return found


def test_cache_key_ignores_where_the_inputs_are_installed(
    fake_torch: FakeTorch, dlpack_include: Path, tmp_path: Path, cxx: str
) -> None:
    # Two venvs of one torch wheel: torch, the shipped csrc/ and tvm-ffi's DLPack headers
    # at other paths, libtorch_cpu with another mtime. One build serves both.
    a = _plan(fake_torch(name="venv-a"), _sources(tmp_path / "a" / "csrc"), dlpack_include,
              tmp_path / "out-a", cxx)  # fmt: skip
    dlpack_b = tmp_path / "b" / "tvm_ffi" / "include"
    shutil.copytree(dlpack_include, dlpack_b)
    prefix_b = fake_torch(name="venv-b")
    cpu_b = next(prefix_b.glob("lib/python3.11/site-packages/torch/lib/libtorch_cpu.so"))
    os.utime(cpu_b, (1_000_000_000, 1_000_000_000))
    b = _plan(prefix_b, _sources(tmp_path / "b" / "csrc"), dlpack_b, tmp_path / "out-b", cxx)
    assert a.torch.root != b.torch.root
    assert a.cache_key() == b.cache_key()

    # What does decide the library still does: another build of the same version
    # (version.py records its commit), another libtorch_cpu, an edited source.
    key = b.cache_key()
    version_py = b.torch.root / "version.py"
    version_py.write_text(version_py.read_text() + "git_version = 'abc'\n", encoding="utf-8")
    assert _plan(prefix_b, b.source_dir, dlpack_b, b.output_dir, cxx).cache_key() != key
    key = _plan(prefix_b, b.source_dir, dlpack_b, b.output_dir, cxx).cache_key()
    cpu_b.write_bytes(cpu_b.read_bytes() + b"more")
    assert _plan(prefix_b, b.source_dir, dlpack_b, b.output_dir, cxx).cache_key() != key
    key = _plan(prefix_b, b.source_dir, dlpack_b, b.output_dir, cxx).cache_key()
    (b.source_dir / "exports.map").write_text("{ global: a; b; local: *; };\n", encoding="utf-8")
    assert _plan(prefix_b, b.source_dir, dlpack_b, b.output_dir, cxx).cache_key() != key


def test_locations_become_placeholders_on_path_boundaries() -> None:
    sp = Path("/v/lib/python3.11/site-packages")
    places = {
        "<torch>": sp / "torch",
        "<sources>": sp / "torch_c_dlpack_ext" / "csrc",
        "<dlpack>": sp / "tvm_ffi" / "include",
    }
    command = [
        f"-I{sp / 'tvm_ffi' / 'include'}",
        f"-I{sp / 'torch' / 'include'}",
        f"-Wl,--version-script={sp / 'torch_c_dlpack_ext' / 'csrc' / 'exports.map'}",
        f"{sp / 'torch_c_dlpack_ext' / 'csrc' / 'a.cc'}",
        f"-L{sp / 'torch'}",
        f"{sp / 'torchvision'}",
    ]
    assert buildsteps.without_locations(command, places) == [
        "-I<dlpack>",
        "-I<torch>/include",
        "-Wl,--version-script=<sources>/exports.map",
        "<sources>/a.cc",
        "-L<torch>",
        f"{sp / 'torchvision'}",
    ]


@pytest.fixture(params=[0o022, 0o002, 0o077], ids=lambda m: f"umask{m:03o}")
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    mask: int = request.param
    old = os.umask(mask)
    try:
        yield mask
    finally:
        os.umask(old)


def test_atomic_writes_get_the_umask_mode(tmp_path: Path, umask: int) -> None:
    # build/cells/*/manifest.json and <lib>.build.json: meant to be read by others.
    target = tmp_path / "manifest.json"
    atomic_write_bytes(target, b"{}\n")
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask
    atomic_write_bytes(target, b"[]\n")  # replacing keeps the rule
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json"]


def _fake_gnu_compiler(at: Path) -> Path:
    """A stand-in g++ that, like a linker, replaces its output (here with mode 0600)."""
    at.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = --version ]; then echo "g++ (GCC) 12.2.0"; exit 0; fi\n'
        'while [ "$1" != -o ]; do shift; done\n'
        'rm -f "$2"; (umask 077; printf "library bytes" > "$2")\n',
        encoding="utf-8",
    )
    at.chmod(0o755)
    return at


@linux_only
def test_built_library_and_record_get_the_umask_mode(
    fake_torch: FakeTorch, dlpack_include: Path, tmp_path: Path, umask: int
) -> None:
    cc = _fake_gnu_compiler(tmp_path / "g++")
    out = tmp_path / "out"
    out.mkdir()
    plan = _plan(fake_torch(), _sources(tmp_path / "csrc"), dlpack_include, out, str(cc))
    driver._build(plan, plan.cache_key(), driver.BuildPolicy(audit=False, echo=False))
    assert plan.output.stat().st_mode & 0o777 == 0o777 & ~umask
    assert plan.sidecar.stat().st_mode & 0o777 == 0o666 & ~umask


REUSE = r"""
import json, sys
from pathlib import Path
from _torch_c_dlpack_ext_core.naming import Backend
from _torch_c_dlpack_ext_core.trust import TrustedOwners
from torch_c_dlpack_ext._jit import _reuse_read_only
from torch_c_dlpack_ext._torchinfo import TorchInfo
info = TorchInfo(version=sys.argv[2], backend=Backend.CPU, cxx11_abi=False, cuda_version=None,
                 hip_version=None, has_capsule=False, has_legacy_int=False)
found = _reuse_read_only(Path(sys.argv[1]), info, Backend.CPU, TrustedOwners())
print(json.dumps(None if found is None else str(found[0])))
"""


@linux_only
@pytest.mark.needs_root
@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="switching to another user needs root and setpriv",
)
def test_another_user_reuses_the_cache_read_only(
    fake_torch: FakeTorch, dlpack_include: Path, tmp_path: Path
) -> None:
    # A cache built by root under the usual umask, reused by nobody (who may not write
    # it): the build record must be readable, or the JIT would refuse the cache.
    old = os.umask(0o022)
    shared = Path(tempfile.mkdtemp(prefix="tcde-shared-cache-"))
    try:
        shared.chmod(0o755)
        cc = _fake_gnu_compiler(tmp_path / "g++")
        plan = _plan(fake_torch(), _sources(tmp_path / "csrc"), dlpack_include, shared, str(cc))
        driver._build(plan, plan.cache_key(), driver.BuildPolicy(audit=False, echo=False))
        proc = subprocess.run(
            ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
             sys.executable, "-c", REUSE, str(shared), plan.torch.version],
            env={"PYTHONPATH": str(ROOT / "python"), "PATH": os.environ.get("PATH", ""),
                 "HOME": "/nonexistent", "PYTHONDONTWRITEBYTECODE": "1",
                 "TORCH_C_DLPACK_EXT_DISABLE": "1"},
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert json.loads(proc.stdout.strip().splitlines()[-1]) == str(plan.output)
    finally:
        os.umask(old)
        shutil.rmtree(shared)
