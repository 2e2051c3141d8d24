"""Faults: each must leave import working, set no attribute unless a valid table was
obtained, and say what went wrong in exactly one warning.

Every import runs in a fresh process, so a crash inside dlopen (SIGBUS on a
truncated file) shows up as a failed return code rather than a dead test runner.
On the running torch (2.13, which has the API) ``TORCH_C_DLPACK_EXT_FORCE=1`` makes
the selector load ours; the ABI case uses a real old torch.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.helpers import (
    CUDA_TORCH,
    IMPORT_PROBE,
    Bundled,
    build_fake_library,
    clean_env,
    make_package,
    run_python,
)
from tests.helpers import probe_import as probe

from _torch_c_dlpack_ext_core.files import sha256_of
from _torch_c_dlpack_ext_core.manifest import ManifestEntry
from _torch_c_dlpack_ext_core.naming import MANIFEST_NAME, PACKAGE, Backend

torch = pytest.importorskip("torch")

P = "TORCH_C_DLPACK_EXT_"
TORCH_MINOR = ".".join(torch.__version__.split(".")[:2])
ABI = bool(torch.compiled_with_cxx11_abi())


def assert_contained(result: dict[str, Any], *fragments: str) -> None:
    """Nothing published, one warning, and it names the cause."""
    assert result["kind"] == "unavailable", result
    assert not result["replaced"], result
    assert not result["legacy"], result
    assert len(result["warnings"]) == 1, result["warnings"]
    for fragment in fragments:
        assert fragment in result["warnings"][0], (fragment, result["warnings"][0])


def bundled(source: Path, **overrides: Any) -> Bundled:
    return Bundled(
        source, TORCH_MINOR, Backend.CPU, ABI, torch_build=torch.__version__, **overrides
    )


def corrupt_copy(tmp_path: Path, library: Path, mutate: Callable[[bytes], bytes]) -> Path:
    out = tmp_path / "corrupt" / library.name
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(mutate(library.read_bytes()))
    return out


def truncate(data: bytes) -> bytes:
    return data[: len(data) // 2]


def truncate_at(fraction: float) -> Callable[[bytes], bytes]:
    return lambda data: data[: int(len(data) * fraction)]


def random_bytes(data: bytes) -> bytes:
    return random.Random(1234).randbytes(len(data))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        *((truncate_at(f), "truncated") for f in (0.05, 0.3, 0.5, 0.8, 0.999)),
        (random_bytes, "cannot be loaded"),
    ],
    ids=[
        "truncated-5%",
        "truncated-30%",
        "truncated-50%",
        "truncated-80%",
        "truncated-99.9%",
        "random-bytes",
    ],
)
def test_corrupt_library_with_matching_manifest_reaches_dlopen_safely(
    tmp_path: Path,
    torch213_library: tuple[Path, ManifestEntry],
    mutate: Callable[[bytes], bytes],
    message: str,
) -> None:
    # The manifest's size and sha256 describe the corrupt file, so only dlopen can object.
    bad = corrupt_copy(tmp_path, torch213_library[0], mutate)
    root = make_package(tmp_path / "pkg", [bundled(bad)])
    assert_contained(probe(root, **{P + "FORCE": "1"}), message)


@pytest.mark.slow
def test_truncated_library_is_caught_before_dlopen(
    tmp_path: Path, torch213_library: tuple[Path, ManifestEntry]
) -> None:
    library = torch213_library[0]
    bad = corrupt_copy(tmp_path, library, truncate)
    root = make_package(
        tmp_path / "pkg",
        [bundled(bad, size=library.stat().st_size, sha256=sha256_of(library))],
    )
    assert_contained(probe(root, **{P + "FORCE": "1"}), "bytes, the manifest says", "Reinstall")


@pytest.mark.slow
def test_sha256_mismatch_is_caught_before_dlopen(
    tmp_path: Path, torch213_library: tuple[Path, ManifestEntry]
) -> None:
    library = torch213_library[0]

    def flip(data: bytes) -> bytes:
        middle = len(data) // 2
        return data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1 :]

    bad = corrupt_copy(tmp_path, library, flip)
    root = make_package(tmp_path / "pkg", [bundled(bad, sha256=sha256_of(library))])
    assert_contained(probe(root, **{P + "FORCE": "1"}), "sha256", "does not match the manifest")


@pytest.mark.parametrize(
    ("defines", "message"),
    [
        (("FAKE_NO_EXPORT",), "does not export TorchDLPackExchangeAPIPtr"),
        (("FAKE_NULL_MEMBER",), "NULL member(s) current_work_stream"),
        (("FAKE_MAJOR=2",), "DLPack version 2.3"),
        (("FAKE_NULL_TABLE",), "returned NULL"),
        (
            ("FAKE_LOAD_PROBLEM",),
            "cannot be used: torch-c-dlpack-ext: the loaded libtorch_python.so lacks "
            "THPVariableClass (fake)",
        ),
    ],
    ids=["missing-export", "null-member", "major-2", "null-table", "load-problem"],
)
def test_invalid_library_is_refused(tmp_path: Path, defines: tuple[str, ...], message: str) -> None:
    library = build_fake_library(tmp_path / "lib", *defines)
    root = make_package(tmp_path / "pkg", [bundled(library)])
    assert_contained(probe(root, **{P + "FORCE": "1"}), message)


def test_manifest_missing(tmp_path: Path) -> None:
    root = make_package(tmp_path, manifest=False)
    assert_contained(probe(root, **{P + "FORCE": "1"}), "no manifest at", f"{P}JIT=1")


def test_manifest_corrupt(tmp_path: Path) -> None:
    root = make_package(tmp_path)
    (root / PACKAGE / MANIFEST_NAME).write_text("{not json", encoding="utf-8")
    assert_contained(probe(root, **{P + "FORCE": "1"}), "not valid JSON")


def test_manifest_names_missing_file(tmp_path: Path) -> None:
    library = build_fake_library(tmp_path / "lib")
    root = make_package(tmp_path / "pkg", [bundled(library)])
    for path in (root / PACKAGE / "libs").iterdir():
        path.unlink()
    assert_contained(probe(root, **{P + "FORCE": "1"}), "(listed in the manifest) is missing")


def test_unwritable_jit_cache(tmp_path: Path) -> None:
    root = make_package(tmp_path / "pkg", manifest=False)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory", encoding="utf-8")
    result = probe(
        root, **{P + "FORCE": "1", P + "JIT": "1", P + "CACHE_DIR": str(blocker / "cache")}
    )
    assert_contained(result, "not writable", f"{P}CACHE_DIR")


FAILING_CXX = """#!/bin/sh
case "$1" in
  --version) echo "g++ (Debian 12.2.0-14) 12.2.0"; exit 0 ;;
  -dumpmachine) echo "x86_64-linux-gnu"; exit 0 ;;
  -dumpversion|-dumpfullversion) echo "12.2.0"; exit 0 ;;
