"""Opt-in JIT: ``TORCH_C_DLPACK_EXT_JIT=1`` at import, or ``build_for_current_torch()``.

One cache directory is shared by the module, so the real compile happens once and
later tests prove the cache is reused (no second compile).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from tests.helpers import clean_env, make_package, probe_import, run_python

from _torch_c_dlpack_ext_core.naming import Backend
from torch_c_dlpack_ext._jit import cache_key
from torch_c_dlpack_ext._torchinfo import TorchInfo

torch = pytest.importorskip("torch")

P = "TORCH_C_DLPACK_EXT_"


def info(version: str = "2.8.0+cu128", abi: bool | None = True) -> TorchInfo:
    return TorchInfo(
        version=version,
        backend=Backend.CUDA,
        cxx11_abi=abi,
        cuda_version="12.8",
        hip_version=None,
        has_capsule=False,
        has_legacy_int=False,
    )


def test_cache_key_covers_full_torch_identity() -> None:
    base = cache_key(info(), Backend.CUDA, "cp311")
    assert base == cache_key(info(), Backend.CUDA, "cp311")
    variants = {
        cache_key(info("2.8.0a0+abc123"), Backend.CUDA, "cp311"),
        cache_key(info("2.8.1+cu128"), Backend.CUDA, "cp311"),
        cache_key(info(abi=False), Backend.CUDA, "cp311"),
        cache_key(info(), Backend.CPU, "cp311"),
        cache_key(info(), Backend.CUDA, "cp312"),
        cache_key(info(), Backend.CUDA, "cp314t"),
    }
    assert base not in variants
    assert len(variants) == 6
    assert all("/" not in key and "+" not in key for key in {base, *variants})


@pytest.fixture(scope="module")
def jit_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("jit-cache")


@pytest.fixture(scope="module")
def empty_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_package(tmp_path_factory.mktemp("pkg"), manifest=False)


#: torch's own import warnings (NumPy missing...) are not ours: silenced, so stderr is
#: exactly what torch-c-dlpack-ext printed.
QUIET_TORCH = """
import warnings
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import torch
"""

BUILD = (
    QUIET_TORCH
    + r"""
import json
before = torch.Tensor.__dict__.get("__dlpack_c_exchange_api__")
import torch_c_dlpack_ext as pkg
path = pkg.build_for_current_torch()
status = pkg.status()
print(json.dumps({"path": str(path), "kind": status.kind.value,
                  "replaced": torch.Tensor.__dict__.get("__dlpack_c_exchange_api__") is not before,
                  "legacy": torch.Tensor.__dict__.get("__c_dlpack_exchange_api__")}))
"""
)


@pytest.mark.slow
def test_build_for_current_torch_builds_once_then_reuses(
    empty_package: Path, jit_cache: Path
) -> None:
    env = clean_env(**{P + "CACHE_DIR": str(jit_cache)})
    first = run_python(BUILD, pythonpath=[empty_package], env=env, timeout=900)
    assert first.returncode == 0, first.stderr[-3000:]
    result = json.loads(first.stdout.strip().splitlines()[-1])
    path = Path(result["path"])
    assert path.is_file()
    assert path.parent.parent == jit_cache
    assert path.parent.name.startswith(f"torch{torch.__version__.replace('+', '_')}-")
    assert result["kind"] == "jit"
    assert result["replaced"]
    assert isinstance(result["legacy"], int)
    # A cold build says one line that it is building (no compiler command, no timing).
    (line,) = first.stderr.splitlines()
    assert line.startswith(
        f"torch-c-dlpack-ext: building {path.name} for torch {torch.__version__}"
    )
    assert line.endswith("(once; later imports reuse it)")

    second = run_python(BUILD, pythonpath=[empty_package], env=env, timeout=300)
    assert second.returncode == 0, second.stderr[-3000:]
    assert json.loads(second.stdout.strip().splitlines()[-1])["path"] == str(path)
    assert second.stderr == "", "a cache hit prints nothing"


@pytest.mark.slow
def test_jit_import_on_a_warm_cache_prints_nothing(empty_package: Path, jit_cache: Path) -> None:
    # Runs after the build above (same cache). An import prints nothing on success.
    code = QUIET_TORCH + "import torch_c_dlpack_ext as p; print(p.status().kind.value)"
    env = clean_env(**{P + "CACHE_DIR": str(jit_cache), P + "JIT": "1", P + "FORCE": "1"})
    proc = run_python(code, pythonpath=[empty_package], env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "jit"
    assert proc.stderr == ""


@pytest.mark.slow
def test_jit_at_import_uses_the_cache_and_round_trips(empty_package: Path, jit_cache: Path) -> None:
    # Runs after the build above (same cache): import-time JIT finds the library.
    env = clean_env(**{P + "CACHE_DIR": str(jit_cache), P + "JIT": "1", P + "FORCE": "1"})
    env["PYTHONPATH"] = str(empty_package)
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "torch_c_dlpack_ext", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report["decision"]["kind"] == "jit"
    assert report["decision"]["library"].startswith(str(jit_cache))
    assert report["build_info"]["torch"] == torch.__version__
    assert report["smoke_test"]["ok"], report["smoke_test"]


def test_import_never_compiles_unless_asked(empty_package: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    code = "import torch_c_dlpack_ext as p; print(p.status().kind.value)"
    env = clean_env(**{P + "CACHE_DIR": str(cache), P + "FORCE": "1"})
    proc = run_python(code, pythonpath=[empty_package], env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "unavailable"
    assert not cache.exists()
    assert "c++" not in proc.stderr


def test_build_for_current_torch_raises_typed_error_without_compiler(
    empty_package: Path, tmp_path: Path
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    nm = shutil.which("nm")
    assert nm is not None
    (bin_dir / "nm").symlink_to(nm)
    code = """
