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

Inside ``devtools`` the same rule holds between its rooms (sub-packages, table
:data:`ROOMS`, bottom up: ``base``, ``matrix``, ``envs``, ``testkit``, ``build``, ``release``,
``rehearse``, ``commands``): a room imports itself and the rooms below it, and its
``__init__`` says which (a "May import:" line) and imports nothing. The longest chain of
imports inside ``devtools`` is pinned (:data:`DEVTOOLS_MAX_LEVELS`), so a new import that
makes a reader follow one more module to understand a command fails here. So is the
longest chain inside the runtime package ``torch_c_dlpack_ext``
(:data:`RUNTIME_MAX_LEVELS`): its rooms are records (``_model``) and the cost figures at
the bottom, then gathering (``_torchinfo``, ``_settings``, ``_library``, ``_install``), the
wording (``_wording``), the policy (``_decide``), acting (``_apply``), the package and its
diagnostics.
"""

from __future__ import annotations

import ast
import re
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
#: What each layer may import (besides itself). devtools/docmap.py reads this table (with
#: ast, so keep it a literal) for the layers table of CONTRIBUTING.md.
ALLOWED = {
    "_torch_c_dlpack_ext_core": set(),
    "torch_c_dlpack_ext": {"_torch_c_dlpack_ext_core"},
    "build_backend": {"_torch_c_dlpack_ext_core"},
    "devtools": {"_torch_c_dlpack_ext_core", "build_backend"},
    "benchmarks": {"_torch_c_dlpack_ext_core", "build_backend", "devtools", "tests"},
}


#: Each room of ``devtools`` -> the rooms it may import (besides itself), bottom up.
#: ``""`` is the top level (``devtools/__main__.py``; ``devtools/docmap.py``, which the
#: ``map`` command imports).
ROOMS: dict[str, set[str]] = {
    "base": set(),
    "matrix": {"base"},
    "envs": {"base", "matrix"},
    "testkit": {"base"},
    "build": {"base", "matrix", "envs"},
    "release": {"base", "matrix", "envs", "build"},
    "rehearse": {"base", "matrix", "envs", "build", "release"},
    "commands": {"base", "matrix", "envs", "testkit", "build", "release", "rehearse", ""},
    "": {"base"},
}
#: The most modules one chain of imports inside ``devtools`` may pass through (a module
#: importing nothing of devtools is 1). Before the rooms it was 12.
DEVTOOLS_MAX_LEVELS = 6
#: The most lines a ``devtools`` module may have: a longer one is a room doing several jobs
#: (issue 45; three were over it: testkit/footprint.py, envs/torchenv.py and
#: rehearse/variantinstall.py, before the first two were split by concern).
DEVTOOLS_MAX_LINES = 400
#: The one ``devtools`` module allowed over :data:`DEVTOOLS_MAX_LINES`, until it is split.
DEVTOOLS_LONG_MODULE = "devtools.rehearse.variantinstall"
#: The same for the runtime package ``torch_c_dlpack_ext`` (``__main__`` -> the package ->
#: ``_apply`` -> ``_decide`` -> ``_wording`` -> ``_costs``). It was 10 (``__main__`` ->
#: ``__init__`` -> ``_boundary`` -> ``_apply`` -> ``_status`` -> ``_jit`` -> ``_decide`` ->
#: ``_torchinfo`` -> ``_capsule`` -> ``_loader``) before each of its modules had one job.
RUNTIME_MAX_LEVELS = 6


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


def _room(module: str) -> str:
    """``devtools.build.wheels`` -> ``build``; a top-level module (or the package) -> ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in ROOMS else ""


def test_every_devtools_package_is_a_room() -> None:
    packages = {p.parent.name for p in (ROOT / "devtools").glob("*/__init__.py")}
    assert packages == set(ROOMS) - {""}
    loose = {name for name in MODULES if name.startswith("devtools.") and not _room(name)}
    assert loose == {"devtools.__main__", "devtools.docmap"}


def _long_modules(modules: dict[str, Path], limit: int) -> dict[str, int]:
    """``devtools`` modules of ``modules`` longer than ``limit`` lines -> their lines."""
    lines = {
        name: len(path.read_text(encoding="utf-8").splitlines())
        for name, path in modules.items()
        if name.startswith("devtools.")
    }
    return {name: n for name, n in lines.items() if n > limit}


def test_at_most_one_devtools_module_is_long() -> None:
    long = _long_modules(MODULES, DEVTOOLS_MAX_LINES)
    assert set(long) <= {DEVTOOLS_LONG_MODULE}, long


