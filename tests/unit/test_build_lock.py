"""The build lock says whom it waits for (issue 31 item 5), and a killed build's
temporaries are removed by the next build (item 6): ``_torch_c_dlpack_ext_core.buildlock``
and the driver that uses it, with real processes holding the lock and a real build killed
with SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from _torch_c_dlpack_ext_core import buildlock, driver
from _torch_c_dlpack_ext_core.errors import BuildError
from _torch_c_dlpack_ext_core.naming import Backend

ROOT = Path(__file__).resolve().parents[2]
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="gnu toolchain")

#: Holds ``argv[1]`` with the project's lock (it records its owner), says so, then sleeps.
HOLDER = """
import sys, time
from pathlib import Path
from _torch_c_dlpack_ext_core.buildlock import hold
with hold(Path(sys.argv[1]), 60, "a test build"):
    print("held", flush=True)
    time.sleep(120)
"""
#: Holds ``argv[1]`` with a plain FileLock (no owner record), says so, then sleeps.
PLAIN_HOLDER = """
import sys, time
from filelock import FileLock
lock = FileLock(sys.argv[1]); lock.acquire()
print("held", flush=True)
time.sleep(120)
"""


def start_holder(code: str, lock: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "python")}
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(lock)], env=env, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "held"
    return proc


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_waiter_says_at_once_for_what_on_whom_and_how_long(tmp_path: Path) -> None:
    lock = tmp_path / "libx.so.lock"
    holder = start_holder(HOLDER, lock)
    said: list[tuple[float, str]] = []
    started = time.monotonic()
    try:
        with (
            pytest.raises(BuildError) as caught,
            buildlock.hold(
                lock,
                2.0,
                "the build of libx.so",
                say=lambda line: said.append((time.monotonic(), line)),
            ),
        ):
            pytest.fail("the lock is held by the other process")
    finally:
        holder.kill()
        holder.wait()
    (when, line), *more = said
    assert more == []
    assert when - started < 1.0, "said at once, not after the wait"
    assert f"waiting up to 2 s for {lock}" in line
    assert f"pid {holder.pid} on {socket.gethostname()}, holding it since " in line
    assert "TORCH_C_DLPACK_EXT_LOCK_TIMEOUT" in line
    assert f"held by pid {holder.pid}" in str(caught.value)
    assert 2.0 <= time.monotonic() - started < 10


def test_a_lock_whose_recorded_owner_is_dead_is_broken(tmp_path: Path) -> None:
    """The lock is held (here by a process that records nothing, as a soft lock left by a
    killed holder would be) and its record names a pid that no longer runs: broken."""
    lock = tmp_path / "libx.so.lock"
    holder = start_holder(PLAIN_HOLDER, lock)
    gone = buildlock.LockOwner(dead_pid(), socket.gethostname(), time.time() - 100)
    Path(f"{lock}.owner").write_text(
        json.dumps({"pid": gone.pid, "host": gone.host, "since": gone.since})
    )
    said: list[str] = []
    started = time.monotonic()
    try:
        with buildlock.hold(lock, 30.0, "the build of libx.so", say=said.append):
            assert buildlock.read_owner(lock) is not None
            assert buildlock.read_owner(lock).pid == os.getpid()  # type: ignore[union-attr]
    finally:
        holder.kill()
        holder.wait()
    assert time.monotonic() - started < 10
    assert said[0].startswith(f"waiting up to 30 s for {lock} (the build of libx.so by pid")
    assert said[1] == f"breaking {lock}: its owner, pid {gone.pid} on {gone.host}, is gone"
    assert not Path(f"{lock}.owner").exists(), "the record goes with the holder"


def test_a_live_owner_on_another_host_is_not_broken(tmp_path: Path) -> None:
    lock = tmp_path / "libx.so.lock"
    holder = start_holder(PLAIN_HOLDER, lock)
    Path(f"{lock}.owner").write_text(
        json.dumps({"pid": dead_pid(), "host": "elsewhere", "since": time.time()})
    )
    said: list[str] = []
    try:
        with pytest.raises(BuildError), buildlock.hold(lock, 2.5, "b", say=said.append):
            pass
    finally:
        holder.kill()
        holder.wait()
    assert len(said) == 1
    assert "pid" in said[0]
    assert "on elsewhere" in said[0]


def test_a_reused_pid_is_not_the_owner() -> None:
    me = buildlock.LockOwner.this_process()
    assert me.alive() is True
    if me.process_start is not None:
        assert buildlock.LockOwner(me.pid, me.host, me.since, "1").alive() is False
    assert buildlock.LockOwner(dead_pid(), me.host, me.since).alive() is False


def _fake_torch_libs() -> tuple[str, ...]:
    return ("libc10.so", "libtorch_cpu.so")


def _compiler(at: Path, *, sleep: float = 0) -> Path:
    """A stand-in g++ that writes part of its output, maybe sleeps, then finishes it."""
    at.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = --version ]; then echo "g++ (GCC) 12.2.0"; exit 0; fi\n'
        'while [ "$1" != -o ]; do shift; done\n'
        f'printf "partial" > "$2"; sleep {sleep}; printf " library" >> "$2"\n',
        encoding="utf-8",
    )
    at.chmod(0o755)
    return at


KILLED_BUILD = """
import sys
from _torch_c_dlpack_ext_core import driver
driver.compile_library(
    driver.BuildRequest(torch=sys.argv[1], backend="cpu", output_dir=sys.argv[2],
        dlpack_include=sys.argv[3], source_dir=sys.argv[4], cxx=sys.argv[5]),
    driver.BuildPolicy(audit=False, echo=False))
