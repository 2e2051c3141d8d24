"""Real compiles against real torch releases, then the exchange suite inside each torch.

- torch 2.13 (the running one): compile csrc/, run tests/exchange_suite against it;
- PyPI torch 2.4.1, 2.6.0 (pre-cxx11 ABI), 2.8.0 and 2.9.1 (cxx11 ABI), really imported in
  provisioned envs: compile against each, run the suite with that env's Python;
- compile-only: the CUDA variant against PyPI torch 2.8.0 with the CUDA headers of
  the nvidia-cuda-runtime-cu12 wheel the env already has;
- the driver's own guarantees with a real compiler: build cache, one build under
  concurrency, nothing left behind by a failed compile.

Compile time and the peak RSS of compiler children are printed (``-s`` shows them).
"""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from devtools.envs.torchenv import TorchEnv
from tests.helpers import SUITE_CUDA_HEADERS

from _torch_c_dlpack_ext_core.driver import BuildRequest, compile_library, plan_build
from _torch_c_dlpack_ext_core.errors import ABIAuditError, BuildError
from _torch_c_dlpack_ext_core.files import verify_file
from _torch_c_dlpack_ext_core.manifest import ManifestEntry
from _torch_c_dlpack_ext_core.naming import Backend
from _torch_c_dlpack_ext_core.toolchains import AuditOutcome, toolchain_for
from _torch_c_dlpack_ext_core.toolchains.elf import dynamic_symbols, run_time_symbols
from _torch_c_dlpack_ext_core.torchinstall import TorchInstall

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SUITE_ENV = "TCDE_TEST_LIBRARY"
EXPORTS = {"TorchDLPackExchangeAPIPtr", "TorchCDLPackExtBuildInfo", "TorchCDLPackExtLoadProblem"}
# The oldest and newest supported minors, and one of each C++ ABI in between: 2.4/2.6
# are pre-cxx11 on PyPI, 2.8/2.9 cxx11; 2.9's own headers carry DLPack 1.0.
OLD_TORCH = [("2.4.1", False), ("2.6.0", False), ("2.8.0", True), ("2.9.1", True)]
#: The suite has ~250 tests on old torch; far fewer passing means it mostly skipped.
MIN_SUITE_PASSED = 200


def timed_compile(**kwargs: Any) -> ManifestEntry:
    """compile_library of a :class:`BuildRequest` of ``kwargs``, printing wall time and the
    peak RSS of child processes so far."""
    started = time.monotonic()
    entry = compile_library(BuildRequest(**kwargs))
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(
        f"\nBUILD {entry.file}: {time.monotonic() - started:.1f} s, {entry.size} bytes, "
        f"peak child RSS so far {peak_mb:.0f} MB"
    )
    return entry


def run_exchange_suite(python: Path | str, library: Path) -> int:
    """Run tests/exchange_suite with ``python`` against ``library``; return how many passed.

    ``--confcutdir`` keeps tests/conftest.py (which needs this project's dependencies)
    out of old-torch envs; the suite itself only needs torch and pytest.
    """
    env = {**os.environ, SUITE_ENV: str(library)}
    env.pop("PYTHONPATH", None)
    proc = subprocess.run(
        [
            str(python),
            "-m",
            "pytest",
            "tests/exchange_suite",
            "-q",
            "-p",
            "no:cacheprovider",
            "--confcutdir",
            "tests/exchange_suite",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"exchange suite failed with {python}:\n{output[-8000:]}"
    summary = output.strip().splitlines()[-1]
    passed = re.search(r"(\d+) passed", summary)
    assert passed is not None, f"no tests ran: {summary}"
    assert "failed" not in summary, summary
    assert "error" not in summary, summary
    print(f"\nSUITE {library.name} under {python}: {summary}")
    return int(passed.group(1))


def check_exports(library: Path) -> None:
    """The two C entry points are the library's whole dynamic interface (csrc/exports.map:
    no weak template instance or typeinfo from torch's headers), and it is stripped."""
    assert dynamic_symbols(library, defined=True) == EXPORTS
    sections = subprocess.run(
        ["readelf", "-S", "-W", str(library)], capture_output=True, text=True, check=True
    ).stdout
    assert ".text" in sections
    assert ".symtab" not in sections, "the driver links with --strip-all"


def needed_torch_libraries(library: Path) -> set[str]:
    """The torch libraries among ``library``'s NEEDED entries (``readelf -d``)."""
    dynamic = subprocess.run(
        ["readelf", "-d", "-W", str(library)], capture_output=True, text=True, check=True
    ).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^]]+)\]", dynamic)
    return {name for name in needed if name.startswith(("libc10", "libtorch"))}


