"""The WHEEL file's ``Tag:`` lines: a compressed tag set expanded by packaging's parser."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from build_backend._wheel import WheelWriter


def _tag_lines(tmp_path: Path, tag: str) -> list[str]:
    writer = WheelWriter(name="demo", version="1.0", tag=tag)
    wheel = writer.write(tmp_path, metadata=b"Metadata-Version: 2.4\n", root_is_purelib=False)
    with zipfile.ZipFile(wheel) as archive:
        text = archive.read("demo-1.0.dist-info/WHEEL").decode()
    return [line.removeprefix("Tag: ") for line in text.splitlines() if line.startswith("Tag: ")]


@pytest.mark.parametrize(
    ("tag", "expected"),
    [
        ("py3-none-any", ["py3-none-any"]),
        (
            "cp39-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64",
            ["cp39-abi3-manylinux2014_x86_64", "cp39-abi3-manylinux_2_17_x86_64"],
        ),
        ("py2.py3-none-any", ["py2-none-any", "py3-none-any"]),
        (
            "cp313.cp314-abi3.none-win_amd64",
            [
                "cp313-abi3-win_amd64",
                "cp313-none-win_amd64",
                "cp314-abi3-win_amd64",
                "cp314-none-win_amd64",
            ],
        ),
    ],
)
def test_a_compressed_tag_set_is_every_tag_it_names(
    tmp_path: Path, tag: str, expected: list[str]
) -> None:
    assert _tag_lines(tmp_path, tag) == expected


def test_the_tag_lines_do_not_depend_on_the_order_of_the_set(tmp_path: Path) -> None:
    """Reproducible WHEEL bytes: the lines are sorted, whatever order the set is in."""
    one = _tag_lines(tmp_path / "a", "cp39-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64")
    two = _tag_lines(tmp_path / "b", "cp39-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64")
    assert one == two


def test_a_malformed_tag_is_refused(tmp_path: Path) -> None:
    # packaging >= 25 names the tag; 24 fails the unpacking.
    with pytest.raises(ValueError, match=r"three components|values to unpack"):
        _tag_lines(tmp_path, "cp39-abi3")
