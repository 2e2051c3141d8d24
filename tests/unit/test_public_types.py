"""No ``Any`` in a public signature of the project's packages.

mypy (strict) checks that every signature is annotated; this test checks that no public
one says ``Any``: what a caller of a public function, method, class attribute or module
constant receives or must pass is a real type. Read from the source with :mod:`ast`, so a
``typing.Any`` spelled any way (``Any``, ``typing.Any``, ``t.Any``, inside a string
annotation or a subscript) counts. Private names (a leading underscore, or a module or
class that is private) may use ``Any`` where a value is not yet validated (a parsed JSON
or TOML document); the public edge narrows it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TREES = {
    "torch_c_dlpack_ext": ROOT / "python" / "torch_c_dlpack_ext",
    "_torch_c_dlpack_ext_core": ROOT / "python" / "_torch_c_dlpack_ext_core",
    "build_backend": ROOT / "build_backend",
    "devtools": ROOT / "devtools",
}


def _any_aliases(tree: ast.Module) -> tuple[set[str], set[str]]:
    """The names ``Any`` is imported as, and the names the ``typing`` module is."""
    names, modules = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in {"typing", "typing_extensions"}:
            names |= {a.asname or a.name for a in node.names if a.name == "Any"}
        elif isinstance(node, ast.Import):
            modules |= {a.asname or a.name for a in node.names if a.name == "typing"}
    return names, modules


def _says_any(annotation: ast.expr | None, names: set[str], modules: set[str]) -> bool:
    if annotation is None:
        return False
    for node in ast.walk(annotation):
        if isinstance(node, ast.Name) and node.id in names:
            return True
        if (
            isinstance(node, ast.Attribute)
            and node.attr == "Any"
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
        ):
            return True
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                inner = ast.parse(node.value, mode="eval").body
            except SyntaxError:
                continue
            if _says_any(inner, names, modules):
                return True
    return False


def _public(name: str) -> bool:
    return not name.startswith("_") or (name.startswith("__") and name.endswith("__"))


def _signatures(body: list[ast.stmt], prefix: str) -> Iterator[tuple[str, int, ast.expr]]:
    """``(qualified name, line, annotation)`` of every public annotation in ``body``."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _public(node.name):
            arguments = node.args
            every = [
                *arguments.posonlyargs,
                *arguments.args,
                *arguments.kwonlyargs,
                *([arguments.vararg] if arguments.vararg else []),
                *([arguments.kwarg] if arguments.kwarg else []),
            ]
            for argument in every:
                if argument.annotation is not None:
                    yield f"{prefix}{node.name}({argument.arg})", node.lineno, argument.annotation
            if node.returns is not None:
                yield f"{prefix}{node.name} -> ", node.lineno, node.returns
        elif isinstance(node, ast.ClassDef) and _public(node.name):
            yield from _signatures(node.body, f"{prefix}{node.name}.")
        elif (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and _public(node.target.id)
        ):
            yield f"{prefix}{node.target.id}", node.lineno, node.annotation


def _modules() -> list[tuple[str, Path]]:
    """Every module of the trees, private modules too: a private module's public names
    are the package's own seams, called across modules."""
    found = []
    for top, directory in TREES.items():
        for path in sorted(directory.rglob("*.py")):
            if "__pycache__" not in path.parts:
                relative = path.relative_to(directory).with_suffix("").parts
                found.append((".".join([top, *relative]), path))
    return found


MODULES = _modules()


def _offenders(source: str, label: str) -> list[str]:
    tree = ast.parse(source)
    names, modules = _any_aliases(tree)
    return [
        f"{label}:{line}: {name}"
        for name, line, annotation in _signatures(tree.body, "")
        if _says_any(annotation, names, modules)
    ]


def test_every_tree_is_read() -> None:
    tops = {name.partition(".")[0] for name, _ in MODULES}
    assert tops == set(TREES)
    assert len(MODULES) > 60


@pytest.mark.parametrize("top", sorted(TREES))
def test_no_any_in_public_signatures(top: str) -> None:
    offenders = [
        offender
        for name, path in MODULES
        if name.partition(".")[0] == top
        for offender in _offenders(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    ]
    assert offenders == []


@pytest.mark.parametrize(
    "source",
    [
        "from typing import Any\ndef f(x: Any) -> None: ...",
        "import typing\ndef f() -> typing.Any: ...",
        "import typing as t\nclass C:\n    field: t.Any",
        "from typing import Any as A\nX: dict[str, A] = {}",
        "from typing import Any\ndef f(x: 'list[Any]') -> None: ...",
        "from typing import Any\nclass C:\n    def m(self, **kw: Any) -> None: ...",
    ],
)
def test_the_check_finds_any(source: str) -> None:
    assert _offenders(source, "probe")


@pytest.mark.parametrize(
    "source",
    [
        "from typing import Any\ndef _f(x: Any) -> None: ...",
        "from typing import Any\nclass _C:\n    def m(self, x: Any) -> None: ...",
        "from typing import Any\ndef f(x: object) -> 'dict[str, object]': ...",
    ],
)
def test_private_and_precise_pass(source: str) -> None:
    assert _offenders(source, "probe") == []