def check_links(library: Path, backend: Backend) -> None:
    """On Linux the library needs only libc10, libtorch_cpu and the backend's c10 library:
    libtorch_python's symbols are looked up at run time (csrc/tcde_python.h), so loading
    it does not walk libtorch_python's dependency closure (docs/facts.md)."""
    gpu = {Backend.CPU: set(), Backend.CUDA: {"libc10_cuda.so"}, Backend.ROCM: {"libc10_hip.so"}}
    assert needed_torch_libraries(library) == {"libc10.so", "libtorch_cpu.so", *gpu[backend]}


def test_torch213_compile_and_exchange_suite(
    torch213_library: tuple[Path, ManifestEntry],
) -> None:
    import torch

    library, entry = torch213_library
    assert verify_file(entry, library.parent) == library
    assert entry.torch_build == torch.__version__
    assert entry.torch == "2.13"
    assert entry.backend is Backend.CPU
    assert entry.dlpack in ("1.2", "1.3")
    check_exports(library)
    check_links(library, Backend.CPU)
    assert run_exchange_suite(sys.executable, library) >= MIN_SUITE_PASSED


# Loads the library before torch (its torch libraries found through LD_LIBRARY_PATH),
# then imports torch: the table export says why it cannot serve yet, then serves.
BEFORE_TORCH = r"""
import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1])
lib.TorchDLPackExchangeAPIPtr.restype = ctypes.c_int64
lib.TorchCDLPackExtLoadProblem.restype = ctypes.c_char_p
before = (lib.TorchDLPackExchangeAPIPtr(), lib.TorchCDLPackExtLoadProblem().decode())
import torch
after = (lib.TorchDLPackExchangeAPIPtr(), lib.TorchCDLPackExtLoadProblem())
print(json.dumps({"before": before, "after": [after[0], after[1]]}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the run-time lookup is Linux's")
def test_a_library_loaded_before_torch_says_why_and_serves_once_torch_is_imported(
    torch213_library: tuple[Path, ManifestEntry],
) -> None:
    import torch

    library, _ = torch213_library
    env = dict(os.environ, LD_LIBRARY_PATH=str(Path(torch.__file__).parent / "lib"))
    proc = subprocess.run(
        [sys.executable, "-c", BEFORE_TORCH, str(library)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["before"][0] == 0, result
    assert "torch._C is not loaded" in result["before"][1], result
    assert result["after"][0] != 0, result
    assert result["after"][1] is None, result
    assert "torch-c-dlpack-ext" not in proc.stderr, (
        proc.stderr
    )  # the reason is returned, not printed


@pytest.mark.parametrize(("version", "cxx11_abi"), OLD_TORCH)
def test_old_torch_compile_import_and_exchange_suite(
    old_torch_env: Callable[[str], TorchEnv], build_cache: Path, version: str, cxx11_abi: bool
) -> None:
    env = old_torch_env(version)
    install = TorchInstall.from_path(env.root)
    # 2.6 states its ABI in CMake; 2.8 does not, so this also covers the libc10 symbol check.
    assert install.cxx11_abi is cxx11_abi
    assert install.version.startswith(version)
    entry = timed_compile(torch=install, backend="cpu", output_dir=build_cache / f"torch{version}")
    assert entry.cxx11_abi is cxx11_abi
    assert entry.torch_build == install.version
    assert entry.file.endswith(f"-cxx11abi{int(cxx11_abi)}.so")
    library = build_cache / f"torch{version}" / entry.file
    check_exports(library)
    check_links(library, Backend.CPU)
    # 2.4 and 2.5 take the tensor by value, 2.6 and later by const reference.
    wrap = "N2at10TensorBaseE" if version.startswith("2.4") else "RKN2at10TensorBaseE"
    assert run_time_symbols(library) == {
        "THPVariableClass",
        "ParameterClass",
        f"_Z16THPVariable_Wrap{wrap}",
    }
    assert run_exchange_suite(env.python, library) >= MIN_SUITE_PASSED


def test_cuda_variant_compiles_against_pypi_torch_2_8(
    old_torch_env: Callable[[str], TorchEnv], build_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Compile-only CUDA build with CUDA headers from NVIDIA's wheels (no toolkit, no GPU).

    nvidia-cuda-runtime-cu12 alone is not enough: its cuda_runtime_api.h includes
    crt/host_defines.h, which only nvidia-cuda-nvcc-cu12 ships.
    """
    env = old_torch_env("2.8.0")
    install = TorchInstall.from_path(env.torch_dir)
    # The suite's 2.8.0 env holds the header wheels of torch's own CUDA
    # (nvidia-cuda-runtime-cu12 and nvidia-cuda-nvcc-cu12 12.8.*).
    assert install.cuda_version == SUITE_CUDA_HEADERS["2.8.0"] == "12.8"
    assert Backend.CUDA in install.backends_available
    # Found without help in the target env (no CUDA_HOME, no nvcc on PATH) ...
    for var in ("CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv(
        "PATH",
        os.pathsep.join(
            p for p in os.environ["PATH"].split(os.pathsep) if not (Path(p) / "nvcc").exists()
        ),
    )
    plan = plan_build(
        BuildRequest(torch=install, backend="cuda", output_dir=build_cache / "torch2.8.0-cuda")
    )
    nvidia = env.site_packages.resolve() / "nvidia"
    assert plan.gpu_includes == (
        nvidia / "cuda_runtime" / "include",
        nvidia / "cuda_nvcc" / "include",
    )
    # ... and through gpu_home pointing at the runtime wheel.
    entry = timed_compile(
        torch=install,
        backend="cuda",
        output_dir=build_cache / "torch2.8.0-cuda",
        gpu_home=env.site_packages / "nvidia" / "cuda_runtime",
    )
    assert entry.backend is Backend.CUDA
    assert entry.gpu_toolkit == "12.8"
    assert entry.file == "libtorch_c_dlpack_ext-torch2.8-cuda-cxx11abi1.so"
    library = build_cache / "torch2.8.0-cuda" / entry.file
    check_exports(library)
    needed = subprocess.run(
        ["readelf", "-d", str(library)], capture_output=True, text=True, check=True
    ).stdout
    assert "libpython" not in needed, "libpython must come from the interpreter, never linked"
    check_links(library, Backend.CUDA)
    assert toolchain_for("linux").audit(library, install, "cuda") is AuditOutcome.PASSED


