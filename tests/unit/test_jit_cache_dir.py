"""Where the JIT cache goes: never a relative path, settings read once (issue 21 item 4)."""

from __future__ import annotations

from pathlib import Path

import pytest

from _torch_c_dlpack_ext_core.errors import ConfigError
from _torch_c_dlpack_ext_core.naming import user_cache_dir
from torch_c_dlpack_ext._jit import _cache_root
from torch_c_dlpack_ext._settings import read_settings

P = "TORCH_C_DLPACK_EXT_"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    for name in ("XDG_CACHE_HOME", P + "CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)
    return home


@pytest.mark.parametrize("value", ["", "   ", "relative/cache", "torch-c-dlpack-ext", "."])
def test_empty_or_relative_xdg_cache_home_means_home_cache(
    home: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    # The XDG Base Directory spec: an empty or relative XDG_CACHE_HOME is ignored.
    monkeypatch.setenv("XDG_CACHE_HOME", value)
    found = user_cache_dir(platform="linux")
    assert found.path == home / ".cache" / "torch-c-dlpack-ext"
    assert found.variable is None
    root, fix = _cache_root(read_settings({"XDG_CACHE_HOME": value}))
    assert root.is_absolute()
    assert root == home / ".cache" / "torch-c-dlpack-ext"
    assert "XDG_CACHE_HOME" not in fix


def test_absolute_xdg_cache_home_is_honoured(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert user_cache_dir(platform="linux") == (
        tmp_path / "xdg" / "torch-c-dlpack-ext",
        "XDG_CACHE_HOME",
    )
    root, fix = _cache_root(read_settings({}))
    assert root == tmp_path / "xdg" / "torch-c-dlpack-ext"
    assert fix.startswith("it is under XDG_CACHE_HOME: make that writable")


def test_relative_home_is_an_error_not_a_cache_in_the_cwd(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", "relative-home")
    with pytest.raises(
        ConfigError,
        match=rf"home directory is unknown or relative.*set {P}CACHE_DIR to an absolute path",
    ):
        user_cache_dir(platform="linux")


@pytest.mark.parametrize("value", ["", "   ", "\t"])
def test_blank_project_cache_dir_counts_as_unset_everywhere(
    home: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    # status() and the build read the same settings: a blank value is unset for both,
    # so the build goes to the user cache, not to ./"   "/.
    monkeypatch.setenv(P + "CACHE_DIR", value)
    settings = read_settings({P + "CACHE_DIR": value})
    assert settings.cache_dir is None
    assert settings.problems == ()
    root, _ = _cache_root(settings)
    assert root == home / ".cache" / "torch-c-dlpack-ext"


@pytest.mark.parametrize("value", ["cache", "./cache", "~nosuchuser-tcde/cache"])
def test_relative_project_cache_dir_is_refused(home: Path, value: str) -> None:
    settings = read_settings({P + "CACHE_DIR": value})
    assert settings.cache_dir is None
    (problem,) = settings.problems
    assert problem.variable == P + "CACHE_DIR"
    assert f"{P}CACHE_DIR={value!r} is not an absolute path" in problem.message
    assert "give an absolute path or unset it" in problem.message


def test_project_cache_dir_with_tilde_is_expanded(home: Path) -> None:
    settings = read_settings({P + "CACHE_DIR": "~/jit"})
    assert settings.problems == ()
    assert _cache_root(settings)[0] == home / "jit"


def test_windows_and_macos_user_cache_dirs(home: Path, tmp_path: Path) -> None:
    local = str(tmp_path / "local")
    assert user_cache_dir({"LOCALAPPDATA": local}, platform="win32") == (
        Path(local) / "torch-c-dlpack-ext",
        "LOCALAPPDATA",
    )
    assert user_cache_dir({"LOCALAPPDATA": ""}, platform="win32").path == (
        home / "AppData" / "Local" / "torch-c-dlpack-ext"
    )
    assert user_cache_dir({"XDG_CACHE_HOME": local}, platform="darwin") == (
        home / "Library" / "Caches" / "torch-c-dlpack-ext",
        None,
    )


def test_a_jit_output_that_no_longer_matches_its_record_says_rebuild_not_reinstall(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 36 deliverable 5: the JIT cache is not the installation. A build whose file
    changed after it was recorded was reported with the core's "reinstall
    torch-c-dlpack-ext" (a pinned index command, before): the fix is to build it anew."""
    from _torch_c_dlpack_ext_core import driver
    from _torch_c_dlpack_ext_core.errors import BuildError
    from _torch_c_dlpack_ext_core.manifest import ManifestEntry
    from torch_c_dlpack_ext import _jit

    def compiled(request: driver.PortableRequest, *args: object, **kwargs: object) -> ManifestEntry:
        (request.output_dir / "lib.so").write_bytes(b"changed")
        return ManifestEntry(
            file="lib.so",
            torch="any",
            torch_build="any",
            backend=None,
            cxx11_abi=None,
            dlpack="1.3",
            toolchain="test",
            gpu_toolkit=None,
            platform="linux_x86_64",
            python="abi3",
            size=3,
            sha256="0" * 64,
        )

    monkeypatch.setattr(driver, "compile_portable_library", compiled)
    settings = read_settings({P + "CACHE_DIR": str(tmp_path / "cache")})
    with pytest.raises(BuildError, match="does not match its record") as caught:
        _jit.build_portable(settings)
    message = str(caught.value)
    assert "and import again to build it anew" in message, message
    assert "reinstall" not in message, message