esac
echo "cc1plus: compiling exchange_api.cc" >&2
echo "fatal error: cannot write exchange_api.o: No space left on device" >&2
exit 1
"""


def test_a_failed_jit_build_shows_the_compilers_last_lines(tmp_path: Path) -> None:
    """Issue 21 item 8: the warning and status() ended with "...failed (exit 1):"; the
    compiler's last lines are where the user is sent to look."""
    root = make_package(tmp_path / "pkg", manifest=False)
    cxx = tmp_path / "bin" / "g++"
    cxx.parent.mkdir()
    cxx.write_text(FAILING_CXX, encoding="utf-8")
    cxx.chmod(0o755)
    result = probe(
        root,
        **{
            P + "FORCE": "1",
            P + "JIT": "1",
            P + "CACHE_DIR": str(tmp_path / "cache"),
            "CXX": str(cxx),
        },
    )
    assert result["kind"] == "unavailable", result
    assert_contained(result, "JIT build", "No space left on device")
    assert "No space left on device" in result["reason"], result  # status() too
    assert not any((tmp_path / "cache").rglob("*.so"))


def test_jit_without_compiler(tmp_path: Path) -> None:
    root = make_package(tmp_path / "pkg", manifest=False)
    # A PATH with binutils (the driver's audit needs nm) but no C++ compiler.
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir()
    nm = shutil.which("nm")
    assert nm is not None
    (empty_bin / "nm").symlink_to(nm)
    result = probe(
        root,
        **{
            P + "FORCE": "1",
            P + "JIT": "1",
            P + "CACHE_DIR": str(tmp_path / "cache"),
            "PATH": str(empty_bin),
            "CXX": "",
        },
    )
    assert_contained(result, "JIT build", "no C++ compiler")
    assert not any((tmp_path / "cache").rglob("*.so"))