def test_audit_refuses_a_run_time_name_torch_python_lacks(
    torch213_library: tuple[Path, ManifestEntry], tmp_path: Path
) -> None:
    """The names csrc/ looks up at run time are checked at build time: a mangling that
    torch's libtorch_python.so does not export (here one letter changed) fails the audit
    instead of a load that hands out no table."""
    import torch

    library, _entry = torch213_library
    right = b"_Z16THPVariable_WrapRKN2at10TensorBaseE"
    wrong = b"_Z16THPVariable_WrapRKN2at10TensorBaseX"
    data = library.read_bytes()
    assert data.count(b"\0" + right + b"\0") == 1
    patched = tmp_path / library.name
    patched.write_bytes(data.replace(right, wrong))
    install = TorchInstall.from_path(Path(torch.__file__).parent)
    assert toolchain_for("linux").audit(library, install, "cpu") is AuditOutcome.PASSED
    with pytest.raises(ABIAuditError, match="THPVariable_Wrap") as caught:
        toolchain_for("linux").audit(patched, install, "cpu")
    assert caught.value.missing == (wrong.decode(),)


def test_build_info_is_recorded_in_the_sidecar(
    torch213_library: tuple[Path, ManifestEntry],
) -> None:
    library, entry = torch213_library
    record = json.loads((library.parent / f"{entry.file}.build.json").read_text())
    assert ManifestEntry.from_json(record["entry"]) == entry
    assert len(record["key"]) == 64
    command = record["command"]
    assert Path(command[command.index("-o") + 1]) == library.resolve()
    assert f'-DTCDE_TORCH_BUILD="{entry.torch_build}"' in command


