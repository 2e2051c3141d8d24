"""devtools/base/wheelnames.py: every wheel and sdist name devtools reads goes through
``packaging.utils``, plus PEP 825's variant label."""

from __future__ import annotations

import pytest
from devtools.base.errors import ReleaseError
from devtools.base.wheelnames import dist_name_version, parse_wheel_name, with_platform
from packaging.tags import Tag
from packaging.version import Version

NAMES = [
    "torch_c_dlpack_ext-0.2.0-cp39-abi3-manylinux_2_28_x86_64.whl",
    "torch_c_dlpack_ext-0.2.0-cp39-abi3-manylinux_2_28_x86_64-t28_cpu.whl",
    "torch_c_dlpack_ext-0.2.0-cp314-cp314t-win_amd64-t29_cpu.whl",
    "torch_c_dlpack_ext-0.2.0-1-cp39-abi3-win_amd64.whl",
    "torch_c_dlpack_ext-0.2.0-1-cp39-abi3-win_amd64-t26_cpu_abi0.whl",
    "torch_c_dlpack_ext-0.2.0-py3-none-any.whl",
    "torch_c_dlpack_ext-0.2.0-cp39-abi3-manylinux_2_28_x86_64.manylinux_2_17_x86_64.whl",
]


@pytest.mark.parametrize("name", NAMES)
def test_label_is_told_apart_as_variantlib_does(name: str) -> None:
    from variantlib.constants import VALIDATION_WHEEL_NAME_REGEX

    match = VALIDATION_WHEEL_NAME_REGEX.fullmatch(name)
    assert match is not None
    assert parse_wheel_name(name).label == match.group("variant_label")


def test_fields_come_from_packaging() -> None:
    wheel = parse_wheel_name(NAMES[4])
    assert wheel.name == "torch-c-dlpack-ext"
    assert wheel.version == Version("0.2.0")
    assert wheel.build == (1, "")
    assert wheel.tags == frozenset({Tag("cp39", "abi3", "win_amd64")})
    assert wheel.label == "t26_cpu_abi0"
    compressed = parse_wheel_name(NAMES[6])
    assert compressed.tag_strings == {
        "cp39-abi3-manylinux_2_28_x86_64",
        "cp39-abi3-manylinux_2_17_x86_64",
    }
    assert compressed.label is None


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("torch_c_dlpack_ext-0.2.0-cp39-abi3.whl", "not a wheel file name"),
        ("torch_c_dlpack_ext-0.2.0-cp39-abi3-linux_x86_64-T28.whl", "variant label 'T28'"),
        ("torch_c_dlpack_ext-x.y-cp39-abi3-linux_x86_64.whl", "not a wheel file name"),
        ("notes.txt", "not a wheel file name"),
    ],
)
def test_bad_names_are_release_errors(name: str, message: str) -> None:
    with pytest.raises(ReleaseError, match=message):
        parse_wheel_name(name)


def test_dist_name_version_reads_wheels_and_sdists() -> None:
    assert dist_name_version(NAMES[1]) == ("torch-c-dlpack-ext", Version("0.2.0"))
    assert dist_name_version("torch_c_dlpack_ext-0.2.0.tar.gz") == (
        "torch-c-dlpack-ext",
        Version("0.2.0"),
    )
    with pytest.raises(ReleaseError, match="not an sdist file name"):
        dist_name_version("torch_c_dlpack_ext.tar.gz")


def test_with_platform_replaces_only_the_platform_tag() -> None:
    assert (
        with_platform("torch_c_dlpack_ext-0.2.0-cp39-abi3-linux_x86_64.whl", "win_amd64")
        == "torch_c_dlpack_ext-0.2.0-cp39-abi3-win_amd64.whl"
    )
    with pytest.raises(ReleaseError, match="a variant wheel"):
        with_platform(NAMES[1], "win_amd64")
