"""CONTRIBUTING.md's map of devtools/ is generated from the docstrings (devtools/docmap.py,
``python -m devtools map``): it must match them, and the check must notice a drift."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from devtools import docmap
from devtools.base import cli
from devtools.base.errors import DevToolError
from devtools.base.paths import ROOT

CONTRIBUTING = ROOT / "CONTRIBUTING.md"


def test_contributing_map_matches_the_docstrings() -> None:
    text = CONTRIBUTING.read_text(encoding="utf-8")
    assert text.count(docmap.BEGIN) == 1
    assert text.count(docmap.END) == 1
    assert docmap.replace_map(text, docmap.render()) == text, "run `nox -s map`"


def test_every_room_and_module_is_on_the_map() -> None:
    generated = docmap.render()
    for path in (ROOT / "devtools").rglob("*.py"):
        relative = path.relative_to(ROOT).as_posix()
        if path == ROOT / "devtools" / "__init__.py":
            continue
        if path.name == "__init__.py":
            assert f"| `{path.parent.relative_to(ROOT).as_posix()}/` |" in generated
        else:
            assert f"| `{relative}` |" in generated, relative


def test_a_changed_docstring_makes_the_check_fail(tmp_path: Path) -> None:
    root = tmp_path / "checkout"
    shutil.copytree(ROOT / "devtools", root / "devtools", ignore=shutil.ignore_patterns("*.pyc"))
    module = root / "devtools" / "release" / "publish.py"
    text = module.read_text(encoding="utf-8")
    module.write_text(text.replace('"""Publishing a release', '"""Shipping a release', 1))
    changed = docmap.render(root)
    assert "| Shipping a release:" in changed
    stale = tmp_path / "CONTRIBUTING.md"
    stale.write_text(docmap.replace_map(CONTRIBUTING.read_text(encoding="utf-8"), changed))
    assert cli.main(["map", "--check", "--file", str(stale)]) == 1
    assert "Shipping a release" in stale.read_text(encoding="utf-8")  # --check writes nothing
    assert cli.main(["map", "--file", str(stale)]) == 0
    assert stale.read_text(encoding="utf-8") == CONTRIBUTING.read_text(encoding="utf-8")
    assert cli.main(["map", "--check", "--file", str(stale)]) == 0


def test_rest_markup_becomes_markdown() -> None:
    text = "See :func:`~devtools.matrix.reader.load_matrix`, :mod:`devtools.base.cli` and ``a|b``."
    assert docmap._markdown(text) == "See `load_matrix`, `devtools.base.cli` and `a\\|b`."
    assert docmap._first_sentence("One ``x. y`` here. Two.") == "One ``x. y`` here."


def test_a_file_without_markers_is_refused() -> None:
    with pytest.raises(DevToolError, match="markers"):
        docmap.replace_map("# no map here\n", docmap.render())
