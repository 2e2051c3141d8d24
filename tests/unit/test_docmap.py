"""CONTRIBUTING.md's map of the code is generated from the docstrings (devtools/docmap.py,
``python -m devtools map``): the layers table from the import-graph test's ``ALLOWED``,
every other row from a module's first docstring paragraph. It must match them, and the
check must notice a drift in any of its tables."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from devtools import docmap
from devtools.base import cli
from devtools.base.errors import DevToolError
from devtools.base.generated import regenerate
from devtools.base.paths import ROOT

CONTRIBUTING = ROOT / "CONTRIBUTING.md"
TREES = [tree for tree, _ in docmap.TREES]


def _checkout(tmp_path: Path) -> Path:
    """A copy of what the map is read from."""
    root = tmp_path / "checkout"
    ignore = shutil.ignore_patterns("*.pyc", "__pycache__")
    for tree in ("devtools", "python", "build_backend", "benchmarks"):
        shutil.copytree(ROOT / tree, root / tree, ignore=ignore)
    (root / docmap.LAYERS_SOURCE).parent.mkdir(parents=True)
    shutil.copy(ROOT / docmap.LAYERS_SOURCE, root / docmap.LAYERS_SOURCE)
    return root


def _with_map(text: str, generated: str) -> str:
    """CONTRIBUTING.md's text with its cog block's output replaced by ``generated``."""
    code_end = text.index("]]] -->\n", text.index("from devtools.docmap import render"))
    start = code_end + len("]]] -->\n")
    return text[:start] + generated + text[text.index("<!-- [[[end]]] -->", start) :]


def test_contributing_map_matches_the_docstrings() -> None:
    text = CONTRIBUTING.read_text(encoding="utf-8")
    assert text.count("[[[cog") == 1
    assert text.count("[[[end]]]") == 1
    assert _with_map(text, docmap.render()) == text, "run `nox -s map`"


def test_every_layer_room_and_module_is_on_the_map() -> None:
    generated = docmap.render()
    for layer in ("_torch_c_dlpack_ext_core", "torch_c_dlpack_ext"):
        assert f"| `python/{layer}/` |" in generated
    for layer in ("build_backend", "devtools", "benchmarks"):
        assert f"| `{layer}/` |" in generated
    for tree in TREES:
        rows = docmap.tree_rows(ROOT, tree)
        assert "\n".join(rows) in generated
        for path in (ROOT / tree).rglob("*.py"):
            if "__pycache__" in path.parts or path == ROOT / tree / "__init__.py":
                continue
            where = path.relative_to(ROOT / tree).as_posix().removesuffix("__init__.py")
            assert sum(row.startswith(f"| `{where}` |") for row in rows) == 1, where
    assert "| `toolchains/` |" in "\n".join(docmap.tree_rows(ROOT, TREES[0]))
    for path in (ROOT / "devtools").rglob("*.py"):
        relative = path.relative_to(ROOT).as_posix()
        if path == ROOT / "devtools" / "__init__.py" or "__pycache__" in path.parts:
            continue
        if path.name == "__init__.py":
            assert f"| `{path.parent.relative_to(ROOT).as_posix()}/` |" in generated
        else:
            assert f"| `{relative}` |" in generated, relative


def test_the_layers_are_the_import_graph_tests_table() -> None:
    layers = docmap._allowed(ROOT)
    assert list(layers) == [
        "_torch_c_dlpack_ext_core", "torch_c_dlpack_ext", "build_backend", "devtools",
        "benchmarks",
    ]  # fmt: skip
    assert layers["_torch_c_dlpack_ext_core"] == []
    assert layers["devtools"] == ["_torch_c_dlpack_ext_core", "build_backend"]
    generated = docmap.render()
    assert "| `python/_torch_c_dlpack_ext_core/` | nothing of ours but itself |" in generated
    assert "| `devtools/` | `_torch_c_dlpack_ext_core`, `build_backend` |" in generated


@pytest.mark.parametrize(
    ("module", "old", "new"),
    [
        ("devtools/release/publish.py", '"""Publishing a release', '"""Shipping a release'),
        ("python/_torch_c_dlpack_ext_core/run.py", '"""The one helper', '"""The single helper'),
        ("python/_torch_c_dlpack_ext_core/toolchains/__init__.py", "Everything that", "All that"),
        ("python/torch_c_dlpack_ext/_decide.py", "The selection policy", "The choosing policy"),
        ("build_backend/_wheel.py", "Wheel writing:", "Wheel making:"),
        ("build_backend/__init__.py", "In-tree PEP 517", "In-tree PEP 999"),
        (str(docmap.LAYERS_SOURCE), '"build_backend": {"_', '"build_backend": {"devtools", "_'),
    ],
)  # fmt: skip
def test_a_changed_source_makes_the_check_fail(
    tmp_path: Path, module: str, old: str, new: str
) -> None:
    """Any table drifts: a devtools module, a core module or sub-package, a face module,
    a backend module, a layer's docstring and the import-graph test's ALLOWED table."""
    root = _checkout(tmp_path)
    source = root / module
    text = source.read_text(encoding="utf-8")
    assert old in text
    source.write_text(text.replace(old, new, 1), encoding="utf-8")
    changed = docmap.render(root)
    assert changed != docmap.render()
    stale = tmp_path / "CONTRIBUTING.md"
    stale.write_text(_with_map(CONTRIBUTING.read_text(encoding="utf-8"), changed))
    assert cli.main(["map", "--check", "--file", str(stale)]) == 1
    assert _with_map(stale.read_text(encoding="utf-8"), changed) == stale.read_text(
        encoding="utf-8"
    )  # --check writes nothing
    assert cli.main(["map", "--file", str(stale)]) == 0
    assert stale.read_text(encoding="utf-8") == CONTRIBUTING.read_text(encoding="utf-8")
    assert cli.main(["map", "--check", "--file", str(stale)]) == 0


def test_a_hand_edited_row_makes_the_check_fail(tmp_path: Path) -> None:
    text = CONTRIBUTING.read_text(encoding="utf-8")
    row = next(r for r in docmap.tree_rows(ROOT, TREES[1]) if r.startswith("| `_loader.py` |"))
    edited = tmp_path / "CONTRIBUTING.md"
    edited.write_text(text.replace(row, "| `_loader.py` | the loader |"), encoding="utf-8")
    assert edited.read_text(encoding="utf-8") != text
    assert cli.main(["map", "--check", "--file", str(edited)]) == 1
    assert cli.main(["map", "--file", str(edited)]) == 0
    assert edited.read_text(encoding="utf-8") == text


@pytest.mark.parametrize(
    "module",
    [
        "python/_torch_c_dlpack_ext_core/newthing.py",
        "python/_torch_c_dlpack_ext_core/toolchains/riscv.py",
        "python/torch_c_dlpack_ext/_newthing.py",
        "build_backend/_newthing.py",
        "devtools/build/newthing.py",
    ],
)
def test_a_module_without_a_docstring_is_refused(tmp_path: Path, module: str) -> None:
    root = _checkout(tmp_path)
    (root / module).write_text("from __future__ import annotations\n\nX = 1\n")
    with pytest.raises(DevToolError, match=f"{module} has no docstring"):
        docmap.render(root)
    (root / module).write_text('"""A new module: what it does.\n\nMore."""\n')
    assert "| A new module: what it does. |" in docmap.render(root)


def test_a_layers_table_that_is_not_literal_is_refused(tmp_path: Path) -> None:
    root = _checkout(tmp_path)
    source = root / docmap.LAYERS_SOURCE
    text = source.read_text(encoding="utf-8")
    source.write_text(text.replace('"build_backend": {"_torch', '"build_backend": {NAME, "_torch'))
    with pytest.raises(DevToolError, match="no literal ALLOWED table"):
        docmap.render(root)


def test_rest_markup_becomes_markdown() -> None:
    text = "See :func:`~devtools.matrix.reader.load_matrix`, :mod:`devtools.base.cli` and ``a|b``."
    assert docmap._markdown(text) == "See `load_matrix`, `devtools.base.cli` and `a\\|b`."
    assert docmap._markdown("In :mod:`.files` and :data:`..naming.ENV_PREFIX`.") == (
        "In `files` and `naming.ENV_PREFIX`."
    )
    assert docmap._paragraphs("One ``x. y`` here.\nTwo.\n\n  Three.\n") == [
        "One ``x. y`` here. Two.",
        "Three.",
    ]


def test_a_file_without_a_cog_block_is_refused(tmp_path: Path) -> None:
    page = tmp_path / "CONTRIBUTING.md"
    page.write_text("# no map here\n", encoding="utf-8")
    with pytest.raises(DevToolError, match="no cog block"):
        regenerate([page])
    assert cli.main(["map", "--file", str(page)]) != 0
    assert page.read_text(encoding="utf-8") == "# no map here\n"


def test_a_failing_block_names_the_file_and_writes_nothing(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    text = "<!-- [[[cog\nraise ValueError('broken source')\n]]] -->\nold\n<!-- [[[end]]] -->\n"
    page.write_text(text, encoding="utf-8")
    with pytest.raises(DevToolError, match="broken source"):
        regenerate([page])
    assert page.read_text(encoding="utf-8") == text