@pytest.mark.slow
def test_rocm_torch_with_api_never_reads_manifest(tmp_path: Path) -> None:
    """A ROCm torch that provides the API defers without touching the manifest: here
    the manifest path is a directory, so reading it would fail loudly."""
    root = make_package(tmp_path, manifest=False)
    (root / PACKAGE / MANIFEST_NAME).mkdir()
    code = """
import ctypes, sys, types, warnings
import torch as real_torch  # 2.10+: its table is a valid one to point at
class Tensor:  # a valid capsule (a real table inside): only those are deferred to
    __dlpack_c_exchange_api__ = real_torch.Tensor.__dlpack_c_exchange_api__
del sys.modules["torch"]
fake = types.ModuleType("torch")
fake.__version__ = "2.10.0+rocm6.4"
fake.Tensor = Tensor
fake.version = types.SimpleNamespace(cuda=None, hip="6.4")
fake.compiled_with_cxx11_abi = lambda: True
sys.modules["torch"] = fake
from torch_c_dlpack_ext import _loader, _apply
def boom(path):
    raise AssertionError(f"manifest read: {path}")
_apply.load_manifest = boom
_loader._read_manifest = boom
with warnings.catch_warnings():
    warnings.simplefilter("error")
    import torch_c_dlpack_ext as pkg
    import os
    from pathlib import Path
    for env in ({}, {"TORCH_C_DLPACK_EXT_BACKEND": "rocm"}):
        fields = _apply.select_and_load(env, Path(pkg.__file__).parent)
        assert fields["kind"].value == "defer", fields
        assert fields["torch"].backend.value == "rocm", fields["torch"]
print("ok")
"""
    proc = run_python(code, pythonpath=[root], timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("ok")


@pytest.mark.slow
def test_library_for_other_cxx_abi_is_refused(
    tmp_path: Path, old_torch_env: Callable[[str], Any], build_cache: Path
) -> None:
    """A 2.8 library (cxx11 ABI) presented as the 2.6 entry (old ABI) to PyPI's 2.6.0:
    dlopen reports an undefined symbol, which must become a warning, not an error.
    (PyPI's 2.6.0 is a CUDA build: ``BACKEND=cpu`` makes the CPU entry the one tried.)"""
    from _torch_c_dlpack_ext_core.driver import BuildRequest, compile_library

    env28 = old_torch_env("2.8.0")
    env26 = old_torch_env("2.6.0")
    out = build_cache / "faults-torch2.8.0-cpu"
    entry = compile_library(BuildRequest(torch=env28.torch_dir, backend="cpu", output_dir=out))
    root = make_package(
        tmp_path, [Bundled(out / entry.file, "2.6", Backend.CPU, False, "2.6.0+cu124")]
    )
    result = probe(root, python=env26.python, timeout=300, **{P + "BACKEND": "cpu"})
    assert_contained(result, "cannot be loaded", "undefined symbol")


@pytest.mark.slow
def test_library_override_for_another_minor_is_named_before_dlopen(
    tmp_path: Path,
    old_torch_env: Callable[[str], Any],
    torch213_library: tuple[Path, ManifestEntry],
) -> None:
    """Issue 21 item 9: ``LIBRARY`` naming the 2.13 library on PyPI's torch 2.8 failed
    inside dlopen ("undefined symbol: ..."). The build info is read from the file's bytes
    first, so the message says which torch it was built for."""
    library, _ = torch213_library
    env28 = old_torch_env("2.8.0")
    root = make_package(tmp_path / "pkg", manifest=False)
    result = probe(
        root,
        python=env28.python,
        timeout=300,
        **{P + "LIBRARY": str(library), P + "BACKEND": "cpu"},
    )
    assert result["kind"] == "unavailable", result
    assert_contained(result, "was built for torch 2.13, this is torch 2.8.0")
    assert "undefined symbol" not in json.dumps(result), result


@pytest.mark.slow
def test_eight_processes_jit_at_once_build_once(tmp_path: Path) -> None:
    """Eight importers, JIT on, empty cache: one compile (the driver's lock and cache),
    eight published libraries."""
    import subprocess

    root = make_package(tmp_path / "pkg", manifest=False)
    cache = tmp_path / "cache"
    env = clean_env(**{P + "FORCE": "1", P + "JIT": "1", P + "CACHE_DIR": str(cache)})
    env["PYTHONPATH"] = str(root)
    code = IMPORT_PROBE
    started = time.monotonic()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(8)
    ]
    outputs = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=900)
            outputs.append((proc.returncode, out, err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    elapsed = time.monotonic() - started
    for returncode, _, err in outputs:
        assert returncode == 0, err[-3000:]
    results = [json.loads(out.strip().splitlines()[-1]) for _, out, _ in outputs]
    assert [r["kind"] for r in results] == ["jit"] * 8, [r["reason"] for r in results]
    assert all(r["replaced"] and r["legacy"] for r in results)
    assert len({r["library"] for r in results}) == 1
    # A JIT import says one line when it compiles, nothing on a cache hit: one build.
    building = [err.count("torch-c-dlpack-ext: building") for _, _, err in outputs]
    assert sorted(building) == [0] * 7 + [1], [err[-500:] for _, _, err in outputs]
    libraries = list(cache.rglob("*.so"))
    assert len(libraries) == 1, libraries
    print(f"8 concurrent JIT imports: {elapsed:.1f} s")
    shutil.rmtree(cache, ignore_errors=True)
    assert not os.path.exists(cache)


def test_failed_jit_of_gpu_library_does_not_fall_back_to_bundled_cpu(tmp_path: Path) -> None:
    library = build_fake_library(tmp_path / "lib")
    root = make_package(tmp_path / "pkg", [bundled(library)])
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    nm = shutil.which("nm")
    assert nm is not None
    (bin_dir / "nm").symlink_to(nm)
    result = probe(
        root,
        prelude=CUDA_TORCH,  # a CUDA torch by its build flavour (BACKEND=cuda would conflict)
        **{
            P + "FORCE": "1",
            P + "JIT": "1",
            P + "CACHE_DIR": str(tmp_path / "cache"),
            "PATH": str(bin_dir),
            "CXX": "",
        },
    )
    # The build fails (a CPU torch cannot build the cuda library; nor can a PATH without
    # a compiler). The bundled CPU library is not a fallback for a cuda torch (issue 13).
    assert_contained(result, "JIT build of the cuda library for torch", "failed")
    (warning,) = result["warnings"]
    assert f"unset {P}JIT" in warning
    assert f"Set {P}JIT=1" not in warning
    assert f"set {P}JIT=1" not in warning
    assert warning.count("\n") <= 3, warning
    assert len(warning) < 1000, warning


WARNING_SINKS = {
    # A daemon that closed sys.stderr: the default showwarning raises ValueError.
    "closed-stderr": "sys.stderr.close()",
    # An application's hook that fails while displaying.
    "raising-hook": (
        "def hook(*args, **kwargs):\n"
        "    raise RuntimeError('log sink unavailable')\n"
        "warnings.showwarning = hook"
    ),
}


@pytest.mark.parametrize("sink", sorted(WARNING_SINKS))
def test_warning_that_cannot_be_displayed_does_not_fail_import(tmp_path: Path, sink: str) -> None:
    """Emitting the warning may itself raise (not a Warning: the user did not ask for an
    error); import still succeeds and status() keeps the text."""
    root = make_package(tmp_path, manifest=False)
    code = f"""
import os, sys, warnings
import torch
{WARNING_SINKS[sink]}
try:
    import torch_c_dlpack_ext as pkg
except BaseException as exc:
    os.write(1, f"RAISED {{type(exc).__name__}}: {{exc}}\\n".encode())
    raise SystemExit(3)
status = pkg.status()
assert status.kind.value == "unavailable", status
assert len(status.warnings) == 1 and "no manifest at" in status.warnings[0], status.warnings
os.write(1, b"ok\\n")
"""
    proc = run_python(code, pythonpath=[root], env=clean_env(**{P + "FORCE": "1"}), timeout=120)
    assert proc.returncode == 0, (proc.stdout, proc.stderr[-2000:])
    assert proc.stdout.strip().endswith("ok")


def test_warning_turned_into_error_leaves_as_an_import_error(tmp_path: Path) -> None:
    """-W error is the user's choice, but consumers guard the import with ``except
    ImportError`` only (tvm-ffi 0.1.1-0.1.15): what leaves is an ImportError subclass, the
    warning chained as its cause, naming the cause and how to import anyway."""
    root = make_package(tmp_path, manifest=False)
    code = """
import warnings
import torch
before = dict(vars(torch.Tensor))
warnings.simplefilter("error")
try:
    import torch_c_dlpack_ext
except ImportError as exc:
    from torch_c_dlpack_ext.errors import WarningAsImportError
    from _torch_c_dlpack_ext_core.errors import TorchCDLPackExtWarning
    assert isinstance(exc, WarningAsImportError), type(exc)
    assert isinstance(exc.__cause__, TorchCDLPackExtWarning), repr(exc.__cause__)
    assert exc.warning is exc.__cause__ and exc.name == "torch_c_dlpack_ext"
    assert str(exc.__cause__) in str(exc)
    assert dict(vars(torch.Tensor)) == before
    print("raised", type(exc).__name__)
    print(exc)
"""
    proc = run_python(code, pythonpath=[root], env=clean_env(**{P + "FORCE": "1"}), timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    first, message = proc.stdout.strip().split("\n", 1)
    assert first == "raised WarningAsImportError", proc.stdout
    assert "no manifest at" in message, message  # the cause
    assert "made this warning an error" in message, message
    assert "-W default::_torch_c_dlpack_ext_core.errors.TorchCDLPackExtWarning" in message, message
    assert f"{P}DISABLE=1" in message, message


def test_reimport_says_the_capsule_is_ours_not_torchs(tmp_path: Path) -> None:
    """After ``del sys.modules[...]`` a second import finds our own capsule: status()
    says an earlier import of this package published it (not "torch provides it")."""
    library = build_fake_library(tmp_path / "lib")
    root = make_package(tmp_path / "pkg", [bundled(library)])
    code = """
import sys, warnings
import torch
del torch.Tensor.__dlpack_c_exchange_api__  # as on a torch without the API
import torch_c_dlpack_ext as first
assert first.status().kind.value == "load", first.status()
capsule = torch.Tensor.__dlpack_c_exchange_api__
for name in [m for m in sys.modules if m.split(".")[0] == "torch_c_dlpack_ext"]:
    del sys.modules[name]
import torch_c_dlpack_ext as second
status = second.status()
assert status.kind.value == "defer", status
assert torch.Tensor.__dlpack_c_exchange_api__ is capsule
print(status.reason)
"""
    proc = run_python(code, pythonpath=[root], timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    reason = proc.stdout.strip().splitlines()[-1]
    assert "torch-c-dlpack-ext library (an earlier import" in reason, reason
    assert "provides __dlpack_c_exchange_api__ itself" not in reason, reason


# A CUDA build of torch, by the flavour the selector reads (no device is ever asked).
GPU_TORCH = "import torch\ntorch.version.cuda = '12.8'\n"


@pytest.mark.parametrize(
    ("minor", "gpu", "backend", "published", "says"),
    [
        # The CPU library on a GPU torch only when BACKEND=cpu asks for it (issue 13).
        (None, True, "", False, "this torch needs cuda"),
        (None, True, "cpu", True, ""),
        (None, False, "cuda", False, f"{P}BACKEND=cuda conflicts with the torch build"),
        # Another torch minor: refused whatever BACKEND says (layouts differ).
        (8, False, "", False, "was built for torch 2.8"),
        (8, False, "cpu", False, "was built for torch 2.8"),
        ("this", False, "", True, ""),
    ],
    ids=[
        "cpu-lib-gpu-torch",
        "backend-cpu-asks",
        "backend-cuda-asks",
        "other-minor",
        "other-minor-backend",
        "same-minor",
    ],
)
def test_library_override_is_checked_against_running_torch(
    tmp_path: Path, *, minor: Any, gpu: bool, backend: str, published: bool, says: str
) -> None:
    running_minor = int(TORCH_MINOR.split(".")[1])
    defines = (
        ()
        if minor is None
        else (f"FAKE_TORCH_MINOR={running_minor if minor == 'this' else minor}",)
    )
    library = build_fake_library(tmp_path / "lib", *defines)
    root = make_package(tmp_path / "pkg", manifest=False)
    env = {P + "FORCE": "1", P + "LIBRARY": str(library)}
    if backend:
        env[P + "BACKEND"] = backend
    code = (GPU_TORCH if gpu else "") + IMPORT_PROBE
    proc = run_python(code, pythonpath=[root], env=clean_env(**env), timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if published:
        assert result["kind"] == "load", result
        assert result["replaced"], result
    else:
        # A conflicting BACKEND is refused before the file is looked at.
        named = () if "conflicts" in says else ("(from TORCH_C_DLPACK_EXT_LIBRARY)",)
        assert_contained(result, says, *named)


# Runs `ACTION(lib)` at the moment the loader calls dlopen (`_loader.dlopen`), after every
# check: a racing writer made deterministic.
RACE = r"""
import ctypes, json, os, sys, warnings
LIB = sys.argv[1]
OTHER = sys.argv[2] if len(sys.argv) > 2 else ""
def swap(lib):
    tmp = lib + ".swap"
    with open(OTHER, "rb") as src, open(tmp, "wb") as dst:
        dst.write(src.read())
    os.replace(tmp, lib)
def truncate(lib):
    os.truncate(lib, 4096)  # in place: the same inode loses its loadable segments
def fifo(lib):
    os.unlink(lib)
    os.mkfifo(lib)
ACTION = {action}
def tracer(frame, event, arg):
    if (event == "call" and frame.f_code.co_name == "dlopen"
            and frame.f_code.co_filename.endswith("_loader.py")):
        ACTION(LIB)
        sys.settrace(None)
    return None
import torch
sys.settrace(tracer)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import torch_c_dlpack_ext as pkg
sys.settrace(None)
status = pkg.status()
from torch_c_dlpack_ext._library import loaded_library
loaded = loaded_library(status.library) if status.library else None
print(json.dumps({{"kind": status.kind.value, "reason": status.reason,
                  "info": loaded.build_info() if loaded else None,
                  "warnings": [str(w.message) for w in caught]}}))
"""


def _race(tmp_path: Path, action: str, env: dict[str, str], lib: Path, *args: Path) -> Any:
    root = tmp_path / "pkg"
    proc = run_python(
        RACE.format(action=action),
        pythonpath=[root],
        env=clean_env(**env),
        timeout=60,  # a FIFO opened blocking would hang the import: fail, do not wait
        args=[str(lib), *map(str, args)],
    )
    assert proc.returncode == 0, f"import died with {proc.returncode}:\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_library_swapped_after_verification_is_not_loaded(tmp_path: Path) -> None:
    """The bytes loaded are the bytes hashed: a file replaced between the sha256 check
    and dlopen does not reach the process."""
    verified = build_fake_library(tmp_path / "lib")
    other = build_fake_library(tmp_path / "other", "FAKE_TORCH_MINOR=99")
    root = make_package(tmp_path / "pkg", [bundled(verified)])
    (lib,) = (root / PACKAGE / "libs").iterdir()
    result = _race(tmp_path, "swap", {P + "FORCE": "1"}, lib, other)
    assert result["kind"] == "load", result
    assert "torch_minor" not in result["info"], f"the swapped-in file was loaded: {result}"


def test_library_truncated_in_place_during_dlopen_does_not_kill_the_process(
    tmp_path: Path,
) -> None:
    """An in-place truncation (same inode) while dlopen maps the file would be a SIGBUS;
    the loader maps its own sealed copy of the verified bytes instead."""
    library = build_fake_library(tmp_path / "lib")
    root = make_package(tmp_path / "pkg", [bundled(library)])
    (lib,) = (root / PACKAGE / "libs").iterdir()
    result = _race(tmp_path, "truncate", {P + "FORCE": "1"}, lib)
    assert result["kind"] == "load", result


def test_library_override_replaced_by_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    """LIBRARY passed the settings' is_file(), then became a FIFO: opening it blocking
    (as dlopen does) would hang the import forever."""
    library = build_fake_library(tmp_path / "lib")
    make_package(tmp_path / "pkg", manifest=False)
    lib = tmp_path / "override.so"
    shutil.copyfile(library, lib)
    env = {P + "FORCE": "1", P + "LIBRARY": str(lib)}
    # Swapped before the loader opens it: at its first look at the file (read_library,
    # which reads the bytes whose build info is checked before dlopen).
    code_action = "fifo"
    root = tmp_path / "pkg"
    race = RACE.format(action=code_action).replace(
        'frame.f_code.co_name == "dlopen"\n'
        '            and frame.f_code.co_filename.endswith("_loader.py")',
        'frame.f_code.co_name == "read_library"',
    )
    assert "read_library" in race
    proc = run_python(race, pythonpath=[root], env=clean_env(**env), timeout=60, args=[str(lib)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["kind"] == "unavailable", result
    assert "is a FIFO" in result["reason"], result


FOREIGN_TABLE = """
import ctypes, sys
import torch
lib = ctypes.CDLL(sys.argv[1])
lib.TorchDLPackExchangeAPIPtr.restype = ctypes.c_void_p
name = ctypes.create_string_buffer(b"dlpack_exchange_api")
new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(
    ("PyCapsule_New", ctypes.pythonapi))
# What tvm-ffi does with its JIT-built addon when this package is not installed.
torch.Tensor.__dlpack_c_exchange_api__ = new(lib.TorchDLPackExchangeAPIPtr(),
                                             ctypes.addressof(name), None)
import torch_c_dlpack_ext
status = torch_c_dlpack_ext.status()
print(status.kind.value)
print(status.reason)
"""


@pytest.mark.parametrize("build_info", [False, True], ids=["foreign", "ours"])
def test_a_table_someone_else_published_is_named_as_theirs(
    tmp_path: Path, build_info: bool
) -> None:
    """Issue 21 item 1: a table from an image exporting ``TorchDLPackExchangeAPIPtr`` but
    not this package's ``TorchCDLPackExtBuildInfo`` (tvm-ffi's own addon, 0.1.x) is deferred
    to and named by its image, never reported as "a torch-c-dlpack-ext library (an earlier
    import in this process)"; one with the build info is ours."""
    defines = () if build_info else ("FAKE_NO_BUILD_INFO",)
    library = build_fake_library(tmp_path / "lib", *defines, name="libtorch_c_dlpack_addon.so")
    root = make_package(tmp_path / "pkg", manifest=False)
    proc = run_python(FOREIGN_TABLE, pythonpath=[root], args=[str(library)], timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    kind, reason = proc.stdout.strip().splitlines()[-2:]
    assert kind == "defer", proc.stdout
    if build_info:
        assert "a torch-c-dlpack-ext library (an earlier import in this process)" in reason
    else:
        assert reason.startswith("libtorch_c_dlpack_addon.so (a library exporting"), reason
        assert "tvm-ffi's torch addon" in reason, reason
        assert "earlier import" not in reason, reason
        assert f"{P}FORCE=1 replaces it" in reason, reason
