"""Build inputs a hostile user sets (issue 21): ``SOURCE_DATE_EPOCH``, ``variant-label``, a
GPU torch without its toolkit headers, and where a failed build's traceback goes.

Each bad input must give one clear line (or paragraph) and leave nothing written.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import build_backend
import pytest
from build_backend import _options
from build_backend._metadata import load_pyproject
from build_backend._options import (
    EPOCH_MAX,
    VARIANT_LABEL_RULE,
    check_variant_label,
    read_options,
    source_date_epoch,
)
from build_backend._source import ROOT
from tests.helpers import devtools_env

from _torch_c_dlpack_ext_core import driver, headers
from _torch_c_dlpack_ext_core.errors import ConfigError, GPUHeadersNotFoundError

FakeTorch = Callable[..., Path]

#: Values the issue tried, plus a few more that int() would have let through.
BAD_EPOCHS = [
    *("", "   ", "abc", "1e9", "-1", "99999999999", str(EPOCH_MAX + 1), "1_000"),
    "\uff11\uff12",  # fullwidth digits: int() reads them as 12
]


@pytest.fixture(autouse=True)
def _tracebacks_in_a_temp_dir(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hook that fails in-process saves its traceback file in the temp dir: one of the
    test session's (removed with it), never /tmp itself."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path_factory.mktemp("tempdir")))


def _hook(hook: Callable[..., Any], *args: Any) -> ConfigError | GPUHeadersNotFoundError:
    """Call a hook in-process: it exits with the error's code and names it as the cause."""
    with pytest.raises(SystemExit) as exited:
        hook(*args)
    cause = exited.value.__cause__
    assert isinstance(cause, (ConfigError, GPUHeadersNotFoundError)), cause
    assert exited.value.code == cause.exit_code
    return cause


def _frontend(
    hook: str, kwargs: Mapping[str, Any], tmp_path: Path, environ: Mapping[str, str]
) -> subprocess.CompletedProcess[str]:
    """Run ``hook`` as pip does (pyproject_hooks' script in a child Python); the child's
    result, whatever it was. Its temp dir is ``tmp_path``."""
    from pyproject_hooks import BuildBackendHookCaller

    seen: list[subprocess.CompletedProcess[str]] = []

    def runner(
        cmd: list[str], cwd: str | None = None, extra_environ: Mapping[str, str] | None = None
    ) -> None:
        env = {**os.environ, **environ, **(extra_environ or {}), "TMPDIR": str(tmp_path)}
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
        seen.append(proc)
        if proc.returncode:
            raise subprocess.CalledProcessError(proc.returncode, cmd)

    caller = BuildBackendHookCaller(
        str(ROOT), "build_backend",
        backend_path=load_pyproject(ROOT)["build-system"]["backend-path"], runner=runner,
        python_executable=sys.executable,
    )  # fmt: skip
    with contextlib.suppress(subprocess.CalledProcessError):
        getattr(caller, hook)(**kwargs)
    return seen[-1]


# --- SOURCE_DATE_EPOCH ----------------------------------------------------------


@pytest.mark.parametrize("value", BAD_EPOCHS)
def test_a_bad_source_date_epoch_is_one_line_naming_the_range(value: str) -> None:
    with pytest.raises(ConfigError) as info:
        source_date_epoch({"SOURCE_DATE_EPOCH": value})
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"SOURCE_DATE_EPOCH={value!r} is not valid")
    assert f"0 to {EPOCH_MAX}" in message
    assert "2106-02-07" in message


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, None), ("0", 0), (" 1700000000\n", 1700000000), (str(EPOCH_MAX), EPOCH_MAX)],
)
def test_good_source_date_epochs(value: str | None, expected: int | None) -> None:
    environ = {} if value is None else {"SOURCE_DATE_EPOCH": value}
    assert source_date_epoch(environ) == expected


@pytest.mark.parametrize("value", ["", "abc", "1e9", "-1", "99999999999"])
def test_every_hook_that_writes_refuses_a_bad_epoch_before_writing(
    value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", value)
    out = tmp_path / "out"
    for hook, args in [
        (build_backend.get_requires_for_build_wheel, ({"universal": "true"},)),
        (build_backend.build_wheel, (str(out), {"universal": "true"})),
        (build_backend.build_sdist, (str(out),)),
        (build_backend.build_editable, (str(out),)),
    ]:
        error = _hook(hook, *args)
        assert isinstance(error, ConfigError)
        assert str(error).startswith(f"SOURCE_DATE_EPOCH={value!r} is not valid")
        lines = capsys.readouterr().err.strip().splitlines()
        assert lines[0] == f"torch-c-dlpack-ext cannot be built: {error}"
        assert len(lines) == 2  # the paragraph, then where the traceback went
    assert not out.exists() or list(out.iterdir()) == []


def test_a_bad_epoch_through_a_frontend_is_one_paragraph_without_traceback(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = _frontend(
        "build_sdist", {"sdist_directory": str(out)}, tmp_path, {"SOURCE_DATE_EPOCH": "-1"}
    )
    assert proc.returncode == ConfigError.exit_code
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("torch-c-dlpack-ext cannot be built: SOURCE_DATE_EPOCH='-1'")
    assert not out.exists() or list(out.iterdir()) == []


def test_the_edges_of_the_range_are_stored_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(EPOCH_MAX))
    sdist = tmp_path / build_backend.build_sdist(str(tmp_path))
    with gzip.open(sdist) as gz:
        gz.read(1)
        assert gz.mtime == EPOCH_MAX
    with tarfile.open(sdist) as tar:
        assert {m.mtime for m in tar.getmembers()} == {EPOCH_MAX}
    wheel = tmp_path / build_backend.build_wheel(str(tmp_path), {"universal": "true"})
    with zipfile.ZipFile(wheel) as archive:
        assert {i.date_time for i in archive.infolist()} == {(2106, 2, 7, 6, 28, 14)}
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "0")
    wheel = (
        tmp_path / "zero" / build_backend.build_wheel(str(tmp_path / "zero"), {"universal": "1"})
    )
    with zipfile.ZipFile(wheel) as archive:
        assert {i.date_time for i in archive.infolist()} == {(1980, 1, 1, 0, 0, 0)}


def test_devtools_refuses_a_bad_epoch_before_compiling_anything(tmp_path: Path) -> None:
    out = tmp_path / "dist"
    proc = subprocess.run(
        [sys.executable, "-m", "devtools", "build", "--cells", "*-t28_cpu", "--out", str(out),
         "--build-dir", str(tmp_path / "cells")],
        cwd=ROOT, env=devtools_env(SOURCE_DATE_EPOCH="1e9"), capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == ConfigError.exit_code, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"error: ConfigError: {_epoch_error('1e9')}",
    ]
    assert not out.exists()
    assert not (tmp_path / "cells").exists()


def _epoch_error(value: str) -> str:
    with pytest.raises(ConfigError) as info:
        source_date_epoch({"SOURCE_DATE_EPOCH": value})
    return str(info.value)


