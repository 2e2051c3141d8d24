"""devtools.envs.torchenv without downloads: which requirements an importable env gets, naming,
and that only a completed env (marker written last) is handed out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from devtools.base.errors import ProvisionError
from devtools.base.hostenv import DEV_CACHE_VAR
from devtools.envs import torchenv

from _torch_c_dlpack_ext_core.errors import ConfigError

LINUX_X86 = '; platform_system == "Linux" and platform_machine == "x86_64"'
METADATA = f"""\
Metadata-Version: 2.1
Name: torch
Version: 2.6.0+cu124
Requires-Dist: filelock
Requires-Dist: typing-extensions (>=4.10.0)
Requires-Dist: nvidia-cuda-nvrtc-cu12 (==12.4.127) {LINUX_X86}
Requires-Dist: nvidia-cuda-runtime-cu12 (==12.4.127) {LINUX_X86}
Requires-Dist: nvidia-cusolver-cu12 (==11.6.1.9) {LINUX_X86}
Requires-Dist: nvidia-nvtx-cu12 (==12.4.127) {LINUX_X86}
Requires-Dist: triton (==3.2.0) {LINUX_X86}
Requires-Dist: setuptools ; python_version >= "3.12"
Requires-Dist: sympy (==1.13.1) ; python_version >= "3.9"
Requires-Dist: cuda-toolkit[cudart,cufile]==13.0.2 ; platform_system == "Linux"
Requires-Dist: opt-einsum (>=3.3) ; extra == 'opt-einsum'
"""


@pytest.fixture
def site(tmp_path: Path) -> Path:
    info = tmp_path / "site-packages" / "torch-2.6.0+cu124.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(METADATA, encoding="utf-8")
    return tmp_path / "site-packages"


def test_import_requirements_keep_pins_and_drop_what_import_does_not_need(site: Path) -> None:
    needed, skipped = torchenv.import_requirements(site, "2.6.0", "3.11")
    assert "sympy==1.13.1" in needed
    assert "typing-extensions>=4.10.0" in needed
    assert not any(req.startswith(("setuptools", "opt-einsum")) for req in needed + skipped)
    import platform

    if platform.system() == "Linux" and platform.machine() == "x86_64":
        assert "nvidia-cuda-runtime-cu12==12.4.127" in needed
        assert sorted(skipped) == [
            "nvidia-cuda-nvrtc-cu12==12.4.127",
            "nvidia-cusolver-cu12==11.6.1.9",
            "nvidia-nvtx-cu12==12.4.127",
            "triton==3.2.0",
        ]


def test_a_requirements_extras_are_kept(site: Path) -> None:
    """torch >= 2.11 pulls its CUDA libraries through ``cuda-toolkit[...]`` extras."""
    import platform

    needed, _ = torchenv.import_requirements(site, "2.6.0", "3.11")
    if platform.system() == "Linux":
        assert "cuda-toolkit[cudart,cufile]==13.0.2" in needed
    else:
        assert not any(req.startswith("cuda-toolkit") for req in needed)


def test_markers_use_the_env_python(site: Path) -> None:
    needed, _ = torchenv.import_requirements(site, "2.6.0", "3.12")
    assert "setuptools" in needed


def test_missing_metadata_is_reported(tmp_path: Path) -> None:
    with pytest.raises(ProvisionError, match="torch install failed"):
        torchenv.import_requirements(tmp_path, "2.6.0", "3.11")


@pytest.mark.parametrize("version", ["latest", "2.6.0; rm -rf /", "v2.6.0"])
def test_bad_versions_are_rejected_before_any_work(
    version: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DEV_CACHE_VAR, str(tmp_path))
    with pytest.raises(ConfigError, match="not a release version"):
        torchenv.torch_env(version, kind=torchenv.EnvKind.NO_DEPS)
    assert not (tmp_path / "envs").exists()


def test_a_complete_env_is_reused_without_running_uv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DEV_CACHE_VAR, str(tmp_path))

    def no_uv() -> str:
        raise AssertionError("a complete env must not be rebuilt")

    monkeypatch.setattr(torchenv, "find_uv", no_uv)
    root = tmp_path / "envs" / "py3.11-torch2.6.0-import-x383da34b"
    (root / "lib" / "python3.11" / "site-packages" / "torch").mkdir(parents=True)
    (root / ".torchenv-complete.json").write_text(json.dumps({"torch": "2.6.0"}))
    env = torchenv.torch_env(
        "2.6.0", kind=torchenv.EnvKind.IMPORTABLE, python="3.11", extra=("pytest", "psutil")
    )
    assert env.root == root
    assert env.torch_dir == root / "lib" / "python3.11" / "site-packages" / "torch"
    assert env.python == root / "bin" / "python"


def test_an_env_without_marker_is_rebuilt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DEV_CACHE_VAR, str(tmp_path))
    root = tmp_path / "envs" / "py3.11-torch2.6.0"
    (root / "half-written").mkdir(parents=True)
    calls: list[Path] = []

    def fake_create(path: Path, *args: object, **kwargs: object) -> dict[str, object]:
        calls.append(path)
        assert not path.exists(), "the interrupted env must be removed first"
        (path / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
        return {"seconds": 0.0}

    monkeypatch.setattr(torchenv, "_create", fake_create)
    env = torchenv.torch_env("2.6.0", kind=torchenv.EnvKind.NO_DEPS, python="3.11")
    assert calls == [root]
    assert (root / ".torchenv-complete.json").is_file()
    assert not (root / "half-written").exists()
    assert env.kind is torchenv.EnvKind.NO_DEPS


def test_a_failed_creation_leaves_nothing_that_looks_ready(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DEV_CACHE_VAR, str(tmp_path))

    def failing_create(path: Path, *args: object, **kwargs: object) -> dict[str, object]:
        path.mkdir(parents=True)
        raise ProvisionError("simulated download failure")

    monkeypatch.setattr(torchenv, "_create", failing_create)
    with pytest.raises(ProvisionError, match="simulated"):
        torchenv.torch_env("2.6.0", kind=torchenv.EnvKind.NO_DEPS, python="3.11")
    assert not (tmp_path / "envs" / "py3.11-torch2.6.0").exists()


@pytest.mark.parametrize(
    ("version", "numpy"),
    [
        ("2.2.2", "numpy<2"),
        ("2.0.1", "numpy<2"),
        ("2.3.1", "numpy"),
        ("2.13.0", "numpy"),
        ("2.8.0a0+abc", "numpy"),
    ],
)
def test_old_torch_gets_the_numpy_it_was_built_for(version: str, numpy: str) -> None:
    assert torchenv.numpy_for(version) == numpy