def test_the_length_check_counts_lines(tmp_path: Path) -> None:
    """The pin can fail: a module one line over the limit is long, one at it is not."""
    over, at = tmp_path / "over.py", tmp_path / "at.py"
    over.write_text("x = 1\n" * (DEVTOOLS_MAX_LINES + 1), encoding="utf-8")
    at.write_text("x = 1\n" * DEVTOOLS_MAX_LINES, encoding="utf-8")
    modules = {"devtools.over": over, "devtools.at": at, "benchmarks.long": over}
    assert _long_modules(modules, DEVTOOLS_MAX_LINES) == {"devtools.over": DEVTOOLS_MAX_LINES + 1}


@pytest.mark.parametrize("room", sorted(ROOMS))
def test_rooms_import_only_the_rooms_below(room: str) -> None:
    offenders = [
        f"{name}:{line} imports {target}"
        for name, edges in GRAPH.items()
        if name.startswith("devtools.") and _room(name) == room
        for target, line in edges
        if target.startswith("devtools.")
        and (there := _room(target)) != room
        and there not in ROOMS[room]
    ]
    assert offenders == []


@pytest.mark.parametrize("room", sorted(set(ROOMS) - {""}))
def test_a_room_init_is_a_docstring_naming_what_it_may_import(room: str) -> None:
    """Importing a room adds no edge, and its docstring states the table's row."""
    path = ROOT / "devtools" / room / "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    doc = ast.get_docstring(tree)
    assert doc is not None, f"{path}: no docstring"
    assert len(tree.body) == 1, f"{path}: only a docstring"
    paragraphs = [" ".join(p.split()) for p in doc.split("\n\n")]
    line = next(p for p in paragraphs if p.startswith("May import:"))
    named = set(re.findall(r"``(\w+)``", line))
    assert named & set(ROOMS) == ROOMS[room] - {""}, (room, line)


def _levels(graph: dict[str, list[tuple[str, int]]], top: str = "devtools") -> dict[str, list[str]]:
    """Each module of the package ``top`` -> its longest chain of imports inside ``top``
    (itself first)."""
    chains: dict[str, list[str]] = {}

    def inside(name: str) -> bool:
        return name == top or name.startswith(top + ".")

    def chain(node: str) -> list[str]:
        if node not in chains:
            below = [chain(t) for t, _ in graph[node] if inside(t) and t != node]
            chains[node] = [node, *max(below, key=len, default=[])]
        return chains[node]

    for name in graph:
        if inside(name):
            chain(name)
    return chains


def test_devtools_import_chains_stay_short() -> None:
    longest = max(_levels(GRAPH).values(), key=len)
    assert len(longest) <= DEVTOOLS_MAX_LEVELS, " -> ".join(longest)
    assert len(longest) >= 3  # the graph is read: a command imports a room that imports base


def test_the_chain_check_counts_a_deeper_chain(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pin can fail: two top-level modules stacked on the deepest chain's head."""
    longest = max(_levels(GRAPH).values(), key=len)
    monkeypatch.setitem(GRAPH, "devtools.docmap", [(longest[0], 1)])
    monkeypatch.setitem(GRAPH, "devtools.__main__", [("devtools.docmap", 1)])
    deeper = _levels(GRAPH)["devtools.__main__"]
    assert deeper == ["devtools.__main__", "devtools.docmap", *longest]
    assert len(deeper) > DEVTOOLS_MAX_LEVELS


def test_runtime_import_chains_stay_short() -> None:
    longest = max(_levels(GRAPH, "torch_c_dlpack_ext").values(), key=len)
    assert len(longest) <= RUNTIME_MAX_LEVELS, " -> ".join(longest)
    # The graph is read: the diagnostics import the package, which imports the selector.
    assert longest[:2] == ["torch_c_dlpack_ext.__main__", "torch_c_dlpack_ext"], longest


def test_the_runtime_chain_check_counts_a_deeper_chain(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pin can fail: the status record importing the policy again (as it once did,
    for the native-speed line) is one level more."""
    status, decide = "torch_c_dlpack_ext._status", "torch_c_dlpack_ext._decide"
    monkeypatch.setitem(GRAPH, status, [*GRAPH[status], (decide, 1)])
    longest = max(_levels(GRAPH, "torch_c_dlpack_ext").values(), key=len)
    assert len(longest) > RUNTIME_MAX_LEVELS, longest
