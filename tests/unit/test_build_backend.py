"""The in-tree PEP 517 backend: hooks, settings chain, metadata, wheel and sdist contents."""

from __future__ import annotations

import ast
import base64
import hashlib
import importlib.util
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import build_backend
import pytest
from build_backend._metadata import load_pyproject, project_metadata
from build_backend._options import BackendOptions, read_options
from build_backend._source import ROOT

from _torch_c_dlpack_ext_core.errors import (
    BuildError,
    ConfigError,
    TorchCDLPackExtError,
    TorchInstallError,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "backend"
HOOKS = [
    "build_editable",
    "build_sdist",
    "build_wheel",
    "get_requires_for_build_editable",
    "get_requires_for_build_sdist",
    "get_requires_for_build_wheel",
    "prepare_metadata_for_build_editable",
    "prepare_metadata_for_build_wheel",
]


@pytest.fixture(autouse=True)
def _tracebacks_in_a_temp_dir(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hook that fails in-process saves its traceback file in the temp dir: one of the
    test session's (removed with it), never /tmp itself."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path_factory.mktemp("tempdir")))


def test_init_holds_only_the_hooks() -> None:
    assert sorted(build_backend.__all__) == HOOKS
    tree = ast.parse((ROOT / "build_backend" / "__init__.py").read_text(encoding="utf-8"))
    top_imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    # Lazy: only __future__ / typing at module level, so asking for requirements loads nothing.
    assert all(
        isinstance(n, ast.ImportFrom) and n.module in ("__future__", "typing") for n in top_imports
    )
    functions = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    assert sorted(f for f in functions if not f.startswith("_")) == HOOKS
    for name in HOOKS:
        assert getattr(build_backend, name).__doc__


def test_requires_hooks_add_nothing() -> None:
    assert build_backend.get_requires_for_build_wheel() == []
    assert build_backend.get_requires_for_build_wheel({"universal": "true"}) == []


def _hook_error(hook: Callable[..., Any], *args: Any) -> TorchCDLPackExtError:
    """Call a hook in-process and return the typed error its boundary translated: the
    hook exits (``SystemExit`` with the error's exit code) and names it as the cause."""
    with pytest.raises(SystemExit) as exited:
        hook(*args)
    cause = exited.value.__cause__
    assert isinstance(cause, TorchCDLPackExtError), cause
    assert exited.value.code == cause.exit_code
    return cause


def test_the_backend_builds_no_matrix_cells(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # cells= is gone (CI's jobs run `python -m devtools build` and pass libs-dir=); asking
    # for requirements reads the settings, so the old key fails at once, with the paragraph.
    error = _hook_error(build_backend.get_requires_for_build_wheel, {"cells": "cp311-*-t28_cpu"})
    assert isinstance(error, ConfigError)
    assert "unknown setting 'cells'" in str(error)
    first = capsys.readouterr().err.splitlines()[0]
    assert first == f"torch-c-dlpack-ext cannot be built: {error}"
    assert build_backend.get_requires_for_build_sdist() == []
    assert build_backend.get_requires_for_build_editable() == []


# --- settings ------------------------------------------------------------------


def _options(
    pyproject: dict | None = None, config: dict | None = None, env: dict | None = None
) -> BackendOptions:  # type: ignore[type-arg]
    return read_options(
        pyproject=pyproject or {}, config_settings=config, environ=env or {}, root=Path("/proj")
    )


def test_defaults() -> None:
    options = _options()
    assert options == BackendOptions()
    assert options.libs_dir is None
    assert not options.universal


def test_precedence_defaults_pyproject_config_env() -> None:
    pyproject = {
        "tool": {"torch-c-dlpack-ext": {"build-dir": "from-pyproject", "variant-label": "t26_cpu"}}
    }
    assert _options(pyproject).build_dir == Path("/proj/from-pyproject")
    config = {"build-dir": "from-config"}
    assert _options(pyproject, config).build_dir == Path("/proj/from-config")
    env = {"TORCH_C_DLPACK_EXT_BUILD_DIR": "/abs/from-env"}
    options = _options(pyproject, config, env)
    assert options.build_dir == Path("/abs/from-env")
    assert options.variant_label == "t26_cpu"  # untouched layers keep their value


def test_libs_dir_from_env_like_cibuildwheel_could_pass_it() -> None:
    options = _options(env={"TORCH_C_DLPACK_EXT_LIBS_DIR": "build/job-libs"})
    assert options.libs_dir == Path("/proj/build/job-libs")


def test_runtime_env_vars_are_not_backend_settings() -> None:
    # Same prefix, other meaning (read by the runtime): ignored here, never rejected.
    assert (
        _options(env={"TORCH_C_DLPACK_EXT_JIT": "1", "TORCH_C_DLPACK_EXT_FORCE": "1"})
        == BackendOptions()
    )


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"univresal": "true"}, r"unknown setting 'univresal'; did you mean 'universal'\?"),
        ({"libs_dri": "x"}, r"did you mean 'libs-dir'\?"),
        ({"zzz": "1"}, "known settings: libs-dir"),
        ({"universal": "maybe"}, "is not a boolean"),
        ({"universal": "true", "libs-dir": "x"}, "exclude each other"),
        ({"universal": "1", "variant-label": "t26_cpu"}, "variant-label needs libraries"),
    ],
)
def test_bad_config_settings(config: dict, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ConfigError, match=message):
        _options(config=config)