def test_devtools_assembly_leaves_dist_as_it_was_when_it_fails_half_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The universal wheel is written, then the sdist fails (here: a full disk)."""
    from build_backend import _sdist
    from devtools.build import wheels

    out = tmp_path / "dist"
    out.mkdir()
    (out / "keep.txt").write_text("from an earlier build\n", encoding="utf-8")

    def disk_full(*args: object) -> str:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_sdist, "build_sdist_impl", disk_full)
    with pytest.raises(OSError, match="No space left"):
        wheels.assemble_dist({}, out, matrix=None, repair=False)
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dist"]  # no staging dir left

    monkeypatch.undo()
    made = wheels.assemble_dist({}, out, matrix=None, repair=False)
    assert sorted(p.name for p in made) == [
        "torch_c_dlpack_ext-0.2.0-py3-none-any.whl",
        "torch_c_dlpack_ext-0.2.0.tar.gz",
    ]
    assert all(p.parent == out and p.is_file() for p in made)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dist"]


# --- variant-label ----------------------------------------------------------------

BAD_LABELS = ["has-dash", "a b", "ÜNI", "../x", "", " ", "T28_cpu", "null", "t28/cpu", "x\n"]


@pytest.mark.parametrize("label", BAD_LABELS)
@pytest.mark.parametrize("where", ["config", "environment", "pyproject"])
def test_a_bad_variant_label_is_refused_naming_the_setting_and_the_rule(
    label: str, where: str
) -> None:
    config: dict[str, str] = {}
    environ: dict[str, str] = {}
    pyproject: dict[str, Any] = {}
    if where == "config":
        config["variant-label"] = label
    elif where == "environment":
        environ["TORCH_C_DLPACK_EXT_VARIANT_LABEL"] = label
    else:
        pyproject["tool"] = {"torch-c-dlpack-ext": {"variant-label": label}}
    with pytest.raises(ConfigError) as info:
        read_options(pyproject=pyproject, config_settings=config, environ=environ, root=ROOT)
    message = str(info.value)
    assert "variant-label" in message
    assert VARIANT_LABEL_RULE in message
    assert repr(label) in message


@pytest.mark.parametrize("label", ["t28_cuda", "t26_cpu_abi0", "x86_64.v3", "0", "a" * 100])
def test_good_variant_labels(label: str) -> None:
    assert check_variant_label(label) == label
    options = read_options(
        pyproject={}, config_settings={"variant-label": label}, environ={}, root=ROOT
    )
    assert options.variant_label == label


def test_the_label_rule_is_variantlibs() -> None:
    from variantlib import constants

    assert _options._VARIANT_LABEL.pattern == constants.VALIDATION_VARIANT_LABEL_REGEX.pattern
    assert _options._NULL_LABEL == constants.NULL_VARIANT_LABEL


@pytest.mark.parametrize("label", ["has-dash", "../x", "", "ÜNI"])
def test_the_backend_writes_no_wheel_for_a_bad_label(
    label: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.unit.test_build_backend import _fake_libs

    libs = _fake_libs(tmp_path)
    out = tmp_path / "out"
    error = _hook(
        build_backend.build_wheel, str(out), {"libs-dir": str(libs), "variant-label": label}
    )
    assert isinstance(error, ConfigError)
    assert "Traceback" not in capsys.readouterr().err
    assert not out.exists() or list(out.iterdir()) == []
    assert not (tmp_path / "x").exists()


def test_the_wheel_writer_refuses_a_bad_label_from_any_caller(tmp_path: Path) -> None:
    from build_backend._metadata import project_metadata
    from build_backend._wheel import assemble_wheel

    with pytest.raises(ConfigError, match=re.escape(VARIANT_LABEL_RULE)):
        assemble_wheel(tmp_path, meta=project_metadata(ROOT), libraries=[], label="../x")
    assert list(tmp_path.iterdir()) == []


# --- a GPU torch without its toolkit headers --------------------------------------

CUDA_LIBS = ("libc10.so", "libtorch_cpu.so", "libc10_cuda.so", "libtorch_cuda.so")
ROCM_LIBS = ("libc10.so", "libtorch_cpu.so", "libc10_hip.so", "libtorch_hip.so")


@pytest.fixture
def no_gpu_toolkit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """No CUDA or ROCm toolkit anywhere the header search looks; ``compile_library``
    recorded instead of run (the libraries are not what is tested here), after the header
    search it starts with (so a GPU backend without headers fails in it, as it would)."""
    for var in ("CUDA_HOME", "CUDA_PATH", "ROCM_PATH", "ROCM_HOME"):
        monkeypatch.delenv(var, raising=False)
    for var in [v for v in os.environ if v.startswith("TORCH_C_DLPACK_EXT_")]:
        monkeypatch.delenv(var)
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # no nvcc
    # Only the torch's own environment: this test's must not lend its NVIDIA wheels.
    monkeypatch.setattr(headers, "_site_packages_dirs", lambda torch: [torch.site_packages])
    monkeypatch.setattr(headers, "_STANDARD_CUDA_HOMES", ())  # nor /usr/local/cuda
    if Path("/opt/rocm/include/hip/hip_runtime_api.h").is_file():
        pytest.skip("this machine has ROCm in /opt/rocm")
    compiled: list[str] = []

    def fake_compile(request: driver.BuildRequest, *_: Any, **__: Any) -> Any:
        from _torch_c_dlpack_ext_core.files import sha256_of

        torch, backend, output_dir = request.torch, request.backend, request.output_dir
        from _torch_c_dlpack_ext_core.manifest import ManifestEntry

        headers.find_gpu_toolkit(backend, torch)
        output_dir.mkdir(parents=True, exist_ok=True)
        name = f"lib-{backend.value}.so"
        (output_dir / name).write_bytes(b"\x7fELF " + backend.value.encode())
        compiled.append(backend.value)
        return ManifestEntry(
            file=name, torch="2.8", torch_build=torch.version, backend=backend, cxx11_abi=False,
            dlpack="1.3", toolchain="g++ 12.2.0", gpu_toolkit=None, platform="linux_x86_64",
            python="3.11", size=(output_dir / name).stat().st_size,
            sha256=sha256_of(output_dir / name),
        )  # fmt: skip

    monkeypatch.setattr(driver, "compile_library", fake_compile)
    return compiled


@pytest.mark.parametrize(
    ("cuda", "wheels"),
    [
        ("12.8", "nvidia-cuda-runtime-cu12==12.8.* nvidia-cuda-nvcc-cu12==12.8.*"),
        ("13.0", "nvidia-cuda-runtime==13.0.* nvidia-cuda-crt==13.0.*"),
    ],
)
def test_a_cuda_torch_without_cuda_headers_fails_naming_what_to_install(
    fake_torch: FakeTorch,
    no_gpu_toolkit: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    *,
    cuda: str,
    wheels: str,
) -> None:
    prefix = fake_torch(f"2.8.0+cu{cuda.replace('.', '')}", cuda=cuda, libs=CUDA_LIBS)
    out = tmp_path / "wheels"
    settings = {"torch": str(prefix), "build-dir": str(tmp_path / "build")}
    error = _hook(build_backend.build_wheel, str(out), settings)
    assert isinstance(error, GPUHeadersNotFoundError)
    paragraph = capsys.readouterr().err.strip().splitlines()[0]
    assert paragraph == f"torch-c-dlpack-ext cannot be built: {error}"
    assert "is a CUDA build" in paragraph
    assert "a CPU-only wheel would do nothing" in paragraph
    assert f"pip install {wheels}" in paragraph
    assert "set CUDA_HOME" in paragraph
    assert "-C backends=cpu" in paragraph
    assert no_gpu_toolkit == []  # failed before compiling anything
    assert not out.exists() or list(out.iterdir()) == []


def test_a_rocm_torch_without_rocm_fails_naming_what_to_install(
    fake_torch: FakeTorch, no_gpu_toolkit: list[str], tmp_path: Path
) -> None:
    prefix = fake_torch("2.8.0+rocm6.3", cuda=None, hip="6.3.42131", libs=ROCM_LIBS)
    out = tmp_path / "wheels"
    error = _hook(build_backend.build_wheel, str(out), {"torch": str(prefix)})
    assert isinstance(error, GPUHeadersNotFoundError)
    assert "is a ROCm build" in str(error)
    assert "ROCM_PATH" in str(error)
    assert "-C backends=cpu" in str(error)
    assert no_gpu_toolkit == []
    assert not out.exists() or list(out.iterdir()) == []


def test_backends_cpu_builds_the_cpu_library_alone_on_purpose(
    fake_torch: FakeTorch, no_gpu_toolkit: list[str], tmp_path: Path
) -> None:
    prefix = fake_torch("2.8.0+cu128", cuda="12.8", libs=CUDA_LIBS)
    settings = {"torch": str(prefix), "backends": "cpu", "build-dir": str(tmp_path / "build")}
    name = build_backend.build_wheel(str(tmp_path / "wheels"), settings)
    assert no_gpu_toolkit == ["cpu"]
    assert name.endswith("-linux_x86_64.whl")


def test_a_cuda_torch_with_its_headers_builds_both(
    fake_torch: FakeTorch, no_gpu_toolkit: list[str], tmp_path: Path
) -> None:
    prefix = fake_torch("2.8.0+cu128", cuda="12.8", libs=CUDA_LIBS)
    site = prefix / "lib" / "python3.11" / "site-packages" / "nvidia"
    (site / "cuda_runtime" / "include").mkdir(parents=True)
    (site / "cuda_runtime" / "include" / "cuda_runtime_api.h").write_text(
        "#define CUDART_VERSION 12080\n", encoding="utf-8"
    )
    (site / "cuda_nvcc" / "include" / "crt").mkdir(parents=True)
    (site / "cuda_nvcc" / "include" / "crt" / "host_defines.h").write_text("", encoding="utf-8")
    build_backend.build_wheel(
        str(tmp_path / "wheels"), {"torch": str(prefix), "build-dir": str(tmp_path / "build")}
    )
    assert no_gpu_toolkit == ["cpu", "cuda"]


# --- the traceback file -------------------------------------------------------------


def test_each_failed_build_keeps_its_own_readable_traceback_file(tmp_path: Path) -> None:
    saved = []
    for attempt in ("one", "two"):
        proc = _frontend(
            "build_wheel",
            {
                "wheel_directory": str(tmp_path / "out"),
                "config_settings": {"torch": str(tmp_path / f"no-torch-{attempt}")},
            },
            tmp_path,
            {},
        )
        assert proc.returncode != 0
        last = proc.stderr.strip().splitlines()[-1]
        match = re.fullmatch(r"\(full traceback: (.+)\)", last)
        assert match, proc.stderr
        saved.append(Path(match.group(1)))
    assert saved[0] != saved[1]
    umask = os.umask(0)
    os.umask(umask)
    for path, attempt in zip(saved, ("one", "two")):
        assert path.parent == tmp_path
        assert f"no-torch-{attempt}" in path.read_text(encoding="utf-8")
        assert "Traceback (most recent call last)" in path.read_text(encoding="utf-8")
        assert path.stat().st_mode & 0o777 == 0o666 & ~umask
