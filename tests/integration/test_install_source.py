"""Remedies install from where this installation came from (issue 31, item 15): a
universal wheel's warning suggested ``pip install torch-c-dlpack-ext==0.2.0``, a release
not on PyPI. PEP 610's ``direct_url.json`` in the dist-info says where it came from: a
local directory, wheel or sdist (``file://``), a VCS checkout, or, without the file, an
index (then, and only then, the version is pinned). That takes an installer's record
(``INSTALLER``, which pip and uv write): a copy with none, a source tree on ``sys.path`` or
an unpacked wheel, was pinned as if from an index (issue 36, deliverable 5) and is now told
that nothing records where it came from. Real dist-info directories beside a real
package, imported in a fresh process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.helpers import clean_env, make_package, run_python

from _torch_c_dlpack_ext_core.installsource import InstallKind, InstallSource, install_source_of
from _torch_c_dlpack_ext_core.remedies import build_from_source_command, reinstall_command
from _torch_c_dlpack_ext_core.version import __version__

P = "TORCH_C_DLPACK_EXT_"
PINNED = f"torch-c-dlpack-ext=={__version__}"

PROBE = """
import json, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import torch_c_dlpack_ext as pkg
status = pkg.status()
print(json.dumps({"kind": status.kind.value, "remedy": status.remedy,
                  "warnings": [str(w.message) for w in caught
                               if issubclass(w.category, pkg.TorchCDLPackExtWarning)]}))
"""

CHECKOUT = "/home/me/src/torch-c-dlpack-ext"
WHEEL = f"/home/me/dist/torch_c_dlpack_ext-{__version__}-py3-none-any.whl"
SDIST = f"/home/me/dist/torch_c_dlpack_ext-{__version__}.tar.gz"
REPO = "https://github.com/example/torch-c-dlpack-ext.git"
COMMIT = "0123456789abcdef0123456789abcdef01234567"

DIRECT_URLS: dict[str, dict[str, Any] | None] = {
    "index": None,
    "dir": {"url": f"file://{CHECKOUT}", "dir_info": {}},
    "wheel": {"url": f"file://{WHEEL}", "archive_info": {"hashes": {"sha256": "0" * 64}}},
    "sdist": {"url": f"file://{SDIST}", "archive_info": {}},
    "vcs": {"url": REPO, "vcs_info": {"vcs": "git", "commit_id": COMMIT}},
    # No installation record: a wheel's own dist-info without INSTALLER, or none at all.
    "unpacked wheel": None,
    "source tree": None,
}


def _installed(tmp_path: Path, kind: str, *, manifest: bool = True) -> Path:
    root = make_package(tmp_path / "site", manifest=manifest)
    if kind == "source tree":
        return root
    info = root / f"torch_c_dlpack_ext-{__version__}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: torch-c-dlpack-ext\nVersion: {__version__}\n",
        encoding="utf-8",
    )
    if kind != "unpacked wheel":
        (info / "INSTALLER").write_text("pip\n", encoding="utf-8")  # as pip writes it
    direct_url = DIRECT_URLS[kind]
    if direct_url is not None:
        (info / "direct_url.json").write_text(json.dumps(direct_url), encoding="utf-8")
    return root


def _probe(root: Path) -> dict[str, Any]:
    pytest.importorskip("torch")
    proc = run_python(PROBE, pythonpath=[root], env=clean_env(**{P + "FORCE": "1"}), timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["kind"] == "unavailable", result
    return result


EXPECTED_BUILD = {
    "index": f"--no-build-isolation --no-binary torch-c-dlpack-ext {PINNED}",
    "dir": f"--no-build-isolation {CHECKOUT}",
    "wheel": f"the sources of {WHEEL}>",
    "sdist": f"--no-build-isolation {SDIST}",
    "vcs": f"--no-build-isolation git+{REPO}@{COMMIT}",
    "unpacked wheel": f"--no-build-isolation <a checkout or the sdist of torch-c-dlpack-ext "
    f"{__version__}>",
    "source tree": f"--no-build-isolation <a checkout or the sdist of torch-c-dlpack-ext "
    f"{__version__}>",
}


@pytest.mark.parametrize("kind", list(DIRECT_URLS))
def test_a_universal_wheels_remedy_builds_from_where_it_came_from(
    tmp_path: Path, kind: str
) -> None:
    result = _probe(_installed(tmp_path, kind))
    (warning,) = result["warnings"]
    for text in (result["remedy"], warning):
        assert EXPECTED_BUILD[kind] in text, text
        if kind != "index":
            assert PINNED not in text, text


@pytest.mark.parametrize("kind", ["index", "wheel", "vcs"])
def test_a_broken_installation_is_reinstalled_from_where_it_came_from(
    tmp_path: Path, kind: str
) -> None:
    result = _probe(_installed(tmp_path, kind, manifest=False))
    location = {"index": PINNED, "wheel": WHEEL, "vcs": f"git+{REPO}@{COMMIT}"}[kind]
    assert f"pip install --force-reinstall --no-deps {location}" in result["remedy"], result
    said = {
        "index": "installed by pip from a package index",
        "wheel": f"installed by pip from {WHEEL}",
        "vcs": f"installed by pip from the checkout git+{REPO}@{COMMIT}",
    }[kind]
    assert said in result["remedy"], result


@pytest.mark.parametrize("kind", ["unpacked wheel", "source tree"])
def test_a_broken_copy_without_a_record_is_not_told_a_pinned_version(
    tmp_path: Path, kind: str
) -> None:
    """Issue 36 deliverable 5: no record, no index: the remedy says where the copy is, that
    nothing records its origin, and how to reinstall it, with no version pinned."""
    root = _installed(tmp_path, kind, manifest=False)
    result = _probe(root)
    (warning,) = result["warnings"]
    for text in (result["remedy"], warning):
        assert PINNED not in text, text
        assert f"no installation record for this copy at {root}" in text, text
        assert "pip install --force-reinstall --no-deps <its wheel, sdist or checkout>" in text


def test_the_commands_by_source() -> None:
    assert install_source_of(None) == InstallSource()
    assert install_source_of("not json") == InstallSource()
    assert reinstall_command() == f"pip install --force-reinstall --no-deps {PINNED}"
    spaced = install_source_of(json.dumps({"url": "file:///a%20b/x", "dir_info": {}}))
    assert spaced == InstallSource(InstallKind.DIR, "/a b/x")
    assert build_from_source_command(source=spaced).endswith(" '/a b/x'")
