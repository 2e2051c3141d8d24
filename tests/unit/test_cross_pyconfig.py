"""A cross build with Debian's multiarch CPython headers: the target's ``pyconfig.h`` is
found where Debian installs it, and its absence is a clear error saying what to install
(before: the compiler's "aarch64-linux-gnu/python3.11/pyconfig.h: No such file")."""

from __future__ import annotations

from pathlib import Path

import pytest

from _torch_c_dlpack_ext_core.errors import BuildError
from _torch_c_dlpack_ext_core.headers import check_target_pyconfig

MULTIARCH = """#if defined(__linux__)
# if defined(__x86_64__) && defined(__LP64__)
#  include <x86_64-linux-gnu/python3.11/pyconfig.h>
# elif defined(__aarch64__) && defined(__AARCH64EL__)
#  include <aarch64-linux-gnu/python3.11/pyconfig.h>
# endif
#endif
"""


def _include(tmp_path: Path, pyconfig: str) -> Path:
    include = tmp_path / "usr" / "include" / "python3.11"
    include.mkdir(parents=True)
    (include / "Python.h").write_text("", encoding="utf-8")
    (include / "pyconfig.h").write_text(pyconfig, encoding="utf-8")
    return include


def test_multiarch_headers_without_the_targets_pyconfig_say_what_to_install(
    tmp_path: Path,
) -> None:
    include = _include(tmp_path, MULTIARCH)
    with pytest.raises(BuildError) as error:
        check_target_pyconfig(include, "aarch64-linux-gnu")
    message = str(error.value)
    assert f"the CPython headers in {include} are Debian's multiarch ones" in message
    assert "<aarch64-linux-gnu/python3.11/pyconfig.h>" in message
    assert "dpkg --add-architecture arm64" in message
    assert "apt-get install libpython3.11-dev:arm64" in message


def test_the_targets_multiarch_pyconfig_is_found_where_debian_installs_it(
    tmp_path: Path,
) -> None:
    include = _include(tmp_path, MULTIARCH)
    target = include.parent / "aarch64-linux-gnu" / "python3.11" / "pyconfig.h"
    target.parent.mkdir(parents=True)
    target.write_text("#define SIZEOF_LONG 8\n", encoding="utf-8")
    check_target_pyconfig(include, "aarch64-linux-gnu")


def test_headers_that_are_not_multiarch_need_nothing_more(tmp_path: Path) -> None:
    include = _include(tmp_path, "#define SIZEOF_LONG 8\n")
    check_target_pyconfig(include, "aarch64-linux-gnu")