"""


@linux_only
def test_the_next_build_removes_what_a_killed_build_left(
    fake_torch: Any, dlpack_include: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("CUDA_HOME", "CUDA_PATH", "CXX"):
        monkeypatch.delenv(var, raising=False)
    prefix = fake_torch("2.8.0+cpu", abi=True, cuda=None, libs=_fake_torch_libs())
    sources = tmp_path / "csrc"
    sources.mkdir()
    (sources / "a.cc").write_text("int a() { return 1; }\n")
    (sources / "exports.map").write_text("{ global: a; local: *; };\n")
    out = tmp_path / "out"
    slow = _compiler(tmp_path / "slow-g++", sleep=60)
    args = [str(prefix), str(out), str(dlpack_include), str(sources), str(slow)]
    scratch_root = tmp_path / "tmp"  # the builds' TMPDIR: their scratch directories
    scratch_root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch_root))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "python"), "TMPDIR": str(scratch_root)}
    build = subprocess.Popen(
        [sys.executable, "-c", KILLED_BUILD, *args], env=env, start_new_session=True
    )
    deadline = time.monotonic() + 60
    # The library's own temporary (not the lock owner record's) and the build's scratch
    # directory, made just after it: the compiler is running. (Waiting for the temporary
    # alone raced with the scratch directory on a loaded machine.)
    pattern = ".*.so.[0-9]*-*.tmp"
    while time.monotonic() < deadline and not (
        list(out.glob(pattern)) and list(scratch_root.glob(f"tcde-build-{build.pid}-*"))
    ):
        time.sleep(0.05)
    os.killpg(build.pid, signal.SIGKILL)  # the build and its compiler, as a ^C'd shell would
    build.wait()
    (left,) = out.glob(pattern)
    assert f".{build.pid}-" in left.name, "the temporary's name carries its writer's pid"
    name = left.name.split(f".{build.pid}-")[0][1:]
    # A live writer's temporary (this process) and an old pid-less one from an older build.
    live = out / f".{name}.{os.getpid()}-0123456789ab.tmp"
    live.write_bytes(b"in progress")
    old = out / f".{name}.build.json.abcdefabcdef.tmp"
    old.write_bytes(b"old")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    other = out / ".someone-else.so.1-0123456789ab.tmp"  # not this library's
    other.write_bytes(b"x")
    (killed_scratch,) = scratch_root.glob(f"tcde-build-{build.pid}-*")
    live_scratch = scratch_root / f"tcde-build-{os.getpid()}-live"
    live_scratch.mkdir()

    entry = driver.compile_library(
        driver.BuildRequest(
            torch=prefix,
            backend=Backend.CPU,
            output_dir=out,
            dlpack_include=dlpack_include,
            source_dir=sources,
            cxx=str(_compiler(tmp_path / "g++")),
        ),
        driver.BuildPolicy(audit=False, echo=False, lock_timeout=3600),
    )
    assert (out / entry.file).read_bytes() == b"partial library"
    assert not left.exists(), "a dead writer's temporary is removed"
    assert not old.exists(), "one older than the lock timeout is removed"
    assert live.exists(), "a live writer's is kept"
    assert other.exists(), "another library's is not this build's business"
    assert not killed_scratch.exists(), "the killed build's scratch directory is removed"
    assert live_scratch.exists(), "a live build's scratch directory is kept"


def test_lock_timeout_setting_is_validated() -> None:
    from torch_c_dlpack_ext._settings import read_settings

    name = "TORCH_C_DLPACK_EXT_LOCK_TIMEOUT"
    assert read_settings({name: "90"}).lock_timeout == 90.0
    assert read_settings({name: " 2.5 "}).lock_timeout == 2.5
    assert read_settings({}).lock_timeout is None
    for bad in ("0", "-5", "nan", "inf", "1e9", "5m", "ten"):
        settings = read_settings({name: bad})
        assert settings.lock_timeout is None, bad
        (problem,) = settings.problems
        assert problem.variable == name
        assert "is not a number of seconds from 1 to 86400" in problem.message


def test_the_default_lock_timeout_is_minutes_not_an_hour() -> None:
    assert 120 <= buildlock.LOCK_TIMEOUT_S <= 600


def test_the_docs_state_the_default_lock_timeout() -> None:
    # README's settings table names the default; docs/import.md quotes the waiting line.
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    details = (ROOT / "docs" / "import.md").read_text(encoding="utf-8")
    seconds = f"{buildlock.LOCK_TIMEOUT_S:.0f}"
    assert f"another process's build of the same library (default {seconds};" in readme
    assert f"waiting up to {seconds} s for <lock>" in details
