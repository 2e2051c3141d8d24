"""Build backend failures that used to end in a traceback: each is one line with the fix.

A read-only source tree (the default build directory is inside it), a backend named
twice in ``-C backends=``, and a variant label too long for a file name. Through the
real PEP 517 hooks, in-process and in a child Python as frontends call them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import build_backend
import pytest
from build_backend import _options
from build_backend._metadata import load_pyproject
from build_backend._source import ROOT

from _torch_c_dlpack_ext_core.errors import BuildError, ConfigError, TorchCDLPackExtError


@pytest.fixture(autouse=True)
def _tracebacks_in_a_temp_dir(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path_factory.mktemp("tempdir")))


def _hook_error(hook: Callable[..., Any], *args: Any) -> TorchCDLPackExtError:
    with pytest.raises(SystemExit) as exited:
        hook(*args)
    cause = exited.value.__cause__
    assert isinstance(cause, TorchCDLPackExtError), cause
    assert exited.value.code == cause.exit_code
    return cause


def _child_hook(
    source: Path,
    hook: str,
    kwargs: Mapping[str, Any],
    tmp_path: Path,
    wrap: Sequence[str] = (),
) -> subprocess.CompletedProcess[str]:
    """Call ``hook`` of the backend in ``source`` as pip, build and uv do
    (pyproject_hooks' script in a child Python), under the command prefix ``wrap``."""
    from pyproject_hooks import BuildBackendHookCaller

    seen: list[subprocess.CompletedProcess[str]] = []

    def runner(
        cmd: Sequence[str], cwd: str | None = None, extra_environ: Mapping[str, str] | None = None
    ) -> None:
        env = {**os.environ, **(extra_environ or {}), "TMPDIR": str(tmp_path)}
        env.pop("TORCH_C_DLPACK_EXT_BUILD_TRACEBACK", None)
        proc = subprocess.run(
            [*wrap, *cmd], cwd=cwd, env=env, capture_output=True, text=True, check=False
        )
        seen.append(proc)
        if proc.returncode:
            raise subprocess.CalledProcessError(proc.returncode, cmd)

    caller = BuildBackendHookCaller(
        str(source), "build_backend",
        backend_path=load_pyproject(ROOT)["build-system"]["backend-path"], runner=runner,
        python_executable=sys.executable,
    )  # fmt: skip
    with pytest.raises(subprocess.CalledProcessError):
        getattr(caller, hook)(**kwargs)
    return seen[-1]


def _one_paragraph(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert lines[-1].startswith("(full traceback: "), stderr
    assert len(lines) == 2, stderr
    assert lines[0].startswith("torch-c-dlpack-ext cannot be built: "), stderr
    return lines[0]


# --- backends=cpu,cpu ---------------------------------------------------------------


@pytest.mark.parametrize("value", ["cpu,cpu", "cpu, CPU", "cuda,cpu,cuda"])
def test_a_backend_named_twice_is_refused_before_any_build(value: str) -> None:
    # Asking for requirements reads the settings: the refusal comes before any compile.
    error = _hook_error(build_backend.get_requires_for_build_wheel, {"backends": value})
    assert isinstance(error, ConfigError)
    assert "more than once" in str(error)
    assert "name each backend once" in str(error)


def test_a_backend_named_twice_is_one_line_for_a_frontend(tmp_path: Path) -> None:
    proc = _child_hook(
        ROOT,
        "build_wheel",
        {"wheel_directory": str(tmp_path / "out"), "config_settings": {"backends": "cpu,cpu"}},
        tmp_path,
    )
    first = _one_paragraph(proc.stderr)
    assert "backends = 'cpu,cpu' names 'cpu' more than once" in first


# --- variant-label too long for a file name -------------------------------------------


def test_a_label_too_long_for_a_file_name_is_refused(tmp_path: Path) -> None:
    from tests.unit.test_build_backend import _fake_libs

    libs = _fake_libs(tmp_path)
    label = "a" * 191  # the wheel's temporary name would pass 255 bytes: ENAMETOOLONG
    error = _hook_error(
        build_backend.build_wheel, str(tmp_path / "out"), {"libs-dir": str(libs),
                                                           "variant-label": label}
    )  # fmt: skip
    assert isinstance(error, ConfigError)
    assert "(191 characters)" in str(error)
    assert f"at most {_options.MAX_VARIANT_LABEL_LENGTH} characters" in str(error)
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []
    # The longest accepted label still makes a wheel (its file name fits).
    longest = "b" * _options.MAX_VARIANT_LABEL_LENGTH
    name = build_backend.build_wheel(
        str(tmp_path / "ok"), {"libs-dir": str(libs), "variant-label": longest}
    )
    assert name.endswith(f"-{longest}.whl")


# --- an unwritable build directory ----------------------------------------------------


def test_an_unwritable_build_dir_is_one_line_before_any_compile(tmp_path: Path) -> None:
    pytest.importorskip("torch")  # the build environment's torch (found, not imported)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n", encoding="utf-8")
    error = _hook_error(
        build_backend.build_wheel,
        str(tmp_path / "out"),
        {"backends": "cpu", "build-dir": str(blocker / "build")},
    )
    assert isinstance(error, BuildError)
    message = str(error)
    assert f"cannot write the build directory {blocker / 'build'}" in message
    assert "-C build-dir=<a writable directory>" in message
    assert "TORCH_C_DLPACK_EXT_BUILD_DIR" in message


def _read_only_mount_available() -> bool:
    if sys.platform != "linux" or os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", "mount --bind -o ro / /mnt 2>/dev/null || mount -t tmpfs "
         "-o ro tmpfs /mnt"],
        capture_output=True, check=False,
    )  # fmt: skip
    return probe.returncode == 0