# --- the driver's guarantees with a real compiler, on tiny sources (fast) -------------------


def _tiny_sources(tmp_path: Path, body: str = "return 7;") -> Path:
    src = tmp_path / "csrc"
    src.mkdir(exist_ok=True)
    (src / "tiny.cc").write_text(
        f'extern "C" __attribute__((visibility("default"))) int tiny(void) {{ {body} }}\n',
        encoding="utf-8",
    )
    return src


@pytest.fixture(scope="module")
def running_torch() -> Path:
    torch = pytest.importorskip("torch")
    return Path(torch.__file__).parent


def test_unchanged_target_is_a_cache_hit_and_a_change_rebuilds(
    tmp_path: Path, running_torch: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    src = _tiny_sources(tmp_path)
    out = tmp_path / "out"
    first = compile_library(
        BuildRequest(torch=running_torch, backend="cpu", output_dir=out, source_dir=src)
    )
    library = out / first.file
    stamp = library.stat().st_mtime_ns
    assert "compiled" in capfd.readouterr().err
    second = compile_library(
        BuildRequest(torch=running_torch, backend="cpu", output_dir=out, source_dir=src)
    )
    assert second == first
    assert library.stat().st_mtime_ns == stamp
    assert "cache hit" in capfd.readouterr().err
    # A damaged library (same sidecar) is rebuilt, never handed out.
    library.write_bytes(library.read_bytes()[:100])
    third = compile_library(
        BuildRequest(torch=running_torch, backend="cpu", output_dir=out, source_dir=src)
    )
    assert third == first
    assert verify_file(third, out) == library
    # A source change rebuilds.
    _tiny_sources(tmp_path, "return 8;")
    fourth = compile_library(
        BuildRequest(torch=running_torch, backend="cpu", output_dir=out, source_dir=src)
    )
    assert fourth.sha256 != first.sha256
    assert "compiled" in capfd.readouterr().err


def test_concurrent_builds_of_one_target_compile_once(tmp_path: Path, running_torch: Path) -> None:
    src = _tiny_sources(tmp_path)
    out = tmp_path / "out"
    cmd = [
        sys.executable, "-m", "_torch_c_dlpack_ext_core.driver", "--torch", str(running_torch),
        "--backend", "cpu", "--output-dir", str(out), "--source-dir", str(src),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT / "python")}
    procs = [
        subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    results = [proc.communicate(timeout=300) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0, 0], results
    errs = "".join(err for _, err in results)
    assert errs.count("compiled libtorch_c_dlpack_ext") == 1, errs
    assert errs.count("cache hit") == 2, errs
    entries = [json.loads(stdout) for stdout, _ in results]
    assert entries[0] == entries[1] == entries[2]
    assert sorted(p.name for p in out.iterdir() if not p.name.endswith(".lock")) == [
        entries[0]["file"],
        entries[0]["file"] + ".build.json",
    ]


def test_failed_compile_raises_with_command_and_output_and_leaves_nothing(
    tmp_path: Path, running_torch: Path
) -> None:
    src = _tiny_sources(tmp_path, "return undefined_name_tcde;")
    out = tmp_path / "out"
    with pytest.raises(BuildError) as info:
        compile_library(
            BuildRequest(torch=running_torch, backend="cpu", output_dir=out, source_dir=src)
        )
    assert info.value.command[0].endswith(("c++", "g++", "clang++"))
    assert str(src / "tiny.cc") in info.value.command
    assert "undefined_name_tcde" in info.value.output
    assert "undefined_name_tcde" in str(info.value)
    assert [p.name for p in out.iterdir() if not p.name.endswith(".lock")] == []
