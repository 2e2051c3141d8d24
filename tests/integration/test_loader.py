"""The loader on the running torch (2.13 in the nox session), with small fake libraries.

torch 2.13 provides the API itself, so these tests use ``TORCH_C_DLPACK_EXT_FORCE=1``
(the A/B switch) to make the selector load ours. Each import runs in a fresh
process: a crash is a failed return code, and attributes never leak between tests.
"""

from __future__ import annotations

import ctypes
import json
import sys
from pathlib import Path

import pytest
from tests.helpers import (
    CUDA_TORCH,
    Bundled,
    build_fake_library,
    clean_env,
    make_package,
    run_python,
)
from tests.helpers import probe_import as probe

from _torch_c_dlpack_ext_core.dlpack_ctypes import DLPackExchangeAPI
from _torch_c_dlpack_ext_core.errors import LibraryLoadError
from _torch_c_dlpack_ext_core.naming import Backend
from torch_c_dlpack_ext import _library, _loader

torch = pytest.importorskip("torch")

P = "TORCH_C_DLPACK_EXT_"
TORCH_MINOR = ".".join(torch.__version__.split(".")[:2])
ABI = bool(torch.compiled_with_cxx11_abi())


@pytest.fixture(scope="module")
def fake_libs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("fake")
    return {
        "good": build_fake_library(root / "good"),
        "no_export": build_fake_library(root / "no_export", "FAKE_NO_EXPORT"),
        "null_member": build_fake_library(root / "null_member", "FAKE_NULL_MEMBER"),
        "major2": build_fake_library(root / "major2", "FAKE_MAJOR=2"),
        "null_table": build_fake_library(root / "null_table", "FAKE_NULL_TABLE"),
    }


def cell(source: Path, backend: Backend = Backend.CPU) -> Bundled:
    return Bundled(source, TORCH_MINOR, backend, ABI, torch_build=torch.__version__)


def test_load_publishes_capsule_and_int(tmp_path: Path, fake_libs: dict[str, Path]) -> None:
    root = make_package(tmp_path, [cell(fake_libs["good"])])
    result = probe(root, **{P + "FORCE": "1"})
    assert result["kind"] == "load"
    assert result["library"].startswith(str(root))
    assert result["replaced"]
    assert result["pointer"] is not None
    assert result["legacy"] == result["pointer"]
    assert result["warnings"] == []


def test_without_force_torch_with_api_defers(tmp_path: Path, fake_libs: dict[str, Path]) -> None:
    root = make_package(tmp_path, [cell(fake_libs["good"])])
    result = probe(root)
    assert result["kind"] == "defer"
    assert not result["replaced"]
    assert result["legacy"] is None


def test_library_override_warns_no_checksum(tmp_path: Path, fake_libs: dict[str, Path]) -> None:
    root = make_package(tmp_path)
    result = probe(root, **{P + "FORCE": "1", P + "LIBRARY": str(fake_libs["good"])})
    assert result["kind"] == "load"
    assert result["library"] == str(fake_libs["good"])
    assert result["replaced"]
    (warning,) = result["warnings"]
    assert "no size/sha256 check was done" in warning


def test_gpu_library_failure_never_falls_back_to_cpu(
    tmp_path: Path, fake_libs: dict[str, Path]
) -> None:
    # Issue 13: the CPU library would answer a GPU tensor's stream with NULL (the default
    # stream), a silent race; publishing nothing lets consumers use their own path.
    root = make_package(
        tmp_path, [cell(fake_libs["no_export"], Backend.CUDA), cell(fake_libs["good"])]
    )
    # A CUDA torch (by its build flavour; BACKEND=cuda would conflict with this CPU torch).
    result = probe(root, prelude=CUDA_TORCH, **{P + "FORCE": "1"})
    assert result["kind"] == "unavailable", result
    assert not result["replaced"]
    assert result["legacy"] is None
    (warning,) = result["warnings"]
    assert "no library could be loaded" in warning.lower()
    assert "does not export TorchDLPackExchangeAPIPtr" in warning
    assert f"{P}JIT=1 to build the cuda library" in warning
    # make_package's copy has no installation record: built from its sources, never a
    # wheel pinned on an index (issue 36, deliverable 5).
    assert "build it from this installation's source" in warning
    assert f"{P}BACKEND=cpu" in warning