import torch_c_dlpack_ext as pkg
from _torch_c_dlpack_ext_core.errors import CompilerNotFoundError
try:
    pkg.build_for_current_torch()
except CompilerNotFoundError as exc:
    print("typed:", exc)
"""
    env = clean_env(**{P + "CACHE_DIR": str(tmp_path / "cache"), "PATH": str(bin_dir), "CXX": ""})
    proc = run_python(code, pythonpath=[empty_package], env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "typed: no C++ compiler" in proc.stdout


READ_ONLY = r"""
import json, tempfile
def refuse(*args, **kwargs):
    raise PermissionError(13, "Permission denied")
tempfile.TemporaryFile = refuse  # the cache directory behaves as read-only
import torch_c_dlpack_ext as pkg
from _torch_c_dlpack_ext_core.errors import ConfigError
try:
    path = pkg.build_for_current_torch()
except ConfigError as exc:
    print(json.dumps({"error": str(exc)}))
else:
    print(json.dumps({"path": str(path), "kind": pkg.status().kind.value}))
"""


@pytest.mark.slow
def test_read_only_cache_holding_the_build_is_reused(
    empty_package: Path, jit_cache: Path, tmp_path: Path
) -> None:
    # Runs after the build above (same cache): nothing may be written, nothing compiles.
    env = clean_env(**{P + "CACHE_DIR": str(jit_cache)})
    proc = run_python(READ_ONLY, pythonpath=[empty_package], env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result.get("kind") == "jit", result
    assert Path(result["path"]).parent.parent == jit_cache
    assert "compiled libtorch_c_dlpack_ext" not in proc.stderr

    # A read-only cache without the build: one clear error naming the variable to change.
    empty = tmp_path / "empty-cache"
    env = clean_env(**{P + "CACHE_DIR": str(empty)})
    proc = run_python(READ_ONLY, pythonpath=[empty_package], env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    error = json.loads(proc.stdout.strip().splitlines()[-1])["error"]
    assert f"JIT cache directory {empty} is not writable (Permission denied)" in error
    assert error.endswith(
        f"holds no build for this torch; point {P}CACHE_DIR at a writable directory"
    )


ERROR = r"""
import torch_c_dlpack_ext as pkg
from _torch_c_dlpack_ext_core.errors import ConfigError
try:
    pkg.build_for_current_torch()
except ConfigError as exc:
    print("ConfigError:", exc)
