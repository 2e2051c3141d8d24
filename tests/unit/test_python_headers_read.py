"""An incomplete CPython include dir is one message, whichever header is missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from _torch_c_dlpack_ext_core.errors import BuildError
from _torch_c_dlpack_ext_core.headers import python_target_of_headers

PATCHLEVEL = "#define PY_MAJOR_VERSION 3\n#define PY_MINOR_VERSION 13\n"


@pytest.mark.parametrize(
    ("files", "missing"),
    [({}, "patchlevel.h"), ({"patchlevel.h": PATCHLEVEL}, "pyconfig.h")],
)
def test_a_missing_header_names_itself_and_the_remedy(
    tmp_path: Path, files: dict[str, str], missing: str
) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    with pytest.raises(BuildError) as info:
        python_target_of_headers(tmp_path)
    assert str(info.value).startswith(f"cannot read {tmp_path / missing} (")
    assert f"{tmp_path} is not a complete CPython include dir; pass python_include=" in str(
        info.value
    )


def test_complete_headers_read(tmp_path: Path) -> None:
    (tmp_path / "patchlevel.h").write_text(PATCHLEVEL, encoding="utf-8")
    (tmp_path / "pyconfig.h").write_text("#define Py_GIL_DISABLED 1\n", encoding="utf-8")
    assert python_target_of_headers(tmp_path) == "3.13t"