def test_unknown_pyproject_key_is_rejected() -> None:
    with pytest.raises(
        ConfigError,
        match=r"\[tool.torch-c-dlpack-ext\]: unknown setting 'univrsal'; did you mean 'universal'",
    ):
        _options({"tool": {"torch-c-dlpack-ext": {"univrsal": "x"}}})


# --- metadata ------------------------------------------------------------------


def test_metadata_from_project_table() -> None:
    meta = project_metadata(ROOT)
    text = meta.metadata_bytes().decode()
    from _torch_c_dlpack_ext_core.version import __version__

    assert meta.version == __version__
    assert f"Version: {__version__}\n" in text
    assert "Name: torch-c-dlpack-ext\n" in text
    assert "Metadata-Version: 2.4" in text
    assert "Requires-Dist: packaging>=24" in text
    assert "License-Expression: Apache-2.0" in text
    assert meta.dist_info == f"torch_c_dlpack_ext-{__version__}.dist-info"


@pytest.mark.parametrize(
    ("fixture", "message"),
    [
        ("bad_version", "'zero point two' is not a PEP 440 version"),
        ("extra_dynamic", r"dynamic = \['dependencies'\]"),
        ("bad_name", r"\[project\] is invalid"),
    ],
)
def test_metadata_failure_modes(fixture: str, message: str) -> None:
    root = FIXTURES / fixture
    with pytest.raises(ConfigError, match=message):
        project_metadata(root, load_pyproject(root))


# --- artifacts -----------------------------------------------------------------


def _record_ok(archive: zipfile.ZipFile) -> None:
    record_name = next(n for n in archive.namelist() if n.endswith(".dist-info/RECORD"))
    rows = [line.split(",") for line in archive.read(record_name).decode().splitlines()]
    assert sorted(r[0] for r in rows) == sorted(archive.namelist())
    for name, digest, size in rows:
        if name == record_name:
            assert digest == size == ""
            continue
        data = archive.read(name)
        expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        assert digest == f"sha256={expected}"
        assert int(size) == len(data)


def test_universal_wheel(tmp_path: Path) -> None:
    name = build_backend.build_wheel(str(tmp_path), {"universal": "true"})
    assert name == Path(name).name, "PEP 517: build_wheel returns the basename"
    assert name.endswith("-py3-none-any.whl")
    with zipfile.ZipFile(tmp_path / name) as archive:
        names = archive.namelist()
        _record_ok(archive)
        assert {n.split("/")[0] for n in names} == {
            "torch_c_dlpack_ext",
            "_torch_c_dlpack_ext_core",
            name.split("-py3")[0] + ".dist-info",
        }
        assert "torch_c_dlpack_ext/csrc/exchange_api.cc" in names
        assert not [n for n in names if n.startswith("torch_c_dlpack_ext/libs/")]
        manifest = json.loads(archive.read("torch_c_dlpack_ext/manifest.json"))
        assert manifest["libraries"] == []
        wheel = archive.read(next(n for n in names if n.endswith("/WHEEL"))).decode()
        assert "Root-Is-Purelib: true" in wheel
        assert "Tag: py3-none-any" in wheel
        assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)


