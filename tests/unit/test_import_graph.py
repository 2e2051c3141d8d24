"""The project's import graph: no cycles, and each layer imports only the layers below it.

Read from the source with :mod:`ast`, so every import counts, including the lazy ones
inside functions and under ``TYPE_CHECKING`` (a cycle through a lazy import is still a
cycle a reader must untangle). The layers, bottom up:

- ``_torch_c_dlpack_ext_core`` (shipped): the building blocks; imports nothing of ours
  but itself;
- ``torch_c_dlpack_ext`` (shipped, the public face): may import the core;
- ``build_backend`` (shipped in the sdist): may import the core, never the face
  (whose import runs the selector) and never ``devtools`` (not in the sdist);
- ``devtools`` (developer-only): may import the core and ``build_backend``, never the
  face;
- ``benchmarks`` and ``tests``: anything.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Top-level name -> the directory holding it.
PACKAGES = {
    "_torch_c_dlpack_ext_core": ROOT / "python" / "_torch_c_dlpack_ext_core",
    "torch_c_dlpack_ext": ROOT / "python" / "torch_c_dlpack_ext",
    "build_backend": ROOT / "build_backend",
    "devtools": ROOT / "devtools",
    "benchmarks": ROOT / "benchmarks",
}
#: What each layer may import (besides itself).
ALLOWED = {
    "_torch_c_dlpack_ext_core": set(),
    "torch_c_dlpack_ext": {"_torch_c_dlpack_ext_core"},
    "build_backend": {"_torch_c_dlpack_ext_core"},
    "devtools": {"_torch_c_dlpack_ext_core", "build_backend"},
    "benchmarks": {"_torch_c_dlpack_ext_core", "build_backend", "devtools", "tests"},
}


def _module_name(path: Path) -> str:
    for top, directory in PACKAGES.items():
        if directory in path.parents:
            parts = [top, *path.relative_to(directory).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            return ".".join(parts)
    raise AssertionError(f"{path} is in no package")


def _modules() -> dict[str, Path]:
    found = {}
    for directory in PACKAGES.values():
        for path in sorted(directory.rglob("*.py")):
            if "__pycache__" not in path.parts:
                found[_module_name(path)] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> Iterator[tuple[str, int]]:
    """``(imported module, line)`` of every import in the file, resolved to module names
    (``from . import x`` names the submodule ``x`` when there is one)."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            submodules = [
                f"{module}.{a.name}" for a in node.names if f"{module}.{a.name}" in MODULES
            ]
            if node.module or len(submodules) < len(node.names):
                yield module, node.lineno  # a name from the module itself
            for submodule in submodules:
                yield submodule, node.lineno


def _ours(module: str) -> str | None:
    """The project module ``module`` names (itself, or the package holding it)."""
    while module:
        if module in MODULES:
            return module
        module = module.rpartition(".")[0]
    return None


GRAPH = {
    name: sorted({(target, line) for m, line in _imports(name, path) if (target := _ours(m))})
    for name, path in MODULES.items()
}


def test_the_graph_is_read() -> None:
    assert len(MODULES) > 30
    face = {target for target, _ in GRAPH["torch_c_dlpack_ext._loader"]}
    assert any(t.startswith("_torch_c_dlpack_ext_core.") for t in face), face


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_layers_import_only_what_they_may(layer: str) -> None:
    offenders = [
        f"{name}:{line} imports {target}"
        for name, edges in GRAPH.items()
        if name.partition(".")[0] == layer
        for target, line in edges
        if (top := target.partition(".")[0]) != layer and top not in ALLOWED[layer]
    ]
    assert offenders == []


def _cycles() -> list[list[str]]:
    """Every strongly connected component of more than one module (or a self-import),
    by Tarjan's algorithm (a package is its ``__init__``; ``from . import sub`` is an
    edge to ``sub`` only)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target, _ in GRAPH[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or any(t == node for t, _ in GRAPH[node]):
                found.append(sorted(component))

    for node in sorted(GRAPH):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycles() -> None:
    assert _cycles() == []


def test_the_cycle_check_finds_a_cycle(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check itself can fail: a lazy import back from the core to the face is one."""
    a, b = "_torch_c_dlpack_ext_core.naming", "_torch_c_dlpack_ext_core.errors"
    monkeypatch.setitem(GRAPH, a, [*GRAPH[a], (b, 1)])
    monkeypatch.setitem(GRAPH, b, [*GRAPH[b], (a, 1)])
    assert any({a, b} <= set(cycle) for cycle in _cycles())
