"""The build lock of one library with its owner written down (``<library>.lock.owner``: pid,
host, start time), the one-line "waiting" message, the break of a dead owner's lock and
:data:`LOCK_TIMEOUT_S`; and the removal of what killed builds left behind (their temporary
files ``.<name>.<pid>-<hex>.tmp`` and scratch dirs).

:func:`hold` takes ``<library>.lock`` (a :class:`filelock.FileLock`) and records who holds
it in ``<library>.lock.owner`` (pid, host, the process's start time): a process that has
to wait says at once, on one line, for which lock, on whom and for how long, instead of
waiting silently. An owner recorded on this host whose process is gone (its pid is dead,
or reused by a process that started later) may have left the lock behind (the soft lock
filelock falls back to where ``flock`` is missing stays after its holder dies): the lock
is broken. A kernel ``flock`` dies with its holder anyway, so there a dead owner's record
is only a leftover; the break needs the same dead owner on two polls a second apart, so a
new holder that has not yet written its record is never mistaken for it.

:func:`clean_stale_temps` removes the temporary files of builds killed before they could
remove them themselves (SIGKILL, a power cut): their names carry the writer's pid
(:func:`.files.new_temp_file`), and one whose pid is dead, or that is older than the
lock timeout, is no one's work in progress. It runs under the lock, so no live build of
the same library is writing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from .errors import BuildError
from .naming import env_var

__all__ = [
    "LOCK_TIMEOUT_S",
    "SCRATCH_PREFIX",
    "LockOwner",
    "clean_stale_scratch",
    "clean_stale_temps",
    "hold",
    "pid_alive",
    "read_owner",
]

#: How long a build waits for another process's build of the same library by default
#: (``TORCH_C_DLPACK_EXT_LOCK_TIMEOUT`` changes it). A JIT build of torch 2.13's CPU
#: library took 9.9 s here, torch 2.8 ~21 s (docs/facts.md, "How long a JIT build
#: takes"); 300 s is 5x a 60 s build (a CUDA build on two busy cores), and no longer an
#: hour of silence behind a stuck process.
LOCK_TIMEOUT_S = 300.0
#: A build's scratch directory in the system temp dir: ``tcde-build-<pid>-<random>``.
SCRATCH_PREFIX = "tcde-build-"
#: How often a waiter looks at the lock and its owner again.
_POLL_S = 1.0
#: ``.<name>.<pid>-<12 hex>.tmp`` (:func:`.files.new_temp_file`); older builds wrote
#: ``.<name>.<12 hex>.tmp`` (no pid: only the age rule applies).
_TEMP = re.compile(r"\.(?:(?P<pid>[0-9]{1,10})-)?[0-9a-f]{12}\.tmp\Z")


def _process_start(pid: int) -> str | None:
    """When ``pid`` started, as the kernel counts it (field 22 of ``/proc/<pid>/stat``,
    clock ticks since boot), so a reused pid is told apart; ``None`` where unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces or parentheses.
    fields = data[data.rfind(b")") + 2 :].split()
    return fields[19].decode() if len(fields) > 19 else None


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this host (one of another user counts)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


@dataclasses.dataclass(frozen=True)
class LockOwner:
    """Who took a build lock: written by the holder, read by a waiter."""

    pid: int
    host: str
    #: Wall-clock time the lock was taken (seconds since the epoch).
    since: float
    #: :func:`_process_start` of the holder, where known.
    process_start: str | None = None

    @classmethod
    def this_process(cls) -> LockOwner:
        pid = os.getpid()
        return cls(pid, socket.gethostname(), time.time(), _process_start(pid))

    def alive(self) -> bool | None:
        """Whether the holder still runs: ``None`` for another host (cannot tell)."""
        if self.host != socket.gethostname():
            return None
        if not pid_alive(self.pid):
            return False
        start = _process_start(self.pid)
        return self.process_start is None or start is None or start == self.process_start

    def describe(self) -> str:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.since))
        age = max(0.0, time.time() - self.since)
        return f"pid {self.pid} on {self.host}, holding it since {stamp} ({age:.0f} s)"


def _owner_path(lock_path: Path) -> Path:
    return lock_path.with_name(lock_path.name + ".owner")