def _fake_libs(tmp_path: Path) -> Path:
    from _torch_c_dlpack_ext_core.files import sha256_of, write_manifest
    from _torch_c_dlpack_ext_core.manifest import ManifestEntry
    from _torch_c_dlpack_ext_core.naming import Backend, library_filename

    libs = tmp_path / "libs-in"
    libs.mkdir()
    entries = []
    for backend in (Backend.CPU, Backend.CUDA):
        name = library_filename(2, 8, backend, True, platform="linux")
        (libs / name).write_bytes(b"\x7fELF not really " + backend.value.encode())
        entries.append(
            ManifestEntry(
                file=name, torch="2.8", torch_build="2.8.0+cu128", backend=backend, cxx11_abi=True,
                dlpack="1.3", toolchain="g++ 12.2.0",
                gpu_toolkit="12.8" if backend is Backend.CUDA else None, platform="linux_x86_64",
                python="abi3", size=(libs / name).stat().st_size, sha256=sha256_of(libs / name),
            )
        )  # fmt: skip
    write_manifest(libs / "manifest.json", entries)
    return libs


def test_wheel_from_prebuilt_libraries(tmp_path: Path) -> None:
    libs = _fake_libs(tmp_path)
    out = tmp_path / "out"
    name = Path(build_backend.build_wheel(str(out), {"libs-dir": str(libs)})).name
    # abi3: one wheel for every CPython >= 3.9 with the GIL.
    assert name == "torch_c_dlpack_ext-0.2.0-cp39-abi3-linux_x86_64.whl"
    with zipfile.ZipFile(out / name) as archive:
        _record_ok(archive)
        manifest = json.loads(archive.read("torch_c_dlpack_ext/manifest.json"))
        files = sorted(e["file"] for e in manifest["libraries"])
        assert files == [
            "libs/libtorch_c_dlpack_ext-torch2.8-cpu-cxx11abi1.so",
            "libs/libtorch_c_dlpack_ext-torch2.8-cuda-cxx11abi1.so",
        ]
        for entry in manifest["libraries"]:
            data = archive.read(f"torch_c_dlpack_ext/{entry['file']}")
            assert hashlib.sha256(data).hexdigest() == entry["sha256"]
            assert len(data) == entry["size"]
            info = archive.getinfo(f"torch_c_dlpack_ext/{entry['file']}")
            assert (info.external_attr >> 16) & 0o777 == 0o755
        wheel = archive.read("torch_c_dlpack_ext-0.2.0.dist-info/WHEEL").decode()
        assert "Root-Is-Purelib: false" in wheel


def test_wheel_is_reproducible(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    libs = _fake_libs(tmp_path)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    first = tmp_path / "a" / build_backend.build_wheel(str(tmp_path / "a"), {"libs-dir": str(libs)})
    second = (
        tmp_path / "b" / build_backend.build_wheel(str(tmp_path / "b"), {"libs-dir": str(libs)})
    )
    assert first.read_bytes() == second.read_bytes()
    with zipfile.ZipFile(first) as archive:
        stamps = {i.date_time for i in archive.infolist()}
        assert stamps == {(2023, 11, 14, 22, 13, 20)}
        names = archive.namelist()
        assert names[:-1] == sorted(names[:-1])
        assert names[-1].endswith("RECORD")


def test_variant_label_on_backend_wheel(tmp_path: Path) -> None:
    libs = _fake_libs(tmp_path)
    name = Path(
        build_backend.build_wheel(
            str(tmp_path), {"libs-dir": str(libs), "variant-label": "t28_cuda"}
        )
    ).name
    assert name.endswith("-cp39-abi3-linux_x86_64-t28_cuda.whl")


def test_wheel_without_torch_fails_with_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a)
    )
    error = _hook_error(build_backend.build_wheel, str(tmp_path))
    assert isinstance(error, TorchInstallError)
    assert "--no-build-isolation" in str(error)
    assert list(tmp_path.iterdir()) == []