def test_backend_cpu_on_request_serves_a_gpu_torch(
    tmp_path: Path, fake_libs: dict[str, Path]
) -> None:
    root = make_package(
        tmp_path, [cell(fake_libs["no_export"], Backend.CUDA), cell(fake_libs["good"])]
    )
    result = probe(root, **{P + "FORCE": "1", P + "BACKEND": "cpu"})
    assert result["kind"] == "load", result
    assert "-cpu-" in result["library"]
    assert result["replaced"]
    assert result["warnings"] == []


def test_legacy_int_gets_a_capsule(tmp_path: Path, fake_libs: dict[str, Path]) -> None:
    root = make_package(tmp_path)
    code = f"""
import ctypes, torch
lib = ctypes.CDLL({str(fake_libs["good"])!r})
lib.TorchDLPackExchangeAPIPtr.restype = ctypes.c_int64
ptr = lib.TorchDLPackExchangeAPIPtr()
del torch.Tensor.__dlpack_c_exchange_api__
torch.Tensor.__c_dlpack_exchange_api__ = ptr
import torch_c_dlpack_ext as pkg
get = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))
assert pkg.status().kind.value == "publish_legacy", pkg.status()
assert get(torch.Tensor.__dlpack_c_exchange_api__, b"dlpack_exchange_api") == ptr
assert torch.Tensor.__c_dlpack_exchange_api__ == ptr
print("ok")
"""
    proc = run_python(code, pythonpath=[root], timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("ok")


def test_invalid_legacy_int_is_refused(tmp_path: Path, fake_libs: dict[str, Path]) -> None:
    root = make_package(tmp_path)
    code = f"""
import ctypes, torch, warnings
lib = ctypes.CDLL({str(fake_libs["major2"])!r})
lib.TorchDLPackExchangeAPIPtr.restype = ctypes.c_int64
del torch.Tensor.__dlpack_c_exchange_api__
torch.Tensor.__c_dlpack_exchange_api__ = lib.TorchDLPackExchangeAPIPtr()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import torch_c_dlpack_ext as pkg
assert pkg.status().kind.value == "unavailable", pkg.status()
assert not hasattr(torch.Tensor, "__dlpack_c_exchange_api__")
assert len(caught) == 1, [str(w.message) for w in caught]
print(caught[0].message)
"""
    proc = run_python(code, pythonpath=[root], timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "DLPack version 2.3" in proc.stdout


def test_import_twice_and_from_threads_loads_once(
    tmp_path: Path, fake_libs: dict[str, Path]
) -> None:
    root = make_package(tmp_path, [cell(fake_libs["good"])])
    code = """
import importlib, os, threading
from pathlib import Path
import torch
results = []
def worker():
    import torch_c_dlpack_ext
    results.append(torch_c_dlpack_ext.status())
threads = [threading.Thread(target=worker) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
import torch_c_dlpack_ext as pkg
from torch_c_dlpack_ext import _loader, _apply
first = torch.Tensor.__c_dlpack_exchange_api__
assert len({id(s) for s in results}) == 1 and len(results) == 8
fields = _apply.select_and_load(os.environ, Path(pkg.__file__).parent)
assert fields["kind"].value == "load", fields
assert torch.Tensor.__c_dlpack_exchange_api__ == first
assert len(_loader.LIBRARIES) == 1, _loader.LIBRARIES
print("ok")
"""
    proc = run_python(code, pythonpath=[root], env=clean_env(**{P + "FORCE": "1"}), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("ok")


def test_check_table_in_process(fake_libs: dict[str, Path]) -> None:
    loaded = _library.open_library(fake_libs["good"])
    assert loaded.dlpack_version == (1, 3)
    assert _library.open_library(fake_libs["good"]) is loaded
    assert json.loads(loaded.build_info() or "")["torch"] == "fake"
    with pytest.raises(LibraryLoadError, match="NULL member"):
        _library.open_library(fake_libs["null_member"])
    with pytest.raises(LibraryLoadError, match="returned NULL"):
        _library.open_library(fake_libs["null_table"])
    with pytest.raises(LibraryLoadError, match="does not export TorchDLPackExchangeAPIPtr"):
        _library.open_library(fake_libs["no_export"])
    with pytest.raises(LibraryLoadError, match="cannot be loaded"):
        _library.open_library(Path(sys.executable).parent / "no-such-lib.so")


def test_a_refused_private_copy_falls_back_to_the_unchanged_file(
    tmp_path: Path, fake_libs: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where memory files cannot be mapped executable (vm.memfd_noexec, SELinux), the
    verified file itself is loaded; a file changed since verification is not."""
    unloadable = tmp_path / "noexec-copy"
    unloadable.write_bytes(b"\x7fELF but not loadable")
    monkeypatch.setattr(_library, "private_copy", lambda path, data: str(unloadable))
    library = tmp_path / "fallback.so"
    library.write_bytes(fake_libs["good"].read_bytes())
    assert _library.open_library(library).dlpack_version == (1, 3)

    changed = tmp_path / "changed.so"
    changed.write_bytes(fake_libs["good"].read_bytes())
    verified = changed.read_bytes()
    changed.write_bytes(fake_libs["major2"].read_bytes())  # swapped after verification
    with pytest.raises(LibraryLoadError, match="cannot be loaded"):
        _library.open_library(changed, verified)


def test_capsule_is_named_and_points_at_table() -> None:
    table = DLPackExchangeAPI()
    pointer = ctypes.addressof(table)
    capsule = _loader.make_capsule(pointer)
    is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
        ("PyCapsule_IsValid", ctypes.pythonapi)
    )
    assert is_valid(capsule, b"dlpack_exchange_api") == 1
    assert is_valid(capsule, b"other") == 0
    assert ctypes.sizeof(DLPackExchangeAPI) == 56


AUDIT = r"""
import os, sys
events = []
WATCHED = {"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.fork",
           "os.forkpty", "socket.connect", "socket.getaddrinfo", "ctypes.dlopen"}
def hook(event, args):
    if event in WATCHED:
        name = str(args[0])
        if name.startswith("/proc/self/fd/"):  # the loader's private copy (a memfd)
            name = os.readlink(name).replace("/memfd:", "")
        name = name.rsplit("/", 1)[-1]
        events.append(event if event != "ctypes.dlopen" else "dlopen:" + name)
import torch
sys.addaudithook(hook)
import torch_c_dlpack_ext as pkg
modules = ["torch_c_dlpack_ext._loader" in sys.modules, "torch_c_dlpack_ext._decide" in sys.modules]
print(pkg.status().kind.value, sorted(set(events)), *modules)
"""


def test_import_spawns_nothing_and_fast_path_loads_no_selector(
    tmp_path: Path, fake_libs: dict[str, Path]
) -> None:
    root = make_package(tmp_path, [cell(fake_libs["good"])])
    deferred = run_python(AUDIT, pythonpath=[root], timeout=120)
    assert deferred.returncode == 0, deferred.stderr
    # torch has the API and nothing is overridden: the selector modules are not even imported.
    assert deferred.stdout.split() == ["defer", "[]", "False", "False"], deferred.stdout
    loaded = run_python(AUDIT, pythonpath=[root], env=clean_env(**{P + "FORCE": "1"}), timeout=120)
    assert loaded.returncode == 0, loaded.stderr
    # The one dlopen is the bundled library; nothing is spawned or fetched.
    assert loaded.stdout.startswith("load ['dlopen:libtorch_c_dlpack_ext-"), loaded.stdout
    assert "subprocess" not in loaded.stdout
    assert "socket" not in loaded.stdout
    assert loaded.stdout.split()[-2:] == ["True", "True"]


def test_import_without_torch_succeeds_and_says_why(tmp_path: Path) -> None:
    root = make_package(tmp_path)
    code = """
import sys
sys.modules["torch"] = None  # what Python does for a package that cannot be imported
import torch_c_dlpack_ext as pkg
status = pkg.status()
print(status.kind.value, status.torch, "|", status.reason, "|", status.remedy)
"""
    proc = run_python(code, pythonpath=[root], timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("unavailable None | torch is not importable")
    assert "install torch" in proc.stdout
    # Nothing published, so the one warning the README promises (issue 9, class 5).
    assert proc.stderr.count("TorchCDLPackExtWarning") == 1, proc.stderr
    assert "torch-c-dlpack-ext: torch is not importable (ModuleNotFoundError" in proc.stderr, (
        proc.stderr
    )
    diag = run_python(
        "import sys; sys.modules['torch'] = None\n"
        "from torch_c_dlpack_ext.__main__ import main; sys.exit(main([]))",
        pythonpath=[root],
        timeout=60,
    )
    assert diag.returncode == 1, diag.stderr
    assert "not importable" in diag.stdout


def test_warning_points_at_the_importing_line(tmp_path: Path) -> None:
    root = make_package(tmp_path / "pkg", manifest=False)
    script = tmp_path / "user_code.py"
    script.write_text("import torch\nimport torch_c_dlpack_ext\n", encoding="utf-8")
    environ = clean_env(**{P + "FORCE": "1"}, PYTHONPATH=str(root))
    import subprocess

    proc = subprocess.run(
        [sys.executable, str(script)],
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"{script}:2: TorchCDLPackExtWarning: torch-c-dlpack-ext: No usable manifest" in (
        proc.stderr
    )


#: What the two common imports may load of this project (cheap by design: see the import
#: benchmark). The load path is simulated on the running torch by removing its own
#: attributes first, so the import takes the path of a torch 2.4-2.9 with a matching library.
MODULES_PROBE = r"""
import json, sys
import torch
if sys.argv[1] == "load":
    del torch.Tensor.__dlpack_c_exchange_api__
import torch_c_dlpack_ext
ours = sorted(m for m in sys.modules if m.split(".")[0].endswith("c_dlpack_ext_core")
              or m.split(".")[0] == "torch_c_dlpack_ext")
print(json.dumps({"modules": ours, "set": "__dlpack_c_exchange_api__" in vars(torch.Tensor),
                  "kind": torch_c_dlpack_ext.status().kind.value}))
"""


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("defer", ["torch_c_dlpack_ext"]),
        (
            "load",
            # Issue 18: the common path is the package and one module, no core module, no
            # class of the selector's (Settings, Decision, TorchInfo, ManifestEntry, the
            # enums).
            ["torch_c_dlpack_ext", "torch_c_dlpack_ext._loader"],
        ),
    ],
)
def test_the_common_imports_load_few_modules(
    tmp_path: Path, fake_libs: dict[str, Path], path: str, expected: list[str]
) -> None:
    """Neither the full selector, the settings parser, the mirrors, the diagnostics nor
    the Status record is loaded by a common import (they are, on demand, by status())."""
    root = make_package(tmp_path, [cell(fake_libs["good"])])
    proc = run_python(MODULES_PROBE, args=[path], pythonpath=[root], timeout=120)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["modules"] == expected
    assert report["set"] is True
    assert report["kind"] == path


#: The load path, simulated as above; reports how `_loader` was loaded.
LOADER_PROBE = r"""
import json, os, sys
import torch
del torch.Tensor.__dlpack_c_exchange_api__
import torch_c_dlpack_ext
loader = sys.modules["torch_c_dlpack_ext._loader"]
package_dir = os.path.dirname(torch_c_dlpack_ext.__file__)
print(json.dumps({
    "finder": package_dir in sys.path_importer_cache,
    "attribute": getattr(torch_c_dlpack_ext, "_loader", None) is loader,
    "origin": loader.__spec__.origin,
    "common_path": torch_c_dlpack_ext._STATE["fields"].get("common_path"),
    "set": "__dlpack_c_exchange_api__" in vars(torch.Tensor),
}))
"""


def test_the_load_path_builds_no_finder_for_the_package_directory(
    tmp_path: Path, fake_libs: dict[str, Path]
) -> None:
    """Issue 36: the import system's first import from the package's directory builds
    that directory's finder (~60 us, more than any check of the load); the load path
    loads `_loader` from its file instead, as a submodule of the package all the same."""
    root = make_package(tmp_path, [cell(fake_libs["good"])])
    proc = run_python(LOADER_PROBE, pythonpath=[root], timeout=120)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report == {
        "finder": False,
        "attribute": True,
        "origin": str(root / "torch_c_dlpack_ext" / "_loader.py"),
        "common_path": True,
        "set": True,
    }


def test_a_loader_without_its_source_is_imported_by_the_import_system(
    tmp_path: Path, fake_libs: dict[str, Path]
) -> None:
    """Where `_loader.py` is not a file to load (here only its bytecode is installed, as
    some deployments strip sources; or a zip), the import system imports `_loader`, and
    the load path publishes as before."""
    import py_compile

    root = make_package(tmp_path, [cell(fake_libs["good"])])
    source = root / "torch_c_dlpack_ext" / "_loader.py"
    py_compile.compile(str(source), cfile=str(source.with_suffix(".pyc")), doraise=True)
    source.unlink()
    proc = run_python(LOADER_PROBE, pythonpath=[root], timeout=120)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report == {
        "finder": True,
        "attribute": True,
        "origin": str(source.with_suffix(".pyc")),
        "common_path": True,
        "set": True,
    }