@pytest.mark.needs_root
@pytest.mark.skipif(
    not _read_only_mount_available(), reason="needs root and a private mount namespace"
)
def test_a_read_only_source_tree_is_one_line(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    source = tmp_path / "src"
    source.mkdir()
    for name in ("build_backend", "python", "csrc"):
        shutil.copytree(
            ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "libs")
        )
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, source / name)
    # The copy, read-only in a mount namespace of the child's own: EROFS, as on a
    # read-only mounted checkout (as root, file modes would not stop a write).
    wrap = [
        "unshare", "-m", "sh", "-c",
        f'mount --bind "{source}" "{source}" && mount -o remount,ro,bind "{source}" '
        f'"{source}" && exec "$@"', "sh",
    ]  # fmt: skip
    proc = _child_hook(
        source,
        "build_wheel",
        {"wheel_directory": str(tmp_path / "out"), "config_settings": {"backends": "cpu"}},
        tmp_path,
        wrap,
    )
    first = _one_paragraph(proc.stderr)
    assert f"cannot write the build directory {source / 'build' / 'backend'}" in first
    assert "(inside the source tree)" in first
    assert "Read-only file system" in first
    assert "-C build-dir=<a writable directory>" in first


def test_python_m_build_shows_the_one_line(tmp_path: Path) -> None:
    # pypa/build, the frontend README's sdist recipe relies on, without isolation.
    pytest.importorskip("build")
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--wheel", "--outdir",
         str(tmp_path / "dist"), "-C", "backends=cpu,cpu", str(ROOT)],
        capture_output=True, text=True, check=False, timeout=300,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )  # fmt: skip
    assert proc.returncode != 0
    output = proc.stdout + proc.stderr
    assert "Traceback" not in output, output
    assert (
        "torch-c-dlpack-ext cannot be built: config_settings: backends = 'cpu,cpu' names "
        "'cpu' more than once" in output
    )
    assert not (tmp_path / "dist").exists() or list((tmp_path / "dist").iterdir()) == []
