"""A JIT build behind another process's build of the same library (issue 31 item 5): it
says at once that it waits, for which lock, on whom and for how long, and gives up after
``TORCH_C_DLPACK_EXT_LOCK_TIMEOUT`` seconds with a typed error, instead of an hour of
silence. Real torch, a real holder process; nothing is compiled (the holder never lets go).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.helpers import clean_env, make_package, run_python

from _torch_c_dlpack_ext_core.naming import library_filename
from torch_c_dlpack_ext._jit import cache_key, python_tag
from torch_c_dlpack_ext._torchinfo import describe_torch

torch = pytest.importorskip("torch")

P = "TORCH_C_DLPACK_EXT_"
BUILD = """
import warnings
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import torch
import torch_c_dlpack_ext as pkg
from torch_c_dlpack_ext.errors import BuildError
try:
    pkg.build_for_current_torch()
except BuildError as exc:
    print("typed:", exc)
"""
HOLDER = """
import sys, time
from filelock import FileLock
lock = FileLock(sys.argv[1]); lock.acquire()
print("held", flush=True)
time.sleep(300)
"""


def test_a_jit_build_behind_a_stuck_holder_says_so_and_gives_up(tmp_path: Path) -> None:
    info = describe_torch(torch)
    major, minor = info.major_minor
    cache = tmp_path / "cache"
    output_dir = cache / cache_key(info, info.backend, python_tag())
    output_dir.mkdir(parents=True)
    lock = output_dir / (library_filename(major, minor, info.backend, info.cxx11_abi) + ".lock")
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(lock)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        # What the holder would have recorded (its pid, host, since when).
        record = {"pid": holder.pid, "host": socket.gethostname(), "since": time.time() - 42}
        Path(f"{lock}.owner").write_text(json.dumps(record), encoding="utf-8")
        env = clean_env(**{P + "CACHE_DIR": str(cache), P + "LOCK_TIMEOUT": "3"})
        package = make_package(tmp_path / "pkg", manifest=False)
        started = time.monotonic()
        proc = run_python(BUILD, pythonpath=[package], env=env, timeout=120)
        took = time.monotonic() - started
    finally:
        holder.kill()
        holder.wait()
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert took < 60
    (line,) = [line for line in proc.stderr.splitlines() if "waiting" in line]
    assert line.startswith(f"torch-c-dlpack-ext: waiting up to 3 s for {lock} (the build of ")
    assert f"by pid {holder.pid} on {socket.gethostname()}, holding it since " in line
    assert f"set {P}LOCK_TIMEOUT to change the limit" in line
    assert proc.stdout.startswith("typed: the build of ")
    assert f"waited 3 s for {lock}, held by pid {holder.pid}" in proc.stdout