"""


def test_unusable_xdg_cache_home_is_named_as_the_cause(empty_package: Path, tmp_path: Path) -> None:
    not_a_dir = tmp_path / "cache-file"
    not_a_dir.write_text("a file where the cache directory should be\n", encoding="utf-8")
    env = clean_env(XDG_CACHE_HOME=str(not_a_dir))
    proc = run_python(ERROR, pythonpath=[empty_package], env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = proc.stdout.strip().splitlines()[-1]
    assert line.startswith(f"ConfigError: JIT cache directory {not_a_dir / 'torch-c-dlpack-ext'}")
    assert "(Not a directory)" in line
    assert line.endswith(
        f"it is under XDG_CACHE_HOME: make that writable, or point {P}CACHE_DIR at a writable "
        "directory"
    )


def test_bad_backend_fails_instead_of_building_another(empty_package: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    env = clean_env(**{P + "BACKEND": "tpu", P + "CACHE_DIR": str(cache)})
    proc = run_python(ERROR, pythonpath=[empty_package], env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = proc.stdout.strip().splitlines()[-1]
    assert line.startswith("ConfigError: cannot build for the current torch:")
    assert f"{P}BACKEND" in line
    assert "'tpu'" in line
    assert "cpu, cuda, rocm" in line
    assert not cache.exists(), "nothing may be built for another backend"


def test_jit_failure_under_jit_does_not_advise_setting_jit(
    empty_package: Path, tmp_path: Path
) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x", encoding="utf-8")
    code = (
        "import json, torch_c_dlpack_ext as p; s = p.status(); "
        "print(json.dumps({'kind': s.kind.value, 'text': str(s), 'all': [s.reason, s.remedy, "
        "*s.warnings]}))"
    )
    env = clean_env(**{P + "FORCE": "1", P + "JIT": "1", P + "CACHE_DIR": str(not_a_dir / "cache")})
    proc = run_python(code, pythonpath=[empty_package], env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["kind"] == "unavailable"
    # str(status) wraps its lines at word boundaries: read it as one line.
    text = " ".join(result["text"].split())
    assert "is not writable (Not a directory)" in text
    for message in [text, *result["all"], proc.stderr]:
        assert f"set {P}JIT=1" not in " ".join(message.split()), message
    assert f"point {P}CACHE_DIR at a writable directory" in text


@pytest.mark.parametrize("name", ["jit", "Jit", "force"])
def test_mis_cased_variable_is_announced_once_with_a_hint(empty_package: Path, name: str) -> None:
    result = probe_import(empty_package, **{P + name: "1"})
    (warning,) = [w for w in result["warnings"] if P + name in w]
    assert f"did you mean {P}{name.upper()}? The names are case-sensitive" in warning
    assert len(result["warnings"]) == 1, result["warnings"]


CWD_BUILD = r"""
import json, os, sys
os.chdir(sys.argv[1])
import torch_c_dlpack_ext as pkg
from _torch_c_dlpack_ext_core.errors import TorchCDLPackExtError
try:
    pkg.build_for_current_torch()
except TorchCDLPackExtError as exc:
    print(json.dumps({"error": type(exc).__name__}))
"""


@pytest.mark.parametrize(
    "setting", [{P + "CACHE_DIR": "   "}, {"XDG_CACHE_HOME": ""}, {"XDG_CACHE_HOME": "rel"}]
)
def test_blank_or_relative_cache_settings_never_build_in_the_cwd(
    empty_package: Path, tmp_path: Path, setting: dict[str, str]
) -> None:
    # CXX that cannot be a compiler: the cache directory is created, then the build stops.
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    env = clean_env(HOME=str(home), CXX="/bin/false")
    env.pop("XDG_CACHE_HOME", None)
    env.update(setting)
    proc = run_python(CWD_BUILD, pythonpath=[empty_package], env=env, args=[str(work)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1])["error"] == "CompilerNotFoundError"
    assert list(work.iterdir()) == [], "nothing may be created in the current directory"
    (made,) = (home / ".cache" / "torch-c-dlpack-ext").iterdir()
    assert made.name.startswith(f"torch{torch.__version__.replace('+', '_')}-")


def test_relative_cache_dir_is_refused_by_build_for_current_torch(
    empty_package: Path, tmp_path: Path
) -> None:
    code = CWD_BUILD.replace("type(exc).__name__}", 'type(exc).__name__, "text": str(exc)}')
    env = clean_env(**{P + "CACHE_DIR": "cache"})
    proc = run_python(code, pythonpath=[empty_package], env=env, args=[str(tmp_path)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["error"] == "ConfigError"
    assert f"{P}CACHE_DIR='cache' is not an absolute path" in result["text"]
    assert list(tmp_path.iterdir()) == []
