"""How a copy was installed, read from its installation record (issue 36, deliverable 5):
PEP 610's ``direct_url.json`` and the ``INSTALLER`` file of the dist-info beside the
package. A version is pinned on an index only where an installer's record says the copy
came from one; a copy with no record (a source tree on ``sys.path``, an unpacked wheel)
was pinned as if it had, and is now told that nothing records where it came from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from _torch_c_dlpack_ext_core.installsource import InstallKind, InstallSource, install_source_of
from _torch_c_dlpack_ext_core.naming import PACKAGE
from _torch_c_dlpack_ext_core.remedies import reinstall_command, reinstall_remedy
from _torch_c_dlpack_ext_core.version import __version__
from torch_c_dlpack_ext._install import install_source

PINNED = f"torch-c-dlpack-ext=={__version__}"
CHECKOUT = "/home/me/src/torch-c-dlpack-ext"


@pytest.mark.parametrize(
    ("direct_url", "installer", "expected"),
    [
        (None, "pip\n", InstallSource(InstallKind.INDEX, "", "pip")),
        (None, "uv", InstallSource(InstallKind.INDEX, "", "uv")),
        (None, "", InstallSource(InstallKind.INDEX, "", "")),
        (None, None, InstallSource(InstallKind.UNRECORDED, "/site")),
        ("not json", None, InstallSource(InstallKind.UNRECORDED, "/site")),
        ("not json", "pip", InstallSource(InstallKind.INDEX, "", "pip")),
        ('{"url": 5}', "pip", InstallSource(InstallKind.INDEX, "", "pip")),
        (
            json.dumps({"url": f"file://{CHECKOUT}", "dir_info": {}}),
            None,  # a PEP 610 record says where it came from, INSTALLER or not
            InstallSource(InstallKind.DIR, CHECKOUT),
        ),
        (
            json.dumps({"url": f"file://{CHECKOUT}", "dir_info": {"editable": True}}),
            "uv",
            InstallSource(InstallKind.DIR, CHECKOUT, "uv"),
        ),
        (
            # A hostile INSTALLER: its first line, printable, at most 40 characters.
            None,
            "pip\x1b[31m" + "x" * 100 + "\nsecond line",
            InstallSource(InstallKind.INDEX, "", "pip[31m" + "x" * 33),
        ),
    ],
)
def test_the_record_says_where_a_copy_came_from(
    direct_url: str | None, installer: str | None, expected: InstallSource
) -> None:
    assert install_source_of(direct_url, installer, location="/site") == expected


def _dist_info(site: Path, *, installer: str | None, direct_url: object = None) -> None:
    info = site / f"torch_c_dlpack_ext-{__version__}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: torch-c-dlpack-ext\nVersion: {__version__}\n",
        encoding="utf-8",
    )
    if installer is not None:
        (info / "INSTALLER").write_text(installer, encoding="utf-8")
    if direct_url is not None:
        (info / "direct_url.json").write_text(json.dumps(direct_url), encoding="utf-8")


def test_a_source_tree_on_sys_path_has_no_record(tmp_path: Path) -> None:
    (tmp_path / PACKAGE).mkdir()
    source = install_source(tmp_path / PACKAGE)
    assert source == InstallSource(InstallKind.UNRECORDED, str(tmp_path))


def test_an_unpacked_wheel_has_no_record(tmp_path: Path) -> None:
    """A wheel's own dist-info (METADATA, WHEEL, RECORD) has no INSTALLER: only an
    installer writes one (PEP 376 / the installation-metadata spec)."""
    (tmp_path / PACKAGE).mkdir()
    _dist_info(tmp_path, installer=None)
    assert install_source(tmp_path / PACKAGE).kind == InstallKind.UNRECORDED


def test_an_installers_record_without_direct_url_is_an_index_install(tmp_path: Path) -> None:
    (tmp_path / PACKAGE).mkdir()
    _dist_info(tmp_path, installer="pip\n")
    assert install_source(tmp_path / PACKAGE) == InstallSource(InstallKind.INDEX, "", "pip")


def test_a_direct_url_record_names_its_directory(tmp_path: Path) -> None:
    (tmp_path / PACKAGE).mkdir()
    _dist_info(tmp_path, installer="uv", direct_url={"url": f"file://{CHECKOUT}", "dir_info": {}})
    assert install_source(tmp_path / PACKAGE) == InstallSource(InstallKind.DIR, CHECKOUT, "uv")


def test_only_an_index_install_is_told_a_pinned_version() -> None:
    index = reinstall_remedy(InstallSource(installer="pip"))
    assert index == (
        "reinstall torch-c-dlpack-ext (installed by pip from a package index): "
        f"pip install --force-reinstall --no-deps {PINNED}"
    )
    directory = reinstall_remedy(InstallSource(InstallKind.DIR, CHECKOUT, "pip"))
    assert f"installed by pip from the directory {CHECKOUT}" in directory
    assert directory.endswith(f"pip install --force-reinstall --no-deps {CHECKOUT}")
    unrecorded = InstallSource(InstallKind.UNRECORDED, "/home/me/src/torch-c-dlpack-ext/python")
    text = reinstall_remedy(unrecorded)
    assert text.startswith(
        "reinstall torch-c-dlpack-ext (no installation record for this copy at "
        "/home/me/src/torch-c-dlpack-ext/python: a source tree or an unpacked wheel?): "
    ), text
    assert text.endswith(", then take this copy off sys.path"), text
    for said in (text, reinstall_command(unrecorded)):
        assert PINNED not in said, said
        assert "<its wheel, sdist or checkout>" in said, said