def test_torch_setting_pointing_nowhere(tmp_path: Path) -> None:
    error = _hook_error(build_backend.build_wheel, str(tmp_path), {"torch": str(tmp_path / "x")})
    assert isinstance(error, TorchInstallError)
    assert "no torch installation at" in str(error)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("python", "tag"),
    [("3.14t", "cp314-cp314t"), ("3.13t", "cp313-cp313t"), ("3.12", "cp312-cp312")],
)
def test_libs_dir_target_python_comes_from_the_manifest(
    tmp_path: Path, python: str, tag: str
) -> None:
    from _torch_c_dlpack_ext_core.files import load_manifest, write_manifest

    libs = _fake_libs(tmp_path)
    entries = load_manifest(libs / "manifest.json")
    # Free-threaded libraries (and "3.12" ones of a manifest written before abi3) serve one
    # interpreter: the wheel says which.
    write_manifest(libs / "manifest.json", [e._replace(python=python) for e in entries])
    assert build_backend.build_wheel(str(tmp_path / "a"), {"libs-dir": str(libs)}).endswith(
        f"-{tag}-linux_x86_64.whl"
    )
    # A libs dir mixing abi3 and free-threaded libraries cannot make one wheel.
    write_manifest(libs / "manifest.json", [entries[0], entries[1]._replace(python=python)])
    error = _hook_error(build_backend.build_wheel, str(tmp_path / "b"), {"libs-dir": str(libs)})
    assert isinstance(error, BuildError)
    assert f"compiled for {' and '.join(sorted(['abi3', python]))}" in str(error)
    assert not (tmp_path / "b").exists() or list((tmp_path / "b").iterdir()) == []


def test_sdist_contents_and_reproducibility(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    name = build_backend.build_sdist(str(tmp_path / "a"))
    again = build_backend.build_sdist(str(tmp_path / "b"))
    assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / again).read_bytes()
    with tarfile.open(tmp_path / "a" / name) as tar:
        names = tar.getnames()
        base = name[: -len(".tar.gz")]
        assert all(n.startswith(base + "/") for n in names)
        rel = {n[len(base) + 1 :] for n in names}
        for required in (
            "PKG-INFO", "pyproject.toml", "README.md", "LICENSE",
            "build_backend/__init__.py", "build_backend/_boundary.py",
            "python/torch_c_dlpack_ext/__init__.py", "csrc/exchange_api.cc",
        ):  # fmt: skip
            assert required in rel
        # Only what a source build uses: not the matrix, nor its reader (devtools).
        assert "matrix.toml" not in rel
        assert not [n for n in rel if "matrix" in n]
        assert not [n for n in rel if n.endswith((".so", ".pyc")) or "/libs/" in n]
        assert not [n for n in rel if n.startswith(("tests/", "devtools/", ".github/"))]
        pkg_info = tar.extractfile(f"{base}/PKG-INFO")
        assert pkg_info is not None
        assert b"Name: torch-c-dlpack-ext" in pkg_info.read()
        assert {m.mtime for m in tar.getmembers()} == {1700000000}


def test_prepare_metadata_matches_wheel(tmp_path: Path) -> None:
    dist_info = build_backend.prepare_metadata_for_build_wheel(str(tmp_path / "meta"))
    metadata = (tmp_path / "meta" / dist_info / "METADATA").read_bytes()
    wheel = tmp_path / build_backend.build_wheel(str(tmp_path), {"universal": "true"})
    with zipfile.ZipFile(wheel) as archive:
        assert archive.read(f"{dist_info}/METADATA") == metadata


def test_editable_wheel_points_at_the_source(tmp_path: Path) -> None:
    wheel = tmp_path / build_backend.build_editable(str(tmp_path))
    with zipfile.ZipFile(wheel) as archive:
        pth = [n for n in archive.namelist() if n.endswith(".pth")]
        assert len(pth) == 1
        assert archive.read(pth[0]).decode().strip() == str(ROOT / "python")
        assert not [n for n in archive.namelist() if n.startswith("torch_c_dlpack_ext/")]


