"""Output that reads well on GitHub Actions: collapsible groups around each step, error
annotations on failures and the job summary (GitHub's workflow commands).

Everything here is inert unless ``GITHUB_ACTIONS`` is ``true`` (:func:`on_github`): a
:func:`group` then prints nothing and :func:`error` nothing, so the plain output stays
as it was. The one exception is :func:`step_summary`, which writes where it is told.

GitHub does not nest groups: :func:`group` opens one only when none is open, in this
process or above it (:data:`GROUP_MARK` in the environment: a child ``python -m
devtools`` sees its parent's group; ``CIBUILDWHEEL=1``: cibuildwheel wraps each build,
its before-build included, in a group of its own), and always closes it, also when the
block raises. An annotation names the file and line where known
(:func:`compiler_location` reads them from a compiler's error line). Values are escaped
by GitHub's rules: ``%``, CR and LF in the message, and also ``:`` and ``,`` in a
property (``file``, ``line``, ``title``).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

__all__ = [
    "GROUP_MARK",
    "annotate_failure",
    "compiler_location",
    "error",
    "escape_data",
    "escape_property",
    "group",
    "no_groups",
    "on_github",
    "step_summary",
    "was_annotated",
]

#: Set in the environment while a group is open (children inherit it).
GROUP_MARK = "TCDE_GITHUB_GROUP"

#: The attribute :func:`annotate_failure` sets on an exception it annotated, so that the
#: one error report (:func:`devtools.base.cli.report`) does not annotate it twice.
_ANNOTATED = "_tcde_github_annotated"


def on_github(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this runs on GitHub Actions (``GITHUB_ACTIONS=true``, as the runner sets)."""
    return (os.environ if environ is None else environ).get("GITHUB_ACTIONS") == "true"


def escape_data(text: str) -> str:
    """``text`` as a workflow command's message: ``%``, CR and LF escaped."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """``text`` as a workflow command's property value: also ``:`` and ``,``."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _emit(line: str, stream: TextIO | None) -> None:
    # The runner reads the log in arrival order: flush what was printed before.
    sys.stderr.flush()
    sys.stdout.flush()
    print(line, file=stream or sys.stdout, flush=True)


def _group_open() -> bool:
    return bool(os.environ.get(GROUP_MARK)) or os.environ.get("CIBUILDWHEEL") == "1"


@contextmanager
def _marked() -> Iterator[None]:
    """:data:`GROUP_MARK` set for the block (and the processes it starts)."""
    os.environ[GROUP_MARK] = "1"
    try:
        yield
    finally:
        os.environ.pop(GROUP_MARK, None)


@contextmanager
def group(title: str, *, stream: TextIO | None = None) -> Iterator[None]:
    """Wrap the block's output in ``::group::<title>`` ... ``::endgroup::`` on GitHub
    (the closing line also when the block raises); elsewhere, or inside a group already
    open, only run the block."""
    if not on_github() or _group_open():
        yield
        return
    _emit(f"::group::{escape_data(title)}", stream)
    try:
        with _marked():
            yield
    finally:
        _emit("::endgroup::", stream)


@contextmanager
def no_groups() -> Iterator[None]:
    """Open no group inside the block, nor in the processes it starts (their output
    interleaves: parallel builds)."""
    if not on_github() or _group_open():
        yield
        return
    with _marked():
        yield


def _relative(file: str | os.PathLike[str]) -> str:
    """``file`` relative to the working directory when it is below it (annotations name
    files of the checkout by their path in the repository)."""
    path = Path(file)
    if path.is_absolute():
        try:
            return path.relative_to(Path.cwd()).as_posix()
        except ValueError:
            return path.as_posix()
    return path.as_posix()


def error(
    message: str,
    *,
    file: str | os.PathLike[str] | None = None,
    line: int | None = None,
    title: str | None = None,
    stream: TextIO | None = None,
) -> None:
    """An ``::error`` annotation on GitHub (``file`` and ``line`` where known; a
    ``line`` without a ``file`` is dropped); elsewhere nothing."""
    if not on_github():
        return
    properties = []
    if file is not None:
        properties.append(f"file={escape_property(_relative(file))}")
        if line is not None:
            properties.append(f"line={line}")
    if title:
        properties.append(f"title={escape_property(title)}")
    head = "::error " + ",".join(properties) if properties else "::error"
    _emit(f"{head}::{escape_data(message.strip())}", stream)


#: A compiler's error line: GCC and Clang ``path:line:[col:] [fatal ]error``, MSVC
#: ``path(line[,col]): [fatal ]error``.
_COMPILER_ERROR = re.compile(
    r"^\s*(?P<file>[^\s:(][^:(\n]*?|[A-Za-z]:[^:(\n]+?)"
    r"(?::(?P<line>\d+):(?:\d+:)?|\((?P<msvc_line>\d+)(?:,\d+)?\)\s*:)"
    r"\s*(?:fatal )?error\b",
    re.MULTILINE,
)


def compiler_location(output: str) -> tuple[str, int] | None:
    """The file and line of the first compiler error ``output`` names (a failed cell's
    reason or a tool error's message holds its last lines), or ``None``."""
    found = _COMPILER_ERROR.search(output)
    if found is None:
        return None
    return found["file"].strip(), int(found["line"] or found["msvc_line"])


def was_annotated(exc: BaseException) -> bool:
    """Whether :func:`annotate_failure` already annotated ``exc``."""
    return bool(getattr(exc, _ANNOTATED, False))


@contextmanager
def annotate_failure(
    *, file: str | os.PathLike[str] | None = None, title: str | None = None
) -> Iterator[None]:
    """An exception leaving the block is annotated (:func:`error`, with ``file``) on
    GitHub, then propagates unchanged."""
    try:
        yield
    except Exception as exc:
        if on_github() and not was_annotated(exc):
            error(str(exc), file=file, title=title or type(exc).__name__)
            setattr(exc, _ANNOTATED, True)
        raise


def _container_path(path: Path) -> Path:
    """``path`` as seen from cibuildwheel's Linux container, which mounts the host's
    root at ``/host``: a runner's file passed in with ``environment-pass`` is there."""
    if os.environ.get("CIBUILDWHEEL") == "1" and not path.parent.is_dir():
        mounted = Path("/host") / path.relative_to(path.anchor)
        if mounted.parent.is_dir():
            return mounted
    return path


def step_summary(markdown: str, path: str | os.PathLike[str] | None = None) -> bool:
    """Append ``markdown`` to the job summary: ``path``, else ``$GITHUB_STEP_SUMMARY``.
    Whether it was written: an unset variable (off GitHub: silently) or a file that cannot
    be written is a note on stderr, never a failure of the step."""
    if path is None:
        path = os.environ.get("GITHUB_STEP_SUMMARY") or None
        if path is None:
            if on_github():
                print(
                    "note: GITHUB_STEP_SUMMARY is not set; nothing added to the job summary",
                    file=sys.stderr,
                    flush=True,
                )
            return False
    target = _container_path(Path(path))
    text = markdown if markdown.endswith("\n") else markdown + "\n"
    try:
        with target.open("a", encoding="utf-8") as summary:
            summary.write(text)
    except OSError as exc:
        print(
            f"note: cannot append to the job summary {path}: {exc.strerror or exc}; "
            "it stays without this step's part",
            file=sys.stderr,
            flush=True,
        )
        return False
    return True
