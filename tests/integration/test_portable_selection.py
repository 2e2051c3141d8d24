"""The portable table end to end (issue 30 items 3-4): built through the ONE driver
(``compile_portable_library``: C only, no torch, audited), bundled in a package with
its torch-agnostic manifest entry, chosen by the selector, and used through ctypes: a
tensor exported and imported again through the published table."""

from __future__ import annotations

import json
import shutil
import subprocess
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from devtools.base.wheelnames import is_variant_name
from devtools.build import cellbuild as build
from devtools.build import cellresults, wheels
from devtools.envs.torchenv import TorchEnv
from devtools.matrix.cells import group_dir, portable_cells
from tests.helpers import CSRC, ROOT, make_package, run_python
from tests.unit.test_cells import MATRIX, _cell, fake_compile  # noqa: F401 (a fixture)

from _torch_c_dlpack_ext_core import driver
from _torch_c_dlpack_ext_core.files import write_manifest
from _torch_c_dlpack_ext_core.naming import LIBS_DIR, MANIFEST_NAME, PACKAGE

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler (cc)")

#: Imports the package, then round-trips a tensor through the published table.
ROUND_TRIP = r"""
import json, sys
import torch
{prelude}
import torch_c_dlpack_ext
from tests.exchange_suite.dlpack_ctypes import api_from_capsule, export_managed, import_managed

status = torch_c_dlpack_ext.status()
api = api_from_capsule(torch.Tensor.__dlpack_c_exchange_api__)
x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
y = import_managed(api, export_managed(api, x))
print(json.dumps({{
    "kind": status.kind.value,
    "library": str(status.library),
    "same": bool(torch.equal(x, y)) and y.data_ptr() == x.data_ptr(),
    "text": str(status),
    "legacy": getattr(torch.Tensor, "__c_dlpack_exchange_api__", None) is not None,
}}))
"""


@pytest.fixture(scope="module")
def portable_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A package bundling only the portable library, built by the driver."""
    built = tmp_path_factory.mktemp("portable-build")
    entry = driver.compile_portable_library(
        driver.PortableRequest(output_dir=built, source_dir=CSRC), driver.BuildPolicy(echo=False)
    )
    assert (entry.torch, entry.torch_build, entry.backend, entry.python) == (
        "any",
        "any",
        None,
        "abi3",
    )
    root = make_package(tmp_path_factory.mktemp("portable-pkg"))
    package = root / PACKAGE
    (package / LIBS_DIR).mkdir(exist_ok=True)
    shutil.copyfile(built / entry.file, package / LIBS_DIR / entry.file)
    write_manifest(package / MANIFEST_NAME, [entry._replace(file=f"{LIBS_DIR}/{entry.file}")])
    return root


def _round_trip(
    package: Path, env: dict[str, str], prelude: str = "", *, quiet: bool = True
) -> dict[str, object]:
    from tests.helpers import clean_env

    proc = run_python(
        ROUND_TRIP.format(prelude=prelude),
        pythonpath=[package, ROOT],
        env=clean_env(**env),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    if quiet:
        assert "TorchCDLPackExtWarning" not in proc.stderr, proc.stderr  # silent on success
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def test_portable_forced_on_torch_2_13_round_trips_a_tensor(portable_package: Path) -> None:
    """TORCH_C_DLPACK_EXT_PORTABLE=1 replaces torch 2.13's own table (for differential
    tests), and the portable table exports and imports a tensor without a copy."""
    result = _round_trip(portable_package, {"TORCH_C_DLPACK_EXT_PORTABLE": "1"})
    assert result["kind"] == "portable", result
    assert str(result["library"]).endswith("libtorch_c_dlpack_ext-portable.so")
    assert result["same"] is True
    assert result["legacy"] is True
    assert "portable table" in str(result["text"])
    # PORTABLE chose it: unsetting it is the way to native speed, not the JIT (issue 36).
    text = " ".join(str(result["text"]).split())
    assert "for native speed unset TORCH_C_DLPACK_EXT_PORTABLE" in text, text
    assert "JIT=1" not in text, text


def test_torch_2_13_without_the_setting_defers(portable_package: Path) -> None:
    result = _round_trip(portable_package, {})
    assert result["kind"] == "defer", result


def test_a_torch_2_2_gets_the_portable_table_on_the_common_path(portable_package: Path) -> None:
    """torch 2.2 (below the native range) was refused ("not supported"); it has
    torch._C._to_dlpack, so the portable table serves it, silently, on the import's
    common path. A stand-in torch module: the running torch's functions under a 2.2
    version, with a Tensor class that lacks the attribute torch >= 2.10 publishes."""
    from tests.helpers import clean_env

    code = r"""
import json, sys, types
import torch as real
fake = types.ModuleType("torch")
fake.__dict__.update(vars(real))
fake.__version__ = "2.2.2+cu121"
fake.Tensor = type("Tensor", (), {})
sys.modules["torch"] = fake
import torch_c_dlpack_ext
fields = torch_c_dlpack_ext._STATE["fields"]
status = torch_c_dlpack_ext.status()
print(json.dumps({"kind": status.kind.value, "common": bool(fields and fields.get("common_path")),
                  "published": hasattr(fake.Tensor, "__dlpack_c_exchange_api__")}))
"""
    proc = run_python(code, pythonpath=[portable_package, ROOT], env=clean_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "TorchCDLPackExtWarning" not in proc.stderr, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result == {"kind": "portable", "common": True, "published": True}, result


def test_library_override_naming_the_portable_library_is_accepted(
    portable_package: Path,
) -> None:
    library = next((portable_package / PACKAGE / LIBS_DIR).glob("*portable*"))
    result = _round_trip(
        portable_package,
        {"TORCH_C_DLPACK_EXT_LIBRARY": str(library), "TORCH_C_DLPACK_EXT_FORCE": "1"},
        quiet=False,  # LIBRARY's load is announced: no manifest, no sha256 check
    )
    assert result["kind"] == "portable", result
    assert result["same"] is True


def test_the_driver_audits_the_portable_library_as_torch_free(tmp_path: Path) -> None:
    """The torch-free audit refuses a library that needs a torch symbol."""
    from _torch_c_dlpack_ext_core.errors import ABIAuditError
    from _torch_c_dlpack_ext_core.toolchains.elf import audit_torch_free_library

    source = tmp_path / "bad.c"
    source.write_text(
        "extern int _ZN3c104impl3fooEv(void); int f(void) { return _ZN3c104impl3fooEv(); }\n"
    )
    library = tmp_path / "libbad.so"
    import subprocess

    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    with pytest.raises(ABIAuditError, match="built against no torch"):
        audit_torch_free_library(library, cc="cc")


@pytest.mark.usefixtures("fake_compile")
def test_the_combined_wheel_and_each_variant_carry_the_portable_table(
    tmp_path: Path, env_observer: Any
) -> None:
    """Issue 30 item 3: the portable library, built by the driver as the group's
    portable cell, ships in the combined wheel (with its torch-agnostic manifest entry);
    since issue 44 each variant (a torch minor's) carries it too, so a torch that the
    combined wheel serves with it is served by the variant as well."""
    chosen = [_cell("linux_x86_64-t28_cpu")]
    build_dir = tmp_path / "build" / "cells"
    results = [build.build_one(cell, build_dir, observer=env_observer) for cell in chosen]
    cellresults.write_group_manifests(chosen, {r.cell: r for r in results}, build_dir)
    (portable,) = portable_cells(chosen)
    results += build.build_portable_cells([portable], build_dir)
    assert [r.status for r in results] == ["built", "built"], results
    group = group_dir(build_dir, chosen[0])
    made = wheels.assemble_dist(
        {group: {chosen[0].library, portable.library}},
        tmp_path / "dist",
        matrix=MATRIX,
        repair=False,
    )
    (combined,) = [
        p
        for p in made
        if p.suffix == ".whl" and not is_variant_name(p.name) and "-none-any" not in p.name
    ]
    with zipfile.ZipFile(combined) as archive:
        manifest = json.loads(archive.read("torch_c_dlpack_ext/manifest.json"))
        names = set(archive.namelist())
    entries = {e["cell"]: e for e in manifest["libraries"]}
    assert set(entries) == {"linux_x86_64-t28_cpu", "linux_x86_64-portable"}
    assert {k: entries["linux_x86_64-portable"][k] for k in ("torch", "backend", "python")} == {
        "torch": "any",
        "backend": "any",
        "python": "abi3",
    }
    assert "torch_c_dlpack_ext/libs/libtorch_c_dlpack_ext-portable.so" in names
    assert "torch_c_dlpack_ext/csrc/portable/export.c" in names  # for the JIT
    assert "torch_c_dlpack_ext/csrc/tcde_contract.h" in names
    (variant,) = [p for p in made if is_variant_name(p.name)]
    with zipfile.ZipFile(variant) as archive:
        listed = json.loads(archive.read("torch_c_dlpack_ext/manifest.json"))["libraries"]
    assert {e["cell"] for e in listed} == set(entries)


#: A stand-in torch module: the running torch's functions under another version, with a
#: Tensor class that lacks the attribute torch >= 2.10 publishes.
STAND_IN = r"""
import json, sys, types, warnings
import torch as real
fake = types.ModuleType("torch")
fake.__dict__.update(vars(real))
fake.__version__ = sys.argv[1]
fake.Tensor = type("Tensor", (), {})
sys.modules["torch"] = fake
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import torch_c_dlpack_ext
status = torch_c_dlpack_ext.status()
print(json.dumps({"kind": status.kind.value, "library": str(status.library),
                  "warnings": [str(w.message) for w in caught
                               if type(w.message).__name__ == "TorchCDLPackExtWarning"]}))
"""


def _stand_in(package: Path, version: str, **env: str) -> dict[str, Any]:
    from tests.helpers import clean_env

    proc = run_python(
        STAND_IN, pythonpath=[package, ROOT], env=clean_env(**env), args=[version], timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def test_the_universal_wheels_jit_builds_the_portable_table(tmp_path: Path) -> None:
    """Issue 30 item 3: no compiled code is bundled (a universal wheel); with the JIT
    opted in, a torch no native library can be built for (2.2) gets the portable table,
    built with only a C compiler and Python.h into the JIT cache, silently."""
    root = make_package(tmp_path / "universal")
    cache = tmp_path / "cache"
    result = _stand_in(
        root, "2.2.2+cu121", TORCH_C_DLPACK_EXT_JIT="1", TORCH_C_DLPACK_EXT_CACHE_DIR=str(cache)
    )
    assert result["kind"] == "portable", result
    assert Path(result["library"]).parent.parent == cache
    assert Path(result["library"]).name == "libtorch_c_dlpack_ext-portable.so"
    assert result["warnings"] == []
    # Without the JIT the universal wheel still says what to do.
    plain = _stand_in(root, "2.2.2+cu121")
    assert plain["kind"] == "unavailable", plain


def test_a_failed_jit_build_falls_back_to_the_portable_table_and_says_why(
    portable_package: Path, tmp_path: Path
) -> None:
    """A torch in the native range that no bundled library matches, JIT opted in, the
    native build failing (no C++ compiler): the bundled portable table is loaded, and
    the one warning says why the native build failed."""
    result = _stand_in(
        portable_package,
        "2.8.0",
        TORCH_C_DLPACK_EXT_JIT="1",
        TORCH_C_DLPACK_EXT_CACHE_DIR=str(tmp_path / "cache"),
        CXX=str(tmp_path / "no-such-c++"),
    )
    assert result["kind"] == "portable", result
    (warning,) = result["warnings"]
    assert "JIT build of the cpu library for torch 2.8.0 failed" in warning
    assert "using the portable table instead" in warning


def test_force_with_a_failed_jit_never_puts_the_portable_table_over_torchs_own(
    tmp_path: Path,
) -> None:
    """FORCE means our NATIVE library: on torch 2.13, with the native JIT build failing,
    the import publishes nothing (torch's own table stays), never the portable one."""
    from tests.helpers import clean_env

    code = (
        "import torch; own = torch.Tensor.__dlpack_c_exchange_api__\n"
        "import torch_c_dlpack_ext as t\n"
        "print(t.status().kind.value, torch.Tensor.__dlpack_c_exchange_api__ is own)"
    )
    env = clean_env(
        TORCH_C_DLPACK_EXT_FORCE="1",
        TORCH_C_DLPACK_EXT_JIT="1",
        TORCH_C_DLPACK_EXT_CACHE_DIR=str(tmp_path / "cache"),
        CXX=str(tmp_path / "no-such-c++"),
    )
    proc = run_python(code, pythonpath=[make_package(tmp_path / "universal"), ROOT], env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split()[-2:] == ["unavailable", "True"], proc.stdout + proc.stderr


@pytest.mark.parametrize("version", ["3.14t", "3.13t"])
def test_the_driver_builds_a_free_threaded_portable_table(tmp_path: Path, version: str) -> None:
    """Once per free-threaded Python: the full API (no Py_LIMITED_API), named for that
    interpreter, audited torch-free against its libpython."""
    from devtools.envs import freethreaded

    prefix = freethreaded.prefix_for(version)
    found = freethreaded._read(version, prefix)
    if found is None:
        pytest.skip(f"no {version} CPython in the dev cache (nox -s freethreaded builds one)")
    include = prefix / "include" / f"python{version}"
    entry = driver.compile_portable_library(
        driver.PortableRequest(
            output_dir=tmp_path, source_dir=CSRC, python_include=include, python=version
        ),
        driver.BuildPolicy(echo=False),
    )
    assert (entry.python, entry.backend, entry.torch) == (version, None, "any")
    tag = version.replace(".", "").removesuffix("t")
    assert entry.file == f"libtorch_c_dlpack_ext-portable-cp{tag}t.so"
    data = (tmp_path / entry.file).read_bytes()
    assert f'"python": "{version}"'.encode() in data
    assert b"Py_LIMITED_API" not in data


def test_a_source_build_compiles_the_portable_table_where_a_c_compiler_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 30 item 3: the sdist/source build packs the portable table beside the native
    libraries when a C compiler exists; without one, the wheel holds the native ones
    alone and says so (the build does not fail for it)."""
    from build_backend import _wheel

    (entry, path), *rest = _wheel._portable_library(tmp_path / "out")
    assert rest == []
    assert (entry.torch, entry.backend, path.name) == (
        "any",
        None,
        "libtorch_c_dlpack_ext-portable.so",
    )
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    assert _wheel._portable_library(tmp_path / "out2") == []
    assert "no portable table in this wheel" in capsys.readouterr().err


def test_a_portable_table_failing_its_load_check_is_unavailable_saying_why(
    portable_package: Path,
) -> None:
    """The one other case the portable table cannot serve: its own load check fails (a
    torch whose _C lacks _from_dlpack). Nothing is published; the warning quotes the
    library's TorchCDLPackExtLoadProblem."""
    from tests.helpers import clean_env

    code = r"""
import json, sys, types, warnings
import torch as real
fake = types.ModuleType("torch")
fake.__dict__.update(vars(real))
fake.__version__ = "2.2.2"
fake.Tensor = type("Tensor", (), {})
fake._C = types.SimpleNamespace(_to_dlpack=real._C._to_dlpack)
sys.modules["torch"] = fake
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import torch_c_dlpack_ext
status = torch_c_dlpack_ext.status()
print(json.dumps({"kind": status.kind.value, "reason": status.reason,
                  "published": hasattr(fake.Tensor, "__dlpack_c_exchange_api__"),
                  "warned": [str(w.message) for w in caught]}))
"""
    proc = run_python(code, pythonpath=[portable_package, ROOT], env=clean_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["kind"] == "unavailable", result
    assert result["published"] is False
    assert "the portable table failed its load check" in result["reason"]
    assert "_from_dlpack" in result["reason"]
    assert len(result["warned"]) == 1, result["warned"]


def _dlpack_header_path(folder: Path) -> Path:
    """A folder holding only a link to this environment's apache-tvm-ffi, whose DLPack
    header a JIT build compiles with (the driver locates the package, never imports it):
    on another environment's ``PYTHONPATH`` it brings that header and nothing else."""
    tvm_ffi = pytest.importorskip("tvm_ffi")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tvm_ffi").symlink_to(Path(tvm_ffi.__file__).parent, target_is_directory=True)
    return folder


#: Imports the package, then round-trips a tensor through what it published, and lists
#: the JIT cache.
REAL_TORCH_PROBE = r"""
import json, sys, warnings
from pathlib import Path
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import torch
    import torch_c_dlpack_ext
from tests.exchange_suite.dlpack_ctypes import api_from_capsule, export_managed, import_managed

status = torch_c_dlpack_ext.status()
published = getattr(torch.Tensor, "__dlpack_c_exchange_api__", None) is not None
same = False
if published:
    api = api_from_capsule(torch.Tensor.__dlpack_c_exchange_api__)
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    y = import_managed(api, export_managed(api, x))
    same = bool(torch.equal(x, y)) and y.data_ptr() == x.data_ptr()
cache = Path(sys.argv[1])
print(json.dumps({
    "torch": torch.__version__, "kind": status.kind.value, "library": str(status.library),
    "reason": status.reason, "same": same, "text": str(status),
    "warnings": [str(w.message) for w in caught
                 if type(w.message).__name__ == "TorchCDLPackExtWarning"],
    "cache": sorted(p.name for p in cache.iterdir()) if cache.is_dir() else [],
}))
"""


@pytest.mark.slow
def test_portable_and_jit_without_a_manifest_build_the_portable_table_on_real_torch_2_8(
    tmp_path: Path, old_torch_env: Callable[[str], TorchEnv]
) -> None:
    """Issue 36 item 6, on PyPI's torch 2.8.0 (no API of its own; a native library can be
    built for it): with PORTABLE=1 and JIT=1 and no manifest, the JIT builds and publishes
    the portable table, silently. PORTABLE used to be read only after the manifest, so the
    JIT built and published the native library instead (kind "jit")."""
    from tests.helpers import clean_env

    env = old_torch_env("2.8.0")
    root = make_package(tmp_path / "pkg", manifest=False)
    cache = tmp_path / "cache"
    proc = run_python(
        REAL_TORCH_PROBE,
        python=env.python,
        pythonpath=[root, ROOT, _dlpack_header_path(tmp_path / "dlpack")],
        env=clean_env(
            TORCH_C_DLPACK_EXT_PORTABLE="1",
            TORCH_C_DLPACK_EXT_JIT="1",
            TORCH_C_DLPACK_EXT_CACHE_DIR=str(cache),
        ),
        args=[str(cache)],
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["torch"].startswith("2.8.0"), result
    assert result["kind"] == "portable", result
    assert Path(result["library"]).name == "libtorch_c_dlpack_ext-portable.so", result
    assert Path(result["library"]).parent.parent == cache, result
    assert "TORCH_C_DLPACK_EXT_PORTABLE asks for the portable table" in result["reason"]
    assert "no manifest at" in result["reason"], result
    assert result["warnings"] == [], result
    assert result["same"] is True, result
    # Only the portable table was built: no native library's cache directory.
    assert [name for name in result["cache"] if not name.startswith("portable-")] == [], result
    # Chosen by PORTABLE: the way to native speed is to unset it.
    assert "for native speed unset TORCH_C_DLPACK_EXT_PORTABLE" in " ".join(result["text"].split())


@pytest.mark.slow
@pytest.mark.parametrize("jit", [False, True], ids=["plain", "jit"])
def test_torch_2_2_is_told_why_native_speed_is_out_of_reach(
    portable_package: Path, old_torch_env: Callable[[str], TorchEnv], jit: bool
) -> None:
    """Issue 36 item 9, on PyPI's torch 2.2.2: the status and the diagnostics said "for
    native speed set TORCH_C_DLPACK_EXT_JIT=1", also with JIT=1 set, although no native
    library can be built for torch 2.2 (the reason on the same screen says so). They say
    why native speed is out of reach, with the range the decision names."""
    from tests.helpers import clean_env

    from _torch_c_dlpack_ext_core.naming import TORCH_RANGE

    (lo, hi) = TORCH_RANGE
    env = old_torch_env("2.2.2")
    settings = {"TORCH_C_DLPACK_EXT_JIT": "1"} if jit else {}
    environ = clean_env(PYTHONPATH=str(portable_package), **settings)
    proc = subprocess.run(
        [str(env.python), "-m", "torch_c_dlpack_ext", "--json"],
        env=environ, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report["torch"]["version"].startswith("2.2.2"), report["torch"]
    assert report["decision"]["kind"] == "portable", report["decision"]
    cost = report["decision"]["cost"]
    assert "JIT" not in cost["summary"], cost
    assert "native speed is out of reach: torch 2.2.2" in cost["summary"], cost
    assert f"builds for torch {lo[0]}.{lo[1]}-{hi[0]}.{hi[1]}" in cost["summary"], cost
    assert cost["native_speed"] in cost["summary"], cost
    table = subprocess.run(
        [str(env.python), "-c", "import torch_c_dlpack_ext as t; print(t.status())"],
        env=environ, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert table.returncode == 0, table.stderr[-3000:]
    text = " ".join(table.stdout.split())
    assert "native speed is out of reach: torch 2.2.2" in text, text
    assert "_JIT" not in text, text


#: Imports the package under the caller's warning filters, in a fresh process; prints what
#: the import raised (or the status) as JSON.
HOSTILE_PROBE = r"""
import json, sys, warnings
import torch
if sys.argv[1:] == ["-W", "error"]:  # after torch's own import, which warns (no numpy)
    warnings.simplefilter("error")
own = torch.Tensor.__dlpack_c_exchange_api__
try:
    import torch_c_dlpack_ext
except ImportError as exc:
    print(json.dumps({"raised": f"{type(exc).__name__}: {exc}",
                      "unchanged": torch.Tensor.__dlpack_c_exchange_api__ is own}))
else:
    status = torch_c_dlpack_ext.status()
    print(json.dumps({"raised": None, "kind": status.kind.value, "reason": status.reason,
                      "remedy": status.remedy, "warnings": list(status.warnings),
                      "unchanged": torch.Tensor.__dlpack_c_exchange_api__ is own}))
"""


@pytest.mark.parametrize(
    ("case", "env", "werror"),
    [
        ("no JIT, -W error", {"TORCH_C_DLPACK_EXT_PORTABLE": "1"}, True),
        (
            "JIT without a C compiler",
            {"TORCH_C_DLPACK_EXT_PORTABLE": "1", "TORCH_C_DLPACK_EXT_JIT": "1"},
            False,
        ),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_portable_without_a_manifest_names_portable_when_it_cannot_serve(
    tmp_path: Path, case: str, env: dict[str, str], werror: bool
) -> None:
    """Issue 36 item 6, hostile inputs on the running torch (its own table; PORTABLE
    passes over it): with no manifest, PORTABLE=1 alone is unavailable and says PORTABLE
    asked (under -W error as the ImportError the boundary raises); with JIT=1 and no C
    compiler, the portable table's build fails and the fix names PORTABLE, not the JIT.
    torch's own table is left in place."""
    from tests.helpers import clean_env

    root = make_package(tmp_path / "pkg", manifest=False)
    environ = clean_env(
        **env,
        TORCH_C_DLPACK_EXT_CACHE_DIR=str(tmp_path / "cache"),
        CC=str(tmp_path / "no-such-cc"),
        CXX=str(tmp_path / "no-such-c++"),
    )
    proc = run_python(
        HOSTILE_PROBE, pythonpath=[root], env=environ, args=["-W", "error"] if werror else []
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["unchanged"] is True, result
    if werror:
        assert result["raised"] is not None, result
        assert "TORCH_C_DLPACK_EXT_PORTABLE asks for the portable table" in result["raised"]
        assert "no manifest at" in result["raised"], result
        return
    assert result["raised"] is None, result
    assert result["kind"] == "unavailable", result
    assert "the JIT build of the portable table failed" in result["reason"], result
    assert result["remedy"].endswith("or unset TORCH_C_DLPACK_EXT_PORTABLE"), result
    (warning,) = result["warnings"]
    assert "native" not in warning, warning