def test_sdist_tar_is_gzip_with_fixed_header(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    data = (tmp_path / build_backend.build_sdist(str(tmp_path))).read_bytes()
    assert data[:2] == b"\x1f\x8b"
    assert int.from_bytes(data[4:8], "little") == 1700000000
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        assert {m.uid for m in tar.getmembers()} == {0}


def test_build_requirements_match_pyproject() -> None:
    from build_backend._boundary import BUILD_REQUIREMENTS

    requires = load_pyproject(ROOT)["build-system"]["requires"]
    assert sorted(BUILD_REQUIREMENTS.values()) == sorted(requires)


def _run_hook_as_a_frontend_does(
    tmp_path: Path,
    hook: str,
    kwargs: dict[str, Any],
    *,
    block: str = "",
    environ: Mapping[str, str] = {},
) -> tuple[int, str]:
    """Call ``hook`` the way pip, build and uv do: pyproject_hooks' in-process script in
    a child Python. ``block``: a module the child cannot import. Returns the child's
    exit status and stderr."""
    from pyproject_hooks import BuildBackendHookCaller

    seen: list[subprocess.CompletedProcess[str]] = []

    def runner(
        cmd: Sequence[str], cwd: str | None = None, extra_environ: Mapping[str, str] | None = None
    ) -> None:
        argv = list(cmd)
        if block:
            script, *args = argv[1:]
            code = (
                f"import runpy, sys; sys.modules[{block!r}] = None; "
                f"sys.argv = {[script, *args]!r}; runpy.run_path({script!r}, run_name='__main__')"
            )
            argv = [argv[0], "-c", code]
        env = {**os.environ, **environ, **(extra_environ or {}), "TMPDIR": str(tmp_path)}
        proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
        seen.append(proc)
        if proc.returncode:
            raise subprocess.CalledProcessError(proc.returncode, argv)

    caller = BuildBackendHookCaller(
        str(ROOT), "build_backend",
        backend_path=load_pyproject(ROOT)["build-system"]["backend-path"], runner=runner,
        python_executable=sys.executable,
    )  # fmt: skip
    with pytest.raises(subprocess.CalledProcessError):
        getattr(caller, hook)(**kwargs)
    return seen[-1].returncode, seen[-1].stderr


def test_frontend_sees_one_paragraph_not_a_traceback(tmp_path: Path) -> None:
    nowhere = tmp_path / "nowhere"
    code, stderr = _run_hook_as_a_frontend_does(
        tmp_path,
        "build_wheel",
        {"wheel_directory": str(tmp_path / "out"), "config_settings": {"torch": str(nowhere)}},
    )
    assert code != 0
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert lines[0].startswith("torch-c-dlpack-ext cannot be built: no torch installation at")
    assert str(nowhere) in lines[0]
    assert lines[-1].startswith("(full traceback: ")
    assert lines[-1].endswith(")")
    saved = Path(lines[-1].removeprefix("(full traceback: ")[:-1])
    assert saved.parent == tmp_path  # the temp dir (TMPDIR)
    assert saved.name.startswith("torch-c-dlpack-ext-build-error-")
    assert len(lines) == 2
    assert "Traceback (most recent call last)" in saved.read_text(encoding="utf-8")
    assert "TorchInstallError" in saved.read_text(encoding="utf-8")


def test_traceback_when_asked(tmp_path: Path) -> None:
    code, stderr = _run_hook_as_a_frontend_does(
        tmp_path,
        "build_wheel",
        {"wheel_directory": str(tmp_path / "out"), "config_settings": {"torch": "/nowhere"}},
        environ={"TORCH_C_DLPACK_EXT_BUILD_TRACEBACK": "1"},
    )
    assert code != 0
    assert "Traceback (most recent call last)" in stderr
    assert "TorchInstallError: no torch installation at" in stderr
    assert "cannot be built" not in stderr


def test_missing_build_requirement_says_what_to_install(tmp_path: Path) -> None:
    code, stderr = _run_hook_as_a_frontend_does(
        tmp_path,
        "prepare_metadata_for_build_wheel",
        {"metadata_directory": str(tmp_path / "meta")},
        block="pyproject_metadata",
    )
    assert code != 0
    assert "Traceback" not in stderr, stderr
    first = stderr.strip().splitlines()[0]
    assert "its build requirement pyproject-metadata>=0.9 is not installed" in first
    assert "pip --no-build-isolation" in first
    assert 'pip install "packaging>=24" "filelock>=3.12" "apache-tvm-ffi>=0.1.6"' in first
    assert '"pyproject-metadata>=0.9"' in first


def test_foreign_errors_keep_their_traceback() -> None:
    from build_backend._boundary import brief_error

    assert brief_error(KeyError("x")) is None
    assert brief_error(ModuleNotFoundError("no", name="numpy")) is None
    assert (
        brief_error(ConfigError("bad -C key")) == "torch-c-dlpack-ext cannot be built: bad -C key"
    )
