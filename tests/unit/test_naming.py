"""File names and variant labels: the one definition every other module relies on."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from _torch_c_dlpack_ext_core.errors import ConfigError, InvalidBackendError
from _torch_c_dlpack_ext_core.naming import (
    ABI3_FLOOR,
    LIMITED_API_VERSION,
    NATIVE_BACKENDS,
    Backend,
    env_var,
    library_filename,
    parse_backend,
    parse_python_target,
    python_target_tags,
    shared_library_suffix,
    torch_minor,
    user_cache_dir,
    variant_label,
)

LABEL_RE = re.compile(r"^[0-9a-z_.]+$")


@pytest.mark.parametrize(
    ("platform", "abi", "expected"),
    [
        ("linux", False, "libtorch_c_dlpack_ext-torch2.6-cuda-cxx11abi0.so"),
        ("linux", True, "libtorch_c_dlpack_ext-torch2.6-cuda-cxx11abi1.so"),
        ("darwin", None, "libtorch_c_dlpack_ext-torch2.6-cuda.dylib"),
        ("win32", None, "torch_c_dlpack_ext-torch2.6-cuda.dll"),
    ],
)
def test_library_filename_per_platform(platform: str, abi: bool | None, expected: str) -> None:
    assert library_filename(2, 6, "cuda", abi, platform=platform) == expected


def test_library_filenames_are_distinct_across_cells() -> None:
    names = {
        library_filename(2, minor, backend, abi, platform="linux")
        for minor in range(4, 10)
        for backend in NATIVE_BACKENDS
        for abi in (False, True)
    }
    assert len(names) == 6 * 3 * 2


@pytest.mark.parametrize(
    ("platform", "suffix"),
    [("linux", ".so"), ("darwin", ".dylib"), ("win32", ".dll")],
)
def test_shared_library_suffix(platform: str, suffix: str) -> None:
    assert shared_library_suffix(platform) == suffix


@pytest.mark.parametrize("platform", ["freebsd14", "cygwin", "linux2", "win", "macos", ""])
def test_unsupported_platform_is_a_config_error(platform: str) -> None:
    # Only what sys.platform says on the three supported systems names a toolchain.
    with pytest.raises(ConfigError, match=r"unsupported platform .*linux, darwin, win32"):
        shared_library_suffix(platform)
    with pytest.raises(ConfigError, match=r"unsupported platform"):
        library_filename(2, 6, "cpu", None, platform=platform)


@pytest.mark.parametrize("backend", list(Backend))
@pytest.mark.parametrize("abi", [None, False, True])
@pytest.mark.parametrize("with_abi", [False, True])
def test_variant_labels_use_the_pep825_charset(
    backend: Backend, abi: bool | None, with_abi: bool
) -> None:
    label = variant_label(2, 8, backend, abi, with_abi=with_abi)
    assert LABEL_RE.match(label), label
    assert label != "null"
    assert label.startswith(f"t28_{backend.value}")
    assert label.endswith("_abi1") == (with_abi and abi is True)


def test_variant_labels_tell_abis_apart_only_when_asked() -> None:
    assert variant_label(2, 6, "cpu", False, with_abi=True) == "t26_cpu_abi0"
    assert variant_label(2, 6, "cpu", True, with_abi=True) == "t26_cpu_abi1"
    assert variant_label(2, 6, "cpu", False, with_abi=False) == "t26_cpu"


@pytest.mark.parametrize("value", ["cpu", "CUDA", " rocm ", Backend.CUDA])
def test_parse_backend_accepts_known_names(value: str | Backend) -> None:
    assert parse_backend(value) in set(Backend)


def test_parse_backend_rejects_unknown_names_listing_the_choices() -> None:
    with pytest.raises(InvalidBackendError, match=r"'metal'.*cpu, cuda, rocm"):
        parse_backend("metal")


@pytest.mark.parametrize(
    ("version", "expected"),
    [("2.6.0+cu124", (2, 6)), ("2.8.0a0+abc123", (2, 8)), ("2.13.0", (2, 13))],
)
def test_torch_minor(version: str, expected: tuple[int, int]) -> None:
    assert torch_minor(version) == expected


def test_torch_minor_rejects_garbage() -> None:
    with pytest.raises(ConfigError, match="not a torch version"):
        torch_minor("latest")


def test_user_cache_dir_ignores_the_project_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # TORCH_C_DLPACK_EXT_CACHE_DIR is a runtime setting, read once by _settings.
    monkeypatch.setenv(env_var("CACHE_DIR"), str(tmp_path / "ours"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert user_cache_dir(platform="linux").path == tmp_path / "xdg" / "torch-c-dlpack-ext"
    assert env_var("CACHE_DIR") == "TORCH_C_DLPACK_EXT_CACHE_DIR"


@pytest.mark.parametrize(
    ("python", "parsed", "tags"),
    [
        ("abi3", (3, 9, "abi3"), ("cp39", "abi3")),
        ("3.14t", (3, 14, "freethreaded"), ("cp314", "cp314t")),
        ("3.13t", (3, 13, "freethreaded"), ("cp313", "cp313t")),
        ("3.11", (3, 11, "cpython"), ("cp311", "cp311")),
    ],
)
def test_python_targets_and_their_wheel_tags(
    python: str, parsed: tuple[int, int, str], tags: tuple[str, str]
) -> None:
    assert parse_python_target(python) == parsed
    assert python_target_tags(python) == tags


@pytest.mark.parametrize("python", ["", "abi4", "3", "3.x", "cp311", "3.11tt", "3.1" + "1" * 20])
def test_python_target_rejects_garbage(python: str) -> None:
    with pytest.raises(ConfigError, match=r"expected 'abi3', '3\.14t' or '3\.11'"):
        parse_python_target(python)


def test_limited_api_version_is_the_abi3_floor() -> None:
    assert LIMITED_API_VERSION == 0x03090000
    assert ABI3_FLOOR == (3, 9)
