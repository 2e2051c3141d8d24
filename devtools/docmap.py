"""CONTRIBUTING.md's map of the code, generated from the docstrings it describes.

CONTRIBUTING.md's generated section (a cog block, :mod:`devtools.base.generated`) is, in
this order: the layers table (each layer of :data:`LAYERS_SOURCE`'s ``ALLOWED`` table, the
one the import graph test enforces: what it may import, and its ``__init__`` docstring),
one table per layer of :data:`TREES` (the core, the face, the build backend: a row per
module and per sub-package), then ``devtools/``'s rooms table (each room's ``__init__``
docstring: what it owns, and its "May import:" line) and its modules table, room by room,
bottom up. One rule for every row: a module or package is summed up by its docstring's
first paragraph (a package by its ``__init__``'s), so to change a row, change that
paragraph; a module without a docstring is an error. ``python -m devtools map`` (``nox -s
map``) rewrites that part; ``--check`` (run by ``nox -s lint`` and a unit test) fails when
it differs from the docstrings. The sources are read with :mod:`ast`, never imported, so
the map costs no import of a package.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from devtools.base.errors import DevToolError
from devtools.base.paths import ROOT

__all__ = ["LAYERS_SOURCE", "ROOMS", "TREES", "render"]

#: The file holding ``ALLOWED``, the layers and what each may import (read with ast).
LAYERS_SOURCE = Path("tests") / "unit" / "test_import_graph.py"

#: The layers mapped module by module, each with the caption of its table.
TREES = (
    ("python/_torch_c_dlpack_ext_core", "The core"),
    ("python/torch_c_dlpack_ext", "The face"),
    ("build_backend", "The build backend"),
)

#: devtools' rooms, bottom up (the order of the tables; tests/unit/test_import_graph.py
#: holds what each may import).
ROOMS = ("base", "matrix", "envs", "testkit", "build", "release", "rehearse", "commands")

_ROLE = re.compile(r":[\w:]+:`~?([^`<]+?)`")
_LITERAL = re.compile(r"``([^`]+)``")


def _markdown(text: str) -> str:
    """reST roles and literals as Markdown code; ``~a.b.c`` keeps only ``c``, ``.a.b`` (a
    relative name) is ``a.b``."""

    def role(match: re.Match[str]) -> str:
        target = match.group(1).strip()
        if match.group(0).split("`", 1)[1].startswith("~"):
            target = target.rpartition(".")[2]
        return f"`{target.lstrip('.')}`"

    text = _ROLE.sub(role, text)
    return _LITERAL.sub(r"`\1`", text).replace("|", "\\|")


def _paragraphs(doc: str) -> list[str]:
    return [" ".join(p.split()) for p in re.split(r"\n\s*\n", doc.strip()) if p.strip()]


def _docstring(path: Path, root: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    if not doc:
        raise DevToolError(f"{path.relative_to(root).as_posix()} has no docstring")
    return doc


def _summary(path: Path, root: Path) -> str:
    """The row of one module (or package, given its ``__init__.py``)."""
    return _markdown(_paragraphs(_docstring(path, root))[0])


def _names(value: ast.expr) -> list[str] | None:
    """The names of a literal set of strings (``set()`` included), else None."""
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "set":
        return [] if not value.args and not value.keywords else None
    if not isinstance(value, ast.Set):
        return None
    names = []
    for element in value.elts:
        if not (isinstance(element, ast.Constant) and isinstance(element.value, str)):
            return None
        names.append(element.value)
    return sorted(names)


def _allowed(root: Path) -> dict[str, list[str]]:
    """``ALLOWED`` of :data:`LAYERS_SOURCE`: each layer -> what it may import, in order."""
    source = root / LAYERS_SOURCE
    for node in ast.parse(source.read_text(encoding="utf-8")).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else None
        if not (isinstance(target, ast.Name) and target.id == "ALLOWED"):
            continue
        layers: dict[str, list[str]] = {}
        table = node.value if isinstance(node, ast.Assign) else None
        for key, value in zip(table.keys, table.values) if isinstance(table, ast.Dict) else ():
            names = _names(value)
            if not (isinstance(key, ast.Constant) and isinstance(key.value, str)) or names is None:
                break
            layers[key.value] = names
        else:
            if layers:
                return layers
    raise DevToolError(f"{LAYERS_SOURCE.as_posix()} has no literal ALLOWED table")


def _layer_dir(root: Path, layer: str) -> str:
    return f"python/{layer}" if (root / "python" / layer).is_dir() else layer


def _layers(root: Path) -> list[str]:
    rows = ["| layer | may import | job |", "|---|---|---|"]
    for layer, allowed in _allowed(root).items():
        where = _layer_dir(root, layer)
        may = ", ".join(f"`{name}`" for name in allowed) or "nothing of ours but itself"
        job = _summary(root / where / "__init__.py", root)
        rows.append(f"| `{where}/` | {may} | {job} |")
    return rows


def tree_rows(root: Path, tree: str) -> list[str]:
    """One table row per module and sub-package of ``tree`` (its own ``__init__`` is the
    layers table's row), paths relative to ``tree``, sorted."""
    top = root / tree
    rows = []
    for path in sorted(top.rglob("*.py"), key=lambda p: p.relative_to(top).parts):
        if "__pycache__" in path.parts or path == top / "__init__.py":
            continue
        where = path.relative_to(top).as_posix()
        if path.name == "__init__.py":
            where = where.removesuffix("__init__.py")
        rows.append(f"| `{where}` | {_summary(path, root)} |")
    return rows


def _rooms(root: Path) -> tuple[list[str], list[str]]:
    devtools = root / "devtools"
    rooms = ["| room | may import | owns |", "|---|---|---|"]
    modules = ["| module | job |", "|---|---|"]
    for room in ROOMS:
        init = devtools / room / "__init__.py"
        paragraphs = _paragraphs(_docstring(init, root))
        may = next((p for p in paragraphs if p.startswith("May import:")), None)
        if may is None:
            raise DevToolError(f"{init.relative_to(root).as_posix()} has no 'May import:' line")
        allowed = may.removeprefix("May import:").strip().rstrip(".")
        rooms.append(f"| `devtools/{room}/` | {_markdown(allowed)} | {_summary(init, root)} |")
        for path in sorted((devtools / room).glob("*.py")):
            if path.name != "__init__.py":
                where = path.relative_to(root).as_posix()
                modules.append(f"| `{where}` | {_summary(path, root)} |")
    modules += [
        f"| `devtools/{name}` | {_summary(devtools / name, root)} |"
        for name in ("__main__.py", "docmap.py")
    ]
    return rooms, modules


def render(root: Path = ROOT) -> str:
    """The generated part (what CONTRIBUTING.md's cog block writes)."""
    lines = [*_layers(root), ""]
    for tree, caption in TREES:
        lines += [f"{caption} (`{tree}/`):", "", "| path | job |", "|---|---|"]
        lines += [*tree_rows(root, tree), ""]
    rooms, modules = _rooms(root)
    lines += ["`devtools/`, room by room:", "", *rooms, "", *modules]
    return "\n".join(lines) + "\n"
