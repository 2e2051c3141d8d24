"""The long provisioning steps of the developer tools (a cached torch environment, a
CPython built from source), which take minutes on a cold cache: their progress lines and
their commands, and where ``uv`` (which makes their environments) is.

A :class:`Progress` prints ``<tool> [<what>, <N> s]: <message>`` (``<what>``: the
environment or interpreter being made, ``<N>``: seconds since it started), a heartbeat
while a step runs, to stderr or to a sink (``tests/conftest.py`` sends them to pytest's
terminal, past its output capture). :func:`run_step` runs a step's command through the
one subprocess helper; a failure is a :class:`~devtools.base.errors.ProvisionError` that
carries the tool's last lines.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

from _torch_c_dlpack_ext_core.errors import CommandError
from _torch_c_dlpack_ext_core.run import run
from devtools.base import ghactions
from devtools.base.errors import ProvisionError

__all__ = ["TAIL_LINES", "Progress", "find_uv", "run_step", "work_folder"]

#: How many lines of a failed tool's output a :func:`run_step` error carries.
TAIL_LINES = 25


class Progress:
    """The progress lines of one tool (``torchenv``, ``freethreaded``)."""

    def __init__(self, tool: str, *, heartbeat_s: float = 30.0) -> None:
        self.tool = tool
        #: Seconds between "still ..." lines while a step runs.
        self.heartbeat_s = heartbeat_s
        #: Where the lines go (``None``: stderr).
        self.sink: Callable[[str], None] | None = None
        #: What is being made, and since when (the elapsed time on each line).
        self.current: tuple[str, float] | None = None

    def set_sink(self, sink: Callable[[str], None] | None) -> None:
        """Send the lines to ``sink`` (``None``: back to stderr)."""
        self.sink = sink

    def log(self, message: str) -> None:
        if self.current is None:
            line = f"{self.tool}: {message}"
        else:
            what, started = self.current
            line = f"{self.tool} [{what}, {time.monotonic() - started:.0f} s]: {message}"
        if self.sink is not None:
            self.sink(line)
        else:
            print(line, file=sys.stderr, flush=True)

    @contextmanager
    def making(self, what: str) -> Iterator[None]:
        """Name ``what`` (and the time from now) on each line until the block ends."""
        self.current = (what, time.monotonic())
        try:
            yield
        finally:
            self.current = None

    @contextmanager
    def heartbeat(self, doing: str) -> Iterator[None]:
        """A "still ``doing``" line every :attr:`heartbeat_s` until the block ends."""
        done = threading.Event()
        started = time.monotonic()

        def beat() -> None:
            while not done.wait(self.heartbeat_s):
                self.log(f"  still {doing} ({time.monotonic() - started:.0f} s)")

        thread = threading.Thread(target=beat, name=f"{self.tool}-heartbeat", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()

    @contextmanager
    def step(self, doing: str) -> Iterator[None]:
        """Log the step, a heartbeat while it runs, and its duration; on GitHub Actions
        in a group of its own (:func:`devtools.base.ghactions.group`)."""
        with ghactions.group(f"{self.tool}: {doing}"):
            self.log(doing)
            started = time.monotonic()
            with self.heartbeat(doing):
                yield
            self.log(f"  done in {time.monotonic() - started:.1f} s")


def run_step(
    step: str,
    cmd: Sequence[str | os.PathLike[str]],
    *,
    cwd: Path | None = None,
    timeout: float | None = None,
    echo: bool = True,
) -> str:
    """Run one command of ``step``; its output (stdout, then stderr). A failure is a
    :class:`ProvisionError` naming the step and the command, with its last lines."""
    try:
        proc = run(cmd, cwd=cwd, timeout=timeout, echo=echo)
    except CommandError as exc:
        output = "\n".join(part for part in (exc.stdout.strip(), exc.stderr.strip()) if part)
        tail = "\n".join(output.splitlines()[-TAIL_LINES:])
        raise ProvisionError(
            f"{step} failed (exit code {exc.returncode}): {' '.join(exc.cmd)}\n"
            f"last lines of its output:\n{tail}"
        ) from None
    return proc.stdout + proc.stderr


def work_folder(stack: ExitStack, given: Path | None, prefix: str) -> Path:
    """Where a rehearsal works: ``given`` (created if missing, kept afterwards), else a
    temporary folder named ``<prefix>...`` that ``stack`` removes when it closes."""
    if given is None:
        import tempfile

        return Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=prefix)))
    given.mkdir(parents=True, exist_ok=True)
    return given


def find_uv() -> str:
    """``uv`` on PATH, else the one the ``uv`` Python package ships."""
    found = shutil.which("uv")
    if found:
        return found
    try:
        from uv import find_uv_bin
    except ImportError:
        raise ProvisionError(
            "uv is not on PATH and the 'uv' package is not installed; 'pip install uv'"
        ) from None
    return str(find_uv_bin())