def read_owner(lock_path: Path) -> LockOwner | None:
    """The owner recorded beside ``lock_path``, or ``None`` (none, or unreadable)."""
    try:
        data = json.loads(_owner_path(lock_path).read_text(encoding="utf-8"))
        return LockOwner(
            pid=int(data["pid"]),
            host=str(data["host"]),
            since=float(data["since"]),
            process_start=None if data.get("process_start") is None else str(data["process_start"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_owner(lock_path: Path) -> None:
    from .files import atomic_write_bytes

    owner = dataclasses.asdict(LockOwner.this_process())
    with contextlib.suppress(OSError):  # a record is a courtesy to waiters, not a must
        atomic_write_bytes(_owner_path(lock_path), json.dumps(owner).encode())


def _say(line: str) -> None:
    print(f"torch-c-dlpack-ext: {line}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def hold(
    lock_path: Path, timeout: float, what: str, say: Callable[[str], None] = _say
) -> Iterator[None]:
    """Hold the build lock ``lock_path`` for the body; ``what`` names the build (``the
    build of libx.so``). Waits at most ``timeout`` seconds, saying so at once through
    ``say`` (one line: the lock, its owner, the limit, the setting) and breaking a lock
    whose recorded owner died on this host. Raises :class:`BuildError` on timeout."""
    from filelock import FileLock, Timeout

    deadline = time.monotonic() + timeout
    lock = FileLock(str(lock_path))
    told = False
    suspect: LockOwner | None = None
    while True:
        try:
            wait = min(_POLL_S, max(0.0, deadline - time.monotonic())) if told else 0
            lock.acquire(timeout=wait)
            break
        except Timeout:
            pass
        owner = read_owner(lock_path)
        if not told:
            holder = owner.describe() if owner else "a process that recorded no owner"
            say(
                f"waiting up to {timeout:.0f} s for {lock_path} ({what} by {holder}); "
                f"set {env_var('LOCK_TIMEOUT')} to change the limit"
            )
            told = True
        if owner is not None and owner.alive() is False:
            if owner == suspect:
                say(f"breaking {lock_path}: its owner, pid {owner.pid} on {owner.host}, is gone")
                for stale in (_owner_path(lock_path), lock_path):
                    with contextlib.suppress(OSError):
                        stale.unlink()
                suspect = None
                continue
            suspect = owner
        else:
            suspect = None
        if time.monotonic() >= deadline:
            holder = owner.describe() if owner else "a process that recorded no owner"
            raise BuildError(
                f"{what} waited {timeout:.0f} s for {lock_path}, held by {holder}; if that "
                f"process is stuck, end it (or delete the lock file if it is gone), or set "
                f"{env_var('LOCK_TIMEOUT')} to wait longer"
            )
    try:
        _write_owner(lock_path)
        yield
    finally:
        # Removed while still held: after the release the next holder writes its own.
        with contextlib.suppress(OSError):
            _owner_path(lock_path).unlink()
        lock.release()


def clean_stale_temps(directory: Path, prefix: str, max_age: float) -> list[Path]:
    """Remove the temporary files ``<prefix>...<pid>-<hex>.tmp`` in ``directory`` whose
    writer is dead (its pid no longer runs here) or that are older than ``max_age``
    seconds; return what was removed. Call it holding the build lock of ``prefix``."""
    removed: list[Path] = []
    now = time.time()
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in names:
        match = _TEMP.search(name)
        if not name.startswith(prefix) or match is None:
            continue
        path = directory / name
        try:
            info = path.lstat()
        except OSError:
            continue
        pid = match["pid"]
        dead = pid is not None and not pid_alive(int(pid))
        if dead or now - info.st_mtime > max_age:
            with contextlib.suppress(OSError):
                path.unlink()
                removed.append(path)
    return removed


def clean_stale_scratch(directory: Path, prefix: str) -> list[Path]:
    """Remove the scratch directories ``<prefix><pid>-*`` in ``directory`` (the system temp
    dir) that belong to this user and whose build is dead (its pid no longer runs here);
    return what was removed. No age rule: no lock covers the temp dir, and a live build of
    another library may run for long. Never follows a symlink and never touches another
    user's entries (a shared /tmp)."""
    import shutil
    import stat

    removed: list[Path] = []
    you = getattr(os, "geteuid", lambda: None)()
    try:
        names = [name for name in os.listdir(directory) if name.startswith(prefix)]
    except OSError:
        return removed
    for name in names:
        pid, dash, _ = name[len(prefix) :].partition("-")
        if not (dash and pid.isascii() and pid.isdigit() and len(pid) <= 10):
            continue  # an older build's name, without a pid: left to the temp dir's cleaner
        path = directory / name
        try:
            info = path.lstat()
        except OSError:
            continue
        mine = you is None or info.st_uid == you
        if not (mine and stat.S_ISDIR(info.st_mode)):
            continue
        if not pid_alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed
