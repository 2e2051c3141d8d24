"""CONTRIBUTING.md's map of ``devtools/``, generated from the docstrings it describes.

The part of CONTRIBUTING.md between :data:`BEGIN` and :data:`END` is the rooms table
(each room's ``__init__`` docstring: what it owns, and its "May import:" line) and the
modules table (each module's first docstring sentence), room by room, bottom up.
``python -m devtools map`` (``nox -s map``) rewrites that part; ``--check`` (run by
``nox -s lint`` and a unit test) fails when it differs from the docstrings. The sources
are read with :mod:`ast`, never imported, so the map costs no import of a room.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from devtools.base.errors import DevToolError
from devtools.base.paths import ROOT

__all__ = ["BEGIN", "END", "ROOMS", "render", "replace_map"]

BEGIN = "<!-- map:begin (generated from the docstrings by `nox -s map`; edit those) -->"
END = "<!-- map:end -->"

#: devtools' rooms, bottom up (the order of the tables; tests/unit/test_import_graph.py
#: holds what each may import).
ROOMS = ("base", "matrix", "envs", "build", "release", "rehearse", "commands")

_ROLE = re.compile(r":[\w:]+:`~?([^`<]+?)`")
_LITERAL = re.compile(r"``([^`]+)``")


def _markdown(text: str) -> str:
    """reST roles and literals as Markdown code; ``~a.b.c`` keeps only ``c``."""

    def role(match: re.Match[str]) -> str:
        target = match.group(1).strip()
        if match.group(0).split("`", 1)[1].startswith("~"):
            target = target.rpartition(".")[2]
        return f"`{target}`"

    text = _ROLE.sub(role, text)
    return _LITERAL.sub(r"`\1`", text).replace("|", "\\|")


def _paragraphs(doc: str) -> list[str]:
    return [" ".join(p.split()) for p in re.split(r"\n\s*\n", doc.strip()) if p.strip()]


def _first_sentence(paragraph: str) -> str:
    """Up to the first full stop outside backticks that ends a sentence."""
    quoted = False
    i = 0
    while i < len(paragraph):
        char = paragraph[i]
        if char == "`":  # a run of backticks opens or closes one literal
            while i + 1 < len(paragraph) and paragraph[i + 1] == "`":
                i += 1
            quoted = not quoted
        elif char == "." and not quoted and (i + 1 == len(paragraph) or paragraph[i + 1] == " "):
            return paragraph[: i + 1]
        i += 1
    return paragraph


def _docstring(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    if not doc:
        raise DevToolError(f"{path.relative_to(ROOT)} has no docstring")
    return doc


def render(root: Path = ROOT) -> str:
    """The generated part, markers included."""
    devtools = root / "devtools"
    rooms = ["| room | may import | owns |", "|---|---|---|"]
    modules = ["| module | job |", "|---|---|"]
    for room in ROOMS:
        paragraphs = _paragraphs(_docstring(devtools / room / "__init__.py"))
        may = next(p for p in paragraphs if p.startswith("May import:"))
        owns = " ".join(p for p in paragraphs if p is not may)
        allowed = may.removeprefix("May import:").strip().rstrip(".")
        rooms.append(f"| `devtools/{room}/` | {_markdown(allowed)} | {_markdown(owns)} |")
        for path in sorted((devtools / room).glob("*.py")):
            if path.name == "__init__.py":
                continue
            first = _first_sentence(_paragraphs(_docstring(path))[0])
            where = path.relative_to(root).as_posix()
            modules.append(f"| `{where}` | {_markdown(first)} |")
    for name in ("__main__.py", "docmap.py"):
        first = _first_sentence(_paragraphs(_docstring(devtools / name))[0])
        modules.append(f"| `devtools/{name}` | {_markdown(first)} |")
    return "\n".join([BEGIN, "", *rooms, "", *modules, "", END])


def replace_map(text: str, generated: str) -> str:
    """``text`` (CONTRIBUTING.md) with its marked part replaced by ``generated``."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise DevToolError(f"CONTRIBUTING.md lacks the markers {BEGIN!r} ... {END!r}")
    return text[:start] + generated + text[end + len(END) :]
