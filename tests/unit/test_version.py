"""One source for the version: ``_torch_c_dlpack_ext_core/version.py``. The changelog,
the release tag and the built metadata must all agree with it."""

from __future__ import annotations

import email.parser
import re
import zipfile
from pathlib import Path

import pytest
from devtools.base.errors import ReleaseError
from devtools.release import publish
from packaging.version import Version

from _torch_c_dlpack_ext_core import version as _version

ROOT = Path(__file__).resolve().parents[2]
CHANGELOG = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
HEADING = re.compile(r"^## \[(?P<version>[^\]]+)\](?: - (?P<date>.+))?$", re.MULTILINE)


def test_version_is_canonical_pep440() -> None:
    assert str(Version(_version.__version__)) == _version.__version__


def test_changelog_top_entry_is_the_current_version() -> None:
    headings = [m["version"] for m in HEADING.finditer(CHANGELOG)]
    assert headings, "CHANGELOG.md has no '## [version]' entries"
    assert headings[0] == _version.__version__


def test_changelog_entry_has_content_and_a_date_or_unreleased() -> None:
    match = next(m for m in HEADING.finditer(CHANGELOG) if m["version"] == _version.__version__)
    assert match["date"] == "Unreleased" or re.fullmatch(r"\d{4}-\d{2}-\d{2}", match["date"] or "")
    body = CHANGELOG[match.end() :].split("\n## ", 1)[0]
    assert re.search(r"^### (Added|Changed|Fixed|Removed|Deprecated|Security)$", body, re.M)
    assert f"[{_version.__version__}]: " in CHANGELOG, "missing link reference"


def test_changelog_versions_descend() -> None:
    versions = [Version(m["version"]) for m in HEADING.finditer(CHANGELOG)]
    assert versions == sorted(versions, reverse=True)


def test_tag_must_match_version() -> None:
    publish.check_tag(f"v{_version.__version__}")
    with pytest.raises(ReleaseError, match=r"_torch_c_dlpack_ext_core/version\.py"):
        publish.check_tag("v0.1.5")
    with pytest.raises(ReleaseError):
        publish.check_tag(_version.__version__)  # the "v" is part of the tag


def test_pyproject_reads_the_version_dynamically() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert "version" not in project
    assert "version" in project["dynamic"]


def _metadata_version(text: str) -> str:
    return email.parser.HeaderParser().parsestr(text)["Version"]


def test_built_metadata_uses_the_version(tmp_path: Path) -> None:
    """The in-tree backend's metadata hook and a real (universal) wheel carry it."""
    import build_backend

    dist_info = build_backend.prepare_metadata_for_build_wheel(str(tmp_path))
    assert dist_info == f"torch_c_dlpack_ext-{_version.__version__}.dist-info"
    metadata = (tmp_path / dist_info / "METADATA").read_text(encoding="utf-8")
    assert _metadata_version(metadata) == _version.__version__

    out = tmp_path / "wheel"
    out.mkdir()
    # PEP 517: the hook returns the file's basename inside the output directory.
    wheel = out / Path(build_backend.build_wheel(str(out), {"universal": "true"})).name
    assert wheel.name == f"torch_c_dlpack_ext-{_version.__version__}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        text = archive.read(f"{dist_info}/METADATA").decode("utf-8")
    assert _metadata_version(text) == _version.__version__
