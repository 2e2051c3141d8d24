"""The one helper every subprocess of this project goes through: it echoes the command,
captures its output and raises :class:`~.errors.CommandError` (command, exit code, output)
when it fails or times out."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from .errors import CommandError, CommandTimeoutError

__all__ = ["run"]


def run(
    cmd: Sequence[str | os.PathLike[str]],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    echo: bool = True,
    timeout: float | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run ``cmd``, echoing it to stderr; raise :class:`CommandError` on failure.

    Output is captured so a failure can carry the command, its exit code and its
    stderr (compiler diagnostics, linker errors) in one exception. With
    ``timeout`` (seconds) a command still running then is killed and
    :class:`CommandTimeoutError` raised, so release tooling never hangs.
    ``check=False`` is for a caller whose finding the exit status is (a probe): a
    non-zero exit is returned, not raised, and a missing program is exit status
    127, as a shell reports it. A timeout is raised either way.
    """
    argv = [os.fspath(part) for part in cmd]
    if echo:
        print(f"+ {shlex.join(argv)}", file=sys.stderr, flush=True)
    try:
        proc = subprocess.run(
            argv,
            cwd=cwd,
            env=dict(env) if env is not None else None,
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:
        raise CommandTimeoutError(
            argv, timeout or 0.0, _text(exc.stdout), _text(exc.stderr)
        ) from None
    except FileNotFoundError:
        if not check:
            return subprocess.CompletedProcess(argv, 127, "", f"{argv[0]}: command not found")
        raise CommandError(argv, 127, "", f"{argv[0]}: command not found") from None
    if check and proc.returncode != 0:
        raise CommandError(argv, proc.returncode, proc.stdout, proc.stderr)
    return proc


def _text(data: str | bytes | None) -> str:
    if isinstance(data, bytes):
        return data.decode("utf-8", "replace")
    return data or ""
