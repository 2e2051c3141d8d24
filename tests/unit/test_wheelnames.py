"""devtools/base/wheelnames.py: every wheel and sdist name devtools reads goes through
``packaging.utils``, plus PEP 825's variant label."""

from __future__ import annotations

import sys

import pytest
from devtools.base import wheelnames
from devtools.base.errors import ReleaseError
from devtools.base.wheelnames import dist_name_version, parse_wheel_name, with_platform
from hypothesis import example, given
from hypothesis import strategies as st
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
        ("torch_c_dlpack_ext-0.2.0-cp39-abi3-linux_x86_64-T28.whl", "a label of PEP 825's"),
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


#: Characters that move a name across the rule's edges: separators, digits that start
#: a build tag (also non-ASCII ones), white space, upper case, the label's alphabet.
_EDGES = "a0Z9_.- \t\u00b2\u0663\u00a0"
_FIELDS = st.lists(st.text(_EDGES, max_size=4), min_size=1, max_size=8).map("-".join)
_NAMES = st.one_of(
    st.tuples(_FIELDS, st.sampled_from([".whl", "", ".whl.whl", ".WHL"])).map("".join),
    st.text(max_size=30),
)


def _variantlib_rule() -> object:
    constants = pytest.importorskip("variantlib.constants", reason="variantlib needs 3.10+")
    return constants.VALIDATION_WHEEL_NAME_REGEX


@given(_NAMES)
@example("a-1-2-py3-none-any.whl")
@example("a-1-2 x-py3-none-any-t28.whl")
@example("a--py3-none-any.whl")
@example("a-1-\u00b2-py3-none-any.whl")
@example("a-1-\u0663-py3-none-any-t.whl")
@example("a-1-py3-none-any-T28.whl")
@example("a b-1-py3-none-any.whl")
@example("a-1-py3-none-any\u00a0x-t28.whl")
@example("-1-py3-none-any.whl")
@example("a-1-py3--any.whl")
def test_the_39_parser_splits_every_name_as_variantlibs_rule_does(name: str) -> None:
    rule = _variantlib_rule()
    assert isinstance(rule, type(wheelnames._LABEL))
    assert wheelnames._split_by_position(name) == wheelnames._split_by_rule(rule, name)


@pytest.mark.parametrize("name", NAMES)
def test_the_valid_names_split_alike_on_both_paths(name: str) -> None:
    rule = _variantlib_rule()
    assert isinstance(rule, type(wheelnames._LABEL))
    split = wheelnames._split_by_position(name)
    assert split is not None
    assert split == wheelnames._split_by_rule(rule, name)


def test_without_variantlib_the_39_parser_reads_names(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("variantlib.constants", reason="variantlib needs 3.10+")
    with_variantlib = [parse_wheel_name(name) for name in NAMES]
    assert wheelnames._variantlib_rule() is not None
    monkeypatch.setitem(sys.modules, "variantlib", None)
    monkeypatch.setitem(sys.modules, "variantlib.constants", None)
    assert wheelnames._variantlib_rule() is None
    assert [parse_wheel_name(name) for name in NAMES] == with_variantlib
    assert wheelnames.is_variant_name(NAMES[1])
    assert not wheelnames.is_variant_name(NAMES[3])
    with pytest.raises(ReleaseError, match="a label of PEP 825's"):
        parse_wheel_name("torch_c_dlpack_ext-0.2.0-cp39-abi3-linux_x86_64-T28.whl")
